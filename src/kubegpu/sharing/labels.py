"""GPU feature discovery's node labels: a pure function of the GPUs and the plugin config.

`compute_labels(gpus, config, system)` returns the label set NVIDIA's gpu-feature-discovery
puts on a node: the driver and CUDA versions, `mig.capable`, `mps.capable`, the
`nvidia.com/gpu.*` labels of the whole GPUs (`-SHARED` when replicated without a rename),
`nvidia.com/mig.strategy` and the MIG labels of the single strategy (the `gpu.*` keys
describe the MIG device, or `...-MIG-INVALID` when the node cannot be used that way) and of
the mixed strategy (`nvidia.com/mig-<profile>.*`). No I/O: the caller reads NVML, the
machine type and the config, and writes the labels.

Two deliberate differences, both about keeping every label valid: a value longer than 63
characters has its model part shortened (the `-MIG-<profile>` and `-SHARED` parts are
kept), and when GPUs of several models share a node the choice of which model's labels
win is deterministic (sorted by name) rather than map order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubegpu.catalog import nvidia
from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.devices import (
    GPU_RESOURCE,
    GpuFacts,
    MigFacts,
    StrategyError,
    check_sharing,
    mig_resource_name,
)

PREFIX = nvidia.PREFIX
MAX_VALUE = 63
PCI_CLASS_VGA = 0x0300
PCI_CLASS_3D = 0x0302

_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")
_SPACES = re.compile(r"\s+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


class LabelError(ValueError):
    """The labels cannot be computed for this node under this config (upstream fails too)."""


@dataclass(frozen=True)
class SystemFacts:
    """What the labels need besides the GPUs."""

    driver_version: str  # "580.82.07"
    cuda_version: tuple[int, int]  # from NVML's CUDA driver version, e.g. (13, 0)
    machine: str = "unknown"  # /sys/class/dmi/id/product_name
    pci_classes: Mapping[int, int] | None = None  # GPU index -> PCI class (0x0300 / 0x0302)


def sanitise(text: str) -> str:
    """Upstream's rule for product names: drop characters outside [A-Za-z0-9-_. ], then turn
    each run of whitespace into one `-`."""
    return _SPACES.sub("-", _UNSAFE.sub("", text).strip())


def _fit(head: str, tail: str = "") -> str:
    """`head + tail` as a valid label value: the head is shortened when the whole is too long."""
    room = MAX_VALUE - len(tail)
    value = _EDGE.sub("", head[:room]) + tail if len(head) + len(tail) > MAX_VALUE else head + tail
    return _EDGE.sub("", value)


def arch_family(major: int, minor: int) -> str:
    """The `gpu.family` label for a CUDA compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    families = {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }
    return families.get(major, "undefined")


