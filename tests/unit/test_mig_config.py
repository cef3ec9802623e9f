"""The mig-parted config format: strict parsing, errors that say where, and static checks."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.catalog import get_model
from kubegpu.mig.config import ConfigError, MigPartedConfig, parse_config
from kubegpu.mig.parted import generate_config
from kubegpu.mig.targets import check_against_catalog, check_against_model

GOOD = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  custom:
    - device-filter: ["0x20B010DE", "0x20F110DE"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    - device-filter: 0x233010DE
      devices: all
      mig-enabled: true
      mig-devices: {"1c.2g.20gb": 2}
"""


def _one(devices: str) -> str:
    return f"version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {devices}\n"


def test_upstream_format_parses() -> None:
    cfg = parse_config(GOOD, "good.yaml")
    assert set(cfg.mig_configs) == {"all-disabled", "custom"}
    entry = cfg.mig_configs["custom"][1]
    assert entry.device_filter == ("0x233010DE",)
    assert entry.selects(5, 0x233010DE)
    assert not entry.selects(5, 0x20B010DE)
    assert cfg.mig_configs["custom"][0].selects(1, 0x20F110DE)
    assert not cfg.mig_configs["custom"][0].selects(2, 0x20F110DE)


_ENTRY = "version: v1\nmig-configs:\n  c:\n    - devices: all\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("      mig-enabled: true\n      mig-devices: {1g.5gb: '7'}\n", "field mig-devices.1g.5gb, value '7': Input should be a valid integer"),
        ("      mig-enabled: true\n      mig-devices: {1g.5gb: 7.0}\n", "value 7.0: Input should be a valid integer"),
        ("      mig-enabled: true\n      mig-devices: {1g.5gb: true}\n", "value True: Input should be a valid integer"),
        ("      mig-enabled: 'false'\n", "field mig-enabled, value 'false': Input should be a valid boolean"),
        ("      mig-enabled: 1\n", "field mig-enabled, value 1: Input should be a valid boolean"),
        ("      mig_enabled: false\n", "field mig_enabled"),
        ("      mig-enabled: true\n      mig_devices: {1g.5gb: 1}\n", "field mig_devices"),
        ("      mig-enabled: true\n      mig-devices: {1g.5gb: 1, 1g.5gb: 2}\n", "duplicate key '1g.5gb'"),
        # the same profile spelt twice would add up, a duplicate key in disguise
        ("      mig-enabled: true\n      mig-devices: {1g.5gb: 1, '1g.5gb ': 2}\n", "field mig-devices: '1g.5gb ': write the profile as '1g.5gb'"),
    ],
)  # fmt: skip
def test_counts_and_flags_are_not_coerced_and_keys_are_kebab_case(entry: str, message: str) -> None:
    """mig-parted's decoder refuses these; a lenient reader would apply something else."""
    with pytest.raises(ConfigError) as err:
        parse_config(_ENTRY + entry, "strict.yaml")
    assert str(err.value).startswith("strict.yaml:")
    assert message in str(err.value)


def test_a_config_name_given_twice_is_refused_not_replaced() -> None:
    text = "version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n  a: []\n"
    with pytest.raises(ConfigError, match="line 4, column 3 malformed YAML: duplicate key 'a'"):
        parse_config(text, "dup.yaml")


def test_a_huge_config_name_is_quoted_as_an_excerpt() -> None:
    name = "n" * 100_000
    with pytest.raises(ConfigError) as err:
        parse_config(f"version: v1\nmig-configs:\n  ? {name}\n  : []\n", "big.yaml")
    assert "nnnnnnnn…" in str(err.value)
    assert len(str(err.value)) < 300


