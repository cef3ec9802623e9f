"""The validator's checks, as the upstream validator runs them, one per component.

- driver: NVML answers and reports a driver version and at least one GPU. With a
  containerized driver on real hardware the driver container's startup probe must have
  marked `.driver-ctr-ready`, and NVML is loaded from the driver's root.
- toolkit: this container was given the GPUs by the container runtime (NVML sees them
  from inside), and every NVIDIA CDI spec on the node is consistent with the GPUs (each
  GPU named by index or UUID, no name pointing at a GPU or MIG device that is not there).
- cuda: the GPU accepts a workload. On a simulated node a process is started on a GPU (or
  MIG device) and seen by NVML; on real hardware a CUDA context is created through the
  driver API. With WITH_WORKLOAD the same check runs in a pod pinned to the node.
- plugin: the node advertises `nvidia.com/gpu*` or `nvidia.com/mig-*`; with WITH_WORKLOAD
  a pod asking for one such device is admitted and runs.

Each check returns a `CheckResult`; the runner (validator.runner) deletes the ready file
first and writes it only on success.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubegpu.nvml import Nvml, NvmlError, SimNvml

NVIDIA_CDI_KINDS = ("nvidia.com/gpu", "k8s.device-plugin.nvidia.com/gpu")
DEFAULT_CDI_DIRS = (Path("/var/run/cdi"), Path("/etc/cdi"))
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
WORKLOAD_MEMORY_MIB = 64


class CheckFailed(RuntimeError):
    """The component is not (yet) working; the message says what is missing."""


@dataclass(frozen=True)
class CheckResult:
    component: str
    message: str
    env: Mapping[str, str] = field(default_factory=dict)  # written into the ready file


# -- driver ------------------------------------------------------------------------------------------
def driver_env(driver_root: str) -> dict[str, str]:
    """The env file upstream's driver-ready carries, read by the toolkit and MIG manager."""
    host = driver_root in ("", "/")
    return {
        "IS_HOST_DRIVER": "true" if host else "false",
        "NVIDIA_DRIVER_ROOT": "/" if host else driver_root,
        "DRIVER_ROOT_CTR_PATH": "/host" if host else "/driver-root",
        "NVIDIA_DEV_ROOT": "/" if host else driver_root,
        "DEV_ROOT_CTR_PATH": "/host" if host else "/driver-root",
    }


def preload_driver_library(container_root: Path, soname: str) -> bool:
    """Load a driver library from a containerized driver's root, so NVML/CUDA bindings that
    dlopen the soname find it. False when it is not there."""
    for libdir in ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu", "usr/lib"):
        candidate = container_root / libdir / soname
        if candidate.exists():
            ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
            return True
    return False


def check_driver(
    open_nvml: Callable[[], Nvml], driver_root: str, validations: Path, container_root: Path
) -> CheckResult:
    containerized = driver_root not in ("", "/")
    container_ready = (validations / ".driver-ctr-ready").exists()
    not_ready = (
        "the driver container is not ready yet (no .driver-ctr-ready from its startup probe)"
    )
    if containerized:
        with contextlib.suppress(OSError):  # NVML then comes from the driver's root
            preload_driver_library(container_root, "libnvidia-ml.so.1")
    try:
        nvml = open_nvml()
    except NvmlError as exc:
        raise CheckFailed(
            not_ready if containerized and not container_ready else f"NVML does not answer: {exc}"
        ) from None
    try:
        if containerized and not container_ready and not isinstance(nvml, SimNvml):
            raise CheckFailed(not_ready)
        system = nvml.system()
        count = nvml.device_count()
    except NvmlError as exc:
        raise CheckFailed(f"NVML does not answer: {exc}") from None
    finally:
        nvml.close()
    if count < 1:
        raise CheckFailed(f"driver {system.driver_version} answers but sees no GPU")
    env = driver_env(driver_root) | {"DRIVER_VERSION": system.driver_version}
    where = "containerized driver" if containerized else "host driver"
    cuda = ".".join(map(str, system.cuda_version))
    return CheckResult(
        "driver", f"{where} {system.driver_version}, CUDA {cuda}, {count} GPU(s)", env
    )


# -- toolkit / CDI --------------------------------------------------------------------------------------
def _load_spec(path: Path) -> dict[str, Any]:
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise CheckFailed(f"CDI spec {path}: not a mapping")
    return data


def cdi_problems(
    specs: Mapping[Path, Mapping[str, Any]], gpus: Mapping[int, str], migs: Mapping[str, str]
) -> list[str]:
    """Inconsistencies between NVIDIA CDI specs and the GPUs.

    `gpus`: index -> UUID; `migs`: "<gpu>:<mig>" index -> MIG UUID."""
    problems = []
    uuids = set(gpus.values()) | set(migs.values())
    for path, spec in specs.items():
        names = [str(d.get("name", "")) for d in spec.get("devices") or [] if isinstance(d, dict)]
        for name in names:
            if name == "all":
                continue
            if name.startswith(("GPU-", "MIG-")):
                if name not in uuids:
                    problems.append(f"{path}: device {name} is not on this node")
            elif name.isdigit():
                if int(name) not in gpus:
                    problems.append(f"{path}: device {name}: there is no GPU {name}")
            elif ":" in name and name not in migs:
                problems.append(f"{path}: device {name}: there is no such MIG device")
        for index, uuid in sorted(gpus.items()):
            if str(index) not in names and uuid not in names:
                problems.append(f"{path}: GPU {index} ({uuid}) is missing")
    return problems


