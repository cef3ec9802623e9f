"""The management CDI spec (`management.nvidia.com/gpu`), rewritten after each MIG change.

Management containers (DCGM, the exporter, validators) ask for `management.nvidia.com/gpu=all`
and get every GPU's device node plus the control nodes. MIG devices appear as their own
entries (`<gpu>:<mig>` and by UUID) so a spec that is current names the current instances.
Where the driver publishes MIG capability minors, each MIG device also gets its GI and CI
capability nodes; a simulated node has none. The document is built by `sharing.cdi`, the
same code that writes the device plugin's spec.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kubegpu.catalog import nvidia
from kubegpu.nvml import Nvml
from kubegpu.sharing.cdi import (
    MIG_MINORS,
    cdi_spec,
    device_nodes,
    mig_capability_nodes,
    read_mig_minors,
)
from kubegpu.sharing.facts import read_gpus

KIND = nvidia.CDI_MANAGEMENT_KIND
SPEC_NAME = "management.nvidia.com-gpu.yaml"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

__all__ = ["build_spec", "read_mig_minors", "write_spec"]


def build_spec(nvml: Nvml, mig_minors: Mapping[str, int]) -> dict[str, Any]:
    gpus = read_gpus(nvml)
    nodes = device_nodes(gpus, None, mig_capability_nodes(mig_minors, gpus))
    return cdi_spec(gpus, nodes, CONTROL_NODES, kind=KIND, void_visible_devices=False)


def write_spec(nvml: Nvml, cdi_dir: Path, mig_minors_file: Path = Path("/") / MIG_MINORS) -> Path:
    """Write the spec atomically; returns its path."""
    spec = build_spec(nvml, read_mig_minors(mig_minors_file))
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = cdi_dir / SPEC_NAME
    tmp = cdi_dir / f".{SPEC_NAME}.tmp"
    tmp.write_text(yaml.safe_dump(spec, sort_keys=False))
    os.replace(tmp, path)
    return path