def _version_labels(system: SystemFacts) -> dict[str, str]:
    parts = system.driver_version.split(".")
    major = parts[0] if parts else ""
    minor = parts[1] if len(parts) > 1 else ""
    rev = parts[2] if len(parts) > 2 else ""
    cuda_major, cuda_minor = system.cuda_version
    return {
        "cuda.driver.major": major,
        "cuda.driver.minor": minor,
        "cuda.driver.rev": rev,
        "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor,
        "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": system.driver_version,
        "cuda.runtime.major": str(cuda_major),
        "cuda.runtime.minor": str(cuda_minor),
        "cuda.runtime-version.major": str(cuda_major),
        "cuda.runtime-version.minor": str(cuda_minor),
        "cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


class _Resource:
    """Labels of one resource, keyed `<resource>.<suffix>`; `sharing=False` is upstream's
    labeler for MIG-enabled parents, which reports replicas 0."""

    def __init__(self, resource: str, config: PluginConfig, *, sharing: bool = True) -> None:
        self.key = resource.removeprefix(PREFIX)
        self.replicas = 0
        self.strategy = "none"
        self.renamed = False
        if sharing:
            self.replicas = 1
            shared = config.replicated
            for entry in shared.resources if shared is not None else ():
                if entry.name == resource and entry.replicas > 1 and shared is not None:
                    self.replicas = entry.replicas
                    self.strategy = config.sharing_strategy
                    self.renamed = shared.shared_name(entry) is not None

    def labels(self, count: int, model: str, *extra: str) -> dict[str, str]:
        tail = "".join("-" + sanitise(part.replace("+", ".")) for part in extra if part)
        if self.replicas > 1 and not self.renamed:
            tail += "-SHARED"
        out = {
            "product": _fit(sanitise(model), tail),
            "count": str(count),
            "replicas": str(self.replicas),
            "sharing-strategy": self.strategy,
        }
        return {f"{self.key}.{k}": v for k, v in out.items()}


def _gpu_labels(gpu: GpuFacts, count: int, config: PluginConfig, sharing: bool) -> dict[str, str]:
    res = _Resource(GPU_RESOURCE, config, sharing=sharing)
    out = res.labels(count, gpu.product)
    if gpu.memory_mib:
        out["gpu.memory"] = str(gpu.memory_mib)
    major, minor = gpu.compute_capability
    if major:
        out["gpu.family"] = arch_family(major, minor)
        out["gpu.compute.major"] = str(major)
        out["gpu.compute.minor"] = str(minor)
    return out


def _full_gpu_labels(gpus: Sequence[GpuFacts], config: PluginConfig) -> dict[str, str]:
    """Whole-GPU labels: one labeler per product name; whole GPUs override MIG-enabled ones."""
    counts: dict[str, int] = {}
    for g in gpus:
        counts[g.product] = counts.get(g.product, 0) + 1
    enabled = {g.product: g for g in gpus if g.mig_enabled}
    disabled = {g.product: g for g in gpus if not g.mig_enabled}
    out: dict[str, str] = {}
    for name in sorted(enabled):
        out |= _gpu_labels(enabled[name], counts[name], config, sharing=False)
    for name in sorted(disabled):
        out |= _gpu_labels(disabled[name], counts[name], config, sharing=True)
    return out


def _mig_labels(
    resource: str, parent: GpuFacts, mig: MigFacts, count: int, config: PluginConfig
) -> dict[str, str]:
    res = _Resource(resource, config)
    out = res.labels(count, parent.product, "MIG", mig.profile)
    copy, decoder, encoder, jpeg, ofa = mig.engines
    attributes = {
        "memory": mig.memory_mib,
        "multiprocessors": mig.multiprocessors,
        "slices.gi": mig.gi_slices,
        "slices.ci": mig.ci_slices,
        "engines.copy": copy,
        "engines.decoder": decoder,
        "engines.encoder": encoder,
        "engines.jpeg": jpeg,
        "engines.ofa": ofa,
    }
    out |= {f"{res.key}.{k}": str(v) for k, v in attributes.items()}
    return out


def _by_profile(gpus: Sequence[GpuFacts]) -> dict[str, tuple[GpuFacts, MigFacts, int]]:
    found: dict[str, tuple[GpuFacts, MigFacts, int]] = {}
    for g in gpus:
        if not g.mig_enabled:
            continue
        for m in g.mig_devices:
            parent, first, n = found.get(m.profile, (g, m, 0))
            found[m.profile] = (parent, first, n + 1)
    return found


def _invalid_single(gpu: GpuFacts) -> dict[str, str]:
    return {
        "gpu.product": _fit(sanitise(gpu.product), "-MIG-INVALID"),
        "gpu.count": "0",
        "gpu.replicas": "0",
        "gpu.memory": "0",
        "gpu.sharing-strategy": "",
    }


def single_strategy_problem(gpus: Sequence[GpuFacts]) -> str | None:
    """Why this node cannot be used under mig-strategy=single (None when it can, or when no
    GPU has MIG enabled, which single treats like none)."""
    enabled = [g for g in gpus if g.mig_enabled]
    if not enabled:
        return None
    if any(not g.mig_devices for g in enabled):
        return "at least one MIG-enabled GPU has no MIG devices"
    if len(enabled) != len(gpus):
        return "some GPUs have MIG enabled and others disabled"
    if len(_by_profile(gpus)) != 1:
        return "more than one MIG device type present on node"
    return None


def _mig_strategy_labels(gpus: Sequence[GpuFacts], config: PluginConfig) -> dict[str, str]:
    strategy = config.flags.mig_strategy
    out: dict[str, str] = {"mig.strategy": strategy}
    profiles = _by_profile(gpus)
    if strategy == "single":
        if not any(g.mig_enabled for g in gpus):
            return out
        if single_strategy_problem(gpus) is not None:
            return out | _invalid_single(next(g for g in gpus if g.mig_enabled))
        ((parent, mig, n),) = profiles.values()
        return out | _mig_labels(GPU_RESOURCE, parent, mig, n, config)
    for profile in sorted(profiles):
        parent, mig, n = profiles[profile]
        out |= _mig_labels(mig_resource_name(profile), parent, mig, n, config)
    return out


def _gpu_mode(gpus: Sequence[GpuFacts], system: SystemFacts) -> str:
    modes = set()
    for g in gpus:
        pci_class = PCI_CLASS_3D if g.mig_enabled else (system.pci_classes or {}).get(g.index)
        modes.add(
            {PCI_CLASS_VGA: "graphics", PCI_CLASS_3D: "compute"}.get(pci_class or 0, "unknown")
        )
    return modes.pop() if len(modes) == 1 else "unknown"


def compute_labels(
    gpus: Sequence[GpuFacts],
    config: PluginConfig,
    system: SystemFacts,
    *,
    timestamp: int | None = None,
) -> dict[str, str]:
    """Every `nvidia.com/` label GPU feature discovery puts on a node with these GPUs.

    `timestamp` (seconds) becomes `nvidia.com/gfd.timestamp`; None leaves it out
    (`--no-timestamp`). Raises LabelError for an MPS config on a node with MIG enabled,
    unless the config shares MIG instances through MPS (`sharing.mps.migInstances` under the
    single or mixed strategy): then the MIG resource's labels say `mps` and its replicas.
    """
    out: dict[str, str] = {}
    if timestamp is not None:
        out["gfd.timestamp"] = str(timestamp)
    if gpus:
        if (
            config.sharing_strategy == "mps"
            and any(g.mig_enabled for g in gpus)
            and not (config.mps_on_mig and config.flags.mig_strategy != "none")
        ):
            enabled = ", ".join(str(g.index) for g in gpus if g.mig_enabled)
            raise LabelError(
                f"sharing using MPS is not supported with MIG enabled (GPUs with MIG: {enabled})"
            )
        try:  # labels never claim a sharing the device plugin refuses to advertise
            check_sharing(gpus, config)
        except StrategyError as exc:
            raise LabelError(str(exc)) from None
        out["gpu.machine"] = sanitise(system.machine) or "unknown"
        out |= _version_labels(system)
        out["mig.capable"] = str(any(g.mig_capable for g in gpus)).lower()
        out["mps.capable"] = str(config.sharing_strategy == "mps").lower()
        out |= _full_gpu_labels(gpus, config)
        if config.flags.mig_strategy != "none":
            out |= _mig_strategy_labels(gpus, config)
        out["gpu.mode"] = _gpu_mode(gpus, system)
    out["vgpu.present"] = "false"
    return {PREFIX + k: _fit(v) if v else v for k, v in out.items()}
