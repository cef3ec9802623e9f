"""The isolation vocabulary: which method each advertised device gives, what it guarantees,
the node label per GPU, and the pod annotation that carries it to the exporter."""

from __future__ import annotations

import pytest

from kubegpu.catalog import nvidia
from kubegpu.sharing.allocate import container_response, settings_for
from kubegpu.sharing.config import PluginConfig, parse_config
from kubegpu.sharing.devices import GpuFacts, MigFacts, advertise
from kubegpu.sharing.isolation import (
    AnnotationError,
    Isolation,
    Method,
    allocation_isolation,
    annotation,
    describe,
    fault_isolated,
    gpu_methods,
    node_labels,
    parse_annotation,
    plan_method,
)
from kubegpu.sharing.mps import mps_resources


def gpu(index: int, *, migs: int = 0, memory: int = 81559) -> GpuFacts:
    devices = tuple(
        MigFacts(
            index=i,
            uuid=f"MIG-{index}-{i}",
            profile="1g.10gb",
            gi=i + 1,
            ci=0,
            full=True,
            memory_mib=9984,
            multiprocessors=16,
            gi_slices=1,
            ci_slices=1,
        )
        for i in range(migs)
    )
    return GpuFacts(
        index=index,
        uuid=f"GPU-{index}",
        product="NVIDIA H100 80GB HBM3",
        memory_mib=memory,
        compute_capability=(9, 0),
        mig_capable=True,
        mig_enabled=migs > 0,
        mig_devices=devices,
    )


def config(text: str) -> PluginConfig:
    strategy = "none" if "mps:" in text else "mixed"  # MPS refuses the mixed strategy
    return parse_config(f"flags: {{migStrategy: {strategy}, mpsRoot: /run/nvidia/mps}}\n" + text)


TIME_SLICE_GPU2 = """
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, rename: nvidia.com/gpu.shared, devices: [2], replicas: 4}
"""
MPS_ALL = """
sharing:
  mps:
    resources:
    - {name: nvidia.com/gpu, replicas: 3}
"""


def test_each_gpu_is_labelled_with_the_method_its_devices_give() -> None:
    gpus = [gpu(0, migs=2), gpu(1), gpu(2)]
    labels = node_labels(gpus, config(TIME_SLICE_GPU2))
    assert labels == {
        "kubegpu.io/gpu.0.isolation": "mig",
        "kubegpu.io/gpu.1.isolation": "exclusive",
        "kubegpu.io/gpu.2.isolation": "time-sliced",
    }
    assert list(labels) == [nvidia.isolation_label(i) for i in range(3)]
    assert node_labels([gpu(0)], config(MPS_ALL)) == {nvidia.isolation_label(0): "mps"}


def test_a_config_the_plugin_refuses_gets_no_isolation_label() -> None:
    # MPS on a MIG-enabled GPU is refused by the plugin: no label claims anything
    assert node_labels([gpu(0, migs=1)], config(MPS_ALL)) == {}


def test_a_gpu_mixing_methods_is_labelled_with_the_weakest() -> None:
    two = config(TIME_SLICE_GPU2.replace("devices: [2]", "devices: [0]"))
    adv = advertise([gpu(0), gpu(1)], two)
    assert gpu_methods(adv, "time-slicing") == {0: Method.TIME_SLICED, 1: Method.EXCLUSIVE}


