"""The DRA plugin and the device plugin never hand out the same GPU on one node.

Until the kubelet can map a counted `nvidia.com/gpu` request onto DRA devices, the two
must not both serve one node (reference/dcgm-dra.md section 2.1: upstream's chart refuses
it too). The plugin refuses to start while a device plugin serves NVIDIA resources on the
node: a live `nvidia-*.sock` in the kubelet's device-plugin directory. A stale socket file
that nobody listens on does not count.
"""

from __future__ import annotations

import socket
from pathlib import Path


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


def device_plugin_sockets(device_plugin_dir: Path) -> list[Path]:
    """The live NVIDIA device-plugin sockets in `device_plugin_dir` (sorted)."""
    try:
        candidates = sorted(device_plugin_dir.glob("nvidia-*.sock"))
    except OSError:
        return []
    return [p for p in candidates if p.is_socket() and _listening(p)]