def test_round_trip_through_yaml() -> None:
    cfg = parse_config(GOOD)
    assert parse_config(cfg.to_yaml()) == cfg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            "field version, value 'v2'",
        ),
        ("version: v1\nmig-configs: {}", "mig-configs is empty"),
        ("version: v1\nmig-configs:\n  a: []\n", "config 'a' has no entries"),
        (
            "version: v1\nextra: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            "field extra",
        ),
        (
            _one("{1g.5gbx: 7}"),
            "config 'c', entry 0, field mig-devices: '1g.5gbx' is not a MIG profile name",
        ),
        (_one("{1g.5gb: -1}"), "count -1 is negative"),
        (_one("{1g.5gb: 0}"), "every count is 0"),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: some\n      mig-enabled: false\n",
            "config 'c', entry 0, field devices, value 'some'",
        ),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: [0, -1]\n      mig-enabled: false\n",
            "-1 is not a GPU index",
        ),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n",
            "mig-devices is required",
        ),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {1g.5gb: 1}\n",
            "must be empty or absent",
        ),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      device-filter: 0xZZ\n      mig-enabled: false\n",
            "'0xZZ' is not a PCI id",
        ),
        (
            "version: v1\nmig-configs:\n  c:\n    - devices: all\n      colour: red\n      mig-enabled: false\n",
            "field colour, value 'red'",
        ),
        ("version: v1\nmig-configs: [a\n", "line 3, column 1 malformed YAML"),
        ("- just\n- a list\n", "expected a mapping"),
    ],
)
def test_bad_configs_name_file_config_field_and_value(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "bad.yaml")
    assert str(err.value).startswith("bad.yaml:")
    assert message in str(err.value)


def test_selecting_a_config() -> None:
    cfg = parse_config(GOOD, "good.yaml")
    with pytest.raises(
        ConfigError, match=r"2 configs \(all-disabled, custom\); choose one with -c"
    ):
        cfg.select(None, "good.yaml")
    with pytest.raises(ConfigError, match="unknown config name 'nope'"):
        cfg.select("nope", "good.yaml")
    assert cfg.select("custom")[0] == "custom"


def test_static_check_against_a_model() -> None:
    cfg = parse_config(_one("{3g.20gb: 2, 1g.5gb: 1}"), "f.yaml")
    with pytest.raises(ConfigError, match="does not fit one a100-40gb"):
        check_against_model("c", cfg.mig_configs["c"], get_model("a100-40gb"))
    cfg = parse_config(_one("{1g.18gb: 1}"), "f.yaml")
    with pytest.raises(ConfigError, match=r"value '1g\.18gb': no such profile on a100-40gb"):
        check_against_model("c", cfg.mig_configs["c"], get_model("a100-40gb"))
    on_l4 = parse_config(
        "version: v1\nmig-configs:\n  c:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {}\n"
    )
    with pytest.raises(ConfigError, match="GPU 0 is a l4, which is not MIG-capable"):
        check_against_model("c", on_l4.mig_configs["c"], get_model("l4"))


def test_index_out_of_range_with_a_known_count() -> None:
    cfg = parse_config(
        "version: v1\nmig-configs:\n  c:\n    - devices: [0, 8]\n      mig-enabled: false\n"
    )
    with pytest.raises(
        ConfigError, match="field devices, value 8: out of range, this node has 8 GPUs"
    ):
        check_against_model("c", cfg.mig_configs["c"], get_model("h200"), 8)
    check_against_model("c", cfg.mig_configs["c"], get_model("h200"))


def test_a_gpu_selected_twice_is_an_error() -> None:
    text = "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: false\n    - devices: [1]\n      mig-enabled: false\n"
    with pytest.raises(ConfigError, match="GPU 1 is already selected by entry 0"):
        check_against_model("c", parse_config(text).mig_configs["c"], get_model("h200"), 2)


def test_compute_instance_profiles_are_checked() -> None:
    ok = parse_config(_one("{1c.3g.20gb: 2}"))
    check_against_model("c", ok.mig_configs["c"], get_model("a100-40gb"))
    bad = parse_config(_one("{2c.3g.20gb: 1, 3g.20gb: 2}"))
    with pytest.raises(ConfigError, match="does not fit"):
        check_against_model("c", bad.mig_configs["c"], get_model("a100-40gb"))


