"""How many more MIG instances of each profile a GPU's free slices could still hold, and
whether a profile that does not fit now would fit after repacking what is there.

Free slices are what no GPU instance covers. A profile can be short of room while enough
slices are free, because its instances only start at some places (a 3g on an 8-unit GPU
starts at 0 or 4): the exporter's `kubegpu_mig_free_instances` shows what fits now, the
doctor's `mig-fragmented` warns when Pending pods ask for a profile only a repacking
(destroy and recreate the instances, so a drain) would make room for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kubegpu.catalog import GpuInstanceProfile, GpuModel
from kubegpu.catalog.placement import PlacedInstance, profile_allowed
from kubegpu.mig.geometry import fits, place


def _profiles(model: GpuModel, driver: str | None) -> list[GpuInstanceProfile]:
    if model.mig is None:
        return []
    return [p for p in model.mig.gpu_instance_profiles if profile_allowed(p, driver)]


def more_instances(
    model: GpuModel, placed: Sequence[PlacedInstance], driver: str | None = None
) -> dict[str, int]:
    """Profile name -> the most instances of it that could be added next to `placed` (every
    profile the driver offers, 0 included)."""
    out: dict[str, int] = {}
    for p in _profiles(model, driver):
        k = 0
        while k < p.max_count and place(model, {p.name: k + 1}, occupied=placed, driver=driver):
            k += 1
        out[p.name] = k
    return out


def free_slices(model: GpuModel, placed: Sequence[PlacedInstance]) -> int:
    """Placement units no instance covers."""
    units = model.mig.placement_units if model.mig is not None else 0
    used = 0
    for pi in placed:
        used |= pi.mask
    return units - bin(used & ((1 << units) - 1)).count("1")


def fits_after_repack(
    model: GpuModel, placed: Sequence[PlacedInstance], profile: str, driver: str | None = None
) -> bool:
    """Whether the instances there and one more `profile` fit the GPU in some layout."""
    mix = Counter(pi.profile.name for pi in placed)
    mix[profile] += 1
    return fits(model, dict(mix), driver=driver)
