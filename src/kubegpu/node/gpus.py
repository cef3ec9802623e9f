"""The GPU backend a node component runs on, chosen by configuration (`--nvml`,
$KUBEGPU_NVML), never by a test switch: how to open NVML, how to probe CUDA, which MPS
backend starts the MPS daemons.

- `real`: NVML through the driver, a CUDA context through libcuda, `nvidia-cuda-mps-control`;
- `sim:<state-file>`: a simulated node (created from `--sim-node` on first use), a process
  started on a simulated GPU, and MPS limits recorded to a file.

Components get a `GpuBackend` and never ask which kind it is; only this module knows the
simulator.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from kubegpu.node.cuda import CudaProbe, LibcudaProbe, SimCudaProbe
from kubegpu.node.mps import MpsBackend, RecordingMps, SystemMps
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import ENV_NVML, ENV_SIM_NODE, BackendError, Nvml, NvmlError, open_nvml

if TYPE_CHECKING:  # loaded only when a simulated node is opened: see kubegpu.nvml
    from kubegpu.nvml.sim import SimNvml

SIM_PREFIX = "sim:"


class GpusUnavailable(NvmlError):
    """The configured backend cannot be opened (a missing state file, a bad node spec)."""

    label = "cannot open the GPUs"


@dataclass(frozen=True)
class GpuBackend:
    """What `--nvml` chose. `open()` starts an NVML session (the caller closes it); every
    failure is an NvmlError."""

    name: str  # "real" or "sim:<state-file>"
    opener: Callable[[], Nvml] = field(repr=False)
    cuda: CudaProbe = field(repr=False)
    mps: MpsBackend = field(repr=False)
    # a containerized driver's startup probe writes .driver-ctr-ready before NVML is usable;
    # a simulated node has no driver container
    driver_ready_file: bool = True
    # a pre-installed driver is files on the host's root (its nvidia-smi and libraries),
    # checked there; a simulated node's driver is its simulated NVML, with no such files
    host_driver_files: bool = True

    def open(self) -> Nvml:
        try:
            return self.opener()
        except NvmlError:
            raise
        except (BackendError, OSError, ValueError) as exc:
            raise GpusUnavailable(str(exc)) from None

    def open_or_fail(self) -> Nvml:
        """`open()` for a component that cannot run without GPUs: ComponentError instead."""
        try:
            return self.open()
        except NvmlError as exc:
            raise ComponentError(str(exc)) from None


def real_backend() -> GpuBackend:
    return GpuBackend(
        name="real",
        opener=lambda: open_nvml("real"),
        cuda=LibcudaProbe(),
        mps=SystemMps(),
    )


def sim_backend(state_file: Path | str, sim_node: str | None = None) -> GpuBackend:
    """A simulated node whose GPU state lives in `state_file` (created from `sim_node`, e.g.
    "h200-nvl:8", when it does not exist yet)."""
    spec = f"{SIM_PREFIX}{state_file}"

    def open_sim() -> SimNvml:
        return cast("SimNvml", open_nvml(spec, sim_node or None))  # a sim: spec opens SimNvml

    return GpuBackend(
        name=spec,
        opener=open_sim,
        cuda=SimCudaProbe(open_sim),
        mps=RecordingMps(),
        driver_ready_file=False,
        host_driver_files=False,
    )


def gpu_backend(nvml: str | None = None, sim_node: str | None = None) -> GpuBackend:
    """The backend named by `nvml` (default: $KUBEGPU_NVML, else "real"); `sim_node`
    (default: $KUBEGPU_SIM_NODE) creates a simulated node's state file on first use.
    ComponentError for a value that names no backend."""
    choice = nvml or os.environ.get(ENV_NVML) or "real"
    if choice == "real":
        return real_backend()
    if choice.startswith(SIM_PREFIX) and len(choice) > len(SIM_PREFIX):
        return sim_backend(choice[len(SIM_PREFIX) :], sim_node or os.environ.get(ENV_SIM_NODE))
    raise ComponentError(f"--nvml {choice!r}: use 'real' or 'sim:<state-file>'")
