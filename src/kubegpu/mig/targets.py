"""Static checks of a mig-parted config against the catalog, a model, or a node's GPUs.

Everything here is pure: it decides what each GPU should become, with a concrete
placement for every instance, before any GPU is touched. Errors name the config, entry,
field and value.

`validate --model`, `apply` and `assert` all go through `plan_node`, so they agree on
every input. In particular, as in mig-parted's assert, a config must cover every GPU of
the node: a GPU that no entry selects makes the config invalid for that node (a MIG-less
GPU is left alone when some entry says `devices: all`), and an entry that can select no
GPU at all (`devices: []`) is an error. Sizes are bounded before any work: a node checked
without hardware has 1 to `MAX_NODE_GPUS` GPUs, and a profile count above the profile's
max count is refused without a placement search.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kubegpu.base.loader import excerpt
from kubegpu.catalog import (
    GpuInstanceProfile,
    GpuModel,
    UnknownModelError,
    all_models,
    find_by_pci_id,
    get_model,
)
from kubegpu.catalog.profile import ProfileName
from kubegpu.mig.config import ConfigError, MigConfigEntry
from kubegpu.mig.geometry import LayoutError, misfit_reason, place

MAX_NODE_GPUS = 64
"""The most GPUs `validate --model M:N` accepts for a node (and without N, the highest GPU
index + 1 it assumes)."""
_REASONS_SHOWN = 3  # per uncovered GPU, why the first entries miss it


@dataclass(frozen=True)
class PlannedDevice:
    """One MIG device to create: a GPU instance at `start` with one compute instance."""

    gi_profile: GpuInstanceProfile
    start: int
    ci_slices: int  # == gi_profile.compute_slices for a full-GI device

    @property
    def name(self) -> str:
        g = self.gi_profile.compute_slices
        return (
            self.gi_profile.name
            if self.ci_slices == g
            else f"{self.ci_slices}c.{self.gi_profile.name}"
        )


@dataclass(frozen=True)
class GpuTarget:
    """What one GPU of a node should be after applying the selected config."""

    index: int
    model: GpuModel
    entry: int  # which entry of the config selected this GPU
    mig_enabled: bool
    devices: tuple[PlannedDevice, ...]

    def wanted(self) -> Counter[str]:
        return Counter(d.name for d in self.devices)


@dataclass(frozen=True)
class NodeGpu:
    """What the checks need to know about one GPU of a node."""

    index: int
    pci_device_id: int
    model: GpuModel | None


def _where(config_name: str, entry: int) -> str:
    return f"config {config_name!r}, entry {entry}"


def plan_devices(
    model: GpuModel, mig_devices: dict[str, int], where: str, driver: str | None = None
) -> tuple[PlannedDevice, ...]:
    """Resolve `mig-devices` on `model` into placed devices, or raise ConfigError saying why."""
    if model.mig is None:
        raise ConfigError(
            f"{where}, field mig-enabled, value true: {model.id} ({model.product_name}) is not MIG-capable"
        )
    mig = model.mig
    gi_counts: Counter[str] = Counter()
    ci_counts: Counter[tuple[str, int]] = Counter()
    for name, count in mig_devices.items():
        if not count:
            continue
        parsed = ProfileName.parse(name)
        gi_name = parsed.gpu_instance
        try:
            gip = mig.profile(gi_name)
        except KeyError:
            known = ", ".join(p.name for p in mig.gpu_instance_profiles)
            raise ConfigError(
                f"{where}, field mig-devices, value {name!r}: no such profile on {model.id} (profiles: {known})"
            ) from None
        c = parsed.compute_slices or gip.compute_slices
        if c not in {ci.compute_slices for ci in mig.compute_instance_profiles(gip)}:
            raise ConfigError(
                f"{where}, field mig-devices, value {name!r}: a {gi_name} instance has no {c}-slice compute instance"
            )
        gi_counts[gi_name] += count
        ci_counts[gi_name, c] += count
    # a count above the profile's max count can never fit; saying so before any placement
    # search also keeps absurd counts (10**20) from being expanded into lists
    too_many = any(n > mig.profile(k).max_count for k, n in gi_counts.items())
    try:
        layout = None if too_many else place(model, gi_counts, driver=driver)
    except LayoutError as exc:
        raise ConfigError(f"{where}, field mig-devices: {exc}") from None
    if layout is None:
        mix = ", ".join(f"{k}: {n}" for k, n in sorted(mig_devices.items()) if n)
        problems = (
            mig.driver_problems([mig.profile(k) for k in gi_counts.elements()], driver)
            if driver and not too_many
            else []
        )
        why = (
            "; ".join(problems)
            if problems
            else f"does not fit one {model.id} (instances would overlap, exceed a max count or the GPU's limit of {mig.max_gpu_instances})"
            if too_many
            else f"does not fit one {model.id}: {misfit_reason(model, gi_counts, driver=driver)}"
        )
        raise ConfigError(f"{where}, field mig-devices, value {{{mix}}}: {why}")
    ci_for: dict[str, list[int]] = {}
    for (gi_name, c), n in ci_counts.items():
        ci_for.setdefault(gi_name, []).extend([c] * n)
    devices = []
    for pi in layout:
        devices.append(PlannedDevice(pi.profile, pi.start, ci_for[pi.profile.name].pop()))
    return tuple(devices)


@dataclass(frozen=True)
class NodePlan:
    """Every selected GPU's target, and the GPUs the config leaves uncovered."""

    targets: list[GpuTarget]
    uncovered: dict[int, str]  # GPU index -> why no entry selects it (when one must)


