"""MIG placement rules: when a GPU instance may join the others on one GPU.

The one home of the rules the hardware enforces, so the static checks (kubegpu.mig.geometry:
`mig validate`, `mig apply`'s plan, the planner) and the simulated GPU (kubegpu.nvml.sim)
accept and refuse exactly the same sets of instances:

- driver: MIG needs the model's minimum driver; some profiles need a newer branch; some
  profiles may share a GPU only from a branch on (A100: 4g + 3g from R510);
- the GPU's limit on instances and each profile's max count;
- media engines: a GPU's decoders, encoders, JPEG decoders and optical-flow accelerators are
  handed out whole, so the instances' sums must stay within the GPU's. An `+me.all` instance
  takes them all, which is why it shares its GPU only with `-me` instances (nvml.h);
- an instance occupies `[start, start + slices)` of the placement axis, starts only where its
  profile allows, and never overlaps another.

Every rule is monotone: adding an instance never cures a refusal. So a layout is valid exactly
when each instance can be added to the ones before it, in any order, and that is how a whole
layout is checked here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from kubegpu.catalog.models import (
    NO_MEDIA_ENGINES,
    GpuInstanceProfile,
    MediaEngines,
    MigCapability,
    driver_at_least,
)


class Refusal(Enum):
    """Why an instance cannot be added; each kind is one NVML error."""

    DRIVER = "driver"  # NVML_ERROR_NOT_SUPPORTED: this driver cannot do it
    CAPACITY = "capacity"  # NVML_ERROR_INSUFFICIENT_RESOURCES: no room (slices, counts, engines)
    PLACEMENT = "placement"  # NVML_ERROR_INVALID_ARGUMENT: a start the profile does not have


@dataclass(frozen=True)
class Problem:
    kind: Refusal
    message: str

    def __str__(self) -> str:
        return self.message


def instance_mask(start: int, slices: int) -> int:
    """The placement units `[start, start + slices)` as a bit mask."""
    return ((1 << slices) - 1) << start


@dataclass(frozen=True)
class PlacedInstance:
    """One GPU instance of `profile` at `start`."""

    start: int
    profile: GpuInstanceProfile

    @property
    def size(self) -> int:
        return self.profile.slices

    @property
    def mask(self) -> int:
        return instance_mask(self.start, self.profile.slices)

    def __str__(self) -> str:
        return f"{self.profile.name}@{self.start}:{self.profile.slices}"

    def __repr__(self) -> str:
        return f"PlacedInstance({self})"


@dataclass(frozen=True)
class Occupancy:
    """What the instances on one GPU take: placement units, instances, media engines.

    `start` is None for an instance whose place is not decided (a mix without a layout).
    """

    profiles: tuple[GpuInstanceProfile, ...] = ()
    used: int = 0
    engines: MediaEngines = field(default=NO_MEDIA_ENGINES)

    @classmethod
    def of(cls, placed: Iterable[PlacedInstance]) -> Occupancy:
        occ = cls()
        for pi in placed:
            occ = occ.add(pi.profile, pi.start)
        return occ

    def add(self, profile: GpuInstanceProfile, start: int | None) -> Occupancy:
        mask = 0 if start is None else instance_mask(start, profile.slices)
        return Occupancy(
            (*self.profiles, profile), self.used | mask, self.engines + profile.engines.media
        )


# -- driver ---------------------------------------------------------------------------------


def mig_driver_problem(mig: MigCapability, driver: str) -> str | None:
    """Why MIG cannot be used at all with `driver` (None when it can)."""
    if driver_at_least(driver, mig.min_driver):
        return None
    return f"MIG needs driver {mig.min_driver} or newer (have {driver})"


def profile_allowed(profile: GpuInstanceProfile, driver: str | None) -> bool:
    """Whether `driver` offers this profile at all (an unknown driver offers every one)."""
    return driver is None or not profile.min_driver or driver_at_least(driver, profile.min_driver)


def offered_profiles(mig: MigCapability, driver: str | None) -> tuple[GpuInstanceProfile, ...]:
    """The profiles `driver` lists for this GPU (every one when the driver is unknown)."""
    return tuple(p for p in mig.gpu_instance_profiles if profile_allowed(p, driver))


def driver_problems(
    mig: MigCapability, profiles: Iterable[GpuInstanceProfile], driver: str | None
) -> list[str]:
    """Why `driver` cannot create these profiles together on one GPU (empty when it can,
    or when the driver is unknown)."""
    if driver is None:
        return []
    ps = list(profiles)
    whole = mig_driver_problem(mig, driver)
    out = [whole] if whole else []
    out += [
        f"{p.name} needs driver R{p.min_driver}+ (have {driver})"
        for p in dict.fromkeys(ps)
        if not profile_allowed(p, driver)
    ]
    kinds = {p.nvml for p in ps}
    for rule in mig.combination_rules:
        if rule.profiles <= kinds and not driver_at_least(driver, rule.min_driver):
            names = " + ".join(sorted({p.name for p in ps if p.nvml in rule.profiles}))
            out.append(f"{names} on one GPU needs driver R{rule.min_driver}+ (have {driver})")
    return out


# -- adding instances -----------------------------------------------------------------------


def engine_use(profiles: Iterable[GpuInstanceProfile]) -> MediaEngines:
    total = NO_MEDIA_ENGINES
    for p in profiles:
        total = total + p.engines.media
    return total


def addition_problem(
    mig: MigCapability,
    occupied: Occupancy,
    profile: GpuInstanceProfile,
    start: int | None,
    driver: str | None = None,
) -> Problem | None:
    """Why `profile` at `start` cannot join `occupied` (None when it can).

    With `start` None only the rules that do not depend on where it goes are checked.
    """
    if driver is not None:
        problems = driver_problems(mig, [*occupied.profiles, profile], driver)
        if problems:
            return Problem(Refusal.DRIVER, "; ".join(problems))
    n = len(occupied.profiles)
    if n >= mig.max_gpu_instances:
        return Problem(
            Refusal.CAPACITY, f"all {mig.max_gpu_instances} GPU instances of the GPU are in use"
        )
    if n >= profile.max_count:  # else the count cannot have reached it
        same = sum(1 for p in occupied.profiles if p.id == profile.id)
        if same >= profile.max_count:
            return Problem(
                Refusal.CAPACITY,
                f"{same + 1}x {profile.name} exceeds its max count {profile.max_count}",
            )
    media = profile.engines.media
    if not occupied.engines.fits_with(media, mig.engines):
        over = (occupied.engines + media).over(mig.engines)
        return Problem(
            Refusal.CAPACITY,
            f"{profile.name} needs media engines the GPU has no more of ({', '.join(over)}); "
            "-me profiles need none",
        )
    if start is None:
        return None
    if start not in profile.placements:
        starts = ",".join(str(s) for s in profile.placements)
        return Problem(
            Refusal.PLACEMENT, f"{profile.name} cannot start at {start} (starts: {starts})"
        )
    if occupied.used & instance_mask(start, profile.slices):
        return Problem(
            Refusal.CAPACITY, f"{PlacedInstance(start, profile)} overlaps another instance"
        )
    return None


def layout_problem(
    mig: MigCapability, layout: Sequence[PlacedInstance], driver: str | None = None
) -> Problem | None:
    """The first rule a layout breaks (None when the GPU can hold it).

    Rules are checked in the order `addition_problem` checks them (driver, then counts and
    engines, then starts and overlaps), so a layout built one instance at a time is refused
    with the same kind of problem as the whole layout.
    """
    problem = mix_problem(mig, [pi.profile for pi in layout], driver)
    if problem:
        return problem
    occ = Occupancy()
    for pi in sorted(layout, key=lambda pi: (pi.start, -pi.profile.slices)):
        problem = addition_problem(mig, occ, pi.profile, pi.start)
        if problem:
            return problem
        occ = occ.add(pi.profile, pi.start)
    return None


def mix_problem(
    mig: MigCapability, profiles: Iterable[GpuInstanceProfile], driver: str | None = None
) -> Problem | None:
    """The first placement-free rule a multiset of profiles breaks (None when none)."""
    ps = list(profiles)
    if driver is not None:
        problems = driver_problems(mig, ps, driver)
        if problems:
            return Problem(Refusal.DRIVER, "; ".join(problems))
    occ = Occupancy()
    for p in ps:
        problem = addition_problem(mig, occ, p, None)
        if problem:
            return problem
        occ = occ.add(p, None)
    return None
