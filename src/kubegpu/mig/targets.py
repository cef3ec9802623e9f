"""Static checks of a mig-parted config against the catalog, a model, or a node's GPUs.

Everything here is pure: it decides what each GPU should become, with a concrete
placement for every instance, before any GPU is touched. Errors name the config, entry,
field and value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kubegpu.catalog import GpuInstanceProfile, GpuModel, all_models, find_by_pci_id
from kubegpu.catalog.profile import ProfileName
from kubegpu.mig.config import ConfigError, MigConfigEntry
from kubegpu.mig.geometry import LayoutError, place


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


def _where(config: str, entry: int) -> str:
    return f"config {config!r}, entry {entry}"


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
    ci_for: dict[str, list[int]] = {}
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
        ci_for.setdefault(gi_name, []).extend([c] * count)
    try:
        layout = place(model, gi_counts, driver=driver)
    except LayoutError as exc:
        raise ConfigError(f"{where}, field mig-devices: {exc}") from None
    if layout is None:
        mix = ", ".join(f"{k}: {n}" for k, n in sorted(mig_devices.items()) if n)
        problems = (
            mig.driver_problems([mig.profile(k) for k in gi_counts.elements()], driver)
            if driver
            else []
        )
        why = (
            "; ".join(problems)
            if problems
            else f"does not fit one {model.id} (instances would overlap, exceed a max count or the GPU's limit of {mig.max_gpu_instances})"
        )
        raise ConfigError(f"{where}, field mig-devices, value {{{mix}}}: {why}")
    devices = []
    for pi in layout:
        devices.append(PlannedDevice(pi.profile, pi.start, ci_for[pi.profile.name].pop()))
    return tuple(devices)


def plan_node(
    config: str,
    entries: Sequence[MigConfigEntry],
    gpus: Sequence[NodeGpu],
    driver: str | None = None,
) -> list[GpuTarget]:
    """Decide every selected GPU's target. GPUs no entry selects are left out."""
    errors: list[str] = []
    chosen: dict[int, int] = {}
    targets: dict[int, GpuTarget] = {}
    for i, entry in enumerate(entries):
        where = _where(config, i)
        if entry.devices != "all":
            for idx in entry.devices:
                if idx >= len(gpus):
                    errors.append(
                        f"{where}, field devices, value {idx}: out of range, this node has {len(gpus)} GPUs (0..{len(gpus) - 1})"
                    )
        for gpu in gpus:
            if not entry.selects(gpu.index, gpu.pci_device_id):
                continue
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
    return [targets[k] for k in sorted(targets)]


def check_against_model(
    config: str, entries: Sequence[MigConfigEntry], model: GpuModel, count: int | None = None
) -> list[GpuTarget]:
    """Check a config for a node of `count` GPUs of `model`.

    Without a count, GPU indexes cannot be range-checked, so the node is assumed large
    enough for every index the config names.
    """
    if count is None:
        named = [i for e in entries if e.devices != "all" for i in e.devices]
        count = max([1, *(i + 1 for i in named)])
    gpus = [NodeGpu(i, model.pci_device_id, model) for i in range(count)]
    return plan_node(config, entries, gpus)


def check_against_catalog(config: str, entries: Sequence[MigConfigEntry]) -> None:
    """Without a node or model: each MIG entry must suit every catalog model its filter names
    (PCI ids the catalog does not know are not checked), or some model when unfiltered."""
    errors: list[str] = []
    for i, entry in enumerate(entries):
        if not entry.mig_enabled:
            continue
        where = _where(config, i)
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