def _why_not_selected(entry: MigConfigEntry, gpu: NodeGpu) -> str:
    if entry.devices != "all" and gpu.index not in entry.devices:
        return f"devices {excerpt(list(entry.devices))} leave it out"
    filters = excerpt(list(entry.device_filter or ()))
    return f"device-filter {filters} does not match its PCI id 0x{gpu.pci_device_id:08X}"


def _uncovered(
    config_name: str, entries: Sequence[MigConfigEntry], gpus: Sequence[NodeGpu], selected: set[int]
) -> dict[int, str]:
    left_alone = any(e.devices == "all" for e in entries)
    out = {}
    for gpu in gpus:
        if gpu.index in selected:
            continue
        if left_alone and (gpu.model is None or gpu.model.mig is None):
            continue  # mig-parted leaves a GPU without MIG alone under `devices: all`
        name = gpu.model.id if gpu.model else f"PCI id 0x{gpu.pci_device_id:08X}"
        reasons = [f"entry {i}: {_why_not_selected(e, gpu)}" for i, e in enumerate(entries)]
        if len(reasons) > _REASONS_SHOWN:
            more = len(reasons) - _REASONS_SHOWN
            reasons[_REASONS_SHOWN:] = [f"{more} more entries miss it too"]
        why = "; ".join(reasons)
        out[gpu.index] = (
            f"GPU {gpu.index} ({name}) is selected by no entry of config {config_name!r} ({why}); "
            "a config must cover every GPU of the node"
        )
    return out


def plan_coverage(
    config_name: str,
    entries: Sequence[MigConfigEntry],
    gpus: Sequence[NodeGpu],
    driver: str | None = None,
) -> NodePlan:
    """Decide every selected GPU's target (ConfigError for a bad entry) and report, without
    raising, which GPUs no entry covers. `assert` reports those as mismatches."""
    errors: list[str] = []
    chosen: dict[int, int] = {}
    selected: set[int] = set()
    targets: dict[int, GpuTarget] = {}
    for i, entry in enumerate(entries):
        where = _where(config_name, i)
        if entry.devices != "all":
            if not entry.devices:
                errors.append(
                    f"{where}, field devices, value []: selects no GPU (list GPU indexes or use 'all')"
                )
            for idx in entry.devices:
                if idx >= len(gpus):
                    errors.append(
                        f"{where}, field devices, value {idx}: out of range, this node has {len(gpus)} GPUs (0..{len(gpus) - 1})"
                    )
        for gpu in gpus:
            if not entry.selects(gpu.index, gpu.pci_device_id):
                continue
            selected.add(gpu.index)
            if gpu.model is None:
                if entry.mig_enabled:
                    errors.append(
                        f"{where}: GPU {gpu.index} (PCI id 0x{gpu.pci_device_id:08X}) is not in the catalog"
                    )
                continue
            if entry.mig_enabled and gpu.model.mig is None:
                if entry.devices == "all":
                    continue  # mig-parted skips GPUs without MIG when devices is 'all'
                errors.append(
                    f"{where}, field mig-enabled, value true: GPU {gpu.index} is a {gpu.model.id}, which is not MIG-capable"
                )
                continue
            if gpu.index in chosen:
                errors.append(
                    f"{where}: GPU {gpu.index} is already selected by entry {chosen[gpu.index]}"
                )
                continue
            chosen[gpu.index] = i
            try:
                devices = (
                    plan_devices(gpu.model, entry.wanted(), f"{where} (GPU {gpu.index})", driver)
                    if entry.mig_enabled
                    else ()
                )
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            targets[gpu.index] = GpuTarget(gpu.index, gpu.model, i, entry.mig_enabled, devices)
    if errors:
        raise ConfigError("\n".join(dict.fromkeys(errors)))
    return NodePlan(
        [targets[k] for k in sorted(targets)], _uncovered(config_name, entries, gpus, selected)
    )


