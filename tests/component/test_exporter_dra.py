"""DRA attribution (`--kubernetes-enable-dra`): the devices of a pod's claims, as the
kubelet's pod-resources API lists them (driver, pool, device), land on the series of that
GPU or that MIG instance with the claim's `dra_*` labels; without the flag they do not."""

from __future__ import annotations

from test_exporter import FakeKubelet, MakeNode, kubelet, mig_node, scrape, serving, short_dir

__all__ = ["kubelet", "short_dir"]  # the fixtures, shared with test_exporter

from kubegpu.catalog import nvidia
from kubegpu.exporter.dra import (
    DeviceName,
    DraIndex,
    MigTarget,
    attribute_claims,
    parse_device_name,
)
from kubegpu.exporter.pods import EntityKey
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.podresources import ClaimDevice


def claim(kubelet: FakeKubelet, pod: str, container: str, name: str, *devices: str) -> None:
    kubelet.pods.append(
        pr.PodResources(
            name=pod,
            namespace="ml",
            containers=[
                pr.ContainerResources(
                    name=container,
                    dynamic_resources=[
                        pr.DynamicResource(
                            claim_name=name,
                            claim_namespace="ml",
                            claim_resources=[
                                pr.ClaimResource(
                                    driver_name=nvidia.DRA_DRIVER,
                                    pool_name="node-a",
                                    device_name=d,
                                )
                                for d in devices
                            ],
                        )
                    ],
                )
            ],
        )
    )


def mig_device_name(node: object, uuid: str) -> str:
    (m,) = [d for d in node.mig_devices(1) if d.uuid == uuid]  # type: ignore[attr-defined]
    return f"gpu-1-mig-{m.profile.replace('.', '')}-{m.gi_profile_id}-{m.placement.start}"


async def test_claims_are_attributed_to_their_gpu_and_mig_instance(
    sim_node: MakeNode, kubelet: FakeKubelet
) -> None:
    mig = mig_node(sim_node)
    small = mig_device_name(mig.node, mig.small)
    claim(kubelet, "trainer", "main", "trainer-gpu", "gpu-0")
    claim(kubelet, "notebook", "jupyter", "notebook-mig", small)
    async with serving(
        mig.node, kubernetes=True, enable_dra=True, pod_resources_socket=kubelet.socket
    ) as exporter:
        got = await scrape(exporter)

    (gpu,) = got.samples("DCGM_FI_DEV_FB_USED", gpu="0")
    assert gpu.labels["pod"] == "trainer" and gpu.labels["container"] == "main"
    assert gpu.labels["dra_claim_name"] == "trainer-gpu"
    assert gpu.labels["dra_claim_namespace"] == "ml"
    assert gpu.labels["dra_driver_name"] == "gpu.nvidia.com"
    assert gpu.labels["dra_pool_name"] == "node-a"
    assert gpu.labels["dra_device_name"] == "gpu-0"
    assert "dra_mig_profile" not in gpu.labels

    (inst,) = got.samples("DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID=mig.small_gi)
    assert inst.labels["pod"] == "notebook"
    assert inst.labels["dra_device_name"] == small
    assert inst.labels["dra_mig_profile"] == "1g.10gb"
    assert inst.labels["dra_mig_device_uuid"] == mig.small
    (other,) = got.samples("DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID=mig.big_gi)
    assert "pod" not in other.labels  # only the claimed instance, not the whole parent


async def test_without_the_flag_claims_are_not_attributed(
    sim_node: MakeNode, kubelet: FakeKubelet
) -> None:
    node = sim_node("l4:1;seed=noflag")
    claim(kubelet, "trainer", "main", "trainer-gpu", "gpu-0")
    async with serving(node, kubernetes=True, pod_resources_socket=kubelet.socket) as exporter:
        got = await scrape(exporter)
    (s,) = got.samples("DCGM_FI_DEV_FB_USED", gpu="0")
    assert "pod" not in s.labels and "dra_claim_name" not in s.labels


async def test_a_claim_shared_by_two_containers_gives_each_its_series(
    sim_node: MakeNode, kubelet: FakeKubelet
) -> None:
    node = sim_node("l4:1;seed=shared-claim")
    claim(kubelet, "pair", "first", "shared", "gpu-0")
    claim(kubelet, "pair", "second", "shared", "gpu-0")
    async with serving(
        node, kubernetes=True, enable_dra=True, pod_resources_socket=kubelet.socket
    ) as exporter:
        got = await scrape(exporter)
    containers = {s.labels["container"] for s in got.samples("DCGM_FI_DEV_FB_USED", gpu="0")}
    assert containers == {"first", "second"}


def test_device_names_parse_as_the_plugin_writes_them() -> None:
    assert parse_device_name("gpu-3") == DeviceName(3)
    assert parse_device_name("gpu-0-mig-1g18gb-19-4") == DeviceName(0, 19, 4)
    assert parse_device_name("gpu-0-mig-1g18gb+me-20-0") == DeviceName(0, 20, 0)
    assert parse_device_name("gpu-x") is None
    assert parse_device_name("nvidia0") is None


def test_other_drivers_unknown_devices_and_series_not_served_are_left_out() -> None:
    index = DraIndex({0: 0, 1: 1}, {(1, 19, 0): MigTarget(7, "1g.10gb", "MIG-a")})
    entities: frozenset[EntityKey] = frozenset({("gpu", 0), ("gi", 1, 7)})

    def held(driver: str, device: str) -> ClaimDevice:
        return ClaimDevice("ns", "p", "c", "claim", "ns", driver, "node-a", device)

    got = attribute_claims(
        [
            held("example.com/fpga", "gpu-0"),
            held(nvidia.DRA_DRIVER, "gpu-5"),  # no such minor
            held(nvidia.DRA_DRIVER, "gpu-1-mig-1g10gb-19-4"),  # no instance there
            held(nvidia.DRA_DRIVER, "gpu-1"),  # the GPU has MIG: no whole-GPU series
            held(nvidia.DRA_DRIVER, "gpu-1-mig-1g10gb-19-0"),
        ],
        index,
        entities,
    )
    assert list(got) == [("gi", 1, 7)]
    (info,) = got[("gi", 1, 7)]
    assert dict(info.labels)["dra_mig_device_uuid"] == "MIG-a"
