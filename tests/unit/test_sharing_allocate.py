"""Allocate responses for every device-list strategy, the CDI spec, MPS limits, and what a
container ends up seeing (no GPU requested: no GPU)."""

from __future__ import annotations

import pytest

from kubegpu.cdi.build import gpu_devices
from kubegpu.sharing.allocate import (
    AllocateSettings,
    AllocationError,
    DeviceNode,
    Mount,
    accepts_envvar,
    container_response,
    settings_for,
    visible_devices,
)
from kubegpu.sharing.config import parse_config
from kubegpu.sharing.devices import Device, GpuFacts, MigFacts, advertise
from kubegpu.sharing.mps import MpsLimit, mps_resources


def _gpu(i: int, mig: int = 0, memory: int = 23034) -> GpuFacts:
    return GpuFacts(
        index=i,
        uuid=f"GPU-{i}",
        product="NVIDIA L4",
        memory_mib=memory,
        compute_capability=(8, 9),
        mig_capable=bool(mig),
        mig_enabled=bool(mig),
        mig_devices=tuple(
            MigFacts(m, f"MIG-{i}-{m}", "1g.18gb", m + 7, 0, True, 16384, 16, 1, 1)
            for m in range(mig)
        ),
    )


GPUS = [_gpu(0), _gpu(1)]
WHOLE = {d.id: d for d in advertise(GPUS, parse_config("")).resources["nvidia.com/gpu"]}
SHARED = {
    d.id: d
    for d in advertise(
        GPUS, parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}")
    ).resources["nvidia.com/gpu"]
}
MIG_NODE = [_gpu(0, mig=2)]
MIGS = {
    d.id: d
    for d in advertise(MIG_NODE, parse_config("flags: {migStrategy: mixed}")).resources[
        "nvidia.com/mig-1g.18gb"
    ]
}
# GPU-0 is MIG-enabled in MIG_NODE
PATHS = {d.names[0]: d.nodes for d in gpu_devices([*GPUS[1:], *MIG_NODE])}
PATHS.update({d.names[0]: d.nodes for d in gpu_devices(GPUS)})
RID = "0b1c2d3e-0000-4000-8000-000000000000"


def settings(**kw: object) -> AllocateSettings:
    return AllocateSettings(resource="nvidia.com/gpu", device_paths=PATHS, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ids", "devices", "kw", "envs"),
    [
        (["GPU-1"], WHOLE, {}, {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}),
        (["GPU-1", "GPU-0"], WHOLE, {}, {"NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-0"}),
        (["GPU-1", "GPU-0"], WHOLE, {"id_strategy": "index"}, {"NVIDIA_VISIBLE_DEVICES": "1,0"}),
        # replicas become their GPU, de-duplicated in request order
        (
            ["GPU-1::2", "GPU-0::0", "GPU-1::3"],
            SHARED,
            {},
            {"NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-0"},
        ),
        (["MIG-0-1"], MIGS, {}, {"NVIDIA_VISIBLE_DEVICES": "MIG-0-1"}),
        (["MIG-0-1"], MIGS, {"id_strategy": "index"}, {"NVIDIA_VISIBLE_DEVICES": "0:1"}),
        (
            ["GPU-0"],
            WHOLE,
            {"gds": True, "mofed": True, "gdrcopy": True},
            {
                "NVIDIA_VISIBLE_DEVICES": "GPU-0",
                "NVIDIA_GDS": "enabled",
                "NVIDIA_MOFED": "enabled",
                "NVIDIA_GDRCOPY": "enabled",
            },
        ),
        (
            ["GPU-0"],
            WHOLE,
            {"imex_channels": (0,)},
            {"NVIDIA_VISIBLE_DEVICES": "GPU-0", "NVIDIA_IMEX_CHANNELS": "0"},
        ),
    ],
)
def test_envvar_strategy(
    ids: list[str], devices: dict[str, Device], kw: dict[str, object], envs: dict[str, str]
) -> None:
    r = container_response(ids, devices, settings(**kw), RID)
    assert r.envs == envs
    assert (r.mounts, r.devices, r.annotations, r.cdi_devices) == ([], [], {}, [])


def test_volume_mounts_strategy_lists_devices_as_dev_null_mounts() -> None:
    r = container_response(
        ["GPU-1::0", "GPU-0::1"], SHARED, settings(strategies=("volume-mounts",)), RID
    )
    assert r.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert r.mounts == [
        Mount("/var/run/nvidia-container-devices/GPU-1", "/dev/null", True),
        Mount("/var/run/nvidia-container-devices/GPU-0", "/dev/null", True),
    ]


