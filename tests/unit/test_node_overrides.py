"""Flag and environment values over the device-plugin config: one builder for every
component, refusing a bad value by its flag, variable and value."""

from __future__ import annotations

import pytest

from kubegpu.node.overrides import OverrideError, config_overrides, env_overrides, flag_of
from kubegpu.node.runtime import ComponentError
from kubegpu.sharing.config import ENV_OVERRIDES, PluginConfig, with_overrides


def test_env_overrides_takes_known_non_empty_variables_only() -> None:
    env = {"MIG_STRATEGY": "single", "PASS_DEVICE_SPECS": "", "HOME": "/root", "MPS_ROOT": "/m"}
    assert env_overrides(env) == {"MIG_STRATEGY": "single", "MPS_ROOT": "/m"}


def test_every_override_has_the_flag_named_after_its_variable() -> None:
    assert flag_of("MIG_STRATEGY") == "--mig-strategy"
    assert flag_of("DEVICE_ID_STRATEGY") == "--device-id-strategy"
    assert {flag_of(k) for k in ENV_OVERRIDES} >= {"--pass-device-specs", "--mps-root"}


def test_flags_not_given_are_left_out() -> None:
    flags = {"MIG_STRATEGY": "mixed", "MPS_ROOT": None, "NVIDIA_DRIVER_ROOT": ""}
    assert config_overrides(flags) == {"MIG_STRATEGY": "mixed"}


def test_boolean_flags_become_the_text_the_config_reads() -> None:
    overrides = config_overrides({"FAIL_ON_INIT_ERROR": False, "GDS_ENABLED": True})
    assert overrides == {"FAIL_ON_INIT_ERROR": "false", "GDS_ENABLED": "true"}
    config = with_overrides(PluginConfig(), overrides)
    assert (config.flags.fail_on_init_error, config.flags.gds_enabled) == (False, True)


def test_a_flag_wins_over_the_environment_which_fills_the_rest() -> None:
    env = {"MIG_STRATEGY": "single", "MPS_ROOT": "/run/nvidia/mps", "PATH": "/bin"}
    overrides = config_overrides({"MIG_STRATEGY": "mixed", "FAIL_ON_INIT_ERROR": None}, env)
    assert overrides == {"MIG_STRATEGY": "mixed", "MPS_ROOT": "/run/nvidia/mps"}


def test_without_an_environment_only_flags_count() -> None:
    assert config_overrides({"MIG_STRATEGY": None}) == {}


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        ({"MIG_STRATEGY": "half"}, None, ["--mig-strategy / MIG_STRATEGY", "'half'"]),
        (
            {"PASS_DEVICE_SPECS": "maybe"},
            None,
            ["--pass-device-specs / PASS_DEVICE_SPECS", "'maybe'", "not a boolean"],
        ),
        (
            {},
            {"DEVICE_LIST_STRATEGY": "carrier-pigeon"},
            ["DEVICE_LIST_STRATEGY", "carrier-pigeon"],
        ),
        ({}, {"DEVICE_ID_STRATEGY": "serial"}, ["--device-id-strategy", "'serial'"]),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag_variable_and_value(
    flags: dict[str, object], env: dict[str, str] | None, named: list[str]
) -> None:
    with pytest.raises(OverrideError) as caught:
        config_overrides(flags, env)
    for text in named:
        assert text in str(caught.value)
    assert isinstance(caught.value, ComponentError) and caught.value.exit_code == 1


def test_an_unknown_key_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="not config overrides: NOT_A_FLAG"):
        config_overrides({"NOT_A_FLAG": "x"})
