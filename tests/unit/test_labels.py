"""GPU feature discovery's label set: a pure function of GPUs, MIG devices and the plugin config.

Tables per GPU model and MIG strategy; each row names the labels that must be present with
their values, and the ones that must be absent.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kubegpu.catalog import get_model
from kubegpu.sharing.config import PluginConfig, parse_config
from kubegpu.sharing.devices import GpuFacts, MigFacts
from kubegpu.sharing.labels import (
    LabelError,
    SystemFacts,
    arch_family,
    compute_labels,
    sanitise,
    single_strategy_problem,
)

SYSTEM = SystemFacts(
    driver_version="580.82.07", cuda_version=(13, 0), machine="ThinkSystem SR675 V3"
)


def mig(model_id: str, profile: str, index: int, *, ci_slices: int | None = None) -> MigFacts:
    """A MIG device of `profile` (a GPU-instance profile name) as NVML would describe it."""
    model = get_model(model_id)
    assert model.mig
    p = model.mig.profile(profile)
    ci = ci_slices or p.compute_slices
    name = profile if ci == p.compute_slices else f"{ci}c.{profile}"
    return MigFacts(
        index=index,
        uuid=f"MIG-{model_id}-{index}",
        profile=name,
        gi=index + 1,
        ci=0,
        full=ci == p.compute_slices,
        memory_mib=p.memory_mib,
        multiprocessors=p.sms * ci // p.compute_slices,
        gi_slices=p.compute_slices,
        ci_slices=ci,
        engines=(p.engines.ce, p.engines.dec, p.engines.enc, p.engines.jpg, p.engines.ofa),
    )


def gpu(model_id: str, index: int, layout: Sequence[str] | None = None) -> GpuFacts:
    """GPU `index` of a model; `layout` (profile names) turns MIG on with those devices."""
    model = get_model(model_id)
    major, _, minor = model.compute_capability.partition(".")
    devices = tuple(mig(model_id, p, i) for i, p in enumerate(layout or ()))
    return GpuFacts(
        index=index,
        uuid=f"GPU-{model_id}-{index}",
        product=model.product_name,
        memory_mib=model.memory_mib,
        compute_capability=(int(major), int(minor)),
        mig_capable=model.mig is not None,
        mig_enabled=layout is not None,
        mig_devices=devices,
    )


def node(model_id: str, count: int, layout: Sequence[str] | None = None) -> list[GpuFacts]:
    return [gpu(model_id, i, layout) for i in range(count)]


def config(text: str = "") -> PluginConfig:
    return parse_config(text)


def strategy(name: str) -> PluginConfig:
    return config(f"version: v1\nflags: {{migStrategy: {name}}}\n")


TIME_SLICED_4 = """
version: v1
sharing:
  timeSlicing:
    resources: [{name: nvidia.com/gpu, replicas: 4}]