@pytest.mark.parametrize(
    ("strategies", "annotations", "cdi"),
    [
        (
            ("cdi-annotations",),
            {
                f"cdi.k8s.io/nvidia-device-plugin_{RID}": "k8s.device-plugin.nvidia.com/gpu=GPU-0,"
                "k8s.device-plugin.nvidia.com/gpu=GPU-1"
            },
            [],
        ),
        (
            ("cdi-cri",),
            {},
            ["k8s.device-plugin.nvidia.com/gpu=GPU-0", "k8s.device-plugin.nvidia.com/gpu=GPU-1"],
        ),
    ],
)
def test_cdi_strategies_name_devices_and_void_the_env_var(
    strategies: tuple[str, ...], annotations: dict[str, str], cdi: list[str]
) -> None:
    r = container_response(["GPU-0", "GPU-1"], WHOLE, settings(strategies=strategies), RID)
    assert r.annotations == annotations
    assert r.cdi_devices == cdi
    assert r.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert r.mounts == [] and r.devices == []


def test_cdi_with_index_ids_and_a_custom_annotation_prefix() -> None:
    s = settings(
        strategies=("cdi-annotations", "cdi-cri"),
        id_strategy="index",
        cdi_annotation_prefix="example.com/",
    )
    r = container_response(["MIG-0-1"], MIGS, s, RID)
    assert r.annotations == {
        f"example.com/nvidia-device-plugin_{RID}": "k8s.device-plugin.nvidia.com/gpu=0:1"
    }
    assert r.cdi_devices == ["k8s.device-plugin.nvidia.com/gpu=0:1"]


def test_mixed_cdi_and_envvar_strategies_do_both() -> None:
    r = container_response(["GPU-0"], WHOLE, settings(strategies=("envvar", "cdi-cri")), RID)
    assert r.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-0"}
    assert r.cdi_devices == ["k8s.device-plugin.nvidia.com/gpu=GPU-0"]


def test_pass_device_specs_adds_control_and_gpu_nodes_under_the_dev_root() -> None:
    s = settings(
        pass_device_specs=True,
        dev_root="/run/nvidia/driver",
        control_devices=("/dev/nvidiactl", "/dev/nvidia-uvm"),
    )
    r = container_response(["GPU-1::0", "GPU-1::1"], SHARED, s, RID)
    assert r.devices == [
        DeviceNode("/dev/nvidiactl", "/run/nvidia/driver/dev/nvidiactl", "rw"),
        DeviceNode("/dev/nvidia-uvm", "/run/nvidia/driver/dev/nvidia-uvm", "rw"),
        DeviceNode("/dev/nvidia1", "/run/nvidia/driver/dev/nvidia1", "rw"),
    ]
    mig = container_response(["MIG-0-0"], MIGS, settings(pass_device_specs=True), RID)
    assert mig.devices == [DeviceNode("/dev/nvidia0", "/dev/nvidia0", "rw")]


def test_mps_replicas_get_the_pipe_directory_and_shared_memory() -> None:
    s = settings(mps_root="/run/nvidia/mps")
    r = container_response(["GPU-0::1"], SHARED, s, RID)
    assert r.envs == {
        "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
        "NVIDIA_VISIBLE_DEVICES": "GPU-0",
    }
    assert r.mounts == [
        Mount("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe", False),
        Mount("/dev/shm", "/run/nvidia/mps/shm", False),
    ]
    # a whole GPU of a partly shared resource is not an MPS client
    assert "CUDA_MPS_PIPE_DIRECTORY" not in container_response(["GPU-0"], WHOLE, s, RID).envs


@pytest.mark.parametrize(
    ("ids", "devices", "fail", "error"),
    [
        (["GPU-9"], WHOLE, False, "invalid request: unknown device: GPU-9"),
        (["GPU-0::9"], SHARED, False, "invalid request: unknown device: GPU-0::9"),
        (
            ["GPU-0::0", "GPU-1::0"],
            SHARED,
            True,
            "invalid request: maximum request size for shared resources is 1; found 2",
        ),
    ],
)
def test_refused_requests(
    ids: list[str], devices: dict[str, Device], fail: bool, error: str
) -> None:
    with pytest.raises(AllocationError, match=error):
        container_response(ids, devices, settings(fail_requests_greater_than_one=fail), RID)


def test_fail_requests_greater_than_one_only_limits_shared_devices() -> None:
    s = settings(fail_requests_greater_than_one=True)
    assert container_response(["GPU-0::0"], SHARED, s, RID).envs["NVIDIA_VISIBLE_DEVICES"]
    assert container_response(["GPU-0", "GPU-1"], WHOLE, s, RID).envs["NVIDIA_VISIBLE_DEVICES"]
    assert container_response(["GPU-0::0", "GPU-0::1"], SHARED, settings(), RID).envs


