"""The validator's checks, as the upstream validator runs them, one per component.

- driver: NVML answers and reports a driver version and at least one GPU. With a
  containerized driver on real hardware the driver container's startup probe must have
  marked `.driver-ctr-ready`, and NVML is loaded from the driver's root.
- toolkit: this container was given the GPUs by the container runtime (NVML sees them
  from inside), and the container toolkit's CDI spec is consistent with the GPUs (each GPU
  named by index or UUID, no name pointing at a GPU that is not there). The device plugin's
  spec, and MIG entries of any spec, are only reported here, never a failure: their writers
  rewrite them after a MIG change, and the device plugin does so only once it runs, which
  is after `toolkit-ready` (failing on them would wedge the node; see docs/operator.md,
  "Who waits for whom").
- cuda: the GPU accepts a workload. On a simulated node a process is started on a GPU (or
  MIG device) and seen by NVML; on real hardware a CUDA context is created through the
  driver API. With WITH_WORKLOAD the same check runs in a pod pinned to the node.
- plugin: the node advertises `nvidia.com/gpu*` or `nvidia.com/mig-*`, the device plugin's
  CDI spec (which it rewrites when it starts) names exactly the node's GPUs and MIG devices;
  with WITH_WORKLOAD a pod asking for one such device is admitted and runs.

Each check returns a `CheckResult`; the runner (validator.runner) deletes the ready file
first and writes it only on success.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.cdi.spec import SPEC_SUFFIXES, Spec, SpecError
from kubegpu.cdi.spec import load as load_spec
from kubegpu.node.cuda import CudaProbe, ProbeFailed, cuda_targets, preload_driver_library
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import Nvml, NvmlError

NVIDIA_CDI_KINDS = (nvidia.CDI_RUNTIME_KIND, nvidia.CDI_PLUGIN_KIND)
DEFAULT_CDI_DIRS = (Path(nvidia.CDI_SPEC_DIR), Path(nvidia.CDI_STATIC_SPEC_DIR))
GPU_RESOURCE_PREFIXES = (nvidia.GPU_RESOURCE, nvidia.MIG_RESOURCE_PREFIX)

__all__ = ["CheckFailed", "CheckResult", "cuda_targets", "preload_driver_library"]


class CheckFailed(ComponentError):
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


def check_driver(
    open_nvml: Callable[[], Nvml],
    driver_root: str,
    validations: Path,
    container_root: Path,
    *,
    ready_file: bool = True,
) -> CheckResult:
    """`ready_file`: a containerized driver marks readiness with .driver-ctr-ready (real
    hardware; a simulated node has no driver container)."""
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
        if containerized and not container_ready and ready_file:
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


# the directories NVIDIA's validator searches, under the host root, for a pre-installed
# driver's nvidia-smi (gpu-operator.md §4; node-runtime.md §4 "Validator logic")
HOST_SMI_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/lib/wsl/lib", "opt/bin")
SMI_QUERY = ("--query-gpu=driver_version,uuid", "--format=csv,noheader")
SmiRunner = Callable[[Path, str, Sequence[str]], "subprocess.CompletedProcess[str]"]


def host_nvidia_smi(host_root: Path) -> str | None:
    """The host's nvidia-smi as a path on the host (`/usr/bin/nvidia-smi`): the first
    non-empty executable file in HOST_SMI_DIRS under `host_root`."""
    for d in HOST_SMI_DIRS:
        candidate = host_root / d / "nvidia-smi"
        try:
            if (
                candidate.is_file()
                and candidate.stat().st_size > 0
                and os.access(candidate, os.X_OK)
            ):
                return f"/{d}/nvidia-smi"
        except OSError:
            continue
    return None


def run_in_host_root(
    host_root: Path, path: str, args: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    """Run a host binary with the host's own libraries: `chroot <host_root> <path>` (directly
    when this process already runs on the host's root)."""
    argv = [path, *args] if host_root == Path("/") else ["chroot", str(host_root), path, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def check_host_driver(host_root: Path, run: SmiRunner = run_in_host_root) -> CheckResult:
    """A pre-installed driver, checked through the host's root as NVIDIA's validator does:
    the host's nvidia-smi, run with the host's libraries, lists the GPUs. Never NVML from
    this container's image, which the runtime gives no driver (NVIDIA_VISIBLE_DEVICES is
    unset here)."""
    smi = host_nvidia_smi(host_root)
    if smi is None:
        where = ", ".join("/" + d for d in HOST_SMI_DIRS)
        raise CheckFailed(
            f"no pre-installed driver: no executable nvidia-smi under the host root {host_root} "
            f"in {where} (driver.enabled=false expects the driver on the host)"
        )
    try:
        done = run(host_root, smi, SMI_QUERY)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CheckFailed(f"the host's {smi} cannot run: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CheckFailed(
            f"the host's {smi} failed (exit {done.returncode}): {said[-1] if said else 'no output'}"
        )
    rows = [
        [f.strip() for f in line.split(",")] for line in done.stdout.splitlines() if line.strip()
    ]
    if not rows:
        raise CheckFailed(f"the host's {smi} answers but lists no GPU")
    version = rows[0][0]
    env = driver_env("/") | {"DRIVER_VERSION": version}
    return CheckResult("driver", f"host driver {version} ({smi}), {len(rows)} GPU(s)", env)


# -- toolkit / CDI --------------------------------------------------------------------------------------
def cdi_problems(
    specs: Mapping[Path, Spec], gpus: Mapping[int, str], migs: Mapping[str, str]
) -> list[str]:
    """Inconsistencies between NVIDIA CDI specs and the GPUs.

    `gpus`: index -> UUID; `migs`: "<gpu>:<mig>" index -> MIG UUID."""
    problems = []
    uuids = set(gpus.values()) | set(migs.values())
    for path, spec in specs.items():
        names = [d.name for d in spec.devices]
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


def is_stale_mig_entry(problem: str) -> bool:
    """A problem about a MIG device (the layout changed after the spec was written)."""
    return " MIG-" in problem or "no such MIG device" in problem


@dataclass(frozen=True)
class CdiVerdict:
    """What the toolkit check makes of the CDI specs: `blocking` problems fail it; `stale`
    ones are left to writers that rewrite their spec later (they may be waiting on us)."""

    blocking: list[str]
    stale: list[str]


def judge_cdi_for_toolkit(
    specs: Mapping[Path, Spec], gpus: Mapping[int, str], migs: Mapping[str, str]
) -> CdiVerdict:
    """Split the problems: the device plugin's spec is never blocking (the plugin writes it
    after `toolkit-ready`, the file this check writes), nor are MIG entries of the toolkit's
    own spec (a MIG change after the toolkit generated it); whole-GPU problems of the
    toolkit's spec are (a GPU named that is not on the node: a wrong or broken spec)."""
    blocking: list[str] = []
    stale: list[str] = []
    for path, spec in specs.items():
        problems = cdi_problems({path: spec}, gpus, migs)
        if spec.kind == nvidia.CDI_PLUGIN_KIND:
            stale += problems
            continue
        for p in problems:
            (stale if is_stale_mig_entry(p) else blocking).append(p)
    return CdiVerdict(blocking, stale)


def nvidia_cdi_specs(dirs: Sequence[Path]) -> dict[Path, Spec]:
    """NVIDIA's specs in `dirs` (parsed by `kubegpu.cdi`); an invalid one fails the check."""
    specs = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.iterdir()):
            if path.suffix not in SPEC_SUFFIXES or not path.is_file():
                continue
            try:
                spec = load_spec(path)
            except OSError as exc:
                raise CheckFailed(f"CDI spec {path}: unreadable: {exc}") from None
            except SpecError as exc:
                raise CheckFailed(str(exc)) from None
            if spec.kind in NVIDIA_CDI_KINDS:
                specs[path] = spec
    return specs