"""

H200_1G = ["1g.18gb"] * 7


# -- always-present labels ---------------------------------------------------------------------


def test_versions_machine_and_capabilities_on_every_gpu_node() -> None:
    labels = compute_labels(node("h200-nvl", 8), config(), SYSTEM, timestamp=1724632719)
    assert labels | {} == labels  # a plain dict[str, str]
    expected = {
        "nvidia.com/gfd.timestamp": "1724632719",
        "nvidia.com/gpu.machine": "ThinkSystem-SR675-V3",
        "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/cuda.driver.minor": "82",
        "nvidia.com/cuda.driver.rev": "07",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "82",
        "nvidia.com/cuda.driver-version.revision": "07",
        "nvidia.com/cuda.driver-version.full": "580.82.07",
        "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
    }
    assert expected.items() <= labels.items()
    assert "nvidia.com/mig.strategy" not in labels  # omitted under none


def test_no_timestamp_and_a_two_part_driver_version() -> None:
    system = SystemFacts(driver_version="575.51", cuda_version=(12, 9))
    labels = compute_labels(node("l4", 1), config(), system)
    assert "nvidia.com/gfd.timestamp" not in labels
    assert labels["nvidia.com/cuda.driver.rev"] == ""
    assert labels["nvidia.com/cuda.driver-version.full"] == "575.51"
    assert labels["nvidia.com/gpu.machine"] == "unknown"
    assert labels["nvidia.com/mig.capable"] == "false"


def test_a_node_without_gpus_gets_only_the_timestamp_and_vgpu_labels() -> None:
    assert compute_labels([], config(), SYSTEM, timestamp=5) == {
        "nvidia.com/gfd.timestamp": "5",
        "nvidia.com/vgpu.present": "false",
    }


# -- whole GPUs, per model -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "count", "product", "memory", "family", "compute"),
    [
        ("h200-nvl", 8, "NVIDIA-H200-NVL", "143771", "hopper", ("9", "0")),
        ("a100-40gb", 8, "NVIDIA-A100-SXM4-40GB", "40960", "ampere", ("8", "0")),
        ("a30", 4, "NVIDIA-A30", "24576", "ampere", ("8", "0")),
        ("h100-80gb", 8, "NVIDIA-H100-80GB-HBM3", "81559", "hopper", ("9", "0")),
        ("b200", 8, "NVIDIA-B200", "183359", "blackwell", ("10", "0")),
        (
            "rtx-pro-6000-se",
            2,
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            "97887",
            "blackwell",
            ("12", "0"),
        ),
        ("l4", 1, "NVIDIA-L4", "23034", "ada-lovelace", ("8", "9")),
        ("a10", 2, "NVIDIA-A10", "23028", "ampere", ("8", "6")),
    ],
)
@pytest.mark.parametrize("mig_strategy", ["none", "single", "mixed"])
def test_whole_gpu_labels_per_model(
    model: str,
    count: int,
    product: str,
    memory: str,
    family: str,
    compute: tuple[str, str],
    mig_strategy: str,
) -> None:
    labels = compute_labels(node(model, count), strategy(mig_strategy), SYSTEM)
    assert {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": memory,
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": compute[0],
        "nvidia.com/gpu.compute.minor": compute[1],
    }.items() <= labels.items()
    assert not any(k.startswith("nvidia.com/mig-") for k in labels)
    if mig_strategy == "none":
        assert "nvidia.com/mig.strategy" not in labels
    else:
        assert labels["nvidia.com/mig.strategy"] == mig_strategy
    assert labels["nvidia.com/mig.capable"] == str(get_model(model).mig is not None).lower()


@pytest.mark.parametrize(
    ("major", "minor", "family"),
    [
        (1, 3, "tesla"),
        (2, 1, "fermi"),
        (3, 5, "kepler"),
        (5, 2, "maxwell"),
        (6, 1, "pascal"),
        (7, 0, "volta"),
        (7, 2, "volta"),
        (7, 5, "turing"),
        (8, 0, "ampere"),
        (8, 6, "ampere"),
        (8, 7, "ampere"),
        (8, 9, "ada-lovelace"),
        (9, 0, "hopper"),
        (10, 0, "blackwell"),
        (12, 0, "blackwell"),
        (13, 0, "rubin"),
        (4, 0, "undefined"),
        (11, 0, "undefined"),
    ],
)
def test_architecture_family_from_compute_capability(major: int, minor: int, family: str) -> None:
    assert arch_family(major, minor) == family


def test_product_names_are_sanitised() -> None:
    assert sanitise("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert sanitise("Tesla  T4 (rev a1)") == "Tesla-T4-rev-a1"
    assert sanitise("GeForce RTX™ 4090") == "GeForce-RTX-4090"


# -- sharing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "product", "replicas", "sharing", "mps"),
    [
        (TIME_SLICED_4, "NVIDIA-H200-NVL-SHARED", "4", "time-slicing", "false"),
        (
            TIME_SLICED_4.replace("timeSlicing:", "timeSlicing:\n    renameByDefault: true"),
            "NVIDIA-H200-NVL",
            "4",
            "time-slicing",
            "false",
        ),
        (
            TIME_SLICED_4.replace("replicas: 4}", "replicas: 4, rename: gpu-ts}"),
            "NVIDIA-H200-NVL",
            "4",
            "time-slicing",
            "false",
        ),
        (
            "version: v1\nflags: {mpsRoot: /run/nvidia/mps}\n"
            "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 10}]}}\n",
            "NVIDIA-H200-NVL-SHARED",
            "10",
            "mps",
            "true",
        ),
    ],
)
def test_shared_gpus(text: str, product: str, replicas: str, sharing: str, mps: str) -> None:
    labels = compute_labels(node("h200-nvl", 8), config(text), SYSTEM)
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.replicas"] == replicas
    assert labels["nvidia.com/gpu.sharing-strategy"] == sharing
    assert labels["nvidia.com/gpu.count"] == "8"  # physical GPUs, not replicas
    assert labels["nvidia.com/mps.capable"] == mps


def test_mps_with_mig_enabled_is_an_error() -> None:
    text = (
        "version: v1\nflags: {mpsRoot: /run/nvidia/mps}\n"
        "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"
    )
    gpus = [gpu("h200-nvl", 0, H200_1G), gpu("h200-nvl", 1)]
    with pytest.raises(
        LabelError, match=r"MPS is not supported with MIG enabled \(GPUs with MIG: 0\)"
    ):
        compute_labels(gpus, config(text), SYSTEM)


@pytest.mark.parametrize(
    ("sharing", "message"),
    [
        ("{name: nvidia.com/gpu, replicas: 2, devices: [5]}", "device 5 is not one of"),
        ("{name: nvidia.com/gpu, replicas: 2, devices: 3}", "requested 3 devices"),
    ],
)
def test_a_sharing_the_plugin_refuses_is_not_labelled_as_shared(sharing: str, message: str) -> None:
    # the labels said replicas=2 while the plugin refused the config and advertised nothing
    text = f"sharing:\n  timeSlicing:\n    resources:\n    - {sharing}\n"
    with pytest.raises(LabelError, match=message):
        compute_labels(node("l4", 2), config(text), SYSTEM)


# -- MIG: single --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "profile", "per_gpu", "product", "memory", "sms", "gi", "engines"),
    [
        (
            "h200-nvl",
            "1g.18gb",
            7,
            "NVIDIA-H200-NVL-MIG-1g.18gb",
            "16384",
            "16",
            "1",
            ("1", "1", "0", "1", "0"),
        ),
        (
            "a100-40gb",
            "1g.5gb",
            7,
            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
            "4864",
            "14",
            "1",
            ("1", "0", "0", "0", "0"),
        ),
        (
            "a100-80gb",
            "3g.40gb",
            2,
            "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
            "40192",
            "42",
            "3",
            ("3", "2", "0", "0", "0"),
        ),
        (
            "h100-80gb",
            "7g.80gb",
            1,
            "NVIDIA-H100-80GB-HBM3-MIG-7g.80gb",
            "81152",
            "132",
            "7",
            ("8", "7", "0", "7", "1"),
        ),
    ],
)
def test_single_strategy_describes_the_mig_device_under_gpu_keys(
    model: str,
    profile: str,
    per_gpu: int,
    product: str,
    memory: str,
    sms: str,
    gi: str,
    engines: tuple[str, ...],
) -> None:
    labels = compute_labels(node(model, 8, [profile] * per_gpu), strategy("single"), SYSTEM)
    parent = get_model(model)
    assert {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(8 * per_gpu),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": memory,
        "nvidia.com/gpu.multiprocessors": sms,
        "nvidia.com/gpu.slices.gi": gi,
        "nvidia.com/gpu.slices.ci": gi,
        "nvidia.com/gpu.engines.copy": engines[0],
        "nvidia.com/gpu.engines.decoder": engines[1],
        "nvidia.com/gpu.engines.encoder": engines[2],
        "nvidia.com/gpu.engines.jpeg": engines[3],
        "nvidia.com/gpu.engines.ofa": engines[4],
        # the parent's architecture labels stay
        "nvidia.com/gpu.compute.major": parent.compute_capability.split(".")[0],
        "nvidia.com/gpu.family": arch_family(*map(int, parent.compute_capability.split("."))),
    }.items() <= labels.items()
    assert not any(k.startswith("nvidia.com/mig-") for k in labels)


def test_single_strategy_with_time_slicing_appends_shared() -> None:
    text = TIME_SLICED_4.replace("version: v1", "version: v1\nflags: {migStrategy: single}")
    labels = compute_labels(node("h200-nvl", 8, H200_1G), config(text), SYSTEM)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-NVL-MIG-1g.18gb-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "56"


@pytest.mark.parametrize(
    ("gpus", "why"),
    [
        (
            [gpu("h200-nvl", 0, H200_1G), gpu("h200-nvl", 1, [])],
            "at least one MIG-enabled GPU has no MIG devices",
        ),
        (
            [gpu("h200-nvl", 0, H200_1G), gpu("h200-nvl", 1)],
            "some GPUs have MIG enabled and others disabled",
        ),
        (
            [gpu("h200-nvl", 0, H200_1G), gpu("h200-nvl", 1, ["3g.71gb", "3g.71gb"])],
            "more than one MIG device type present on node",
        ),
    ],
)
def test_single_strategy_on_an_unusable_layout_is_mig_invalid(
    gpus: list[GpuFacts], why: str
) -> None:
    assert single_strategy_problem(gpus) == why
    labels = compute_labels(gpus, strategy("single"), SYSTEM)
    assert {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-H200-NVL-MIG-INVALID",
        "nvidia.com/gpu.count": "0",
        "nvidia.com/gpu.replicas": "0",
        "nvidia.com/gpu.memory": "0",
        "nvidia.com/gpu.sharing-strategy": "",
    }.items() <= labels.items()


def test_single_strategy_without_mig_enabled_is_like_none() -> None:
    none = compute_labels(node("h200-nvl", 8), strategy("none"), SYSTEM)
    single = compute_labels(node("h200-nvl", 8), strategy("single"), SYSTEM)
    assert single == none | {"nvidia.com/mig.strategy": "single"}


# -- MIG: mixed --------------------------------------------------------------------------------


def test_mixed_strategy_labels_each_profile_and_keeps_the_whole_gpu_labels() -> None:
    labels = compute_labels(node("h200-nvl", 8, H200_1G), strategy("mixed"), SYSTEM)
    assert {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-1g.18gb.product": "NVIDIA-H200-NVL-MIG-1g.18gb",
        "nvidia.com/mig-1g.18gb.count": "56",
        "nvidia.com/mig-1g.18gb.replicas": "1",
        "nvidia.com/mig-1g.18gb.sharing-strategy": "none",
        "nvidia.com/mig-1g.18gb.memory": "16384",
        "nvidia.com/mig-1g.18gb.multiprocessors": "16",
        "nvidia.com/mig-1g.18gb.slices.gi": "1",
        "nvidia.com/mig-1g.18gb.slices.ci": "1",
        "nvidia.com/mig-1g.18gb.engines.copy": "1",
        "nvidia.com/mig-1g.18gb.engines.decoder": "1",
        "nvidia.com/mig-1g.18gb.engines.encoder": "0",
        "nvidia.com/mig-1g.18gb.engines.jpeg": "1",
        "nvidia.com/mig-1g.18gb.engines.ofa": "0",
        # MIG-enabled parents are still labelled, without sharing: replicas 0
        "nvidia.com/gpu.product": "NVIDIA-H200-NVL",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.replicas": "0",
        "nvidia.com/gpu.family": "hopper",
    }.items() <= labels.items()


def test_mixed_strategy_with_the_inference_mix_layout() -> None:
    """GPU 0 split into mixed profiles, GPUs 1-3 whole (examples/mig-configs/inference-mix.yaml)."""
    gpus = [gpu("h200-nvl", 0, ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"])] + [
        gpu("h200-nvl", i) for i in (1, 2, 3)
    ]
    labels = compute_labels(gpus, strategy("mixed"), SYSTEM)
    counts = {
        k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-") and k.endswith(".count")
    }
    assert counts == {
        "nvidia.com/mig-1g.18gb.count": "2",
        "nvidia.com/mig-2g.35gb.count": "1",
        "nvidia.com/mig-3g.71gb.count": "1",
    }
    assert labels["nvidia.com/mig-3g.71gb.slices.gi"] == "3"
    assert labels["nvidia.com/mig-3g.71gb.memory"] == "71168"
    # whole GPUs win over the MIG-enabled one with the same name: sharing applies again
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.replicas"] == "1"


def test_mixed_strategy_names_media_extension_and_compute_instance_profiles() -> None:
    gpus = [
        GpuFacts(
            **{
                **gpu("h200-nvl", 0).__dict__,
                "mig_enabled": True,
                "mig_devices": (
                    mig("h200-nvl", "1g.18gb+me", 0),
                    mig("h200-nvl", "3g.71gb", 1, ci_slices=1),
                ),
            }
        )
    ]
    labels = compute_labels(gpus, strategy("mixed"), SYSTEM)
    assert labels["nvidia.com/mig-1g.18gb.me.product"] == "NVIDIA-H200-NVL-MIG-1g.18gb.me"
    assert labels["nvidia.com/mig-1g.18gb.me.engines.ofa"] == "1"
    assert labels["nvidia.com/mig-1c.3g.71gb.slices.gi"] == "3"
    assert labels["nvidia.com/mig-1c.3g.71gb.slices.ci"] == "1"


def test_mixed_strategy_with_time_slicing_of_a_mig_resource() -> None:
    text = """
