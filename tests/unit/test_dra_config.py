"""Opaque config of gpu.nvidia.com: decoded strictly, with errors naming the claim, field
and value; the right config for each device; sharing strategies behind upstream's gates."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.dra.config import (
    ClaimConfig,
    DraConfigError,
    FeatureGates,
    GpuConfig,
    MigDeviceConfig,
    check_gates,
    claim_configs,
    config_for,
    parse_parameters,
    quantity_bytes,
    quantity_mib,
)

API = "resource.nvidia.com/v1beta1"


def gpu_config(**sharing: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "GpuConfig", **({"sharing": sharing} if sharing else {})}


def test_time_slicing_and_mps_configs_parse() -> None:
    ts = parse_parameters(
        gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}), "c"
    )
    assert isinstance(ts, GpuConfig)
    assert ts.sharing is not None
    assert ts.sharing.timeSlicingConfig is not None
    assert ts.sharing.timeSlicingConfig.interval == "Long"
    mps = parse_parameters(
        gpu_config(
            strategy="MPS",
            mpsConfig={
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"GPU-1": "1Gi", "0": "512Mi"},
            },
        ),
        "c",
    )
    assert mps.sharing is not None
    assert mps.sharing.mpsConfig is not None
    assert mps.sharing.mpsConfig.defaultActiveThreadPercentage == 50
    mig = parse_parameters({"apiVersion": API, "kind": "MigDeviceConfig"}, "c")
    assert isinstance(mig, MigDeviceConfig)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (gpu_config(strategy="Fair"), "c: field sharing.strategy, value 'Fair': Input should be"),
        (
            {**gpu_config(), "sharng": {}},
            "c: field sharng: Extra inputs are not permitted",
        ),
        (
            gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Forever"}),
            "field sharing.timeSlicingConfig.interval, value 'Forever'",
        ),
        (
            gpu_config(strategy="MPS", timeSlicingConfig={"interval": "Long"}),
            "timeSlicingConfig is set but the strategy is MPS, not TimeSlicing",
        ),
        (
            gpu_config(strategy="TimeSlicing", mpsConfig={}),
            "mpsConfig is set but the strategy is TimeSlicing, not MPS",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 101}),
            "field sharing.mpsConfig.defaultActiveThreadPercentage, value 101: "
            "Input should be less than or equal to 100",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "100Ki"}),
            "value '100Ki': must be at least 1Mi",
        ),
        (
            gpu_config(
                strategy="MPS", mpsConfig={"defaultPerDevicePinnedMemoryLimit": {"GPU-1": "lots"}}
            ),
            "device 'GPU-1': not a quantity",
        ),
        (
            {
                "apiVersion": API,
                "kind": "MigDeviceConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {}},
            },
            "field sharing.timeSlicingConfig: Extra inputs are not permitted",
        ),
        # issue 29: no coercion, as the driver's Go decoder (true was 1%, "5_0" was 50%)
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": True}),
            "field sharing.mpsConfig.defaultActiveThreadPercentage, value True: "
            "Input should be a valid integer",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": "5_0"}),
            "field sharing.mpsConfig.defaultActiveThreadPercentage, value '5_0': "
            "Input should be a valid integer",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 50.0}),
            "value 50.0: Input should be a valid integer",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": 1024}),
            "field sharing.mpsConfig.defaultPinnedDeviceMemoryLimit, value 1024: "
            "Input should be a valid string",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultPerDevicePinnedMemoryLimit": ["1Gi"]}),
            "field sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: Input should be a valid dictionary",
        ),
        (gpu_config(strategy=["MPS"]), "field sharing.strategy: Input should be"),
        ({**gpu_config(), "sharing": "MPS"}, "field sharing, value 'MPS': Input should be"),
        ({"apiVersion": "v1", "kind": "GpuConfig"}, "c: field apiVersion, value 'v1': expected"),
        ({"apiVersion": API, "kind": "VfioDeviceConfig"}, "field kind, value 'VfioDeviceConfig'"),
        ("GpuConfig", "c: parameters must be an object"),
    ],
)
def test_invalid_parameters_are_refused_naming_field_and_value(
    parameters: Any, message: str
) -> None:
    with pytest.raises(DraConfigError) as err:
        parse_parameters(parameters, "c")
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("text", "size"),
    [("10Gi", 10 * 2**30), ("512M", 512 * 10**6), ("1.5Gi", 3 * 2**29), ("7", 7)],
)
def test_quantities(text: str, size: int) -> None:
    assert quantity_bytes(text) == size


def test_memory_limits_round_down_to_mib() -> None:
    assert quantity_mib("1536Ki") == 1
    with pytest.raises(ValueError, match="at least 1Mi"):
        quantity_mib("0")


def _entry(requests: list[str], parameters: dict[str, Any], driver: str = "gpu.nvidia.com") -> Any:
    return {
        "source": "FromClaim",
        "requests": requests,
        "opaque": {"driver": driver, "parameters": parameters},
    }


TS = gpu_config(strategy="TimeSlicing")
MPS = gpu_config(strategy="MPS")


def test_other_drivers_configs_are_skipped() -> None:
    configs = claim_configs([_entry([], {"anything": 1}, driver="other.example.com")], "ns/c")
    assert configs == []


def test_a_bad_config_names_the_claim_and_entry() -> None:
    with pytest.raises(DraConfigError, match=r"claim ns/c: config 1 \(FromClaim, requests gpu\)"):
        claim_configs([_entry([], TS), _entry(["gpu"], {**TS, "x": 1})], "ns/c")


def test_later_configs_win_and_request_names_beat_kind() -> None:
    configs = claim_configs([_entry([], MPS), _entry(["a"], TS), _entry([], TS)], "ns/c")
    chosen = config_for(configs, "a", "gpu", "ns/c")
    assert chosen.sharing is not None
    assert chosen.sharing.strategy == "TimeSlicing"
    # a subrequest is configured by its parent's name
    assert config_for(configs, "a/small", "gpu", "ns/c") == chosen
    # the last config without requests of the right kind applies to the rest
    other = config_for(claim_configs([_entry([], MPS), _entry(["a"], TS)], "ns/c"), "b", "gpu", "c")
    assert other.sharing is not None
    assert other.sharing.strategy == "MPS"


def test_devices_without_config_get_the_defaults() -> None:
    assert config_for([], "gpu", "gpu", "c").kind == "GpuConfig"
    assert config_for([], "gpu", "mig", "c").kind == "MigDeviceConfig"
    assert config_for([], "gpu", "gpu", "c").sharing is None
    # a GpuConfig for all requests does not apply to a MIG device
    configs = claim_configs([_entry([], MPS)], "c")
    assert config_for(configs, "m", "mig", "c").kind == "MigDeviceConfig"


def test_a_config_naming_the_request_with_the_wrong_kind_is_an_error() -> None:
    configs = [ClaimConfig(("m",), parse_parameters(MPS, "c"))]
    with pytest.raises(
        DraConfigError, match="request 'm' got a mig device, but its config is a GpuConfig"
    ):
        config_for(configs, "m", "mig", "ns/c")


def test_feature_gates_default_to_upstreams() -> None:
    gates = FeatureGates.parse(None)
    assert "TimeSlicingSettings" not in gates
    assert "MPSSupport" not in gates
    assert "ComputeDomainCliques" in gates
    on = FeatureGates.parse("TimeSlicingSettings=true, MPSSupport=True")
    assert "TimeSlicingSettings" in on
    assert "MPSSupport" in on


def test_compute_domain_gates_given_a_value_are_named_as_ignored() -> None:
    assert FeatureGates.parse("MPSSupport=true").ignored_warning() is None
    gates = FeatureGates.parse("ComputeDomainCliques=false,MPSSupport=true")
    assert "ComputeDomainCliques" not in gates  # accepted as given ...
    assert gates.ignored == ("ComputeDomainCliques",)  # ... and said to change nothing
    warning = gates.ignored_warning()
    assert warning is not None
    assert warning.startswith("FEATURE_GATES: ComputeDomainCliques accepted and ignored")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Foo=true", "unknown feature gate 'Foo'"),
        ("MPSSupport", "gate 'MPSSupport', value '': use true or false"),
        ("MPSSupport=yes", "value 'yes'"),
        ("PassthroughSupport=true", "PassthroughSupport is not supported by kubegpu's DRA"),
        ("DynamicMIG=true,MPSSupport=true", "DynamicMIG and MPSSupport cannot be enabled together"),
    ],
)
def test_bad_feature_gates_are_refused(text: str, message: str) -> None:
    with pytest.raises(DraConfigError, match=message):
        FeatureGates.parse(text)


def test_a_sharing_strategy_needs_its_gate() -> None:
    with pytest.raises(DraConfigError) as err:
        check_gates(parse_parameters(TS, "c"), FeatureGates.parse(None), "claim ns/c")
    assert str(err.value) == (
        "claim ns/c: 'TimeSlicing' is selected as the GPU sharing strategy, but the "
        "'TimeSlicingSettings' feature gate is not enabled"
    )
    check_gates(parse_parameters(TS, "c"), FeatureGates.parse("TimeSlicingSettings=true"), "c")
    check_gates(parse_parameters(gpu_config(), "c"), FeatureGates.parse(None), "c")
