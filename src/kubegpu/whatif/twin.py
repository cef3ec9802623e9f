"""The twin: a snapshot rebuilt as a simulated cluster, a change tried on it (I/O).

The twin is the real control plane with one `SimNode` per node of the snapshot (the GPU
models, counts, driver and MIG mode its labels say), kubegpu installed by its chart with the
snapshot's ClusterPolicy or GPUCluster and ConfigMaps, the nodes' `mig.config` and
`device-plugin.config` labels, and the workload pods recreated on their nodes so that they
hold devices there. The MIG manager, device plugin and feature discovery then do what they
would do on the real nodes. Only the twin is ever written: nothing here knows the source
cluster, which `kubegpu what-if snapshot` reads once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, ServiceAccount
from lightkube.types import PatchType

from kubegpu.catalog import nvidia
from kubegpu.doctor.capture import capture
from kubegpu.doctor.checks import run_checks
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.kube.labels import labels_of
from kubegpu.kube.policy import ClusterPolicyResource, GPUClusterResource
from kubegpu.mig.holders import gpu_of_device, held_gpus
from kubegpu.mig.parted import plan_config, read_node
from kubegpu.sharing.replicas import physical_id
from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.kubelet.node import SimNode
from kubegpu.sim.stack import NAMESPACE, Stack, simulated_stack
from kubegpu.whatif.change import Change, check_nodes
from kubegpu.whatif.report import (
    GpuLayout,
    NodeState,
    PendingPod,
    Report,
    TwinState,
    build_report,
)
from kubegpu.whatif.twin_spec import TWIN_IMAGE, TwinPod, TwinSpec, mig_layouts

Say = Callable[[str], None]
RESOURCES = {"ClusterPolicy": ClusterPolicyResource, "GPUCluster": GPUClusterResource}
POLL_S = 1.0
# nothing the report reads, and no pod, changed for this long: settled (a device plugin
# registers its resources a few seconds after its pod starts)
QUIET_S = 10.0
SETUP_TIMEOUT_S = 300.0
MIG_TERMINAL = ("success", "failed")
MIG_FAILED_REASON = "MigConfigFailed"
MIG_EVENT_REASONS = ("MigConfigFailed", "MigConfigSuccess")


class TwinError(RuntimeError):
    """The twin could not be built as the snapshot describes it; says what and where."""


@dataclass
class Twin:
    """A running twin: its stack (control plane, nodes, kubegpu) and what it was built from."""

    stack: Stack
    spec: TwinSpec
    say: Say

    @property
    def client(self) -> Any:
        return self.stack.client

    # -- building -------------------------------------------------------------------------
    async def build(self, timeout: float = SETUP_TIMEOUT_S) -> None:
        """ConfigMaps and custom resources as in the snapshot, then the pods, once kubegpu
        has set every node up."""
        for cm in self.spec.config_maps:
            await self.put_config_map(cm.name, dict(cm.data), dict(cm.labels))
        for policy in self.spec.policies:
            resource = RESOURCES[policy.kind]
            await self.client.create(
                resource(metadata=ObjectMeta(name=policy.name), spec=policy.spec)
            )
        self.say(
            f"created {len(self.spec.config_maps)} ConfigMap(s) and "
            + (", ".join(f"{p.kind} {p.name}" for p in self.spec.policies) or "no policy")
        )
        await self.settle(timeout, mig_nodes=self._mig_labelled(), what="kubegpu set up")
        await self._create_pods(timeout)

    def _mig_labelled(self) -> set[str]:
        return {n.name for n in self.spec.nodes if nvidia.MIG_CONFIG in n.labels}

    async def put_config_map(
        self, name: str, data: dict[str, str], labels: dict[str, str] | None = None
    ) -> None:
        cm = ConfigMap(
            metadata=ObjectMeta(name=name, namespace=NAMESPACE, labels=labels or None), data=data
        )
        try:
            await self.client.create(cm)
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            await self.client.replace(cm)

    async def _create_pods(self, timeout: float) -> None:
        namespaces = {p.namespace for p in self.spec.pods}
        for ns in sorted(namespaces):
            with contextlib.suppress(ApiError):
                await self.client.create(Namespace(metadata=ObjectMeta(name=ns)))
        for ns in sorted(namespaces):
            await _wait(f"namespace {ns} ready for pods", self._service_account(ns), timeout=60)
        running = [p for p in self.spec.pods if p.node]
        # the running pods first, holding their devices, before a Pending one is created:
        # the scheduler could otherwise bind it to a device a running pod held in the source
        for p in running:
            await self._create_pod(p)
        self.say(f"recreated {len(running)} running workload pod(s)")

        async def all_running() -> bool:
            for p in running:
                pod = await self.client.get(Pod, p.name, namespace=p.namespace)
                phase = pod.status.phase if pod.status else None
                if phase in ("Failed", "Succeeded"):
                    why = pod.status.message or pod.status.reason or phase
                    raise TwinError(f"pod {p.key} could not run again on {p.node}: {why}")
                if phase != "Running":
                    return False
            return True

        await _wait("the workload pods running", all_running, timeout=timeout)
        pending = [p for p in self.spec.pods if not p.node]
        for p in pending:
            await self._create_pod(p)
        self.say(f"recreated {len(pending)} Pending workload pod(s)")

    async def _create_pod(self, p: TwinPod) -> None:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "workload",
                    "image": TWIN_IMAGE,
                    "resources": {"limits": dict(p.resources)},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        }
        if p.node:
            spec["nodeName"] = p.node  # where it runs, holding devices there
        body = {"metadata": {"name": p.name, "labels": dict(p.labels)}, "spec": spec}
        await self.client.create(Pod.from_dict(body), namespace=p.namespace)

    def _service_account(self, ns: str) -> Callable[[], Awaitable[bool]]:
        """Whether `ns` has its default ServiceAccount: before it, pods are refused."""

        async def check() -> bool:
            try:
                await self.client.get(ServiceAccount, "default", namespace=ns)
            except ApiError:
                return False
            return True

        return check

    # -- changing -----------------------------------------------------------------------------
    async def apply(self, change: Change) -> set[str]:
        """The change, as kubectl would make it; returns the nodes whose MIG layout label
        changed (their MIG manager has work to do)."""
        for cm in change.config_maps:
            await self.put_config_map(cm.name, cm.data)
        if change.policy_patch:
            policy = next((p for p in self.spec.policies if p.kind == "ClusterPolicy"), None)
            if policy is None:
                raise TwinError("the change patches the ClusterPolicy; the snapshot has none")
            await self.client.patch(
                ClusterPolicyResource,
                policy.name,
                {"spec": change.policy_patch},
                patch_type=PatchType.MERGE,
            )
        mig_nodes = set()
        for node, labels in change.labels.items():
            current = labels_of(await self.client.get(Node, node))
            patch: dict[str, str | None] = dict(labels)
            wanted = labels.get(nvidia.MIG_CONFIG)
            if wanted is not None and current.get(nvidia.MIG_CONFIG) != wanted:
                # the MIG manager writes the state again for the new layout: waiting for
                # it then means waiting for this change, not the last one
                patch[nvidia.MIG_CONFIG_STATE] = None
                mig_nodes.add(node)
            await self.client.patch(
                Node, node, {"metadata": {"labels": patch}}, patch_type=PatchType.MERGE
            )
        return mig_nodes

    # -- waiting ------------------------------------------------------------------------------
    async def settle(
        self, timeout: float, *, mig_nodes: set[str], what: str, must: bool = True
    ) -> tuple[str, ...]:
        """Wait until the custom resources are ready, each node in `mig_nodes` has a final
        MIG state, every operand DaemonSet is ready and nothing the report reads has changed
        for QUIET_S. Returns what was still moving at the deadline (with `must`, raises)."""
        deadline = time.monotonic() + timeout
        last: str | None = None
        quiet_since = time.monotonic()
        while True:
            moving = await self._moving(mig_nodes)
            print_ = json.dumps(await self._fingerprint(), sort_keys=True)
            now = time.monotonic()
            if print_ != last:
                last, quiet_since = print_, now
            if not moving and now - quiet_since >= QUIET_S:
                self.say(f"{what}: settled")
                return ()
            if now > deadline:
                moving = moving or [f"still changing within the last {QUIET_S:.0f}s"]
                if must:
                    raise TwinError(
                        f"{what}: not settled within {timeout:.0f}s: {'; '.join(moving)}"
                    )
                return tuple(moving)
            await asyncio.sleep(POLL_S)

    async def _moving(self, mig_nodes: set[str]) -> list[str]:
        out = []
        for policy in self.spec.policies:
            obj = await self.client.get(RESOURCES[policy.kind], policy.name)
            state = (dict(obj).get("status") or {}).get("state")
            if state != "ready":
                out.append(f"{policy.kind} {policy.name} is {state or 'without a state'}")
        for name in sorted(mig_nodes):
            state = labels_of(await self.client.get(Node, name)).get(nvidia.MIG_CONFIG_STATE)
            if state not in MIG_TERMINAL:
                out.append(f"node {name}: {nvidia.MIG_CONFIG_STATE} is {state or 'unset'}")
        async for ds in self.client.list(DaemonSet, namespace=NAMESPACE):
            status = ds.status
            if status and (status.numberReady or 0) < (status.desiredNumberScheduled or 0):
                out.append(
                    f"daemonset {ds.metadata.name}: {status.numberReady or 0}/"
                    f"{status.desiredNumberScheduled} ready"
                )
        out += await self._plugins_unregistered()
        return out

    async def _plugins_unregistered(self) -> list[str]:
        """Nodes whose device-plugin pod runs but has not registered a resource with the
        (simulated) kubelet yet: a pod is Running before its process has started serving."""
        plugin = {"app": nvidia.DEVICE_PLUGIN_DAEMONSET}
        out = []
        async for pod in self.client.list(Pod, namespace=NAMESPACE, labels=plugin):
            node = self.stack.nodes.get(pod.spec.nodeName if pod.spec else "")
            running = pod.status is not None and pod.status.phase == "Running"
            if node is not None and running and not node.devices.resources():
                out.append(f"node {node.name}: the device plugin has not registered yet")
        return out

    async def _fingerprint(self) -> dict[str, Any]:
        nodes = {}
        async for n in self.client.list(Node):
            labels = {
                k: v
                for k, v in labels_of(n).items()
                if k.startswith(nvidia.PREFIX) and k != nvidia.GFD_TIMESTAMP
            }
            allocatable = n.status.allocatable if n.status else None
            nodes[n.metadata.name] = {
                "labels": labels,
                "allocatable": {
                    k: v for k, v in (allocatable or {}).items() if k.startswith(nvidia.PREFIX)
                },
            }
        layouts = {name: [g.text() for g in self._layout(node)] for name, node in self._nodes()}
        pods = [
            [
                p.metadata.uid or "",
                p.status.phase if p.status else "",
                [bool(c.ready) for c in (p.status.containerStatuses or [])] if p.status else [],
            ]
            async for p in self.client.list(Pod, namespace="*")
        ]
        return {"nodes": nodes, "layouts": layouts, "pods": sorted(pods)}

    # -- looking ------------------------------------------------------------------------------
    def _nodes(self) -> list[tuple[str, SimNode]]:
        return sorted(self.stack.nodes.items())

    @staticmethod
    def _layout(node: SimNode) -> tuple[GpuLayout, ...]:
        if node.nvml is None:
            return ()
        out = []
        for s in read_node(node.nvml):
            out.append(
                GpuLayout(
                    index=s.index,
                    model=s.model.id if s.model else f"0x{s.pci_device_id:08X}",
                    mig_capable=s.mig_capable,
                    mig_enabled=s.enabled,
                    devices=tuple(sorted((+s.devices).items())),
                )
            )
        return tuple(out)

    async def observe(self, unsettled: tuple[str, ...] = ()) -> tuple[TwinState, Snapshot]:
        """The twin now: what the report compares, and the doctor's snapshot of it."""
        snapshot = await capture(self.client, namespace=NAMESPACE, source="what-if twin")
        uids = {}
        pending = []
        pods: dict[str, tuple[str, str]] = {}
        async for pod in self.client.list(Pod, namespace="*"):
            meta = pod.metadata
            key = f"{meta.namespace}/{meta.name}"
            uids[meta.uid] = key
            phase = (pod.status.phase if pod.status else None) or ""
            pods[key] = (phase, (pod.spec.nodeName if pod.spec else None) or "")
        for p in snapshot.workload_pods:
            if p.phase == "Pending":
                pending.append(PendingPod(p.key, await self._pending_reason(p.namespace, p.name)))
        nodes = []
        for name, node in self._nodes():
            info = snapshot.node(name)
            labels = info.labels if info else {}
            mig_config = labels.get(nvidia.MIG_CONFIG)
            events = [
                e for e in snapshot.events_about("Node", name) if e.reason in MIG_EVENT_REASONS
            ]
            nodes.append(
                NodeState(
                    name=name,
                    layout=self._layout(node),
                    advertised={
                        k: v
                        for k, v in (info.allocatable if info else {}).items()
                        if k.startswith(nvidia.PREFIX)
                    },
                    mig_config=mig_config,
                    mig_state=labels.get(nvidia.MIG_CONFIG_STATE),
                    mig_message=events[-1].message if events else "",
                    device_plugin_config=labels.get(nvidia.DEVICE_PLUGIN_CONFIG),
                    holders=_holders(node, uids),
                    changing=_changing(node, mig_config, snapshot),
                )
            )
        state = TwinState(tuple(nodes), tuple(pending), not unsettled, unsettled, pods)
        return state, snapshot

    async def _pending_reason(self, namespace: str, name: str) -> str:
        pod = await self.client.get(Pod, name, namespace=namespace)
        for c in (pod.status.conditions if pod.status else None) or []:
            if c.type == "PodScheduled" and c.status != "True":
                return c.message or c.reason or ""
        return "not scheduled yet"