def _visible(open_nvml: Callable[[], Nvml]) -> tuple[dict[int, str], dict[str, str]]:
    """The GPUs (index -> UUID) and MIG devices ("<gpu>:<mig>" -> UUID) NVML shows here."""
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
    return gpus, migs


def check_toolkit(open_nvml: Callable[[], Nvml], cdi_dirs: Sequence[Path]) -> CheckResult:
    gpus, migs = _visible(open_nvml)
    if not gpus:
        raise CheckFailed("no GPU is visible inside the container")
    specs = nvidia_cdi_specs(cdi_dirs)
    verdict = judge_cdi_for_toolkit(specs, gpus, migs)
    if verdict.blocking:
        raise CheckFailed("CDI spec inconsistent with the GPUs: " + "; ".join(verdict.blocking))
    if verdict.stale:
        cdi = ", CDI specs to be rewritten by their writers (not blocking): " + "; ".join(
            verdict.stale
        )
    elif specs:
        cdi = f", CDI specs consistent: {', '.join(str(p) for p in specs)}"
    else:
        cdi = ", no CDI spec"
    return CheckResult("toolkit", f"{len(gpus)} GPU(s) visible in the container{cdi}")


def check_plugin_cdi(open_nvml: Callable[[], Nvml], cdi_dirs: Sequence[Path]) -> str:
    """The device plugin's CDI spec names exactly the node's devices (the plugin rewrites it
    when it starts, so once it advertises, a stale spec is a real fault). Returns a note."""
    specs = {
        p: s for p, s in nvidia_cdi_specs(cdi_dirs).items() if s.kind == nvidia.CDI_PLUGIN_KIND
    }
    if not specs:
        return "no device-plugin CDI spec"
    gpus, migs = _visible(open_nvml)
    problems = cdi_problems(specs, gpus, migs)
    if problems:
        raise CheckFailed(
            "the device plugin's CDI spec is inconsistent with the GPUs: " + "; ".join(problems)
        )
    return "its CDI spec is consistent"


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
def check_cuda_here(
    open_nvml: Callable[[], Nvml],
    cuda: CudaProbe,
    visible: str | None,
    container_root: Path | None,
) -> CheckResult:
    try:
        open_nvml().close()
    except NvmlError as exc:
        raise CheckFailed(f"NVML does not answer: {exc}") from None
    try:
        return CheckResult("cuda", cuda.run(visible, container_root))
    except ProbeFailed as exc:
        raise CheckFailed(str(exc)) from None
    except NvmlError as exc:
        raise CheckFailed(f"the GPU refused the workload: {exc}") from None


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
