"""The hardware seam: the only code that touches GPUs.

`open_nvml("real")` talks to the driver through nvidia-ml-py; `open_nvml("sim:<file>")`
opens a simulated node. The choice is configuration (`--nvml`, `KUBEGPU_NVML`), never a
test-only branch. The simulator's classes (`SimNvml`, and `SimControls` for faults and
reboots) are imported from kubegpu.nvml.sim.

Importing this face loads no simulator code: a component on a real node never loads the
simulated backend (tests/unit/test_nvml_face.py checks each entrypoint). `parse_spec`,
`NodeSpec` and `SpecError` (the `h200-nvl:8` node description) live in kubegpu.nvml.sim.spec
and are loaded from there when first used.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubegpu.nvml import errors
from kubegpu.nvml.errors import NvmlError
from kubegpu.nvml.interface import Nvml
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

if TYPE_CHECKING:
    from kubegpu.nvml.sim.spec import NodeSpec, SpecError, parse_spec

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


_SIM_SPEC_NAMES = frozenset({"NodeSpec", "SpecError", "parse_spec"})


def __getattr__(name: str) -> Any:
    """The simulated node's spec names, loaded on first use (PEP 562) so that importing the
    face does not load the simulator."""
    if name in _SIM_SPEC_NAMES:
        return getattr(importlib.import_module("kubegpu.nvml.sim.spec"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        from kubegpu.nvml.sim.spec import SpecError

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
