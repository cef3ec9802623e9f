"""Pod attribution: kubelet device IDs resolved to GPU and MIG-instance series."""

from __future__ import annotations

from kubegpu.exporter.pods import DeviceIndex, HeldDevice, PodInfo, attribute, resolve

GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"
MIG_A = "MIG-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
MIG_B = "MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"

# GPU 0 whole; GPU 1 in MIG mode with GPU instances 1 (MIG_A) and 13 (MIG_B)
NODE = DeviceIndex(
    gpu_by_uuid={GPU0: 0, GPU1: 1},
    gi_by_mig_uuid={MIG_A: (1, 1), MIG_B: (1, 13)},
    entities=frozenset({("gpu", 0), ("gi", 1, 1), ("gi", 1, 13)}),
)


def test_device_ids_of_every_kind_resolve_to_their_series() -> None:
    assert resolve(GPU0, NODE) == (("gpu", 0), None)
    assert resolve(MIG_B, NODE) == (("gi", 1, 13), None)
    assert resolve(f"{GPU0}::3", NODE) == (("gpu", 0), "3")  # time-slicing / MPS replica
    assert resolve(f"{MIG_A}::0", NODE) == (("gi", 1, 1), "0")
    assert resolve(f"MIG-{GPU1}/13/0", NODE) == (("gi", 1, 13), None)  # legacy MIG form
    assert resolve("nvidia0", NODE) == (("gpu", 0), None)  # GKE forms
    assert resolve("nvidia0/vgpu2", NODE) == (("gpu", 0), "2")
    assert resolve("nvidia1/gi13", NODE) == (("gi", 1, 13), None)


def test_ids_without_a_series_resolve_to_nothing() -> None:
    assert resolve("GPU-elsewhere", NODE) is None
    assert resolve(GPU1, NODE) is None  # a MIG GPU has no whole-GPU series
    assert resolve("nvidia1", NODE) is None
    assert resolve(f"MIG-{GPU1}/7/0", NODE) is None  # no such instance
    assert resolve("foo-0", NODE) is None


def held(pod: str, resource: str, device: str) -> HeldDevice:
    return HeldDevice("ns", pod, "c", resource, device)


def test_only_nvidia_resources_are_attributed_the_last_holder_winning() -> None:
    pods = attribute(
        [
            held("a", "nvidia.com/gpu.shared", f"{GPU0}::0"),
            held("b", "nvidia.com/gpu.shared", f"{GPU0}::1"),
            held("c", "nvidia.com/mig-1g.10gb", MIG_B),
            held("d", "example.com/other", MIG_A),
            held("e", "custom.io/renamed", MIG_A),
        ],
        NODE,
    )
    assert pods == {
        ("gpu", 0): [PodInfo("b", "ns", "c")],
        ("gi", 1, 13): [PodInfo("c", "ns", "c")],
    }
    renamed = attribute(
        [held("e", "custom.io/renamed", MIG_A)], NODE, resource_names=["custom.io/renamed"]
    )
    assert renamed == {("gi", 1, 1): [PodInfo("e", "ns", "c")]}


def test_virtual_gpu_mode_keeps_every_holder_with_its_replica() -> None:
    pods = attribute(
        [
            held("a", "nvidia.com/gpu", f"{GPU0}::0"),
            held("b", "nvidia.com/gpu", f"{GPU0}::1"),
            held("b", "nvidia.com/gpu", f"{GPU0}::1"),  # listed twice: counted once
        ],
        NODE,
        virtual_gpus=True,
    )
    assert pods == {("gpu", 0): [PodInfo("a", "ns", "c", "0"), PodInfo("b", "ns", "c", "1")]}