def nvidia_cdi_specs(dirs: Sequence[Path]) -> dict[Path, dict[str, Any]]:
    specs = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.iterdir()):
            if path.suffix not in {".json", ".yaml", ".yml"} or not path.is_file():
                continue
            try:
                spec = _load_spec(path)
            except (OSError, ValueError, yaml.YAMLError) as exc:
                raise CheckFailed(f"CDI spec {path}: unreadable: {exc}") from None
            if spec.get("kind") in NVIDIA_CDI_KINDS:
                specs[path] = spec
    return specs


def check_toolkit(open_nvml: Callable[[], Nvml], cdi_dirs: Sequence[Path]) -> CheckResult:
    try:
        nvml = open_nvml()
    except NvmlError as exc:
        raise CheckFailed(
            f"the container runtime gave this container no GPU access: {exc}"
        ) from None
    try:
        devices = nvml.devices()
        gpus = {d.index: d.uuid for d in devices}
        migs = {
            f"{m.parent_index}:{m.index}": m.uuid
            for d in devices
            for m in _mig_devices(nvml, d.index)
        }
    except NvmlError as exc:
        raise CheckFailed(f"NVML inside the container fails: {exc}") from None
    finally:
        nvml.close()
    if not gpus:
        raise CheckFailed("no GPU is visible inside the container")
    specs = nvidia_cdi_specs(cdi_dirs)
    problems = cdi_problems(specs, gpus, migs)
    if problems:
        raise CheckFailed("CDI spec inconsistent with the GPUs: " + "; ".join(problems))
    cdi = (
        f", CDI specs consistent: {', '.join(str(p) for p in specs)}" if specs else ", no CDI spec"
    )
    return CheckResult("toolkit", f"{len(gpus)} GPU(s) visible in the container{cdi}")


def _mig_on(nvml: Nvml, index: int) -> bool:
    try:
        return nvml.mig_mode(index).current
    except NvmlError:  # NotSupported: a GPU without MIG
        return False


def _mig_devices(nvml: Nvml, index: int) -> list[Any]:
    if not _mig_on(nvml, index):
        return []
    return list(nvml.mig_devices(index))


# -- CUDA ---------------------------------------------------------------------------------------------------
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
    if visible and visible not in {"all", "void", "none"}:
        wanted = {v.strip() for v in visible.split(",")}
        out = [t for t in out if t[2] in wanted or str(t[0]) in wanted or (t[1] and t[1] in wanted)]
    return out


def run_sim_workload(nvml: SimNvml, visible: str | None = None) -> str:
    """Start a process on the first CUDA device of a simulated node and see NVML report it."""
    targets = cuda_targets(nvml, visible)
    if not targets:
        raise CheckFailed(
            "no CUDA device: every GPU has MIG on without instances, or none is visible"
        )
    index, mig, name = targets[0]
    pid = os.getpid()
    nvml.start_process(index, pid, WORKLOAD_MEMORY_MIB, sm_percent=1, mig_device=mig)
    try:
        if not any(p.pid == pid for p in nvml.processes(index)):
            raise CheckFailed(f"GPU {index} did not report the workload process")
    finally:
        nvml.stop_process(index, pid)
    return f"a workload ran on {name}"


def run_cuda_workload(container_root: Path | None = None) -> str:
    """Create and destroy a CUDA context on device 0 through libcuda (no toolkit needed)."""
    if container_root is not None:
        preload_driver_library(container_root, "libcuda.so.1")
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise CheckFailed(f"libcuda is not available: {exc}") from None

    def call(name: str, *args: Any) -> None:
        code = getattr(cuda, name)(*args)
        if code != 0:
            raise CheckFailed(f"{name} failed with CUDA error {code}")

    call("cuInit", 0)
    count = ctypes.c_int(0)
    call("cuDeviceGetCount", ctypes.byref(count))
    if count.value < 1:
        raise CheckFailed("CUDA sees no device")
    device = ctypes.c_int(0)
    call("cuDeviceGet", ctypes.byref(device), 0)
    context = ctypes.c_void_p()
    call("cuCtxCreate_v2", ctypes.byref(context), 0, device)
    call("cuCtxDestroy_v2", context)
    return f"a CUDA context was created on device 0 of {count.value}"


def check_cuda_here(
    open_nvml: Callable[[], Nvml], visible: str | None, container_root: Path | None
) -> CheckResult:
    try:
        nvml = open_nvml()
    except NvmlError as exc:
        raise CheckFailed(f"NVML does not answer: {exc}") from None
    try:
        if isinstance(nvml, SimNvml):
            return CheckResult("cuda", run_sim_workload(nvml, visible))
        return CheckResult("cuda", run_cuda_workload(container_root))
    except NvmlError as exc:
        raise CheckFailed(f"the GPU refused the workload: {exc}") from None
    finally:
        nvml.close()


# -- plugin -------------------------------------------------------------------------------------------------
def gpu_resources(allocatable: Mapping[str, Any] | None) -> dict[str, int]:
    """The node's GPU resources with at least one device."""
    out = {}
    for name, value in (allocatable or {}).items():
        if name.startswith(GPU_RESOURCE_PREFIXES):
            try:
                n = int(str(value))
            except ValueError:
                continue
            if n > 0:
                out[name] = n
    return out


def workload_resource(resources: Mapping[str, int], mig_strategy: str) -> str:
    """The resource a plugin workload asks for: a MIG device when there is one (mixed
    strategy), else a GPU."""
    migs = sorted(r for r in resources if r.startswith("nvidia.com/mig-"))
    if migs and mig_strategy == "mixed":
        return migs[0]
    if "nvidia.com/gpu" in resources:
        return "nvidia.com/gpu"
    return sorted(resources)[0]