@pytest.mark.parametrize(
    ("text", "resource", "expected"),
    [
        (
            "",
            "nvidia.com/gpu",
            {"strategies": ("envvar",), "fail_requests_greater_than_one": False, "mps_root": None},
        ),
        (
            "flags: {mpsRoot: /run/nvidia/mps, plugin: {deviceListStrategy: [cdi-cri], deviceIDStrategy: index}}\n"
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
            "nvidia.com/gpu",
            {
                "strategies": ("cdi-cri",),
                "id_strategy": "index",
                "fail_requests_greater_than_one": True,
                "mps_root": "/run/nvidia/mps",
            },
        ),
        (
            "flags: {mpsRoot: /m}\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}",
            "nvidia.com/gpu",
            {"mps_root": None, "fail_requests_greater_than_one": False},
        ),
    ],
)
def test_settings_come_from_the_config(
    text: str, resource: str, expected: dict[str, object]
) -> None:
    s = settings_for(parse_config(text), resource)
    assert {k: getattr(s, k) for k in expected} == expected


# -- what a container sees -----------------------------------------------------------------

IMAGE_ALL = {"NVIDIA_VISIBLE_DEVICES": "all"}  # what CUDA base images set


@pytest.mark.parametrize(
    "strategies", [("envvar",), ("volume-mounts",), ("cdi-annotations",), ("cdi-cri",)]
)
def test_a_container_sees_exactly_what_it_was_allocated(strategies: tuple[str, ...]) -> None:
    r = container_response(["GPU-1::0"], SHARED, settings(strategies=strategies), RID)
    env = {**IMAGE_ALL, **r.envs}  # kubelet puts the plugin's envs over the image's
    seen = visible_devices(
        env, r.mounts, r.cdi_devices, r.annotations, accept_envvar=accepts_envvar(strategies)
    )
    assert seen == ("GPU-1",)


@pytest.mark.parametrize("strategies", [("volume-mounts",), ("cdi-annotations",), ("cdi-cri",)])
def test_no_gpu_requested_means_no_gpu_even_when_the_image_says_all(
    strategies: tuple[str, ...],
) -> None:
    # the plugin is never called for the container: only the image's env is there
    assert visible_devices(IMAGE_ALL, accept_envvar=accepts_envvar(strategies)) == ()


@pytest.mark.parametrize(
    ("env", "seen"),
    [
        ({}, ()),  # unset: void
        ({"NVIDIA_VISIBLE_DEVICES": ""}, ()),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, ()),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, ()),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}, ("GPU-0", "GPU-1")),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, "all"),  # the envvar set-up trusts the image
    ],
)
def test_the_envvar_set_up_reads_the_variable(env: dict[str, str], seen: object) -> None:
    assert visible_devices(env, accept_envvar=True) == seen


def test_cdi_names_win_over_the_environment() -> None:
    names = ["k8s.device-plugin.nvidia.com/gpu=GPU-1", "other.vendor/nic=eth0"]
    assert visible_devices(IMAGE_ALL, cdi_devices=names, accept_envvar=True) == ("GPU-1",)
    assert (
        visible_devices(
            {},
            annotations={"cdi.k8s.io/x": "k8s.device-plugin.nvidia.com/gpu=all"},
            accept_envvar=False,
        )
        == "all"
    )


# -- MPS limits -------------------------------------------------------------------------------


def test_mps_limits_are_equal_shares_per_replica() -> None:
    gpus = [_gpu(0, memory=23034), _gpu(1, memory=46068), _gpu(2)]
    config = parse_config(
        "flags: {mpsRoot: /m}\nsharing:\n  mps:\n    resources:\n"
        "    - {name: gpu, replicas: 3, devices: [0, 1]}"
    )
    (res,) = mps_resources(gpus, config, advertise(gpus, config))
    assert res.resource == "nvidia.com/gpu"
    assert res.limits == (
        MpsLimit(
            gpu=0, uuid="GPU-0", replicas=3, pinned_memory_mib=7678, active_thread_percentage=33
        ),
        MpsLimit(
            gpu=1, uuid="GPU-1", replicas=3, pinned_memory_mib=15356, active_thread_percentage=33
        ),
    )
    assert res.active_thread_percentage == 33


def test_no_mps_daemons_without_mps_sharing() -> None:
    config = parse_config("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}")
    assert mps_resources(GPUS, config, advertise(GPUS, config)) == []
