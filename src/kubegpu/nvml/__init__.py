"""The hardware seam: the only code that touches GPUs.

`open_nvml("real")` talks to the driver through nvidia-ml-py; `open_nvml("sim:<file>")`
opens a simulated node. The choice is configuration (`--nvml`, `KUBEGPU_NVML`), never a
test-only branch. The simulator's classes (`SimNvml`, and `SimControls` for faults and
reboots) are imported from kubegpu.nvml.sim.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubegpu.nvml import errors
from kubegpu.nvml.errors import NvmlError
from kubegpu.nvml.interface import Nvml
from kubegpu.nvml.sim.spec import NodeSpec, SpecError, parse_spec
from kubegpu.nvml.types import (
    Activation,
    ComputeInstanceInfo,
    ComputeInstanceProfileInfo,
    DeviceInfo,
    EventType,
    GpuEvent,
    GpuInstanceInfo,
    GpuInstanceProfileInfo,
    MemoryInfo,
    MigDeviceInfo,
    MigMode,
    Placement,
    ProcessInfo,
    ProcessUtilization,
    SystemInfo,
    Utilization,
)

ENV_NVML = "KUBEGPU_NVML"
ENV_SIM_NODE = "KUBEGPU_SIM_NODE"

__all__ = [
    "ENV_NVML",
    "ENV_SIM_NODE",
    "Activation",
    "BackendError",
    "ComputeInstanceInfo",
    "ComputeInstanceProfileInfo",
    "DeviceInfo",
    "EventType",
    "GpuEvent",
    "GpuInstanceInfo",
    "GpuInstanceProfileInfo",
    "MemoryInfo",
    "MigDeviceInfo",
    "MigMode",
    "NodeSpec",
    "Nvml",
    "NvmlError",
    "Placement",
    "ProcessInfo",
    "ProcessUtilization",
    "SpecError",
    "SystemInfo",
    "Utilization",
    "errors",
    "open_nvml",
    "parse_spec",
]


class BackendError(ValueError):
    """The --nvml / --sim-node configuration cannot be used."""


def open_nvml(nvml: str | None = None, sim_node: str | None = None) -> Nvml:
    """Open the backend named by `nvml` (default: $KUBEGPU_NVML, else "real").

    `sim:<state-file>` opens a simulated node; when the file does not exist yet it is
    created from `sim_node` (default: $KUBEGPU_SIM_NODE), e.g. "h200-nvl:8".
    """
    choice = nvml or os.environ.get(ENV_NVML) or "real"
    sim_node = sim_node or os.environ.get(ENV_SIM_NODE)
    if choice == "real":
        from kubegpu.nvml.real import RealNvml

        return RealNvml()
    if choice.startswith("sim:") and len(choice) > 4:
        from kubegpu.nvml.sim import SimNvml

        path = Path(choice[4:])
        if path.exists():
            return SimNvml(path)
        if not sim_node:
            raise BackendError(
                f"--nvml {choice}: {path} does not exist; give --sim-node (e.g. h200-nvl:8) to create it"
            )
        try:
            return SimNvml.create(path, sim_node)
        except SpecError as exc:
            raise BackendError(str(exc)) from None
    raise BackendError(f"--nvml {choice!r}: use 'real' or 'sim:<state-file>'")
