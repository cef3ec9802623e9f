"""MIG geometry: which sets of GPU instances fit one GPU, and where they go.

A GPU instance occupies `[start, start + slices)` on the model's placement axis (8 memory
slices on A100/H100/B200, 4 on A30, a 12-unit grid on the RTX PRO 6000). A layout is
valid when no two instances overlap, each profile stays within its max count, the GPU's
instance limit holds, an `+me.all` instance shares the GPU only with `-me` instances, and
driver-gated profiles or combinations are allowed by the driver. Everything here is pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from kubegpu.catalog import GpuInstanceProfile, GpuModel, MigCapability


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
        return ((1 << self.profile.slices) - 1) << self.start

    def __str__(self) -> str:
        return f"{self.profile.name}@{self.start}:{self.profile.slices}"

    def __repr__(self) -> str:
        return f"PlacedInstance({self})"


Layout = tuple[PlacedInstance, ...]


class LayoutError(ValueError):
    """A layout breaks a hardware rule; the message says which."""


def _mig(model: GpuModel) -> MigCapability:
    if model.mig is None:
        raise LayoutError(f"{model.id} ({model.product_name}) is not MIG-capable")
    return model.mig


def _compatible_me(profiles: Iterable[GpuInstanceProfile]) -> bool:
    """nvml.h: an ALL_ME instance prevents allocation of all but NO_ME profiles."""
    ps = list(profiles)
    if not any(p.all_media_engines for p in ps):
        return True
    return sum(p.all_media_engines for p in ps) == 1 and all(
        p.all_media_engines or p.no_media_engines for p in ps
    )


def driver_violations(
    mig: MigCapability, profiles: Iterable[GpuInstanceProfile], driver: str | None
) -> list[str]:
    """Why this driver cannot create these profiles together (empty when it can or is unknown)."""
    return [] if driver is None else mig.driver_problems(profiles, driver)


def validate_layout(
    model: GpuModel, layout: Sequence[PlacedInstance], driver: str | None = None
) -> None:
    """Raise LayoutError naming the first broken rule; return when the layout is valid."""
    mig = _mig(model)
    if len(layout) > mig.max_gpu_instances:
        raise LayoutError(
            f"{len(layout)} GPU instances exceed the {mig.max_gpu_instances} a {model.id} supports"
        )
    counts = Counter(pi.profile for pi in layout)
    for profile, n in counts.items():
        if n > profile.max_count:
            raise LayoutError(
                f"{n}x {profile.name} exceeds its max count {profile.max_count} on {model.id}"
            )
    used = 0
    for pi in sorted(layout, key=lambda pi: pi.start):
        if pi.start not in pi.profile.placements:
            starts = ",".join(str(s) for s in pi.profile.placements)
            raise LayoutError(
                f"{pi.profile.name} cannot start at {pi.start} on {model.id} (starts: {starts})"
            )
        if used & pi.mask:
            raise LayoutError(f"{pi} overlaps another instance")
        used |= pi.mask
    if not _compatible_me(counts):
        raise LayoutError("an +me.all instance can share its GPU only with -me instances")
    problems = driver_violations(mig, counts, driver)
    if problems:
        raise LayoutError("; ".join(problems))


@dataclass(frozen=True)
class _Candidate:
    profile: GpuInstanceProfile
    start: int
    mask: int


def _candidates(mig: MigCapability, profiles: Iterable[GpuInstanceProfile]) -> list[_Candidate]:
    out = [_Candidate(p, s, ((1 << p.slices) - 1) << s) for p in profiles for s in p.placements]
    out.sort(key=lambda c: (c.start, -c.profile.slices, c.profile.id))
    return out


def _can_add(
    mig: MigCapability,
    chosen: list[_Candidate],
    counts: Counter[GpuInstanceProfile],
    used: int,
    c: _Candidate,
) -> bool:
    if used & c.mask or len(chosen) >= mig.max_gpu_instances:
        return False
    if counts[c.profile] >= c.profile.max_count:
        return False
    return _compatible_me([*counts.elements(), c.profile])


def iter_layouts(
    model: GpuModel,
    profiles: Iterable[GpuInstanceProfile] | None = None,
    *,
    maximal_only: bool = True,
) -> Iterator[Layout]:
    """Every valid layout built from `profiles` (default: all of the model's), each once.

    A layout is maximal when no further instance of the given profiles can be added.
    """
    mig = _mig(model)
    cands = _candidates(mig, profiles if profiles is not None else mig.gpu_instance_profiles)
    chosen: list[_Candidate] = []
    counts: Counter[GpuInstanceProfile] = Counter()

    def walk(i: int, used: int) -> Iterator[Layout]:
        for j in range(i, len(cands)):
            c = cands[j]
            if _can_add(mig, chosen, counts, used, c):
                chosen.append(c)
                counts[c.profile] += 1
                yield from walk(j + 1, used | c.mask)
                chosen.pop()
                counts[c.profile] -= 1
        if not chosen:
            return
        if maximal_only and any(_can_add(mig, chosen, counts, used, c) for c in cands):
            return
        yield tuple(PlacedInstance(c.start, c.profile) for c in chosen)

    yield from walk(0, 0)


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
    if driver_violations(mig, [*wanted.elements(), *(o.profile for o in occupied)], driver):
        return None
    if not occupied:
        key = tuple(sorted((p.name, n) for p, n in wanted.items()))
        found = feasible_mixes(model).get(key)
        return _largest_first(found) if found is not None else None
    return _search(mig, wanted, occupied)


def _largest_first(layout: Layout) -> Layout:
    return tuple(sorted(layout, key=lambda pi: (-pi.profile.slices, pi.start)))


def _search(
    mig: MigCapability, wanted: Counter[GpuInstanceProfile], occupied: Sequence[PlacedInstance]
) -> Layout | None:
    """Backtracking placement of `wanted` around `occupied`: biggest profiles first."""
    used = 0
    for o in occupied:
        used |= o.mask
    counts: Counter[GpuInstanceProfile] = Counter(o.profile for o in occupied)
    if len(occupied) + sum(wanted.values()) > mig.max_gpu_instances:
        return None
    if not _compatible_me([*counts.elements(), *wanted.elements()]):
        return None
    if any(counts[p] + n > p.max_count for p, n in wanted.items()):
        return None
    todo = sorted(wanted.elements(), key=lambda p: (-p.slices, len(p.placements), p.id))
    placed: list[PlacedInstance] = []

    def go(k: int, used: int, min_start: int) -> bool:
        if k == len(todo):
            return True
        p = todo[k]
        # identical profiles are placed in increasing start order to avoid re-trying permutations
        lo = min_start if k and todo[k - 1] is p else 0
        for s in p.placements:
            if s < lo:
                continue
            mask = ((1 << p.slices) - 1) << s
            if used & mask:
                continue
            placed.append(PlacedInstance(s, p))
            if go(k + 1, used | mask, s + 1):
                return True
            placed.pop()
        return False

    return tuple(placed) if go(0, used, 0) else None


def fits(model: GpuModel, mix: Mapping[str, int], *, driver: str | None = None) -> bool:
    return place(model, mix, driver=driver) is not None
