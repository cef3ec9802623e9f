"""What a workload pod's GPU command prints on a simulated node, then exits.

The guide's smoke tests run `nvidia-smi` (plain, `-L`, `--query-gpu=...`) in a CUDA image or
NVIDIA's `vectorAdd` sample. A simulated node has no such binaries; the simulated kubelet
runs this module instead (`python -m kubegpu.sim.smi <program> [ARGS...]`), which answers
from the simulated GPUs (KUBEGPU_NVML) and only for the devices the pod was allocated
(KUBEGPU_SIM_DEVICES, the device plugin's device IDs), so its output says what the pod got.

`workload_program(image, command)` is the kubelet's decision: which pods run it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubegpu.nvml import ENV_NVML, DeviceInfo, MigDeviceInfo, Nvml, NvmlError
from kubegpu.nvml.sim import SimNvml
from kubegpu.sharing.replicas import physical_id

ENV_DEVICES = "KUBEGPU_SIM_DEVICES"  # comma-separated device IDs the pod was allocated
NO_DEVICES_EXIT = 6  # nvidia-smi's "a query to find an object was unsuccessful"
CUDA_SAMPLES = {"vectoradd": "vectorAdd", "devicequery": "deviceQuery"}


def workload_program(image: str, command: Sequence[str]) -> list[str] | None:
    """The simulated program for a container, or None when it is not a known GPU command:
    `nvidia-smi ...`, a CUDA sample by its binary (`/cuda-samples/vectorAdd`), or NVIDIA's
    sample image run with its own entrypoint (`.../cuda-sample:vectoradd-...`)."""
    if command:
        binary = os.path.basename(command[0])
        if binary == "nvidia-smi":
            return ["nvidia-smi", *command[1:]]
        sample = CUDA_SAMPLES.get(binary.lower())
        if sample is not None:
            return [sample]
        if binary in {"sh", "bash"} and len(command) == 3 and command[1] == "-c":
            words = command[2].split()
            return workload_program(image, words) if words else None
        return None
    repo, _, tag = image.rpartition("/")[2].partition(":")
    if repo == "cuda-sample":
        for key, sample in CUDA_SAMPLES.items():
            if tag.lower().startswith(key):
                return [sample]
    return None


@dataclass(frozen=True)
class Visible:
    """The GPUs a container sees and, per GPU, the MIG devices it was given (all of them
    when it was given the whole GPU)."""

    gpus: list[DeviceInfo]
    migs: dict[int, list[MigDeviceInfo]]


def visible(nvml: Nvml, allocated: Sequence[str]) -> Visible:
    """Resolve device IDs (GPU/MIG UUIDs, `0`, `0:1`, time-slice replicas `UUID::2`, `all`)."""
    devices = nvml.devices()
    migs = {d.index: _migs(nvml, d.index) for d in devices}
    wanted = {physical_id(a) for a in allocated if a}
    if "all" in wanted:
        return Visible(devices, migs)
    gpus: dict[int, DeviceInfo] = {}
    given: dict[int, list[MigDeviceInfo]] = {}
    for d in devices:
        whole = d.uuid in wanted or str(d.index) in wanted
        mine = [m for m in migs[d.index] if m.uuid in wanted or f"{d.index}:{m.index}" in wanted]
        if whole or mine:
            gpus[d.index] = d
            given[d.index] = migs[d.index] if whole else mine
    return Visible([gpus[i] for i in sorted(gpus)], given)


def _migs(nvml: Nvml, index: int) -> list[MigDeviceInfo]:
    try:
        return list(nvml.mig_devices(index)) if nvml.mig_mode(index).current else []
    except NvmlError:
        return []


# -- nvidia-smi ---------------------------------------------------------------------------
def list_gpus(v: Visible) -> str:
    """`nvidia-smi -L`."""
    lines = []
    for d in v.gpus:
        lines.append(f"GPU {d.index}: {d.name} (UUID: {d.uuid})")
        for m in v.migs.get(d.index, []):
            lines.append(f"  MIG {m.profile:<12} Device {m.index:>2}: (UUID: {m.uuid})")
    return "\n".join(lines)


QUERY_FIELDS: dict[str, Callable[[Nvml, DeviceInfo], str]] = {
    "index": lambda n, d: str(d.index),
    "name": lambda n, d: d.name,
    "gpu_name": lambda n, d: d.name,
    "uuid": lambda n, d: d.uuid,
    "gpu_uuid": lambda n, d: d.uuid,
    "driver_version": lambda n, d: n.system().driver_version,
    "pci.bus_id": lambda n, d: d.pci_bus_id,
    "gpu_bus_id": lambda n, d: d.pci_bus_id,
    "memory.total": lambda n, d: f"{n.memory(d.index).total_mib} MiB",
    "memory.used": lambda n, d: f"{n.memory(d.index).used_mib} MiB",
    "memory.free": lambda n, d: f"{n.memory(d.index).total_mib - n.memory(d.index).used_mib} MiB",
    "utilization.gpu": lambda n, d: f"{n.utilization(d.index).gpu_percent} %",
    "utilization.memory": lambda n, d: f"{n.utilization(d.index).memory_percent} %",
    "temperature.gpu": lambda n, d: str(n.temperature(d.index)),
    "power.draw": lambda n, d: f"{n.power_usage(d.index):.2f} W",
    "mig.mode.current": lambda n, d: "Enabled" if _mig_on(n, d.index) else "Disabled",
    "compute_cap": lambda n, d: ".".join(map(str, d.compute_capability)),
}


def _mig_on(nvml: Nvml, index: int) -> bool:
    try:
        return nvml.mig_mode(index).current
    except NvmlError:
        return False


class UsageError(Exception):
    """nvidia-smi refuses the arguments (exit 2, as nvidia-smi does)."""


def query_gpus(nvml: Nvml, v: Visible, fields: str, fmt: str) -> str:
    """`nvidia-smi --query-gpu=a,b --format=csv[,noheader][,nounits]`."""
    names = [f.strip() for f in fields.split(",") if f.strip()]
    for name in names:
        if name not in QUERY_FIELDS:
            raise UsageError(f'Field "{name}" is not a valid field to query.')
    options = {o.strip() for o in fmt.split(",")}
    if "csv" not in options:
        raise UsageError(f'"{fmt}" is not a valid format: use csv[,noheader][,nounits]')
    rows = []
    if "noheader" not in options:
        rows.append(", ".join(_header(n, "nounits" in options) for n in names))
    for d in v.gpus:
        values = [QUERY_FIELDS[n](nvml, d) for n in names]
        if "nounits" in options:
            values = [_strip_unit(x) for x in values]
        rows.append(", ".join(values))
    return "\n".join(rows)


def _header(name: str, nounits: bool) -> str:
    unit = {"memory": "MiB", "utilization": "%", "power": "W"}.get(name.partition(".")[0])
    return f"{name} [{unit}]" if unit and not nounits else name


def _strip_unit(value: str) -> str:
    return value.rsplit(" ", 1)[0] if value.endswith((" MiB", " %", " W")) else value


def summary(nvml: Nvml, v: Visible) -> str:
    """Plain `nvidia-smi`: the GPU table, the MIG devices and the processes."""
    system = nvml.system()
    cuda = f"{system.cuda_driver_version // 1000}.{system.cuda_driver_version % 1000 // 10}"
    bar = "+" + "-" * 77 + "+"
    lines = [
        bar,
        f"| NVIDIA-SMI {system.driver_version:<16} Driver Version: {system.driver_version:<14}"
        f" CUDA Version: {cuda:<8}|",
        bar,
        "| GPU  Name                              Bus-Id           Memory-Usage       MIG M. |",
        bar,
    ]
    for d in v.gpus:
        mem = nvml.memory(d.index)
        usage = f"{mem.used_mib}MiB / {mem.total_mib}MiB"
        mig = "Enabled" if _mig_on(nvml, d.index) else "Disabled"
        lines.append(
            f"| {d.index:>3}  {d.name[:32]:<32}  {d.pci_bus_id:<16} {usage:<18} {mig:>8} |"
        )
    lines.append(bar)
    migs = [(d.index, m) for d in v.gpus for m in v.migs.get(d.index, [])]
    if migs:
        lines += [
            "| MIG devices:" + " " * 64 + "|",
            "| GPU  GI  CI  MIG  Profile      Memory" + " " * 39 + "|",
        ]
        for gpu, m in migs:
            lines.append(
                f"| {gpu:>3} {m.gpu_instance_id:>3} {m.compute_instance_id:>3} {m.index:>4}  "
                f"{m.profile:<12} {m.memory_mib:>6}MiB" + " " * 31 + "|"
            )
        lines.append(bar)
    lines += [
        "| Processes:" + " " * 66 + "|",
        "|  No running processes found" + " " * 49 + "|",
        bar,
    ]
    return "\n".join(lines)


# -- CUDA samples ---------------------------------------------------------------------------
def vector_add(v: Visible) -> str:
    d = v.gpus[0]
    where = d.uuid
    if v.migs.get(d.index) and len(v.migs[d.index]) == 1:
        where = v.migs[d.index][0].uuid
    return "\n".join(
        [
            "[Vector addition of 50000 elements]",
            f"[kubegpu sim] on GPU {d.index} {d.name} ({where})",
            "Copy input data from the host memory to the CUDA device",
            "CUDA kernel launch with 196 blocks of 256 threads",
            "Copy output data from the CUDA device to the host memory",
            "Test PASSED",
            "Done",
        ]
    )


def device_query(nvml: Nvml, v: Visible) -> str:
    lines = [" CUDA Device Query (Runtime API) version (CUDART static linking)", ""]
    lines.append(f"Detected {len(v.gpus)} CUDA Capable device(s)")
    for i, d in enumerate(v.gpus):
        cc = ".".join(map(str, d.compute_capability))
        lines += [
            "",
            f'Device {i}: "{d.name}"',
            f"  CUDA Capability Major/Minor version number:    {cc}",
            f"  Total amount of global memory:                 {d.memory_total_mib} MBytes",
            f"  Device PCI Bus ID:                             {d.pci_bus_id}",
            f"  UUID:                                          {d.uuid}",
        ]
    lines += ["", "Result = PASS"]
    return "\n".join(lines)


# -- the program ------------------------------------------------------------------------------
def run(argv: Sequence[str], nvml: Nvml, allocated: Sequence[str]) -> tuple[int, str]:
    """(exit status, output) of the simulated program `argv[0]` with its arguments."""
    program, args = argv[0], list(argv[1:])
    v = visible(nvml, allocated)
    if not v.gpus:
        if program == "nvidia-smi":
            return NO_DEVICES_EXIT, "No devices were found"
        return 1, "CUDA error: no CUDA-capable device is detected (no GPU allocated to this pod)"
    if program == "vectorAdd":
        return 0, vector_add(v)
    if program == "deviceQuery":
        return 0, device_query(nvml, v)
    try:
        return 0, _smi(nvml, v, args)
    except UsageError as exc:
        return 2, f"{exc}\nSee 'nvidia-smi -h' for more information."


def _smi(nvml: Nvml, v: Visible, args: list[str]) -> str:
    if not args:
        return summary(nvml, v)
    if args in (["-L"], ["--list-gpus"]):
        return list_gpus(v)
    options = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    if "--query-gpu" in options:
        return query_gpus(nvml, v, options["--query-gpu"], options.get("--format", ""))
    raise UsageError(f"kubegpu sim: nvidia-smi {' '.join(args)}: option not simulated")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m kubegpu.sim.smi PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    spec = os.environ.get(ENV_NVML, "")
    allocated = [d for d in os.environ.get(ENV_DEVICES, "").split(",") if d]
    if not spec.startswith("sim:"):
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            file=sys.stderr,
        )
        return 9
    nvml = SimNvml(spec.removeprefix("sim:"))
    try:
        code, out = run(argv, nvml, allocated)
    finally:
        nvml.close()
    print(out, file=sys.stdout if code == 0 else sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