def test_catalog_check_uses_the_device_filter() -> None:
    check_against_catalog("custom", parse_config(GOOD).mig_configs["custom"])
    wrong = GOOD.replace('{"1c.2g.20gb": 2}', '{"1g.18gb": 2}')
    with pytest.raises(
        ConfigError, match=r"entry 1 \(h100-80gb\), field mig-devices, value '1g.18gb'"
    ):
        check_against_catalog("custom", parse_config(wrong).mig_configs["custom"])
    with pytest.raises(ConfigError, match="no MIG-capable model in the catalog offers this mix"):
        check_against_catalog("c", parse_config(_one("{1g.5gb: 1, 1g.18gb: 1}")).mig_configs["c"])


@pytest.mark.parametrize(
    "model_id", ["a100-40gb", "a30", "h200-nvl", "rtx-pro-6000-ws", "rtx-pro-4500"]
)
def test_generated_configs_are_valid_for_their_model(model_id: str) -> None:
    model = get_model(model_id)
    cfg = generate_config([model])
    assert {"all-disabled", "all-enabled"} <= set(cfg.mig_configs)
    for name, entries in cfg.mig_configs.items():
        check_against_model(name, entries, model, 4)


def test_generated_balanced_and_per_profile_entries() -> None:
    cfg = generate_config([get_model("a100-40gb")])
    assert cfg.mig_configs["all-balanced"][0].mig_devices == {
        "1g.5gb": 2,
        "2g.10gb": 1,
        "3g.20gb": 1,
    }
    assert cfg.mig_configs["all-1g.10gb"][0].mig_devices == {"1g.10gb": 4}
    assert cfg.mig_configs["all-1g.5gb.me"][0].mig_devices == {"1g.5gb+me": 1}
    rtx = generate_config([get_model("rtx-pro-6000-se")])
    assert rtx.mig_configs["all-balanced"][0].mig_devices == {"1g.24gb": 2, "2g.48gb": 1}
    assert "all-1g.24gb.me.all" in rtx.mig_configs


def test_generating_for_several_models_uses_device_filters() -> None:
    cfg = generate_config([get_model("a100-40gb"), get_model("h100-80gb"), get_model("l4")])
    filters = [e.device_filter for e in cfg.mig_configs["all-balanced"]]
    assert filters == [("0x20B010DE", "0x20F110DE"), ("0x233010DE",)]


def test_generating_for_non_mig_gpus_is_an_error() -> None:
    with pytest.raises(ConfigError, match="none of these GPUs is MIG-capable: l4"):
        generate_config([get_model("l4")])


# -- fuzzing ----------------------------------------------------------------------------------

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), st.text(max_size=12))
_profiles = st.sampled_from(
    ["1g.5gb", "2g.10gb", "1g.10gb+me", "1c.3g.20gb", "7g.80gb", "xg", "1g.24gb+me.all"]
)
_entry = st.fixed_dictionaries(
    {},
    optional={
        "devices": st.one_of(st.just("all"), st.lists(st.integers(-1, 9), max_size=4), _scalar),
        "mig-enabled": st.one_of(st.booleans(), _scalar),
        "mig-devices": st.one_of(
            st.dictionaries(_profiles, st.integers(-1, 8), max_size=3), _scalar
        ),
        "device-filter": st.one_of(
            st.sampled_from(["0x20B010DE", "0xZZ", "20B0"]), st.lists(st.just("0x233010DE"))
        ),
        "unknown-key": _scalar,
    },
)
_document = st.fixed_dictionaries(
    {
        "version": st.one_of(st.just("v1"), _scalar),
        "mig-configs": st.one_of(
            st.dictionaries(
                st.text(min_size=1, max_size=8), st.lists(_entry, max_size=3), max_size=3
            ),
            _scalar,
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(doc=_document)
def test_parser_either_accepts_or_says_why(doc: dict[str, object]) -> None:
    text = yaml.safe_dump(doc)
    try:
        cfg = parse_config(text, "fuzz.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yaml:")
        return
    assert isinstance(cfg, MigPartedConfig)
    for entries in cfg.mig_configs.values():
        for e in entries:
            assert not (e.mig_enabled is False and e.mig_devices)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    try:
        parse_config(text, "any.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("any.yaml:")