def plan_node(
    config_name: str,
    entries: Sequence[MigConfigEntry],
    gpus: Sequence[NodeGpu],
    driver: str | None = None,
) -> list[GpuTarget]:
    """Every selected GPU's target; ConfigError when an entry is bad or a GPU is left
    uncovered. (GPUs a `devices: all` entry skips for lack of MIG get no target.)"""
    plan = plan_coverage(config_name, entries, gpus, driver)
    if plan.uncovered:
        raise ConfigError("\n".join(plan.uncovered.values()))
    return plan.targets


def parse_model_count(text: str) -> tuple[GpuModel, int | None]:
    """`MODEL` or `MODEL:COUNT` (1..MAX_NODE_GPUS) as given to `validate --model`."""
    name, colon, n = text.partition(":")
    if colon and not (n.isascii() and n.isdigit() and len(n) <= 3 and 1 <= int(n) <= MAX_NODE_GPUS):
        raise ConfigError(
            f"--model {excerpt(text)}: the GPU count must be a whole number from 1 to {MAX_NODE_GPUS}"
        )
    try:
        model = get_model(name)
    except UnknownModelError as exc:
        raise ConfigError(
            str(exc) if len(name) <= 60 else f"--model {excerpt(name)}: unknown"
        ) from None
    return model, int(n) if colon else None


def check_against_model(
    config_name: str, entries: Sequence[MigConfigEntry], model: GpuModel, count: int | None = None
) -> list[GpuTarget]:
    """Check a config for a node of `count` GPUs of `model`, exactly as `apply` and
    `assert` would judge it on such a node.

    Without a count the node's size is unknown: GPU indexes cannot be range-checked nor
    coverage judged, so the node is assumed to have just the GPUs the config names (up
    to MAX_NODE_GPUS), each checked as it would be on any node.
    """
    if count is not None and not 1 <= count <= MAX_NODE_GPUS:
        raise ConfigError(
            f"config {config_name!r}: a node of {count} GPUs; the count must be 1 to {MAX_NODE_GPUS}"
        )
    if count is not None:
        gpus = [NodeGpu(i, model.pci_device_id, model) for i in range(count)]
        return plan_node(config_name, entries, gpus)
    named = [i for e in entries if e.devices != "all" for i in e.devices]
    count = min(MAX_NODE_GPUS, max([1, *(i + 1 for i in named)]))
    gpus = [NodeGpu(i, model.pci_device_id, model) for i in range(count)]
    return plan_coverage(config_name, entries, gpus).targets


def check_against_catalog(config_name: str, entries: Sequence[MigConfigEntry]) -> None:
    """Without a node or model: each MIG entry must suit every catalog model its filter names
    (PCI ids the catalog does not know are not checked), or some model when unfiltered."""
    errors: list[str] = []
    for i, entry in enumerate(entries):
        where = _where(config_name, i)
        if entry.devices == ():
            errors.append(
                f"{where}, field devices, value []: selects no GPU (list GPU indexes or use 'all')"
            )
        if not entry.mig_enabled:
            continue
        if entry.device_filter:
            models = list(
                dict.fromkeys(m for dev, _ in entry.pci_filter() if (m := find_by_pci_id(dev)))
            )
            for m in models:
                try:
                    plan_devices(m, entry.wanted(), f"{where} ({m.id})")
                except ConfigError as exc:
                    errors.append(str(exc))
            continue
        for m in all_models():
            if m.mig is None:
                continue
            try:
                plan_devices(m, entry.wanted(), where)
                break
            except ConfigError:
                continue
        else:
            mix = ", ".join(f"{k}: {v}" for k, v in sorted(entry.wanted().items()))
            errors.append(
                f"{where}, field mig-devices, value {{{mix}}}: no MIG-capable model in the catalog offers this mix"
            )
    if errors:
        raise ConfigError("\n".join(dict.fromkeys(errors)))