version: v1
flags: {migStrategy: mixed}
sharing:
  timeSlicing:
    resources: [{name: nvidia.com/mig-1g.18gb, replicas: 3}]
"""
    labels = compute_labels(node("h200-nvl", 2, H200_1G), config(text), SYSTEM)
    assert labels["nvidia.com/mig-1g.18gb.product"] == "NVIDIA-H200-NVL-MIG-1g.18gb-SHARED"
    assert labels["nvidia.com/mig-1g.18gb.replicas"] == "3"
    assert labels["nvidia.com/mig-1g.18gb.sharing-strategy"] == "time-slicing"


def test_every_value_is_a_valid_label_value() -> None:
    """The longest product names keep their MIG suffix and stay within 63 characters."""
    gpus = node("rtx-pro-6000-maxq", 2, ["1g.24gb+me.all"])
    text = TIME_SLICED_4.replace("nvidia.com/gpu", "nvidia.com/gpu").replace(
        "version: v1", "version: v1\nflags: {migStrategy: single}"
    )
    labels = compute_labels(gpus, config(text), SYSTEM)
    product = labels["nvidia.com/gpu.product"]
    assert len(product) <= 63
    assert product.endswith("-MIG-1g.24gb.me.all-SHARED")
    assert product.startswith("NVIDIA-RTX-PRO-6000-Blackwell")
    for key, value in labels.items():
        assert len(value) <= 63, key
        assert value == "" or (value[0].isalnum() and value[-1].isalnum()), key


def test_several_models_on_one_node_are_labelled_deterministically() -> None:
    gpus = [gpu("l4", 0), gpu("a10", 1), gpu("a10", 2)]
    labels = compute_labels(gpus, config(), SYSTEM)
    assert labels == compute_labels(list(reversed(gpus)), config(), SYSTEM)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"  # the last name in sort order
    assert labels["nvidia.com/gpu.count"] == "1"


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        ({0: 0x0302, 1: 0x0302}, "compute"),
        ({0: 0x0300, 1: 0x0300}, "graphics"),
        ({0: 0x0300, 1: 0x0302}, "unknown"),
        ({0: 0x0302}, "unknown"),
        (None, "unknown"),
    ],
)
def test_gpu_mode_from_pci_class(classes: dict[int, int] | None, mode: str) -> None:
    system = SystemFacts("580.82.07", (13, 0), pci_classes=classes)
    assert compute_labels(node("l40s", 2), config(), system)["nvidia.com/gpu.mode"] == mode


def test_mig_enabled_gpus_are_always_in_compute_mode() -> None:
    system = SystemFacts("580.82.07", (13, 0), pci_classes={0: 0x0300, 1: 0x0302})
    gpus = [gpu("rtx-pro-6000-se", 0, ["2g.48gb"]), gpu("rtx-pro-6000-se", 1)]
    assert compute_labels(gpus, strategy("mixed"), system)["nvidia.com/gpu.mode"] == "compute"
