"""What `kubegpu doctor` and `kubegpu what-if` read from a cluster, as one typed value.

A `Snapshot` holds only the facts the checks look at: nodes (labels, annotations, capacity,
conditions, taints), the ClusterPolicies and GPUClusters, the operator namespace's
ConfigMaps and DaemonSets, the operand pods and the GPU pods of workloads, ResourceSlices and
recent Events. It is pure data: `capture` (kubegpu.doctor.capture) fills it from a live
cluster, `to_json` / `from_json` store it, and the checks read it without any I/O, so a
snapshot file lets the doctor run offline and the tests run on captured clusters.

`from_json` is strict (unknown keys, wrong types and a duplicate key are errors) and bounded
like every input file (kubegpu.base.loader), with larger bounds: a cluster is bigger than a
config file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator

from kubegpu.base import loader
from kubegpu.catalog import nvidia
from kubegpu.kube.policy import ClusterPolicySpec, GPUClusterSpec

SNAPSHOT_VERSION: Literal[1] = 1
SNAPSHOT_LIMITS = loader.Limits(
    max_bytes=64 * loader.MIB, max_depth=loader.MAX_DEPTH, max_values=5_000_000
)


# a count is a JSON integer and a flag a JSON boolean: `"3"`, `1.0` or `true` are not
# coerced into them (what the capture writes never needs it; a hand-edited file might)
StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]


class SnapshotError(loader.InputError):
    """A snapshot file that cannot be used (file, field, value and why)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Condition(_Model):
    """One status condition of a Node or custom resource."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


class Taint(_Model):
    key: str
    value: str = ""
    effect: str


class NodeInfo(_Model):
    """A Node: what the labels, capacity and conditions say about its GPUs."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    capacity: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, str] = Field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    taints: tuple[Taint, ...] = ()
    unschedulable: StrictBool = False

    def label(self, key: str) -> str | None:
        return self.labels.get(key)

    @property
    def gpu_present(self) -> bool:
        """A GPU node as the operator sees it: `nvidia.com/gpu.present=true`."""
        return self.labels.get(nvidia.GPU_PRESENT) == "true"


class CustomObject(_Model):
    """A ClusterPolicy or GPUCluster: its spec and status as the API server returned them."""

    kind: str
    name: str
    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


class ConfigMapInfo(_Model):
    namespace: str
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    data: dict[str, str] = Field(default_factory=dict)


class DaemonSetInfo(_Model):
    namespace: str
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    # the first container's image and args: which component this DaemonSet runs
    image: str = ""
    args: tuple[str, ...] = ()
    # the first container's environment (literal values only): the overrides a component
    # applies over its config file (MPS_ROOT, MIG_STRATEGY... from the operator)
    env: dict[str, str] = Field(default_factory=dict)
    desired: StrictInt = 0
    ready: StrictInt = 0
    available: StrictInt = 0


ContainerState = Literal["running", "waiting", "terminated", "unknown"]


class ContainerInfo(_Model):
    """A container's status: its state now and how the last run ended."""

    name: str
    ready: StrictBool = False
    restart_count: StrictInt = 0
    state: ContainerState = "unknown"
    reason: str = ""  # of the current state, e.g. CrashLoopBackOff
    message: str = ""
    started_at: str = ""  # RFC 3339, when the running container started
    last_exit_code: StrictInt | None = None
    last_reason: str = ""  # of the last termination, e.g. Error
    last_message: str = ""  # the container's termination message


class Toleration(_Model):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # "": every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


