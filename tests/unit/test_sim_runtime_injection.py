"""Which GPUs and driver files a container gets from the simulated runtime."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from kubegpu.cdi.registry import Registry
from kubegpu.cdi.spec import parse_spec
from kubegpu.sim.runtime.injection import (
    Injection,
    NodeGpu,
    cdi_requests,
    inject,
    parse_visible,
)


def registry(*docs: Mapping[str, object]) -> Registry:
    reg = Registry()
    for i, doc in enumerate(docs):
        reg.add(Path(f"/var/run/cdi/spec{i}.json"), parse_spec(doc, f"spec{i}"))
    return reg


GPUS = [
    NodeGpu(0, "GPU-aaaa", 0),
    NodeGpu(1, "GPU-bbbb", 1, {"1:0": "MIG-cccc", "1:1": "MIG-dddd"}),
]


def nvidia(value: str | None, handler: bool = True) -> Injection:
    env = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value}
    return inject(nvidia_handler=handler, env=env, cdi_names=[], cdi_specs=Registry(), gpus=GPUS)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ("void", [])),
        ("", ("void", [])),
        (" , ", ("void", [])),
        ("all,void", ("void", [])),
        ("0,none,all", ("none", [])),
        ("all", ("all", [])),
        (" 0 , GPU-bbbb ", ("list", ["0", "GPU-bbbb"])),
    ],
)
def test_visible_devices_are_read_by_the_toolkits_rules(
    value: str | None, expected: tuple[str, list[str]]
) -> None:
    assert parse_visible(value) == expected


def test_the_nvidia_handler_hands_out_what_the_variable_names() -> None:
    assert nvidia("all") == Injection(("GPU-aaaa", "GPU-bbbb"), True)
    assert nvidia("1") == Injection(("GPU-bbbb",), True)
    assert nvidia("GPU-aaaa") == Injection(("GPU-aaaa",), True)
    assert nvidia("MIG-dddd") == Injection(("MIG-dddd",), True)
    assert nvidia("1:0") == Injection(("MIG-cccc",), True)
    assert nvidia("none") == Injection((), True)  # the driver's files, no GPU


def test_void_or_unset_is_not_a_gpu_container() -> None:
    assert nvidia("void") == Injection()
    assert nvidia(None) == Injection()


def test_without_the_nvidia_handler_the_variable_gives_nothing() -> None:
    assert nvidia("all", handler=False) == Injection()


def test_an_id_the_node_lacks_fails_the_create() -> None:
    got = nvidia("0,GPU-zzzz")
    assert got.devices == () and not got.driver
    assert got.error is not None
    assert got.error.endswith("unresolvable CDI devices runtime.nvidia.com/gpu=GPU-zzzz")


SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "k8s.device-plugin.nvidia.com/gpu",
    "devices": [
        {"name": "GPU-aaaa", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        {"name": "GPU-bbbb", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}},
    ],
    "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
}


def test_cdi_devices_are_the_device_nodes_of_the_spec_and_no_driver_unless_mounted() -> None:
    got = inject(
        nvidia_handler=False,
        env={},
        cdi_names=["k8s.device-plugin.nvidia.com/gpu=GPU-bbbb"],
        cdi_specs=registry(SPEC),
        gpus=GPUS,
    )
    assert (got.devices, got.driver, got.error) == (("GPU-bbbb",), False, None)
    assert [n.path for n in got.edits.device_nodes] == ["/dev/nvidiactl", "/dev/nvidia1"]
    with_driver = {
        **SPEC,
        "containerEdits": {
            "mounts": [{"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"}]
        },
    }
    got = inject(
        nvidia_handler=True,
        env={"NVIDIA_VISIBLE_DEVICES": "all"},
        cdi_names=["k8s.device-plugin.nvidia.com/gpu=GPU-aaaa"],
        cdi_specs=registry(with_driver),
        gpus=GPUS,
    )
    assert (got.devices, got.driver, got.error) == (("GPU-aaaa",), True, None)
    # nvidia-smi is mounted, libcuda is not: the driver's utilities and no CUDA program
    assert got.has_program("nvidia-smi") and not got.has_program("vectorAdd")


def test_an_undefined_cdi_device_fails_with_the_runtimes_words() -> None:
    got = inject(
        nvidia_handler=False,
        env={},
        cdi_names=["nvidia.com/gpu=7"],
        cdi_specs=registry(SPEC),
        gpus=GPUS,
    )
    assert got.error == "CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=7"


def test_cdi_requests_take_the_field_then_sorted_annotations_once() -> None:
    names = cdi_requests(
        ["v.com/c=a"],
        {
            "cdi.k8s.io/z_1": "v.com/c=b, v.com/c=a",
            "cdi.k8s.io/a_1": "v.com/c=c",
            "other/x": "v.com/c=d",
        },
    )
    assert names == ["v.com/c=a", "v.com/c=c", "v.com/c=b"]


def test_driver_capabilities_choose_the_driver_files() -> None:
    default = nvidia("0")
    assert default.has_program("nvidia-smi") and default.has_program("vectorAdd")
    compute = inject(
        nvidia_handler=True,
        env={"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "compute"},
        cdi_names=[],
        cdi_specs=Registry(),
        gpus=GPUS,
    )
    assert compute.devices == ("GPU-aaaa",)
    assert not compute.has_program("nvidia-smi") and compute.has_program("vectorAdd")
    assert not nvidia("void").has_program("nvidia-smi")


def test_an_unknown_capability_is_the_runtimes_refusal() -> None:
    got = inject(
        nvidia_handler=True,
        env={"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,warp"},
        cdi_names=[],
        cdi_specs=Registry(),
        gpus=GPUS,
    )
    assert got.error == (
        "unsupported capabilities found in 'compute,warp' "
        "(allowed 'compute,compat32,graphics,utility,video,display,ngx')"
    )


def test_a_cdi_device_brings_the_drivers_files_when_the_spec_mounts_them(
    tmp_path: Path,
) -> None:
    """The device plugin's spec, built from a driver on the node's root, gives a container
    nvidia-smi and libcuda; the same spec built on a node without a driver gives neither."""
    from kubegpu.cdi.build import common_edits, gpu_devices, node_spec
    from kubegpu.cdi.driver import driver_edits, find_driver_files
    from kubegpu.cdi.spec import to_json

    lib = tmp_path / "usr/lib64"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.550.1").write_text("elf")
    (tmp_path / "usr/bin").mkdir()
    (tmp_path / "usr/bin/nvidia-smi").write_text("#!")

    class G:
        def __init__(self, i: int, uuid: str) -> None:
            self.index, self.uuid, self.mig_devices = i, uuid, ()

    gpus = [G(0, "GPU-aaaa"), G(1, "GPU-bbbb")]
    for root, driver in ((tmp_path, True), (tmp_path / "none", False)):
        edits = driver_edits(find_driver_files(root))
        spec = node_spec(
            "k8s.device-plugin.nvidia.com/gpu", gpu_devices(gpus), common_edits(driver=edits)
        )
        got = inject(
            nvidia_handler=False,
            env={},
            cdi_names=["k8s.device-plugin.nvidia.com/gpu=1"],
            cdi_specs=registry(to_json(spec)),
            gpus=GPUS,
        )
        assert got.devices == ("GPU-bbbb",)
        assert got.has_program("nvidia-smi") is driver
        assert got.has_program("vectorAdd") is driver
        assert got.edits.env_map()["NVIDIA_VISIBLE_DEVICES"] == "void"
