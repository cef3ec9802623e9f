"""MIG placement rules (kubegpu.catalog.placement): media engines, driver gates, error kinds."""

from __future__ import annotations

import copy
from importlib import resources

import pytest
import yaml

from kubegpu.catalog import GpuModel, MediaEngines, all_models, get_model
from kubegpu.catalog.loader import CatalogError, _mig
from kubegpu.catalog.placement import (
    Occupancy,
    PlacedInstance,
    Refusal,
    addition_problem,
    driver_problems,
    layout_problem,
    mig_driver_problem,
    mix_problem,
    offered_profiles,
)
from kubegpu.mig.geometry import fits, iter_layouts, misfit_reason, mix_of, place

MIG_MODELS = [m for m in all_models() if m.mig]


def _mig_of(model_id: str):
    mig = get_model(model_id).mig
    assert mig
    return mig


def _profiles(model_id: str, *names: str) -> list:
    mig = _mig_of(model_id)
    return [mig.profile(n) for n in names]


# -- media engines ------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
def test_the_engine_budget_is_what_the_whole_gpu_profile_owns(model: GpuModel) -> None:
    assert model.mig
    whole = [p for p in model.mig.gpu_instance_profiles if p.slices == model.mig.placement_units]
    assert whole
    for p in whole:
        assert p.engines.media == model.mig.engines
    for p in model.mig.gpu_instance_profiles:
        assert not p.engines.media.over(model.mig.engines), p.name


@pytest.mark.parametrize(
    "model",
    [
        m
        for m in MIG_MODELS
        if m.mig and any(p.all_media_engines for p in m.mig.gpu_instance_profiles)
    ],
    ids=lambda m: m.id,
)
def test_the_nvml_all_media_engines_rule_follows_from_the_budget(model: GpuModel) -> None:
    """nvml.h: an ALL_ME instance "prevents allocation of all but _NO_ME profiles"."""
    assert model.mig
    for me_all in (p for p in model.mig.gpu_instance_profiles if p.all_media_engines):
        for other in model.mig.gpu_instance_profiles:
            problem = mix_problem(model.mig, [me_all, other])
            if other.no_media_engines:
                assert problem is None, f"{me_all.name} + {other.name}: {problem}"
            else:
                assert problem is not None and problem.kind is Refusal.CAPACITY, other.name


def test_a30_has_one_jpeg_decoder_and_one_ofa_for_both_media_profiles() -> None:
    a30 = get_model("a30")
    assert not fits(a30, {"1g.6gb+me": 1, "2g.12gb+me": 1})
    assert "NVJPG 2 > 1" in misfit_reason(a30, {"1g.6gb+me": 1, "2g.12gb+me": 1})
    assert fits(a30, {"1g.6gb+me": 1, "1g.6gb": 1, "2g.12gb": 1})
    assert fits(a30, {"2g.12gb+me": 1, "2g.12gb": 1})


def test_seven_hopper_slices_use_all_seven_decoders() -> None:
    h100 = _mig_of("h100-80gb")
    one = h100.profile("1g.10gb")
    occ = Occupancy.of(PlacedInstance(s, one) for s in range(7))
    assert occ.engines == MediaEngines(dec=7, enc=0, jpg=7, ofa=0)
    assert not occ.engines.over(h100.engines)
    assert fits(get_model("h100-80gb"), {"1g.10gb": 6, "1g.10gb+me": 1})


def test_an_engine_refusal_names_the_engines_and_the_way_out() -> None:
    rtx = _mig_of("rtx-pro-6000-se")
    occ = Occupancy.of([PlacedInstance(0, rtx.profile("1g.24gb+me.all"))])
    problem = addition_problem(rtx, occ, rtx.profile("1g.24gb"), 3)
    assert problem is not None and problem.kind is Refusal.CAPACITY
    assert "NVDEC 5 > 4" in problem.message and "-me" in problem.message
    assert addition_problem(rtx, occ, rtx.profile("1g.24gb-me"), 3) is None


# -- placements -------------------------------------------------------------------------------------


def test_error_kinds_of_placement_problems() -> None:
    a100 = _mig_of("a100-40gb")
    two, three = a100.profile("2g.10gb"), a100.profile("3g.20gb")
    occ = Occupancy.of([PlacedInstance(0, two)])
    bad_start = addition_problem(a100, occ, three, 2)
    overlap = addition_problem(a100, occ, a100.profile("1g.10gb"), 0)
    assert bad_start is not None and bad_start.kind is Refusal.PLACEMENT
    assert overlap is not None and overlap.kind is Refusal.CAPACITY
    assert "overlaps" in str(overlap)
    assert addition_problem(a100, occ, three, None) is None  # no start: place-free rules only


