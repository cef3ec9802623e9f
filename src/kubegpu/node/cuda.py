"""CUDA probes: does a GPU of this node accept a workload?

On real hardware a CUDA context is created and destroyed through the driver API (libcuda,
no toolkit needed). On a simulated node a process is started on the first CUDA device (a
GPU, or a MIG device of a GPU with MIG on) and NVML must report it. Which probe a node
uses comes with its GPU backend (`kubegpu.node.gpus`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kubegpu.nvml import Nvml, NvmlError

if TYPE_CHECKING:  # loaded only when a simulated node is opened: see kubegpu.nvml
    from kubegpu.nvml.sim import SimNvml

WORKLOAD_MEMORY_MIB = 64
HIDDEN = frozenset({"all", "void", "none"})


class ProbeFailed(RuntimeError):
    """The GPU did not accept the workload; the message says why."""


class CudaProbe(Protocol):
    def run(self, visible: str | None, container_root: Path | None) -> str:
        """Run a tiny workload on a visible CUDA device; what ran where (ProbeFailed,
        NvmlError otherwise). `visible`: NVIDIA_VISIBLE_DEVICES; `container_root`: a
        containerized driver's root, where libcuda is loaded from."""
        ...


def preload_driver_library(container_root: Path, soname: str) -> bool:
    """Load a driver library from a containerized driver's root, so NVML/CUDA bindings that
    dlopen the soname find it. False when it is not there."""
    for libdir in ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu", "usr/lib"):
        candidate = container_root / libdir / soname
        if candidate.exists():
            ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
            return True
    return False


def _mig_on(nvml: Nvml, index: int) -> bool:
    try:
        return nvml.mig_mode(index).current
    except NvmlError:  # NotSupported: a GPU without MIG
        return False


def cuda_targets(nvml: Nvml, visible: str | None = None) -> list[tuple[int, str | None, str]]:
    """(GPU index, MIG UUID or None, name) of each CUDA device, as CUDA would enumerate
    them: whole GPUs without MIG, and the MIG devices of GPUs with MIG on. `visible`
    (NVIDIA_VISIBLE_DEVICES) restricts them to the listed UUIDs/indexes."""
    out: list[tuple[int, str | None, str]] = []
    for d in nvml.devices():
        if _mig_on(nvml, d.index):
            for m in nvml.mig_devices(d.index):
                out.append((d.index, m.uuid, m.uuid))
        else:
            out.append((d.index, None, d.uuid))
    if visible and visible not in HIDDEN:
        wanted = {v.strip() for v in visible.split(",")}
        out = [t for t in out if t[2] in wanted or str(t[0]) in wanted or (t[1] and t[1] in wanted)]
    return out


@dataclass(frozen=True)
class SimCudaProbe:
    """A simulated node: start a process on the first CUDA device and see NVML report it."""

    open_sim: Callable[[], SimNvml]

    def run(self, visible: str | None, container_root: Path | None) -> str:
        nvml = self.open_sim()
        try:
            targets = cuda_targets(nvml, visible)
            if not targets:
                raise ProbeFailed(
                    "no CUDA device: every GPU has MIG on without instances, or none is visible"
                )
            index, mig, name = targets[0]
            pid = os.getpid()
            from kubegpu.nvml.sim import SimControls

            lab = SimControls.of(nvml)  # the simulated CUDA process
            lab.start_process(index, pid, WORKLOAD_MEMORY_MIB, sm_percent=1, mig_device=mig)
            try:
                if not any(p.pid == pid for p in nvml.processes(index)):
                    raise ProbeFailed(f"GPU {index} did not report the workload process")
            finally:
                lab.stop_process(index, pid)
            return f"a workload ran on {name}"
        finally:
            nvml.close()


@dataclass(frozen=True)
class LibcudaProbe:
    """Real hardware: create and destroy a CUDA context on device 0 through libcuda."""

    library: str = "libcuda.so.1"

    def run(self, visible: str | None, container_root: Path | None) -> str:
        if container_root is not None:
            preload_driver_library(container_root, self.library)
        try:
            cuda = ctypes.CDLL(self.library)
        except OSError as exc:
            raise ProbeFailed(f"libcuda is not available: {exc}") from None

        def call(name: str, *args: Any) -> None:
            code = getattr(cuda, name)(*args)
            if code != 0:
                raise ProbeFailed(f"{name} failed with CUDA error {code}")

        call("cuInit", 0)
        count = ctypes.c_int(0)
        call("cuDeviceGetCount", ctypes.byref(count))
        if count.value < 1:
            raise ProbeFailed("CUDA sees no device")
        device = ctypes.c_int(0)
        call("cuDeviceGet", ctypes.byref(device), 0)
        context = ctypes.c_void_p()
        call("cuCtxCreate_v2", ctypes.byref(context), 0, device)
        call("cuCtxDestroy_v2", context)
        return f"a CUDA context was created on device 0 of {count.value}"
