"""The device nodes a CDI spec lists: per GPU, per MIG device, and the control nodes.

One list of control nodes for every writer (node-runtime.md §3.2): `/dev/nvidiactl`,
`/dev/nvidia-modeset`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`, each only if the node
has it. A GPU is `/dev/nvidia<minor>`; a MIG device is its parent's node plus the
`/dev/nvidia-caps/nvidia-cap<m>` nodes of its GPU and compute instances, with the minors
from the driver's table `proc/driver/nvidia-caps/mig-minors` under the driver root.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from kubegpu.cdi.spec import DeviceNode

#: Device nodes every GPU container needs besides its GPUs, in nvcdi's order.
CONTROL_DEVICES = (
    "/dev/nvidiactl",
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
)
#: The driver's table of MIG capability minors, relative to the driver root: lines like
#: `gpu0/gi1/access 12` and `gpu0/gi1/ci0/access 13`.
MIG_MINORS = "proc/driver/nvidia-caps/mig-minors"


def gpu_node(minor: int) -> str:
    return f"/dev/nvidia{minor}"


def present_control_devices(dev_root: Path) -> tuple[str, ...]:
    """The control nodes this node has, looked up under `dev_root` as this process sees it."""
    return tuple(p for p in CONTROL_DEVICES if (dev_root / p.lstrip("/")).exists())


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


def mig_cap_nodes(table: Mapping[str, int], gpu_minor: int, gi: int, ci: int) -> tuple[str, ...]:
    """The GI and CI capability nodes of one MIG device (those the table lists)."""
    prefix = f"gpu{gpu_minor}/gi{gi}"
    keys = (f"{prefix}/access", f"{prefix}/ci{ci}/access")
    return tuple(f"/dev/nvidia-caps/nvidia-cap{table[k]}" for k in keys if k in table)


def host_path(root: str, path: str) -> str:
    """`path` on the host when the node's devices (or driver) live under `root`."""
    return path if root in ("", "/") else f"{root.rstrip('/')}{path}"


def device_nodes(paths: Iterable[str], dev_root: str = "/") -> tuple[DeviceNode, ...]:
    """Spec entries for `paths`, their host paths under `dev_root` (omitted when the same)."""
    out = []
    for p in dict.fromkeys(paths):
        host = host_path(dev_root, p)
        out.append(DeviceNode(p, None if host == p else host))
    return tuple(out)