def test_a_layout_is_refused_with_the_kind_of_its_first_broken_rule() -> None:
    a100 = _mig_of("a100-40gb")
    me = a100.profile("1g.5gb+me")
    twice = layout_problem(a100, [PlacedInstance(0, me), PlacedInstance(9, me)])
    assert twice is not None and twice.kind is Refusal.CAPACITY and "max count 1" in str(twice)
    four, three = a100.profile("4g.20gb"), a100.profile("3g.20gb")
    old = layout_problem(a100, [PlacedInstance(0, four), PlacedInstance(4, three)], "470.82.01")
    assert old is not None and old.kind is Refusal.DRIVER
    assert (
        layout_problem(a100, [PlacedInstance(0, four), PlacedInstance(4, three)], "510.47.03")
        is None
    )


# -- driver-dependent rules (every one the reference names) -------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "profile", "branch"),
    [
        ("a100-40gb", "1g.5gb+me", "470"),
        ("a100-40gb", "1g.10gb", "525"),
        ("a100-80gb", "1g.10gb+me", "470"),  # assumed from the 40GB rows, marked unconfirmed
        ("a100-80gb", "1g.20gb", "525"),
        ("a30", "1g.6gb+me", "470"),
        ("a30", "2g.12gb+me", "525"),
    ],
)
def test_profiles_gated_on_a_driver_branch(model_id: str, profile: str, branch: str) -> None:
    mig = _mig_of(model_id)
    p = mig.profile(profile)
    assert p.min_driver == branch
    below, at = f"{int(branch) - 5}.10.01", f"{branch}.10.01"
    assert p not in offered_profiles(mig, below) and p in offered_profiles(mig, at)
    assert driver_problems(mig, [p], below) == [f"{profile} needs driver R{branch}+ (have {below})"]
    assert driver_problems(mig, [p], at) == []
    assert not fits(get_model(model_id), {profile: 1}, driver=below)
    assert fits(get_model(model_id), {profile: 1}, driver=at)
    if model_id == "a100-80gb":
        assert "min_driver" in p.unconfirmed


@pytest.mark.parametrize("model_id", ["a100-40gb", "a100-80gb"])
def test_a100_4g_and_3g_share_a_gpu_from_r510(model_id: str) -> None:
    model = get_model(model_id)
    mig = _mig_of(model_id)
    four = next(p for p in mig.gpu_instance_profiles if p.nvml == "4_SLICE")
    three = next(p for p in mig.gpu_instance_profiles if p.nvml == "3_SLICE")
    mix = {four.name: 1, three.name: 1}
    assert not fits(model, mix, driver="470.82.01")
    assert "on one GPU needs driver R510+" in misfit_reason(model, mix, driver="470.82.01")
    assert fits(model, mix, driver="510.47.03")
    assert fits(model, {four.name: 1}, driver="470.82.01")  # each alone is fine
    old = {mix_of(lay) for lay in iter_layouts(model, [four, three], driver="470.82.01")}
    new = {mix_of(lay) for lay in iter_layouts(model, [four, three], driver="510.47.03")}
    assert new - old == {tuple(sorted(mix.items()))}


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
def test_below_the_models_minimum_driver_nothing_fits(model: GpuModel) -> None:
    assert model.mig
    major = int(model.mig.min_driver.split(".")[0])
    too_old = f"{major - 1}.99.99"
    assert mig_driver_problem(model.mig, too_old) is not None
    assert mig_driver_problem(model.mig, model.mig.min_driver) is None
    smallest = min(model.mig.gpu_instance_profiles, key=lambda p: p.slices).name
    assert not fits(model, {smallest: 1}, driver=too_old)
    assert place(model, {smallest: 1}, driver=too_old) is None
    assert list(iter_layouts(model, driver=too_old)) == []
    assert "MIG needs driver" in misfit_reason(model, {smallest: 1}, driver=too_old)


def test_without_a_driver_every_gate_is_open() -> None:
    a100 = _mig_of("a100-40gb")
    assert offered_profiles(a100, None) == a100.gpu_instance_profiles
    assert driver_problems(a100, a100.gpu_instance_profiles, None) == []


# -- catalog data --------------------------------------------------------------------------------


def _raw_a100() -> dict:
    text = resources.files("kubegpu.catalog").joinpath("gpus.yaml").read_text()
    model = next(m for m in yaml.safe_load(text)["models"] if m["id"] == "a100-40gb")
    return copy.deepcopy(model["mig"])


def test_the_catalog_must_give_each_mig_model_an_engine_budget() -> None:
    raw = _raw_a100()
    del raw["engines"]
    with pytest.raises(CatalogError, match=r"model a100-40gb, field mig\.engines"):
        _mig("a100-40gb", 40960, raw)
    raw["engines"] = {"dec": 5, "enc": 0, "jpg": "one", "ofa": 1}
    with pytest.raises(CatalogError, match=r"mig\.engines\.jpg: expected a count, got 'one'"):
        _mig("a100-40gb", 40960, raw)


def test_a_profile_with_more_engines_than_its_gpu_is_a_catalog_error() -> None:
    raw = _raw_a100()
    raw["engines"] = {"dec": 4, "enc": 0, "jpg": 1, "ofa": 1}
    with pytest.raises(CatalogError, match=r"profile 7g\.40gb: more media engines .*NVDEC 5 > 4"):
        _mig("a100-40gb", 40960, raw)