class PodInfo(_Model):
    """An operand pod or a workload pod that asks for GPUs (extended resources or claims)."""

    namespace: str
    name: str
    node: str = ""
    phase: str = ""
    reason: str = ""  # of the pod's status, e.g. UnexpectedAdmissionError
    message: str = ""
    # why the scheduler has not placed it: the PodScheduled=False condition's reason, message
    unscheduled_reason: str = ""
    unscheduled_message: str = ""
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # the ResourceClaim objects behind `claims` (namespace-local names), where known
    claim_objects: tuple[str, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_kind: str = ""
    owner_name: str = ""
    # summed over the pod's containers; only nvidia.com/* resources are kept
    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)
    claims: tuple[str, ...] = ()  # names of the pod's resource claims
    containers: tuple[ContainerInfo, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpu_resources(self) -> dict[str, str]:
        """The NVIDIA resources the pod asks for (limits, which extended resources must set)."""
        merged = {**self.requests, **self.limits}
        return {k: v for k, v in merged.items() if k.startswith(nvidia.PREFIX)}


class DeviceInfo(_Model):
    name: str
    attributes: dict[str, str] = Field(default_factory=dict)


class ResourceSliceInfo(_Model):
    name: str
    driver: str
    node: str = ""
    pool: str = ""
    devices: tuple[DeviceInfo, ...] = ()


class EventInfo(_Model):
    """A recent Event, about a Node or an object of the operator namespace."""

    namespace: str
    kind: str  # of the involved object
    name: str  # of the involved object
    type: str = ""  # Normal or Warning
    reason: str = ""
    message: str = ""
    component: str = ""  # the reporting component
    count: StrictInt = 1
    time: str = ""  # RFC 3339, the last time it was seen


class ClaimRequestInfo(_Model):
    """One request of a ResourceClaim: its device class, CEL selectors and count."""

    name: str
    device_class: str = ""
    selectors: tuple[str, ...] = ()
    count: StrictInt = 1


class ResourceClaimInfo(_Model):
    namespace: str
    name: str
    requests: tuple[ClaimRequestInfo, ...] = ()
    allocated: StrictBool = False


class Snapshot(_Model):
    """A cluster as the doctor sees it. Tuples are sorted by name for stable output."""

    version: Literal[1] = SNAPSHOT_VERSION
    taken_at: str = ""  # RFC 3339
    source: str = ""  # where it came from: a kubeconfig context, a file, "sim"
    operator_namespace: str = "gpu-operator"
    nodes: tuple[NodeInfo, ...] = ()
    cluster_policies: tuple[CustomObject, ...] = ()
    gpu_clusters: tuple[CustomObject, ...] = ()
    config_maps: tuple[ConfigMapInfo, ...] = ()
    daemon_sets: tuple[DaemonSetInfo, ...] = ()
    pods: tuple[PodInfo, ...] = ()
    resource_slices: tuple[ResourceSliceInfo, ...] = ()
    resource_claims: tuple[ResourceClaimInfo, ...] = ()
    events: tuple[EventInfo, ...] = ()

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if type(value) is not int:  # `true` and `1.0` equal 1 but are not a version
            raise ValueError(f"expected the integer {SNAPSHOT_VERSION}")
        return value

    # --- lookups the checks share ---------------------------------------------------------

    def node(self, name: str) -> NodeInfo | None:
        return next((n for n in self.nodes if n.name == name), None)

    @property
    def cluster_policy(self) -> CustomObject | None:
        return self.cluster_policies[0] if self.cluster_policies else None

    @property
    def gpu_cluster(self) -> CustomObject | None:
        return self.gpu_clusters[0] if self.gpu_clusters else None

    def config_map(self, name: str, namespace: str | None = None) -> ConfigMapInfo | None:
        ns = namespace or self.operator_namespace
        return next((c for c in self.config_maps if c.name == name and c.namespace == ns), None)

    @property
    def operand_pods(self) -> tuple[PodInfo, ...]:
        """Pods of the operator's DaemonSets."""
        owned = {(d.namespace, d.name) for d in self.daemon_sets}
        return tuple(
            p
            for p in self.pods
            if p.owner_kind == "DaemonSet" and (p.namespace, p.owner_name) in owned
        )

    @property
    def workload_pods(self) -> tuple[PodInfo, ...]:
        """Pods that ask for GPUs and are not operands."""
        operands = {p.key for p in self.operand_pods}
        return tuple(
            p for p in self.pods if p.key not in operands and (p.gpu_resources or p.claims)
        )

    def claim(self, namespace: str, name: str) -> ResourceClaimInfo | None:
        return next(
            (c for c in self.resource_claims if c.namespace == namespace and c.name == name), None
        )

    def pods_on(self, node: str) -> tuple[PodInfo, ...]:
        return tuple(p for p in self.pods if p.node == node)

    def events_about(self, kind: str, name: str) -> tuple[EventInfo, ...]:
        """Events about one object, oldest first."""
        return tuple(
            sorted(
                (e for e in self.events if e.kind == kind and e.name == name),
                key=lambda e: e.time,
            )
        )

    # --- JSON ------------------------------------------------------------------------------

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=indent, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<snapshot>") -> Snapshot:
        """The snapshot in `text`, or SnapshotError naming source, field and value."""
        data = parse_json(text, source)
        loader.require_mapping(data, source, SnapshotError, "a snapshot object")
        snapshot = loader.validate(cls, data, source, SnapshotError, where=loader.named_items)
        check_specs(snapshot, data, source)
        return snapshot


_SPECS: Mapping[str, tuple[str, type[BaseModel]]] = {
    "cluster_policies": ("ClusterPolicy", ClusterPolicySpec),
    "gpu_clusters": ("GPUCluster", GPUClusterSpec),
}


def check_specs(snapshot: Snapshot, data: Any, source: str) -> None:
    """Each custom resource's spec typed as its CRD types it (the API server stored it so):
    a hand-edited `devicePlugin.config.default: [..]` or `migManager: "x"` is the file's
    error here, not a traceback in a check that reads it. Unknown fields are kept, as a
    newer CRD may have them."""
    for key, (kind, model) in _SPECS.items():
        for i, obj in enumerate(getattr(snapshot, key)):
            if obj.kind != kind:
                raise SnapshotError(
                    f"{source}: {loader.named_items((key, i, 'kind'), data)}, value "
                    f"{loader.excerpt(obj.kind)}: expected {kind!r}"
                )
            loader.validate(
                model, obj.spec, source, SnapshotError, _in_spec(key, i, data), strict=True
            )


def _in_spec(key: str, index: int, data: Any) -> loader.Where:
    def where(loc: tuple[int | str, ...], _: Any) -> str:
        return loader.named_items((key, index, "spec", *loc), data)

    return where


def parse_json(text: str, source: str) -> Any:
    """JSON within SNAPSHOT_LIMITS; a key given twice in one object is an error."""
    loader.check_size(text, source, SnapshotError, SNAPSHOT_LIMITS)

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise SnapshotError(f"{source}: duplicate key {loader.excerpt(key)}")
            out[key] = value
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise SnapshotError(
            f"{source}: line {exc.lineno}, column {exc.colno} malformed JSON: {exc.msg}"
        ) from None
    except RecursionError:
        raise SnapshotError(f"{source}: nested too deeply") from None
    loader.check_shape(data, source, SnapshotError, SNAPSHOT_LIMITS)
    return data


def load_snapshot(path: str | Path) -> Snapshot:
    """A snapshot file (`-`: standard input)."""
    text, source = loader.read_text(path, SnapshotError, SNAPSHOT_LIMITS)
    return Snapshot.from_json(text, source)


def sorted_by_name(items: Iterable[Any]) -> tuple[Any, ...]:
    """Items ordered by (namespace, name) where they have them: stable snapshots."""
    return tuple(sorted(items, key=lambda i: (getattr(i, "namespace", ""), i.name)))


def nvidia_only(resources: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in resources.items() if k.startswith(nvidia.PREFIX)}