@pytest.mark.parametrize(
    ("text", "device", "want"),
    [
        ("", "GPU-1", Isolation("GPU-1", "GPU-1", Method.EXCLUSIVE, 81559, True)),
        ("", "MIG-0-1", Isolation("MIG-0-1", "MIG-0-1", Method.MIG, 9984, True)),
        (
            TIME_SLICE_GPU2,
            "GPU-2::3",
            Isolation("GPU-2::3", "GPU-2", Method.TIME_SLICED, 0, False),
        ),
        (MPS_ALL, "GPU-1::0", Isolation("GPU-1::0", "GPU-1", Method.MPS, 81559 // 3, False, 33)),
    ],
)
def test_what_an_allocated_device_guarantees(text: str, device: str, want: Isolation) -> None:
    gpus = [gpu(0, migs=2), gpu(1), gpu(2)] if "mps" not in text else [gpu(1)]
    cfg = config(text)
    got = allocation_isolation([device], advertise(gpus, cfg), gpus, cfg.sharing_strategy)
    assert got == [want]


def test_mps_guarantees_are_the_limits_the_mps_daemon_sets() -> None:
    gpus = [gpu(0), gpu(1, memory=46068)]
    cfg = config(MPS_ALL)
    adv = advertise(gpus, cfg)
    daemon = {lim.uuid: lim for r in mps_resources(gpus, cfg, adv) for lim in r.limits}
    for iso in allocation_isolation(["GPU-0::1", "GPU-1::2"], adv, gpus, "mps"):
        assert iso.memory_mib == daemon[iso.uuid].pinned_memory_mib
        assert iso.thread_percentage == daemon[iso.uuid].active_thread_percentage


MPS_MIG = """
flags: {migStrategy: mixed, mpsRoot: /run/nvidia/mps}
sharing:
  mps:
    migInstances: true
    renameByDefault: true
    resources:
    - {name: mig-1g.10gb, replicas: 3}
"""


def test_an_mps_client_of_a_mig_instance_is_said_to_get_what_its_daemon_enforces() -> None:
    # one source for the numbers: the annotation (and the exporter's metric read from it)
    # states the per-instance daemon's limits and the env the client gets, not the card's
    gpus = [gpu(0, migs=2)]
    cfg = parse_config(MPS_MIG)
    adv = advertise(gpus, cfg)
    daemons = {r.instance: r.limits[0] for r in mps_resources(gpus, cfg, adv)}
    assert set(daemons) == {"MIG-0-0", "MIG-0-1"}
    resource = "nvidia.com/mig-1g.10gb.shared"
    devices = {d.id: d for d in adv.resources[resource]}
    ids = list(devices)
    assert len(ids) == 6
    settings = settings_for(cfg, resource)
    said = parse_annotation(annotation({"main": allocation_isolation(ids, adv, gpus, "mps")}))
    for iso in said["main"]:
        limit = daemons[iso.uuid]
        assert (iso.method, iso.fault_isolated) == (Method.MPS, False)
        assert iso.memory_mib == limit.pinned_memory_mib == 9984 // 3
        assert iso.thread_percentage == limit.active_thread_percentage == 33
        env = container_response([iso.device], devices, settings, "r").envs
        assert env[nvidia.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT] == f"0={iso.memory_mib}M"
        assert env[nvidia.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE] == str(iso.thread_percentage)


def test_devices_this_node_does_not_advertise_are_left_out() -> None:
    gpus = [gpu(0)]
    cfg = config("")
    assert allocation_isolation(["GPU-9", "GPU-0"], advertise(gpus, cfg), gpus, "none") == [
        Isolation("GPU-0", "GPU-0", Method.EXCLUSIVE, 81559, True)
    ]


def test_only_whole_gpus_and_mig_keep_a_neighbours_fault_away() -> None:
    assert [m for m in Method if fault_isolated(m)] == [Method.EXCLUSIVE, Method.MIG]
    assert "can reach it" in describe(Method.MPS)
    assert "cannot reach it" in describe(Method.MIG)
    assert describe(Method.TIME_SLICED).startswith("time-sliced (")


def test_the_annotation_reads_back_as_written() -> None:
    given = {
        "main": [
            Isolation("GPU-1::0", "GPU-1", Method.MPS, 27186, False, 33),
            Isolation("MIG-0-1", "MIG-0-1", Method.MIG, 9984, True),
        ],
        "side": [Isolation("GPU-2::1", "GPU-2", Method.TIME_SLICED, 0, False)],
    }
    text = annotation(given)
    assert '"method":"mps"' in text and '"threadPercentage":33' in text
    assert parse_annotation(text) == given


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{not json", "not JSON"),
        ("[1]", "expected an object"),
        ('{"main": {}}', "expected a list"),
        ('{"main": [{"device": "GPU-1"}]}', "container 'main': bad device entry"),
        (
            '{"main": [{"device": "d", "uuid": "u", "method": "shared", "memoryMiB": 0, '
            '"faultIsolated": false}]}',
            "bad device entry",
        ),
    ],
)
def test_a_bad_annotation_is_refused_with_the_reason(text: str, error: str) -> None:
    with pytest.raises(AnnotationError, match=error):
        parse_annotation(text)


@pytest.mark.parametrize(
    ("role", "sharing", "want"),
    [
        ("whole", "none", Method.EXCLUSIVE),
        ("mig", "none", Method.MIG),
        ("shared", "time-slicing", Method.TIME_SLICED),
        ("shared", "mps", Method.MPS),
        ("idle", "none", None),
        ("busy", "mps", None),
    ],
)
def test_the_planner_s_roles_in_the_same_words(role: str, sharing: str, want: Method) -> None:
    assert plan_method(role, sharing) == want
