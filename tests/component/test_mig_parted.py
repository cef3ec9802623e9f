"""apply / assert / export on simulated nodes, with mig-parted's semantics."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kubegpu.catalog import all_models, get_model
from kubegpu.mig.config import ConfigError, parse_config
from kubegpu.mig.parted import (
    ApplyError,
    apply_config,
    assert_config,
    export_config,
    generate_config,
    read_node,
)
from kubegpu.nvml import errors
from kubegpu.nvml.sim import SimControls, SimNvml

MakeNode = Callable[[str], SimNvml]
MIG_MODELS = [m for m in all_models() if m.mig]


def _cfg(body: str, name: str = "c"):  # type: ignore[no-untyped-def]
    return parse_config(f"version: v1\nmig-configs:\n  {name}:\n{body}").mig_configs[name]


ALL_BALANCED_A100 = _cfg(
    "    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}\n"
)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
def test_round_trip_for_every_generated_layout(model, sim_node: MakeNode) -> None:  # type: ignore[no-untyped-def]
    """apply -> export -> assert passes for every config `generate` emits."""
    node = sim_node(f"{model.id}:2;display=compute")
    cfg = generate_config([model])
    for name, entries in cfg.mig_configs.items():
        apply_config(node, name, entries)
        assert assert_config(node, name, entries) == [], name
        exported = export_config(node, "current")
        assert assert_config(node, "current", exported.mig_configs["current"]) == [], name


def test_apply_enables_mig_and_resets_ampere(sim_node: MakeNode) -> None:
    node = sim_node("a100-40gb:2")
    result = apply_config(node, "c", ALL_BALANCED_A100)
    assert result.changed == [0, 1]
    assert result.reset_required == []
    assert all(s.enabled for s in read_node(node))
    assert apply_config(node, "c", ALL_BALANCED_A100).already_applied


def test_skip_reset_leaves_the_mode_pending(sim_node: MakeNode) -> None:
    node = sim_node("a100-40gb:1")
    result = apply_config(node, "c", ALL_BALANCED_A100, skip_reset=True)
    assert result.reset_required == [0]
    assert node.mig_mode(0).change_pending
    assert assert_config(node, "c", ALL_BALANCED_A100, mode_only=True) != []


def test_mode_only_changes_no_instances(sim_node: MakeNode) -> None:
    node = sim_node("h100-80gb:1")
    apply_config(
        node,
        "c",
        _cfg("    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n"),
        mode_only=True,
    )
    assert node.mig_mode(0).current
    assert node.gpu_instances(0) == []


def test_assert_fails_when_a_gpu_is_not_covered(sim_node: MakeNode) -> None:
    node = sim_node("h200:2")
    only_first = _cfg("    - devices: [0]\n      mig-enabled: false\n")
    problems = assert_config(node, "c", only_first)
    assert problems == ["GPU 1: not selected by any entry of config 'c'"]


def test_devices_all_skips_gpus_without_mig(sim_node: MakeNode) -> None:
    node = sim_node("h200:1,l4:1")
    entries = _cfg(
        "    - devices: all\n      mig-enabled: true\n      mig-devices: {7g.141gb: 1}\n"
    )
    apply_config(node, "c", entries)
    assert assert_config(node, "c", entries) == []
    assert [s.enabled for s in read_node(node)] == [True, False]


def test_mig_on_a_named_non_mig_gpu_is_refused(sim_node: MakeNode) -> None:
    node = sim_node("h200:1,l4:1")
    entries = _cfg("    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {}\n")
    with pytest.raises(ConfigError, match="GPU 1 is a l4, which is not MIG-capable"):
        apply_config(node, "c", entries)
    assert not node.mig_mode(0).current  # nothing applied


def test_a_layout_that_does_not_fit_changes_nothing(sim_node: MakeNode) -> None:
    node = sim_node("a100-40gb:2")
    apply_config(node, "c", ALL_BALANCED_A100)
    before = export_config(node)
    too_much = _cfg(
        "    - devices: [1]\n      mig-enabled: true\n      mig-devices: {3g.20gb: 2, 1g.5gb: 1}\n    - devices: [0]\n      mig-enabled: false\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"entry 0 \(GPU 1\), field mig-devices, value \{1g.5gb: 1, 3g.20gb: 2\}: does not fit",
    ):
        apply_config(node, "c", too_much)
    assert export_config(node) == before


def test_out_of_range_device_index(sim_node: MakeNode) -> None:
    node = sim_node("h200:2")
    with pytest.raises(
        ConfigError, match="field devices, value 5: out of range, this node has 2 GPUs"
    ):
        apply_config(node, "c", _cfg("    - devices: [5]\n      mig-enabled: false\n"))


def test_prerequisites_are_reported_and_nothing_is_left_half_done(sim_node: MakeNode) -> None:
    node = sim_node(
        "rtx-pro-6000-se:1,rtx-pro-6000-ws:1"
    )  # the workstation card is in graphics mode
    entries = _cfg("    - devices: all\n      mig-enabled: true\n      mig-devices: {2g.48gb: 2}\n")
    with pytest.raises(ApplyError, match=r"graphics display mode.*every GPU was put back"):
        apply_config(node, "c", entries)
    assert [s.enabled for s in read_node(node)] == [False, False]


def test_driver_minimum_is_a_config_error(sim_node: MakeNode) -> None:
    node = sim_node("a100-40gb:1;driver=515.65.01")
    entries = _cfg("    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 4}\n")
    with pytest.raises(ConfigError, match=r"1g.10gb needs driver R525\+ \(have 515.65.01\)"):
        apply_config(node, "c", entries)


def test_gpus_in_use_are_refused_without_changes(sim_node: MakeNode) -> None:
    node = sim_node("a100-40gb:2")
    apply_config(node, "c", ALL_BALANCED_A100)
    before = export_config(node)
    device = node.mig_devices(1)[0]
    SimControls.of(node).start_process(1, pid=999, used_memory_mib=100, mig_device=device.uuid)
    with pytest.raises(
        ApplyError,
        match=r"refusing to change GPUs that are in use; nothing was changed:\nGPU 1: processes 999 are using it",
    ):
        apply_config(
            node,
            "c",
            _cfg("    - devices: all\n      mig-enabled: true\n      mig-devices: {7g.40gb: 1}\n"),
        )
    assert export_config(node) == before


def test_failure_midway_rolls_every_gpu_back(
    sim_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = sim_node("h100-80gb:2")
    apply_config(
        node,
        "c",
        _cfg("    - devices: all\n      mig-enabled: true\n      mig-devices: {3g.40gb: 2}\n"),
    )
    before = export_config(node)
    real_create = node.create_gpu_instance
    calls = {"gpu1": 0}

    def flaky(index: int, profile_id: int, start: int | None = None):  # type: ignore[no-untyped-def]
        if index == 1:
            calls["gpu1"] += 1
            if calls["gpu1"] == 3:  # the third instance on GPU 1 fails, once
                raise errors.UnknownError("driver hiccup")
        return real_create(index, profile_id, start)

    monkeypatch.setattr(node, "create_gpu_instance", flaky)
    with pytest.raises(ApplyError, match="driver hiccup; every GPU was put back as it was"):
        apply_config(
            node,
            "c",
            _cfg("    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n"),
        )
    monkeypatch.undo()
    assert export_config(node) == before


def test_export_merges_identical_gpus(sim_node: MakeNode) -> None:
    node = sim_node("h200:4")
    apply_config(
        node,
        "c",
        _cfg(
            "    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {1g.18gb: 7}\n    - devices: [2, 3]\n      mig-enabled: false\n"
        ),
    )
    exported = export_config(node, "now").mig_configs["now"]
    assert [(e.devices, e.mig_enabled, e.mig_devices) for e in exported] == [
        ((0, 1), True, {"1g.18gb": 7}),
        ((2, 3), False, None),
    ]
    node2 = sim_node("h200:2")
    (entry,) = export_config(node2).mig_configs["current"]
    assert entry.devices == "all"


def test_export_of_mixed_models_uses_device_filters(sim_node: MakeNode) -> None:
    node = sim_node("h200:1,a30:1")
    exported = export_config(node).mig_configs["current"]
    assert [e.device_filter for e in exported] == [("0x233510DE",), ("0x20B710DE",)]
    assert assert_config(node, "current", exported) == []


def test_compute_instance_profiles_apply_and_assert(sim_node: MakeNode) -> None:
    node = sim_node("a100-40gb:1")
    entries = _cfg(
        "    - devices: all\n      mig-enabled: true\n      mig-devices: {1c.3g.20gb: 1, 3g.20gb: 1}\n"
    )
    apply_config(node, "c", entries)
    assert sorted(d.profile for d in node.mig_devices(0)) == ["1c.3g.20gb", "3g.20gb"]
    assert assert_config(node, "c", entries) == []
    assert get_model("a100-40gb").mig is not None
