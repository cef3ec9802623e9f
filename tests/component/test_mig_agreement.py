"""`mig validate --model M:N`, `mig apply` on an N-GPU node of M, and `mig assert` after it
agree on every config: all three accept it, or all three refuse it.

Generated configs mix the shapes that used to split them: `devices: []`, indexes out of
range, device filters for another model, GPUs no entry covers, mixes that do not fit.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubegpu.catalog import GpuModel, all_models, get_model
from kubegpu.mig import commands
from kubegpu.mig.targets import MAX_NODE_GPUS
from kubegpu.nvml import open_nvml

MIG_MODELS = [m for m in all_models() if m.mig]


def _quiet(_: str) -> None:
    return None


@st.composite
def node_and_config(draw: st.DrawFn) -> tuple[GpuModel, int, dict[str, Any]]:
    model = draw(st.sampled_from(MIG_MODELS))
    assert model.mig is not None
    count = draw(st.integers(1, 3))
    stranger = draw(st.sampled_from([m for m in all_models() if m.id != model.id]))
    profiles = [p.name for p in model.mig.gpu_instance_profiles]
    entries = []
    for _ in range(draw(st.integers(1, 3))):
        devices = draw(
            st.one_of(
                st.just("all"),  # weighted: most real configs say all
                st.just("all"),
                st.lists(st.integers(0, count), max_size=count + 1, unique=True),
            )
        )
        entry: dict[str, Any] = {"devices": devices}
        pci = draw(st.sampled_from([None, None, model.pci_device_id, stranger.pci_device_id]))
        if pci is not None:
            entry["device-filter"] = [f"0x{pci:08X}"]
        entry["mig-enabled"] = draw(st.booleans())
        if entry["mig-enabled"]:
            mix = draw(st.dictionaries(st.sampled_from(profiles), st.integers(1, 3), max_size=3))
            entry["mig-devices"] = mix
        entries.append(entry)
    return model, count, {"version": "v1", "mig-configs": {"c": entries}}


def _outcome(run: Any) -> tuple[bool, str]:
    try:
        return True, run()
    except commands.CommandError as exc:
        return False, str(exc)


def _judge(model: GpuModel, count: int, config: dict[str, Any], tmp: Path) -> dict[str, bool]:
    path = tmp / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    spec = f"{model.id}:{count};display=compute"
    state = tmp / "node.json"

    def gpus():  # type: ignore[no-untyped-def]
        return open_nvml(f"sim:{state}", spec)

    validate = _outcome(lambda: commands.validate(str(path), None, f"{model.id}:{count}"))
    apply = _outcome(lambda: commands.apply(str(path), None, gpus, report=_quiet))
    check = _outcome(lambda: commands.assert_applied(str(path), None, gpus))
    outcomes = {"validate": validate, "apply": apply, "assert": check}
    detail = "\n".join(f"{k}: {ok} {text}" for k, (ok, text) in outcomes.items())
    assert len({ok for ok, _ in outcomes.values()}) == 1, f"{config}\n{detail}"
    return {k: ok for k, (ok, _) in outcomes.items()}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(node_and_config())
def test_validate_apply_and_assert_agree(case: tuple[GpuModel, int, dict[str, Any]]) -> None:
    model, count, config = case
    with tempfile.TemporaryDirectory() as tmp:
        _judge(model, count, config, Path(tmp))


def _entries(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"version": "v1", "mig-configs": {"c": list(entries)}}


H200 = get_model("h200")
OFF = {"mig-enabled": False}


@pytest.mark.parametrize(
    ("count", "config", "accepted", "message"),
    [
        (2, _entries({"devices": "all", **OFF}), True, ""),
        (
            2,
            _entries({"devices": [], **OFF}),
            False,
            "config 'c', entry 0, field devices, value []: selects no GPU",
        ),
        (
            2,
            _entries({"devices": "all", "device-filter": "0x20B010DE", **OFF}),
            False,
            "GPU 0 (h200) is selected by no entry of config 'c' (entry 0: device-filter "
            "['0x20B010DE'] does not match its PCI id 0x233510DE)",
        ),
        (
            2,
            _entries({"devices": [0], **OFF}),
            False,
            "GPU 1 (h200) is selected by no entry of config 'c' (entry 0: devices [0] leave it out)",
        ),
        (
            2,
            _entries(
                {"devices": "all", "device-filter": "0x20B010DE", **OFF},
                {"devices": "all", "device-filter": "0x233510DE", **OFF},
            ),
            True,
            "",
        ),
    ],
)
def test_the_cases_that_used_to_split_them(
    tmp_path: Path, count: int, config: dict[str, Any], accepted: bool, message: str
) -> None:
    outcome = _judge(H200, count, config, tmp_path)
    assert outcome["validate"] is accepted
    if message:
        with pytest.raises(commands.CommandError) as exc:
            commands.validate(str(tmp_path / "c.yaml"), None, f"h200:{count}")
        assert message in str(exc.value)


@pytest.mark.parametrize(
    "count", ["0", "-1", "65", "99999999999999999999", "99999999999999999999999999", "x", ""]
)
def test_a_node_size_outside_1_to_64_is_refused_at_once(tmp_path: Path, count: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_entries({"devices": "all", **OFF})))
    with pytest.raises(commands.CommandError) as exc:
        commands.validate(str(path), None, f"h200-nvl:{count}")
    assert f"the GPU count must be a whole number from 1 to {MAX_NODE_GPUS}" in str(exc.value)
    assert len(str(exc.value)) < 200


def test_absurd_profile_counts_are_refused_without_work(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    huge = 10**26
    entry = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": huge}}
    path.write_text(yaml.safe_dump(_entries(entry)))
    with pytest.raises(commands.CommandError, match="mig-devices"):
        commands.validate(str(path), None, "h200:2")
    with pytest.raises(commands.CommandError, match="mig-devices"):
        commands.validate(str(path), None, "h200")


def test_an_index_beyond_any_node_is_refused_without_a_count(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_entries({"devices": [10**22], **OFF})))
    with pytest.raises(commands.CommandError, match="out of range, this node has 64 GPUs"):
        commands.validate(str(path), None, "h200")
