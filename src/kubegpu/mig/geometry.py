"""MIG geometry: which sets of GPU instances fit one GPU, and where they go.

A GPU instance occupies `[start, start + slices)` on the model's placement axis (8 memory
slices on A100/H100/B200, 4 on A30, a 12-unit grid on the RTX PRO 6000). Whether a set of
instances is allowed (overlaps, max counts, the GPU's instance limit, its media engines,
driver gates) is decided by kubegpu.catalog.placement, the rules the simulated GPU enforces
too; this module searches layouts with them. Everything here is pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from kubegpu.catalog import GpuInstanceProfile, GpuModel, MigCapability
from kubegpu.catalog.placement import (
    Occupancy,
    PlacedInstance,
    addition_problem,
    driver_problems,
    instance_mask,
    layout_problem,
    mix_problem,
    profile_allowed,
)

__all__ = [
    "Layout",
    "LayoutError",
    "PlacedInstance",
    "driver_violations",
    "feasible_mixes",
    "fits",
    "iter_layouts",
    "misfit_reason",
    "mix_of",
    "place",
    "validate_layout",
]

Layout = tuple[PlacedInstance, ...]


class LayoutError(ValueError):
    """A layout breaks a hardware rule; the message says which."""


def _mig(model: GpuModel) -> MigCapability:
    if model.mig is None:
        raise LayoutError(f"{model.id} ({model.product_name}) is not MIG-capable")
    return model.mig


def driver_violations(
    mig: MigCapability, profiles: Iterable[GpuInstanceProfile], driver: str | None
) -> list[str]:
    """Why this driver cannot create these profiles together (empty when it can or is unknown).

    Covers the model's MIG minimum, per-profile minimums and combination rules.
    """
    return driver_problems(mig, profiles, driver)


def validate_layout(
    model: GpuModel, layout: Sequence[PlacedInstance], driver: str | None = None
) -> None:
    """Raise LayoutError naming the first broken rule; return when the layout is valid."""
    problem = layout_problem(_mig(model), layout, driver)
    if problem:
        raise LayoutError(f"{model.id}: {problem}")


@dataclass(frozen=True)
class _Candidate:
    profile: GpuInstanceProfile
    start: int
    mask: int


def _candidates(
    mig: MigCapability, profiles: Iterable[GpuInstanceProfile], driver: str | None
) -> list[_Candidate]:
    out = [
        _Candidate(p, s, ((1 << p.slices) - 1) << s)
        for p in profiles
        if profile_allowed(p, driver)
        for s in p.placements
    ]
    out.sort(key=lambda c: (c.start, -c.profile.slices, c.profile.id))
    return out


def iter_layouts(
    model: GpuModel,
    profiles: Iterable[GpuInstanceProfile] | None = None,
    *,
    maximal_only: bool = True,
    driver: str | None = None,
) -> Iterator[Layout]:
    """Every valid layout built from `profiles` (default: all of the model's), each once.

    A layout is maximal when no further instance of the given profiles can be added.
    With a `driver`, only layouts that driver can create (none below the model's minimum).
    """
    mig = _mig(model)
    if driver is not None and driver_problems(mig, [], driver):
        return
    cands = _candidates(
        mig, profiles if profiles is not None else mig.gpu_instance_profiles, driver
    )
    chosen: list[_Candidate] = []

    def can_add(occ: Occupancy, c: _Candidate) -> bool:
        return addition_problem(mig, occ, c.profile, c.start, driver) is None

    def walk(i: int, occ: Occupancy) -> Iterator[Layout]:
        for j in range(i, len(cands)):
            c = cands[j]
            if can_add(occ, c):
                chosen.append(c)
                yield from walk(j + 1, occ.add(c.profile, c.start))
                chosen.pop()
        if not chosen:
            return
        if maximal_only and any(can_add(occ, c) for c in cands):
            return
        yield tuple(PlacedInstance(c.start, c.profile) for c in chosen)

    yield from walk(0, Occupancy())


def mix_of(layout: Iterable[PlacedInstance]) -> tuple[tuple[str, int], ...]:
    """The multiset of profile names in a layout, as a sorted tuple of (name, count)."""
    return tuple(sorted(Counter(pi.profile.name for pi in layout).items()))


@cache
def _feasible_mixes(model: GpuModel) -> dict[tuple[tuple[str, int], ...], Layout]:
    table: dict[tuple[tuple[str, int], ...], Layout] = {}
    for layout in iter_layouts(model, maximal_only=False):
        table.setdefault(mix_of(layout), layout)
    return table


def feasible_mixes(model: GpuModel) -> dict[tuple[tuple[str, int], ...], Layout]:
    """Every feasible non-empty multiset of profiles, with one concrete layout for each."""
    return _feasible_mixes(model)


def _resolve(
    mig: MigCapability, model: GpuModel, mix: Mapping[str, int]
) -> Counter[GpuInstanceProfile]:
    out: Counter[GpuInstanceProfile] = Counter()
    for name, n in mix.items():
        try:
            out[mig.profile(name)] += n
        except KeyError:
            known = ", ".join(p.name for p in mig.gpu_instance_profiles)
            raise LayoutError(
                f"profile {name!r} does not exist on {model.id} (profiles: {known})"
            ) from None
    return out


def place(
    model: GpuModel,
    mix: Mapping[str, int],
    *,
    occupied: Sequence[PlacedInstance] = (),
    driver: str | None = None,
) -> Layout | None:
    """A concrete layout for `mix` (profile name -> count) next to `occupied`, or None.

    Unknown profile names raise LayoutError; a mix that does not fit returns None.
    The returned layout holds only the new instances, largest first: the order the
    MIG guide recommends creating them in.
    """
    mig = _mig(model)
    wanted = _resolve(mig, model, {k: v for k, v in mix.items() if v})
    if not wanted:
        return ()
    if not occupied:
        # the table was built with every rule but the driver's
        if driver_problems(mig, wanted.elements(), driver):
            return None
        key = tuple(sorted((p.name, n) for p, n in wanted.items()))
        found = feasible_mixes(model).get(key)
        return _largest_first(found) if found is not None else None
    if mix_problem(mig, [*(o.profile for o in occupied), *wanted.elements()], driver):
        return None
    return _search(wanted, occupied)


def _largest_first(layout: Layout) -> Layout:
    return tuple(sorted(layout, key=lambda pi: (-pi.profile.slices, pi.start)))


def _search(
    wanted: Counter[GpuInstanceProfile], occupied: Sequence[PlacedInstance]
) -> Layout | None:
    """Backtracking placement of `wanted` around `occupied`: biggest profiles first.

    The caller has checked the placement-free rules for the whole mix (they hold for every
    layout of it), so only the placement rules are left: a profile's starts, no overlaps.
    """
    used = 0
    for o in occupied:
        used |= o.mask
    todo = sorted(wanted.elements(), key=lambda p: (-p.slices, len(p.placements), p.id))
    placed: list[PlacedInstance] = []

    def go(k: int, used: int, min_start: int) -> bool:
        if k == len(todo):
            return True
        p = todo[k]
        # identical profiles are placed in increasing start order to avoid re-trying permutations
        lo = min_start if k and todo[k - 1] is p else 0
        for s in p.placements:
            mask = instance_mask(s, p.slices)
            if s < lo or used & mask:
                continue
            placed.append(PlacedInstance(s, p))
            if go(k + 1, used | mask, s + 1):
                return True
            placed.pop()
        return False

    return tuple(placed) if go(0, used, 0) else None


def fits(model: GpuModel, mix: Mapping[str, int], *, driver: str | None = None) -> bool:
    return place(model, mix, driver=driver) is not None


def misfit_reason(model: GpuModel, mix: Mapping[str, int], *, driver: str | None = None) -> str:
    """Why `mix` (profile name -> count) does not fit one GPU of `model`, in words.

    The rule the mix breaks whatever its layout (driver, counts, instance limit, media
    engines), else that its instances cannot be placed without overlapping.
    """
    mig = _mig(model)
    wanted = _resolve(mig, model, {k: v for k, v in mix.items() if v})
    problem = mix_problem(mig, wanted.elements(), driver)
    if problem:
        return problem.message
    return f"the instances would overlap (a {model.id} has {mig.placement_units} placement units)"
