"""Upper bounds on what one device-plugin config may make a node advertise (docs/limits.md).

A replica count is checked when the config is read; the number of devices one resource
would list is checked from counts alone, before any device list is built, and it keeps the
ListAndWatch message far below gRPC's 4 MiB default."""

from __future__ import annotations

import time
import uuid

import pytest

from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp
from kubegpu.sharing.config import (
    MAX_DEVICES_PER_RESOURCE,
    MAX_REPLICAS,
    SharingConfigError,
    parse_config,
)
from kubegpu.sharing.devices import GpuFacts, MigFacts, StrategyError, advertise
from kubegpu.sharing.health import DEFAULT_IGNORED_XIDS, MAX_XID, MAX_XID_ITEMS, XidPolicy

GRPC_DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024


def ts(replicas: object, name: str = "gpu") -> str:
    return (
        f"sharing:\n  timeSlicing:\n    resources:\n    - {{name: {name}, replicas: {replicas}}}\n"
    )


def gpus(n: int, *, mig: int = 0) -> list[GpuFacts]:
    return [
        GpuFacts(
            index=i,
            uuid=f"GPU-{uuid.uuid4()}",
            product="NVIDIA H200 NVL",
            memory_mib=143771,
            compute_capability=(9, 0),
            mig_capable=True,
            mig_enabled=mig > 0,
            mig_devices=tuple(
                MigFacts(
                    index=k,
                    uuid=f"MIG-{uuid.uuid4()}",
                    profile="1g.18gb",
                    gi=k + 1,
                    ci=0,
                    full=True,
                    memory_mib=16384,
                    multiprocessors=16,
                    gi_slices=1,
                    ci_slices=1,
                )
                for k in range(mig)
            ),
            numa_node=1,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("replicas", [MAX_REPLICAS + 1, 10_000, 10_000_000, 10**30])
def test_a_replica_count_over_the_bound_is_refused_when_the_config_is_read(
    replicas: int,
) -> None:
    started = time.monotonic()
    with pytest.raises(SharingConfigError) as err:
        parse_config(ts(replicas), "c.yaml")
    assert time.monotonic() - started < 1.0  # refused before any work
    message = str(err.value)
    assert message.startswith("c.yaml: field sharing.timeSlicing.resources.0.replicas")
    assert f"must be <= {MAX_REPLICAS}" in message
    assert len(message) < 300  # a huge value is quoted only in part


def test_mps_replicas_share_the_bound() -> None:
    text = ts(MAX_REPLICAS + 1).replace("timeSlicing", "mps")
    with pytest.raises(SharingConfigError, match=f"must be <= {MAX_REPLICAS}"):
        parse_config(text, overrides={"MPS_ROOT": "/run/nvidia/mps"})


def test_the_bound_itself_is_accepted() -> None:
    config = parse_config(ts(MAX_REPLICAS))
    assert config.sharing.time_slicing is not None
    assert config.sharing.time_slicing.resources[0].replicas == MAX_REPLICAS


@pytest.mark.parametrize(
    ("node", "replicas", "config"),
    [
        (gpus(17), MAX_REPLICAS, ts(MAX_REPLICAS)),
        (gpus(8, mig=7), 300, "flags: {migStrategy: mixed}\n" + ts(300, "mig-1g.18gb")),
    ],
)
def test_a_resource_over_the_device_bound_is_refused_before_its_list_is_built(
    node: list[GpuFacts], replicas: int, config: str
) -> None:
    with pytest.raises(StrategyError, match=f"more than the {MAX_DEVICES_PER_RESOURCE}"):
        advertise(node, parse_config(config))


def test_a_renamed_resource_counts_only_its_replicas() -> None:
    per_gpu = MAX_DEVICES_PER_RESOURCE // 16
    config = parse_config(ts(per_gpu).replace("replicas:", "rename: gpu.shared, replicas:"))
    advertised = advertise(gpus(16), config)
    assert advertised.counts() == {"nvidia.com/gpu.shared": MAX_DEVICES_PER_RESOURCE}


def test_the_largest_listing_stays_far_below_grpcs_message_limit() -> None:
    """The bound's reason, measured: the longest device ids (replica numbers of four
    digits), every device unhealthy and with a NUMA node."""
    config = parse_config(ts(MAX_REPLICAS))
    node = gpus(MAX_DEVICES_PER_RESOURCE // MAX_REPLICAS)
    (devices,) = advertise(node, config).resources.values()
    assert len(devices) == MAX_DEVICES_PER_RESOURCE
    listing = dp.ListAndWatchResponse(
        devices=[
            dp.Device(
                ID=d.id,
                health="Unhealthy",
                topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=d.numa_node or 0)]),
            )
            for d in devices
        ]
    )
    size = listing.ByteSize()
    assert size / len(devices) <= 68
    assert size < GRPC_DEFAULT_MAX_MESSAGE / 3


# -- the health-check variables ------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    ["9" * 5000, "4294967296", "²", "٣", "-1", "0x30", "1e3"],
    ids=["5000-digits", "over-32-bit", "superscript", "arabic-digit", "negative", "hex", "exp"],
)
def test_an_xid_that_is_not_a_32_bit_decimal_is_reported_not_a_crash(entry: str) -> None:
    policy = XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": f"48,{entry}"})
    assert policy.ignored == DEFAULT_IGNORED_XIDS | {48}
    (bad,) = policy.invalid
    assert bad.startswith("DP_DISABLE_HEALTHCHECKS=") and len(bad) < 60


def test_the_largest_xid_is_accepted() -> None:
    assert XidPolicy.from_env({"DP_ENABLE_HEALTHCHECKS": "4294967295"}).forced == {MAX_XID}


def test_a_list_longer_than_the_bound_keeps_its_first_entries_and_says_so() -> None:
    policy = XidPolicy.from_env({"DP_ENABLE_HEALTHCHECKS": ",".join(map(str, range(5000)))})
    assert policy.forced == frozenset(range(MAX_XID_ITEMS))
    assert policy.invalid == (
        f"DP_ENABLE_HEALTHCHECKS: {5000 - MAX_XID_ITEMS} entries past the first {MAX_XID_ITEMS}",
    )


# -- GPU feature discovery's sleep interval --------------------------------------------------------


@pytest.mark.parametrize("interval", ["0s", "500ms", "9000h", "9" * 400 + "s"])
def test_a_sleep_interval_out_of_bounds_is_refused(interval: str) -> None:
    with pytest.raises(SharingConfigError, match=r"field flags\.gfd\.sleepInterval") as err:
        parse_config(f"flags: {{gfd: {{sleepInterval: '{interval}'}}}}", "c.yaml")
    assert "a sleep interval must be between 1s and 8760h" in str(err.value)
    assert len(str(err.value)) < 300


@pytest.mark.parametrize("interval", ["1s", "60s", "8760h", "infinite"])
def test_a_sleep_interval_within_bounds_is_accepted(interval: str) -> None:
    config = parse_config(f"flags: {{gfd: {{sleepInterval: '{interval}'}}}}")
    assert config.flags.gfd.sleep_interval == interval
