"""The node's devices as DRA publishes them: upstream's names, attributes and capacities,
no index, and pools that say how many slices they have."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubegpu.dra.slices import (
    DEVICE_NAME,
    MAX_DEVICES_PER_SLICE,
    DraGpu,
    DraMig,
    MigEngines,
    NodeGpus,
    brand_of,
    devices,
    mig_device_name,
    node_owner,
    resource_slices,
    semver,
    slice_devices,
)


def _gpu(minor: int, *, index: int | None = None, migs: tuple[DraMig, ...] = ()) -> DraGpu:
    return DraGpu(
        index=minor if index is None else index,
        minor=minor,
        uuid=f"GPU-{minor}",
        product_name="NVIDIA H200",
        architecture="Hopper",
        compute_capability=(9, 0),
        pci_bus_id=f"00000000:{minor + 0x18:02x}:00.0",
        memory_mib=143771,
        mig_enabled=bool(migs),
        migs=migs,
    )


def _mig(uuid: str, profile: str, gi_profile: int, start: int, size: int) -> DraMig:
    return DraMig(
        uuid=uuid,
        profile=profile,
        gi_profile_id=gi_profile,
        start=start,
        size=size,
        memory_mib=16384 * size,
        multiprocessors=16 * size,
        engines=MigEngines(copy=size, decoders=size, encoders=0, jpeg=1, ofa=0),
    )


NODE = NodeGpus(driver_version="580.82.07", cuda_driver_version=(13, 0), gpus=(_gpu(0), _gpu(1)))


def test_whole_gpus_are_named_by_minor_not_index() -> None:
    node = NodeGpus("580.82.07", (13, 0), (_gpu(3, index=0), _gpu(1, index=1)))
    assert [d.name for d in devices(node)] == ["gpu-1", "gpu-3"]


def test_whole_gpu_attributes_and_capacity() -> None:
    dev = devices(NODE)[0].to_json()
    assert dev == {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-0"},
            "productName": {"string": "NVIDIA H200"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.82.7"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
        },
        "capacity": {"memory": {"value": "143771Mi"}},
    }


def test_no_index_or_minor_attribute_is_published() -> None:
    node = NodeGpus(
        "580.82.07",
        (13, 0),
        (_gpu(0), _gpu(1, migs=(_mig("MIG-a", "1g.18gb", 19, 2, 1),))),
    )
    for dev in devices(node):
        assert not {"index", "minor", "parentIndex", "pcieBusID"} & set(dev.to_json()["attributes"])


def test_mig_devices_replace_their_parent() -> None:
    migs = (
        _mig("MIG-b", "3g.71gb", 9, 4, 4),
        _mig("MIG-a", "1g.18gb", 19, 0, 1),
    )
    node = NodeGpus("580.82.07", (13, 0), (_gpu(0, migs=migs), _gpu(1)))
    assert [d.name for d in devices(node)] == [
        "gpu-0-mig-1g18gb-19-0",
        "gpu-0-mig-3g71gb-9-4",
        "gpu-1",
    ]
    small = devices(node)[0].to_json()
    assert small["attributes"]["type"] == {"string": "mig"}
    assert small["attributes"]["uuid"] == {"string": "MIG-a"}
    assert small["attributes"]["parentUUID"] == {"string": "GPU-0"}
    assert small["attributes"]["profile"] == {"string": "1g.18gb"}
    assert small["attributes"]["productName"] == {"string": "NVIDIA H200"}
    assert small["attributes"]["brand"] == {"string": "Nvidia"}
    big = devices(node)[1].to_json()
    assert big["capacity"] == {
        "multiprocessors": {"value": "64"},
        "copyEngines": {"value": "4"},
        "decoders": {"value": "4"},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": "1"},
        "ofaEngines": {"value": "0"},
        "memory": {"value": "65536Mi"},
        **{f"memorySlice{i}": {"value": "1"} for i in range(4, 8)},
    }


def test_every_device_fits_the_api_limit_of_32_attributes_and_capacities() -> None:
    node = NodeGpus("580.82.07", (13, 0), (_gpu(0, migs=(_mig("M", "7g.141gb", 0, 0, 8),)),))
    (dev,) = devices(node)
    data = dev.to_json()
    assert len(data["attributes"]) + len(data["capacity"]) <= 32


def test_two_compute_instances_of_one_gpu_instance_publish_once() -> None:
    migs = (_mig("MIG-1", "1c.2g.35gb", 14, 0, 2), _mig("MIG-2", "1c.2g.35gb", 14, 0, 2))
    (dev,) = devices(NodeGpus("1.2.3", (13, 0), (_gpu(0, migs=migs),)))
    assert dev.uuid == "MIG-1"


@pytest.mark.parametrize(
    ("profile", "name"),
    [
        ("1g.18gb", "gpu-2-mig-1g18gb-19-3"),
        ("1g.18gb+me", "gpu-2-mig-1g18gbme-19-3"),
        ("1c.2g.35gb", "gpu-2-mig-1c2g35gb-19-3"),
    ],
)
def test_mig_names_are_dns_labels_matching_upstreams_pattern(profile: str, name: str) -> None:
    assert mig_device_name(2, profile, 19, 3) == name
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    m = DEVICE_NAME.match(name)
    assert m is not None
    assert m.groups()[0] == "2"
    assert m.groups()[2:] == ("19", "3")


@pytest.mark.parametrize(
    ("raw", "version"),
    [("580.82.07", "580.82.7"), ("9.0", "9.0.0"), ("13", "13.0.0"), ("1.2.3.4", "1.2.3")],
)
def test_versions_are_semver(raw: str, version: str) -> None:
    assert semver(raw) == version


def test_a_version_that_is_not_numeric_is_refused() -> None:
    with pytest.raises(ValueError, match="'r580'"):
        semver("r580")


def test_the_pool_is_the_node_and_the_slice_is_owned_by_it() -> None:
    owner = node_owner("node-a", "uid-1")
    (s,) = resource_slices("node-a", devices(NODE), 7, owner)
    assert s["apiVersion"] == "resource.k8s.io/v1"
    assert s["metadata"] == {"generateName": "node-a-gpu.nvidia.com-", "ownerReferences": [owner]}
    assert s["spec"]["driver"] == "gpu.nvidia.com"
    assert s["spec"]["nodeName"] == "node-a"
    assert s["spec"]["pool"] == {"name": "node-a", "generation": 7, "resourceSliceCount": 1}
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_an_empty_node_publishes_one_empty_slice() -> None:
    (s,) = resource_slices("n", [], 1)
    assert s["spec"]["devices"] == []
    assert s["spec"]["pool"]["resourceSliceCount"] == 1


@given(st.integers(min_value=0, max_value=3 * MAX_DEVICES_PER_SLICE))
def test_large_pools_split_into_complete_slices(n: int) -> None:
    node = NodeGpus("580.82.07", (13, 0), tuple(_gpu(i) for i in range(n)))
    devs = devices(node)
    slices = resource_slices("n", devs, 3)
    assert all(len(s["spec"]["devices"]) <= MAX_DEVICES_PER_SLICE for s in slices)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert [d["name"] for d in slice_devices(slices)] == [d.name for d in devs]


@pytest.mark.parametrize(
    ("product", "brand"),
    [
        ("NVIDIA H200 NVL", "Nvidia"),
        ("NVIDIA L4", "Nvidia"),
        ("NVIDIA A100-SXM4-80GB", "Nvidia"),
        ("NVIDIA RTX 6000 Ada Generation", "NvidiaRTX"),
        ("NVIDIA GeForce RTX 4090", "GeForceRTX"),
        ("NVIDIA GeForce GTX 1080", "GeForce"),
        ("Tesla V100-SXM2-16GB", "Tesla"),
        ("Quadro RTX 8000", "QuadroRTX"),
    ],
)
def test_brand_follows_nvmls_brand_names(product: str, brand: str) -> None:
    assert brand_of(product) == brand


def test_a_brand_the_backend_reports_wins() -> None:
    gpu = replace(_gpu(0), brand="Tesla")
    (dev,) = devices(NodeGpus("580.82.07", (13, 0), (gpu,)))
    assert dev.to_json()["attributes"]["brand"] == {"string": "Tesla"}
