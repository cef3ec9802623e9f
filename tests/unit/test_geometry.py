"""MIG geometry: what fits one GPU, where it goes, and every layout a model has."""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.catalog import GpuModel, all_models, get_model
from kubegpu.catalog.profile import ProfileName, ProfileNameError
from kubegpu.mig.geometry import (
    LayoutError,
    PlacedInstance,
    feasible_mixes,
    fits,
    iter_layouts,
    mix_of,
    place,
    validate_layout,
)

MIG_MODELS = [m for m in all_models() if m.mig]
A100 = get_model("a100-40gb")
CLASSIC = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]


def _profiles(model: GpuModel, names: list[str]) -> list:
    assert model.mig
    return [model.mig.profile(n) for n in names]


# -- profile names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "1g.18gb",
        "1g.10gb+me",
        "1g.24gb-me",
        "1g.24gb+gfx",
        "1g.24gb+me.all",
        "1c.2g.20gb",
        "7g.141gb",
    ],
)
def test_profile_names_round_trip(text: str) -> None:
    assert str(ProfileName.parse(text)) == text


def test_profile_name_parts() -> None:
    p = ProfileName.parse("1c.3g.20gb")
    assert (p.compute_slices, p.gpu_slices, p.memory_gb, p.gpu_instance) == (1, 3, 20, "3g.20gb")
    assert ProfileName.parse("1g.10gb+me").resource_suffix == "1g.10gb.me"


@pytest.mark.parametrize(
    "text", ["", "1g", "g.5gb", "1g.5", "1g.5gb+xx", "3c.2g.10gb", "0g.5gb", "1g.5GB"]
)
def test_bad_profile_names_are_refused(text: str) -> None:
    with pytest.raises(ProfileNameError):
        ProfileName.parse(text)


# -- enumeration (counts from the reference) ---------------------------------------------


def test_a100_has_exactly_19_maximal_layouts() -> None:
    layouts = list(iter_layouts(A100, _profiles(A100, CLASSIC)))
    assert len(layouts) == 19
    assert len({mix_of(lay) for lay in layouts}) == 14


def test_a100_feasible_mix_counts() -> None:
    all_layouts = iter_layouts(A100, _profiles(A100, CLASSIC), maximal_only=False)
    assert len({mix_of(lay) for lay in all_layouts}) == 37
    with_rev2 = _profiles(A100, [*CLASSIC, "1g.10gb"])
    assert len({mix_of(lay) for lay in iter_layouts(A100, with_rev2, maximal_only=False)}) == 77
    assert len({mix_of(lay) for lay in iter_layouts(A100, with_rev2)}) == 38


def _mixes(model: GpuModel, names: list[str]) -> set[tuple[tuple[str, int], ...]]:
    return {mix_of(lay) for lay in iter_layouts(model, _profiles(model, names))}


def test_a30_and_rtx_pro_6000_maximal_mixes() -> None:
    a30 = get_model("a30")
    assert _mixes(a30, ["1g.6gb", "2g.12gb", "4g.24gb"]) == {
        (("1g.6gb", 4),),
        (("1g.6gb", 2), ("2g.12gb", 1)),
        (("2g.12gb", 2),),
        (("4g.24gb", 1),),
    }
    rtx = get_model("rtx-pro-6000-se")
    assert _mixes(rtx, ["1g.24gb", "2g.48gb", "4g.96gb"]) == {
        (("1g.24gb", 4),),
        (("1g.24gb", 2), ("2g.48gb", 1)),
        (("2g.48gb", 2),),
        (("4g.96gb", 1),),
    }


