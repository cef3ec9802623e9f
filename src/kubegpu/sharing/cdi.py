"""The CDI spec the device plugin writes for its node (pure: returns the JSON document).

One spec of kind `k8s.device-plugin.nvidia.com/gpu` names every GPU and MIG device of the
node twice — by UUID and by index (`0`, `0:1`) — so CDI device names work under either
device-ID strategy, plus `all`. Each device's container edits add its device nodes (for a
MIG device: its parent's node and its capability nodes); the spec-wide edits add the
control nodes and set `NVIDIA_VISIBLE_DEVICES=void`, so a container that gets devices by
CDI is never widened by the legacy runtime hook.

Unlike nvidia-ctk's specs, driver libraries and hooks are not listed: kubegpu leaves the
driver's files to the container toolkit installed on the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubegpu.sharing.allocate import CDI_KIND, CDI_VENDOR, VISIBLE_DEVICES
from kubegpu.sharing.devices import GpuFacts

CDI_VERSION = "0.6.0"
SPEC_FILE = f"{CDI_VENDOR}-gpu.json"
# The driver's table of MIG capability minors, relative to the driver root: lines like
# `gpu0/gi1/access 12` and `gpu0/gi1/ci0/access 13`.
MIG_MINORS = "proc/driver/nvidia-caps/mig-minors"


def read_mig_minors(path: Path) -> dict[str, int]:
    """`gpu0/gi1/access` -> minor, from the driver's table (empty when there is none)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in lines:
        name, _, minor = line.strip().rpartition(" ")
        if name and minor.isdigit():
            out[name] = int(minor)
    return out


def mig_capability_nodes(
    table: Mapping[str, int], gpus: Sequence[GpuFacts], minors: Mapping[int, int] | None = None
) -> dict[str, tuple[str, ...]]:
    """MIG UUID -> its GI and CI capability device nodes (`/dev/nvidia-caps/nvidia-capN`)."""
    out: dict[str, tuple[str, ...]] = {}
    for g in gpus:
        prefix = f"gpu{(minors or {}).get(g.index, g.index)}"
        for m in g.mig_devices:
            keys = (f"{prefix}/gi{m.gi}/access", f"{prefix}/gi{m.gi}/ci{m.ci}/access")
            out[m.uuid] = tuple(
                f"/dev/nvidia-caps/nvidia-cap{table[k]}" for k in keys if k in table
            )
    return out


def gpu_node(minor: int) -> str:
    return f"/dev/nvidia{minor}"


def device_nodes(
    gpus: Sequence[GpuFacts],
    minors: Mapping[int, int] | None = None,
    mig_caps: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, tuple[str, ...]]:
    """UUID of every GPU and MIG device -> the device nodes a container needs for it.

    `minors`: GPU index -> N of /dev/nvidiaN (default: the index). `mig_caps`: MIG UUID ->
    its /dev/nvidia-caps/nvidia-capN nodes, when the node has them.
    """
    out: dict[str, tuple[str, ...]] = {}
    for g in gpus:
        node = gpu_node((minors or {}).get(g.index, g.index))
        out[g.uuid] = (node,)
        for m in g.mig_devices:
            out[m.uuid] = (node, *(mig_caps or {}).get(m.uuid, ()))
    return out


def _host(root: str, path: str) -> str:
    return path if root in ("", "/") else f"{root.rstrip('/')}{path}"


def _edits(paths: Sequence[str], dev_root: str) -> dict[str, Any]:
    return {"deviceNodes": [{"path": p, "hostPath": _host(dev_root, p)} for p in paths]}


def cdi_spec(
    gpus: Sequence[GpuFacts],
    nodes: Mapping[str, tuple[str, ...]],
    control_devices: Sequence[str] = (),
    dev_root: str = "/",
    kind: str = CDI_KIND,
    void_visible_devices: bool = True,
) -> dict[str, Any]:
    """The spec document for these GPUs (`nodes` as returned by `device_nodes`)."""
    devices: list[dict[str, Any]] = []
    everything: list[str] = []

    def add(names: Sequence[str], uuid: str) -> None:
        paths = nodes.get(uuid, ())
        for p in paths:
            if p not in everything:
                everything.append(p)
        for name in names:
            devices.append({"name": name, "containerEdits": _edits(paths, dev_root)})

    for g in sorted(gpus, key=lambda g: g.index):
        add((g.uuid, str(g.index)), g.uuid)
        for m in g.mig_devices:
            add((m.uuid, f"{g.index}:{m.index}"), m.uuid)
    devices.append({"name": "all", "containerEdits": _edits(everything, dev_root)})
    common = _edits(control_devices, dev_root)
    if void_visible_devices:
        common["env"] = [f"{VISIBLE_DEVICES}=void"]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": devices,
        "containerEdits": common,
    }