def _holders(node: SimNode, uids: Mapping[str, str]) -> dict[str, tuple[int, ...]]:
    """Pod -> the GPUs it holds NVIDIA devices on, from the node's device manager, mapped
    as the MIG manager maps what the kubelet says pods hold (`kubegpu.mig.holders`)."""
    if node.nvml is None:
        return {}
    held = (
        (uids[uid], resource, physical_id(device))
        for (uid, _), allocation in node.devices.allocations.items()
        if uid in uids
        for resource, ids in allocation.devices.items()
        for device in ids
    )
    holders = held_gpus(held, gpu_of_device(node.nvml))
    return {pod: tuple(sorted(gpus)) for pod, gpus in sorted(holders.items())}


def _changing(node: SimNode, mig_config: str | None, snapshot: Snapshot) -> tuple[int, ...]:
    """GPUs not in the layout the node's label asks for, judged as the MIG manager judges
    (its layouts, mig.parted's plan of the config and the GPUs it would change)."""
    if node.nvml is None or not mig_config:
        return ()
    layouts = mig_layouts(node.name, snapshot)
    if layouts is None or mig_config not in layouts.mig_configs:
        return ()
    try:
        plan = plan_config(node.nvml, mig_config, layouts.mig_configs[mig_config])
        plan.covered()
    except Exception:  # a layout the GPUs cannot take: the MIG manager's event says why
        return ()
    return tuple(plan.changing(read_node(node.nvml)))


