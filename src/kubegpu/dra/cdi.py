"""The transient CDI spec of one prepared claim (pure: returns the JSON document).

Vendor `k8s.gpu.nvidia.com`, class `claim`, one spec file per claim named after its UID,
one device per allocated device named `<claim uid>-<device>` (reference/dcgm-dra.md
section 2.8 and gotcha 7). Each device's edits add its device nodes and say which GPU it is
(`NVIDIA_VISIBLE_DEVICES=<uuid>`) plus what its own config asks (the MPS pipe directory
and mount, the time-slice interval), so that a container given only some of the claim's
devices gets only their sharing (reference/node-runtime.md section 3.4: a config's edits go
into its devices' entries); the spec-wide edits carry the claim's name and the control
device nodes.
Driver libraries and hooks are left to the container toolkit on the node, as in the device
plugin's spec (`kubegpu.sharing.cdi`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubegpu.catalog import nvidia

Json = dict[str, Any]

CDI_VERSION = "0.6.0"
#: Env var kubegpu sets in every claim's spec: which claim the devices came from.
ENV_CLAIM = "KUBEGPU_DRA_CLAIM"
#: Env var kubegpu sets for a TimeSlicing config: NVML has no compute-policy call in
#: kubegpu's facade, so the interval is handed to the container instead (docs/dra.md).
ENV_TIMESLICE_INTERVAL = "KUBEGPU_DRA_TIMESLICE_INTERVAL"


def spec_file_name(claim_uid: str) -> str:
    """`k8s.gpu.nvidia.com-claim_<uid>.json`, the CDI library's name for a transient spec."""
    return f"{nvidia.CDI_CLAIM_VENDOR}-{nvidia.CDI_CLAIM_CLASS}_{claim_uid}.json"


def device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def cdi_id(claim_uid: str, device: str) -> str:
    """`k8s.gpu.nvidia.com/claim=<uid>-gpu-0`: what the kubelet hands to the runtime."""
    return f"{nvidia.CDI_CLAIM_KIND}={device_name(claim_uid, device)}"


@dataclass(frozen=True)
class SpecDevice:
    """One allocated device, with what its container edits need."""

    name: str  # the published device name, e.g. gpu-0
    uuid: str  # GPU or MIG UUID
    device_nodes: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # from this device's config
    mounts: tuple[str, ...] = ()  # host directories seen at the same path (MPS pipe)


def _host(root: str, path: str) -> str:
    return path if root in ("", "/") else f"{root.rstrip('/')}{path}"


def _nodes(paths: Sequence[str], dev_root: str) -> list[Json]:
    return [{"path": p, "hostPath": _host(dev_root, p)} for p in paths]


def _mounts(paths: Sequence[str]) -> list[Json]:
    return [
        {"hostPath": m, "containerPath": m, "options": ["rw", "nosuid", "nodev", "bind"]}
        for m in paths
    ]


def claim_spec(
    claim_uid: str,
    devices: Sequence[SpecDevice],
    env: Mapping[str, str] | None = None,
    control_devices: Sequence[str] = (),
    dev_root: str = "/",
) -> Json:
    """The spec document of one claim. `env`: claim-wide variables; each device's own env
    and mounts go into that device's entry only."""
    seen: set[str] = set()
    out_devices = []
    for d in devices:
        if d.name in seen:
            continue
        seen.add(d.name)
        edits: Json = {
            "env": [
                f"{nvidia.NVIDIA_VISIBLE_DEVICES}={d.uuid}",
                *(f"{k}={v}" for k, v in sorted(d.env.items())),
            ],
            "deviceNodes": _nodes(d.device_nodes, dev_root),
        }
        if d.mounts:
            edits["mounts"] = _mounts(d.mounts)
        out_devices.append({"name": device_name(claim_uid, d.name), "containerEdits": edits})
    common: Json = {"env": [f"{k}={v}" for k, v in sorted((env or {}).items())]}
    if control_devices:
        common["deviceNodes"] = _nodes(control_devices, dev_root)
    return {
        "cdiVersion": CDI_VERSION,
        "kind": nvidia.CDI_CLAIM_KIND,
        "devices": out_devices,
        "containerEdits": common,
    }