@pytest.mark.parametrize(
    "mix",
    [
        {"4g.20gb": 1, "3g.20gb": 1},
        {"3g.20gb": 2},
        {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1},
        {"3g.20gb": 1, "2g.10gb": 2},
        {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
        {"2g.10gb": 3, "1g.5gb": 1},
        {"1g.5gb": 7},
        {"1g.10gb": 4},
        {"1g.10gb": 2, "3g.20gb": 1},
    ],
)
def test_documented_valid_a100_mixes_fit(mix: dict[str, int]) -> None:
    layout = place(A100, mix)
    assert layout is not None
    validate_layout(A100, layout)
    assert dict(mix_of(layout)) == mix


@pytest.mark.parametrize(
    "mix",
    [
        {"3g.20gb": 2, "1g.5gb": 1},
        {"4g.20gb": 2},
        {"7g.40gb": 2},
        {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1},
        {"2g.10gb": 4},
        {"1g.5gb": 8},
        {"1g.10gb": 4, "1g.5gb": 1},
        {"1g.5gb+me": 2},
    ],
)
def test_documented_invalid_a100_mixes_do_not_fit(mix: dict[str, int]) -> None:
    assert place(A100, mix) is None


def test_overlap_is_refused() -> None:
    two, one = _profiles(A100, ["2g.10gb", "1g.10gb"])
    with pytest.raises(LayoutError, match="overlaps"):
        validate_layout(A100, [PlacedInstance(0, two), PlacedInstance(0, one)])


def test_start_outside_the_placements_is_refused() -> None:
    (three,) = _profiles(A100, ["3g.20gb"])
    with pytest.raises(LayoutError, match="cannot start at 2"):
        validate_layout(A100, [PlacedInstance(2, three)])


def test_unknown_profile_is_an_error_not_a_miss() -> None:
    with pytest.raises(LayoutError, match="does not exist on a100-40gb"):
        place(A100, {"1g.18gb": 1})


def test_non_mig_model_is_refused() -> None:
    with pytest.raises(LayoutError, match="not MIG-capable"):
        list(iter_layouts(get_model("l4")))


def test_driver_gates_profiles_and_combinations() -> None:
    assert not fits(A100, {"4g.20gb": 1, "3g.20gb": 1}, driver="470.82.01")
    assert fits(A100, {"4g.20gb": 1, "3g.20gb": 1}, driver="510.47.03")
    assert not fits(A100, {"1g.10gb": 1}, driver="515.65.01")
    assert fits(A100, {"1g.10gb": 1}, driver="525.60.13")


def test_all_media_engine_instance_shares_only_with_no_media_instances() -> None:
    rtx = get_model("rtx-pro-6000-se")
    assert fits(rtx, {"1g.24gb+me.all": 1, "1g.24gb-me": 3})
    assert not fits(rtx, {"1g.24gb+me.all": 1, "1g.24gb": 1})
    assert fits(rtx, {"2g.48gb+me.all": 1, "1g.24gb-me": 2})


def test_placing_next_to_existing_instances() -> None:
    three, one = _profiles(A100, ["3g.20gb", "1g.5gb"])
    occupied = [PlacedInstance(4, three), PlacedInstance(0, one)]
    layout = place(A100, {"2g.10gb": 1, "1g.5gb": 1}, occupied=occupied)
    assert layout is not None
    validate_layout(A100, [*occupied, *layout])
    assert place(A100, {"2g.10gb": 2}, occupied=occupied) is None


def test_layouts_come_largest_first() -> None:
    layout = place(A100, {"1g.5gb": 2, "3g.20gb": 1, "2g.10gb": 1})
    assert layout is not None
    assert [pi.profile.slices for pi in layout] == sorted(
        (pi.profile.slices for pi in layout), reverse=True
    )


# -- properties over every MIG model -------------------------------------------------------


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
def test_every_enumerated_layout_is_valid_and_maximal(model: GpuModel) -> None:
    assert model.mig
    for layout in iter_layouts(model):
        validate_layout(model, layout)
        used = 0
        for pi in layout:
            used |= pi.mask
        for p in model.mig.gpu_instance_profiles:
            for s in p.placements:
                try:
                    validate_layout(model, [*layout, PlacedInstance(s, p)])
                except LayoutError:
                    continue
                pytest.fail(f"{model.id}: {layout} is not maximal, {p.name}@{s} fits")


def _brute_force_mixes(model: GpuModel, names: list[str]) -> set[tuple[tuple[str, int], ...]]:
    """Independent check: try every subset of (profile, start) candidates."""
    cands = [PlacedInstance(s, p) for p in _profiles(model, names) for s in p.placements]
    out = set()
    assert model.mig
    for k in range(1, model.mig.max_gpu_instances + 1):
        for combo in combinations(cands, k):
            try:
                validate_layout(model, combo)
            except LayoutError:
                continue
            out.add(mix_of(combo))
    return out


@pytest.mark.parametrize(
    ("model_id", "names"),
    [
        (
            "a100-40gb",
            ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me"],
        ),
        ("h100-80gb", ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        (
            "rtx-pro-6000-ws",
            ["1g.24gb", "1g.24gb+me.all", "1g.24gb-me", "2g.48gb", "2g.48gb-me", "4g.96gb"],
        ),
    ],
)
def test_no_valid_mix_is_missed(model_id: str, names: list[str]) -> None:
    model = get_model(model_id)
    enumerated = {
        mix_of(lay) for lay in iter_layouts(model, _profiles(model, names), maximal_only=False)
    }
    assert enumerated == _brute_force_mixes(model, names)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_every_placement_reported_valid_really_places(data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(MIG_MODELS), label="model")
    assert model.mig
    names = [p.name for p in model.mig.gpu_instance_profiles]
    mix = data.draw(
        st.dictionaries(st.sampled_from(names), st.integers(1, 4), max_size=4), label="mix"
    )
    layout = place(model, mix)
    feasible = {dict(k) == mix for k in feasible_mixes(model)}
    if layout is None:
        assert not mix or True not in feasible
        return
    validate_layout(model, layout)
    assert Counter(pi.profile.name for pi in layout) == Counter({k: v for k, v in mix.items() if v})


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_search_around_occupied_agrees_with_the_table(data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(MIG_MODELS), label="model")
    layouts = list(iter_layouts(model, maximal_only=False))
    layout = data.draw(st.sampled_from(layouts), label="layout")
    cut = data.draw(st.integers(0, len(layout)), label="cut")
    occupied, rest = layout[:cut], layout[cut:]
    found = place(model, dict(Counter(pi.profile.name for pi in rest)), occupied=occupied)
    assert found is not None
    validate_layout(model, [*occupied, *found])