async def _wait(what: str, check: Callable[[], Awaitable[bool]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TwinError(f"{what}: not within {timeout:.0f}s")
        await asyncio.sleep(POLL_S)


def cluster_spec(spec: TwinSpec) -> ClusterSpec:
    """The twin's nodes as the simulator's cluster spec (node names as the snapshot has
    them, even where they are longer than a cluster file allows)."""
    entries = [
        NodeEntry.model_construct(
            name=n.name, gpus=n.gpus, labels=dict(n.labels), cpu="32", memory="256Gi", nfd=n.nfd
        )
        for n in spec.nodes
    ]
    return ClusterSpec.model_construct(name="what-if-twin", nodes=entries)


def chart_values(spec: TwinSpec) -> dict[str, Any]:
    """The chart installs the operator only: the custom resources come from the snapshot."""
    nfd = any(n.nfd for n in spec.nodes if n.gpus)
    return {
        "clusterPolicy": {"deployCR": False},
        "gpuCluster": {"deployCR": False},
        "nfd": {"enabled": nfd},
    }


async def what_if(
    spec: TwinSpec,
    change: Change,
    *,
    chart: Path,
    workdir: Path,
    settle_timeout: float = 300.0,
    say: Say = lambda _: None,
) -> Report:
    """Build the twin of `spec`, observe it, apply `change`, wait for it to settle (at
    most `settle_timeout`), observe again and report the difference."""
    check_nodes(change, [n.name for n in spec.nodes])
    async with simulated_stack(
        cluster_spec(spec), workdir, chart=chart, values=chart_values(spec), say=say
    ) as stack:
        twin = Twin(stack, spec, say)
        await twin.build(SETUP_TIMEOUT_S)
        await twin.settle(SETUP_TIMEOUT_S, mig_nodes=set(), what="the twin as the snapshot")
        before, before_snapshot = await twin.observe()
        say("applying the change: " + "; ".join(change.describe()))
        mig_nodes = await twin.apply(change)
        unsettled = await twin.settle(
            settle_timeout, mig_nodes=mig_nodes, what="after the change", must=False
        )
        after, after_snapshot = await twin.observe(unsettled)
    return build_report(
        before,
        after,
        change=change.describe(),
        findings_before=run_checks(before_snapshot),
        findings_after=run_checks(after_snapshot),
        notes=(*spec.skipped, *change.notes),
        was_pending=[p.key for p in spec.pods if not p.node],
    )
