"""The specs kubegpu's node components write, built one way for all of them.

- the device plugin's `k8s.device-plugin.nvidia.com/gpu` and the MIG manager's
  `management.nvidia.com/gpu`: every GPU and MIG device by UUID and by index (`0`, `0:1`),
  plus `all` (every device's nodes);
- the DRA plugin's `k8s.gpu.nvidia.com/claim`, one transient spec per claim, one device
  per allocated device (`<claim uid>-<device>`).

Each device's entry has its own device nodes (and, in a claim, its GPU's UUID and the edits
of the configs applied to its request); the spec-wide edits have what every device needs:
the control nodes, the driver's files and hooks (`cdi.driver`) and
`NVIDIA_VISIBLE_DEVICES=void`, which nvcdi puts in every spec so the legacy hook adds nothing
to a container given devices through CDI (node-runtime.md §2.3, §3.2, §3.4).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kubegpu.catalog import nvidia
from kubegpu.cdi.nodes import device_nodes, gpu_node, mig_cap_nodes
from kubegpu.cdi.spec import ContainerEdits, Device, Mount, Spec, dumps, file_name

VOID = f"{nvidia.NVIDIA_VISIBLE_DEVICES}={nvidia.VISIBLE_DEVICES_VOID}"
#: Mount options of the per-claim directories (the MPS pipe), as NVIDIA's DRA plugin.
SHARED_DIR_OPTIONS = ("rw", "nosuid", "nodev", "bind")


def common_edits(
    control_devices: Sequence[str] = (),
    dev_root: str = "/",
    driver: ContainerEdits | None = None,
    env: Mapping[str, str] | None = None,
) -> ContainerEdits:
    """The spec-wide edits: `NVIDIA_VISIBLE_DEVICES=void`, the driver's env and the
    writer's own (`env`), the control nodes, the driver's mounts and hooks."""
    extra = tuple(f"{k}={v}" for k, v in sorted((env or {}).items()))
    driver = driver or ContainerEdits()
    return ContainerEdits(
        env=(VOID, *driver.env, *extra),
        device_nodes=device_nodes(control_devices, dev_root),
        mounts=driver.mounts,
        hooks=driver.hooks,
    )


@dataclass(frozen=True)
class NodeDevice:
    """A GPU or MIG device of the node: the names a spec gives it and its device nodes."""

    names: tuple[str, ...]  # UUID first, then the index (`0` or `0:1`)
    nodes: tuple[str, ...]


class MigLike(Protocol):
    """A MIG device as NVML reports it (e.g. `sharing.devices.MigFacts`)."""

    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def gi(self) -> int: ...
    @property
    def ci(self) -> int: ...


class GpuLike(Protocol):
    """A GPU as NVML reports it (e.g. `sharing.devices.GpuFacts`)."""

    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def mig_devices(self) -> Sequence[MigLike]: ...


def gpu_devices(
    gpus: Sequence[GpuLike],
    minors: Mapping[int, int] | None = None,
    mig_minors: Mapping[str, int] | None = None,
) -> list[NodeDevice]:
    """Every GPU and MIG device, GPUs in index order: a GPU's node is `/dev/nvidia<minor>`
    (`minors`: index -> minor, default the index); a MIG device has its parent's node and
    its capability nodes (`mig_minors`: the driver's table, `nodes.read_mig_minors`)."""
    out = []
    for g in sorted(gpus, key=lambda g: g.index):
        minor = (minors or {}).get(g.index, g.index)
        node = gpu_node(minor)
        out.append(NodeDevice((g.uuid, str(g.index)), (node,)))
        for m in g.mig_devices:
            caps = mig_cap_nodes(mig_minors or {}, minor, m.gi, m.ci)
            out.append(NodeDevice((m.uuid, f"{g.index}:{m.index}"), (node, *caps)))
    return out


def node_spec(
    kind: str, devices: Sequence[NodeDevice], common: ContainerEdits, dev_root: str = "/"
) -> Spec:
    """A spec of every device of the node under each of its names, plus `all`."""
    out: list[Device] = []
    every: list[str] = []
    for d in devices:
        edits = ContainerEdits(device_nodes=device_nodes(d.nodes, dev_root))
        every += [p for p in d.nodes if p not in every]
        out += [Device(name, edits) for name in d.names]
    out.append(Device("all", ContainerEdits(device_nodes=device_nodes(every, dev_root))))
    return Spec(kind, tuple(out), common)


# -- per-claim specs --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimDevice:
    """One allocated device of a claim."""

    name: str  # the published device name, e.g. gpu-0
    request: str  # the claim's request it was allocated for
    uuid: str  # GPU or MIG UUID
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class ConfigEdits:
    """What one of the claim's configs adds to a container, and the requests it applies to:
    its edits go into those requests' devices only (node-runtime.md §3.4, step 6)."""

    requests: frozenset[str]
    env: Mapping[str, str] = field(default_factory=dict)
    shared_dirs: tuple[str, ...] = ()  # host directories seen at the same path (MPS pipe)

    def edits(self) -> ContainerEdits:
        return ContainerEdits(
            env=tuple(f"{k}={v}" for k, v in sorted(self.env.items())),
            mounts=tuple(Mount(p, p, SHARED_DIR_OPTIONS) for p in self.shared_dirs),
        )


def claim_device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def claim_cdi_id(claim_uid: str, device: str) -> str:
    """`k8s.gpu.nvidia.com/claim=<uid>-gpu-0`: what the kubelet hands to the runtime."""
    return f"{nvidia.CDI_CLAIM_KIND}={claim_device_name(claim_uid, device)}"


def claim_file_name(claim_uid: str) -> str:
    """`k8s.gpu.nvidia.com-claim_<uid>.json`, the CDI library's name for a transient spec."""
    return file_name(nvidia.CDI_CLAIM_KIND, claim_uid)


def claim_spec(
    claim_uid: str,
    devices: Sequence[ClaimDevice],
    configs: Sequence[ConfigEdits] = (),
    common: ContainerEdits | None = None,
    dev_root: str = "/",
) -> Spec:
    """The spec of one claim: a device entry per allocated device (once, however many
    requests it serves) with its nodes, `NVIDIA_VISIBLE_DEVICES=<uuid>` (which GPU it is,
    for kubegpu's simulated containers, which have no device nodes) and the edits of the
    configs naming its request."""
    out: list[Device] = []
    seen: set[str] = set()
    for d in devices:
        if d.name in seen:
            continue
        seen.add(d.name)
        edits = ContainerEdits(
            env=(f"{nvidia.NVIDIA_VISIBLE_DEVICES}={d.uuid}",),
            device_nodes=device_nodes(d.nodes, dev_root),
        )
        for c in configs:
            if d.request in c.requests:
                edits = edits.then(c.edits())
        out.append(Device(claim_device_name(claim_uid, d.name), edits))
    return Spec(nvidia.CDI_CLAIM_KIND, tuple(out), common or common_edits())


# -- writing ----------------------------------------------------------------------------------


def temporary_path(path: Path) -> Path:
    """Where a spec is written before it is renamed into place (`.<name>.tmp`: a CDI scan
    reads only `*.json` and `*.yaml`, so a half-written file is never read)."""
    return path.with_name(f".{path.name}.tmp")


def write_spec(directory: Path, name: str, spec: Spec) -> Path:
    """Write `spec` as `directory/name` atomically (world-readable); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    tmp = temporary_path(path)
    tmp.write_text(dumps(spec, path.suffix))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
