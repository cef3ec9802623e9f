"""MIG geometry: fit checks and full layout enumeration for every MIG model.

Targets (issue: Foundation): fit check < 50 us median; full enumeration of any model
< 200 ms. Enumeration is measured cold (the feasible-mix table is rebuilt each round);
fit checks are measured both warm (table built) and as a search next to occupied
instances, which never uses the table.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter

from kubegpu.catalog import all_models
from kubegpu.mig import geometry

FIT_TARGET_US = 50.0
ENUM_TARGET_MS = 200.0


def _time(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def run() -> int:
    rng = random.Random(7)
    worst_enum = 0.0
    fit_medians: list[float] = []
    search_medians: list[float] = []
    print(f"{'model':<20}{'layouts':>9}{'enum ms (median)':>18}{'fit us':>9}{'search us':>11}")
    for model in all_models():
        if model.mig is None:
            continue

        def enumerate_all(model=model) -> int:  # type: ignore[no-untyped-def]
            geometry._feasible_mixes.cache_clear()
            return len(geometry.feasible_mixes(model))

        n_layouts = sum(1 for _ in geometry.iter_layouts(model, maximal_only=False))
        enum = statistics.median(_time(enumerate_all, 5)) * 1000
        worst_enum = max(worst_enum, enum)
        mixes = list(geometry.feasible_mixes(model))
        names = [p.name for p in model.mig.gpu_instance_profiles]
        queries = [dict(rng.choice(mixes)) for _ in range(300)]
        queries += [{rng.choice(names): rng.randint(1, 7)} for _ in range(100)]  # many do not fit
        fit = (
            statistics.median(
                _time(lambda q=q, m=model: geometry.fits(m, q), 1)[0] for q in queries
            )
            * 1e6
        )
        layouts = list(geometry.iter_layouts(model, maximal_only=False))
        cases = []
        for _ in range(200):
            lay = rng.choice(layouts)
            cut = rng.randint(0, len(lay))
            cases.append((lay[:cut], dict(Counter(pi.profile.name for pi in lay[cut:]))))
        search = (
            statistics.median(
                _time(lambda c=c, m=model: geometry.place(m, c[1], occupied=c[0]), 1)[0]
                for c in cases
            )
            * 1e6
        )
        fit_medians.append(fit)
        search_medians.append(search)
        print(f"{model.id:<20}{n_layouts:>9}{enum:>18.2f}{fit:>9.1f}{search:>11.1f}")
    fit_all = max(fit_medians)
    search_all = max(search_medians)
    print(
        f"worst enumeration {worst_enum:.1f} ms (target < {ENUM_TARGET_MS:.0f}); "
        f"worst fit median {fit_all:.1f} us, worst search median {search_all:.1f} us (target < {FIT_TARGET_US:.0f})"
    )
    ok = worst_enum < ENUM_TARGET_MS and fit_all < FIT_TARGET_US and search_all < FIT_TARGET_US
    print("MIG geometry targets:", "met" if ok else "MISSED")
    return 0 if ok else 1
