"""The catalog: every model of the reference, names from the formula, placements sane."""

from __future__ import annotations

import pytest

from kubegpu.catalog import (
    UnknownModelError,
    all_models,
    find_by_pci_id,
    get_model,
    gpu_instance_name,
    memory_gb,
    round_half_away,
)

REQUIRED = [
    "a30", "a100-40gb", "a100-80gb", "h100-80gb", "h100-pcie", "h100-nvl", "h200", "h200-nvl",
    "gh200", "b200", "rtx-pro-6000-ws", "rtx-pro-6000-maxq", "rtx-pro-6000-se", "rtx-pro-5000",
    "rtx-pro-4500", "l4", "l40s", "rtx-pro-4000", "rtx-pro-2000",
]  # fmt: skip


@pytest.mark.parametrize("model_id", REQUIRED)
def test_every_required_model_is_in_the_catalog(model_id: str) -> None:
    assert get_model(model_id).id == model_id


def test_lookup_accepts_aliases_and_any_case() -> None:
    assert get_model("H100").id == "h100-80gb"
    assert get_model("RTX-PRO-6000").id == "rtx-pro-6000-ws"


def test_unknown_model_error_lists_known_models() -> None:
    with pytest.raises(UnknownModelError) as err:
        get_model("v100")
    assert "'v100'" in str(err.value)
    assert "h200-nvl" in str(err.value)


def test_pci_ids_find_their_model() -> None:
    assert find_by_pci_id(0x233510DE) is get_model("h200")
    assert find_by_pci_id(0x20F110DE) is get_model("a100-40gb")
    assert find_by_pci_id(0x12345678) is None


def test_non_mig_models_have_no_mig_geometry() -> None:
    for model_id in ("l4", "l40s", "rtx-pro-4000", "rtx-pro-2000"):
        assert not get_model(model_id).mig_capable


def test_formula_reproduces_every_documented_profile_name() -> None:
    checked = 0
    for model in all_models():
        for p in model.mig.gpu_instance_profiles if model.mig else ():
            assert p.name == p.documented_name, (model.id, p)
            checked += 1
    assert checked > 100


def test_formula_rounds_half_away_from_zero() -> None:
    # H200 3g: 70.5 GB must become 71 (Python's round() would say 70).
    assert round(70.5) == 70
    assert round_half_away(70.5) == 71
    assert memory_gb(71168, 143771) == 71
    assert gpu_instance_name(3, 71168, 143771) == "3g.71gb"
    # B200 1g on the Jan-2025 driver: 22.5 -> 23.
    assert gpu_instance_name(1, 22528, 183359) == "1g.23gb"


@pytest.mark.parametrize(
    ("variant", "suffix"),
    [("REV1", "+me"), ("ALL_ME", "+me.all"), ("GFX", "+gfx"), ("NO_ME", "-me")],
)
def test_variant_suffixes(variant: str, suffix: str) -> None:
    assert gpu_instance_name(1, 24192, 97887, variant) == f"1g.24gb{suffix}"


def test_profile_ids_are_per_device_not_the_enum() -> None:
    h100 = get_model("h100-80gb").mig
    assert h100 is not None
    one = h100.profile("1g.10gb")
    assert (one.nvml_enum, one.id) == (0, 19)
    rtx = get_model("rtx-pro-6000-se").mig
    assert rtx is not None
    assert rtx.profile("1g.24gb+gfx").id == 47
    assert rtx.profile("1g.24gb+gfx").nvml_enum == 10


def test_rtx_pro_6000_uses_a_twelve_unit_grid() -> None:
    mig = get_model("rtx-pro-6000-se").mig
    assert mig is not None
    assert mig.placement_units == 12
    assert mig.profile("1g.24gb").placements == (0, 3, 6, 9)
    assert mig.profile("2g.48gb").placements == (0, 6)
    assert mig.profile("4g.96gb").slices == 12


def test_placements_stay_on_the_axis() -> None:
    for model in all_models():
        if model.mig:
            for p in model.mig.gpu_instance_profiles:
                assert all(
                    s >= 0 and s + p.slices <= model.mig.placement_units for s in p.placements
                )


def test_prerequisites() -> None:
    ws = get_model("rtx-pro-6000-ws").mig
    se = get_model("rtx-pro-6000-se").mig
    a100 = get_model("a100-40gb").mig
    h200 = get_model("h200").mig
    assert ws and se and a100 and h200
    assert ws.display_mode_compute_required and not se.display_mode_compute_required
    assert ws.min_driver == "575.51.03"
    assert a100.mode_change_needs_reset and not h200.mode_change_needs_reset
    assert a100.profile("1g.10gb").min_driver == "525"


def test_unconfirmed_values_are_exposed() -> None:
    nvl = get_model("h200-nvl")
    facts = nvl.unconfirmed_facts()
    assert "memory_mib" in facts
    assert "mig.1g.18gb.memory_mib" in facts
    assert get_model("a30").unconfirmed_facts() == []
    assert "mig.placement_units" in get_model("rtx-pro-4500").unconfirmed_facts()


def test_compute_instance_profiles_known_and_derived() -> None:
    a100 = get_model("a100-40gb").mig
    assert a100
    three = a100.compute_instance_profiles(a100.profile("3g.20gb"))
    assert [(c.compute_slices, c.max_count, c.sms, c.derived) for c in three] == [
        (1, 3, 14, False), (2, 1, 28, False), (3, 1, 42, False),
    ]  # fmt: skip
    h100 = get_model("h100-80gb").mig
    assert h100
    seven = h100.compute_instance_profiles(h100.profile("7g.80gb"))
    assert [(c.compute_slices, c.max_count) for c in seven] == [
        (1, 7),
        (2, 3),
        (3, 2),
        (4, 1),
        (7, 1),
    ]
    assert all(c.derived for c in seven)
