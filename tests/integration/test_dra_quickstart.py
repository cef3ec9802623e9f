"""NVIDIA's DRA quickstart specs (`gpu-test1` … `gpu-test5`, `gpu-test-mps`; our own copies of
their shapes in tests/data/dra/quickstart/) applied as a user would, on the real control
plane with the real scheduler, against `kubegpu dra-plugin` on simulated nodes: every pod is
allocated and runs, each container gets the devices and the sharing its spec's comments say
(distinct or shared UUIDs, MPS only on the MPS GPU, the time-slice interval only on the
time-sliced one), and everything is unprepared once the pods are deleted.

The specs' containers run `bash -c "nvidia-smi -L; ..."`, which today's simulator cannot run;
the test gives each container a sleeping command instead and asserts on what the container
is handed: the environment its CDI devices add (the simulated kubelet reads the plugin's CDI
spec as the runtime would) and the plugin's prepared state (the MPS daemon's limits)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod

from kube_objects import status_of
from kubegpu.catalog import nvidia
from kubegpu.sim.controlplane.plane import ControlPlane

from .dra_stack import SLEEP, DraCluster, dra_cluster
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

SPECS = Path(__file__).resolve().parents[1] / "data" / "dra" / "quickstart"
GATES = "TimeSlicingSettings=true,MPSSupport=true"
GPUS = "qs-gpus"
MIG = "qs-mig"
#: the 40 GB A100 layout gpu-test4 needs: one of each size it asks for, two 1g.5gb
MIG_LAYOUT = {MIG: {0: ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]}}
VISIBLE = nvidia.NVIDIA_VISIBLE_DEVICES
PIPE = nvidia.CUDA_MPS_PIPE_DIRECTORY
INTERVAL = "KUBEGPU_DRA_TIMESLICE_INTERVAL"


def load(spec: str) -> list[dict[str, Any]]:
    """The spec's objects; each container's command replaced by one the simulator runs."""
    docs = [d for d in yaml.safe_load_all((SPECS / f"{spec}.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "Pod":
            d["spec"]["terminationGracePeriodSeconds"] = 1
            for c in d["spec"]["containers"]:
                c["command"], c["image"] = list(SLEEP), "ghcr.io/kubegpu/kubegpu:test"
                c.pop("args", None)
    return docs


@pytest.fixture
async def cluster(
    control_plane: ControlPlane, akube: AsyncClient, tmp_path: Path, request: Any
) -> AsyncIterator[DraCluster]:
    nodes = {f"{GPUS}-{request.node.callspec.id}": "h200-nvl:2"}
    mig: dict[str, Any] = {}
    if request.node.callspec.id == "gpu-test4":
        nodes = {f"{MIG}-4": "a100-40gb:1"}
        mig = {f"{MIG}-4": MIG_LAYOUT[MIG]}
    async with dra_cluster(
        control_plane, akube, nodes, tmp_path, feature_gates=GATES, mig=mig
    ) as c:
        yield c


Seen = dict[tuple[str, str], dict[str, str]]  # (pod, container) -> its CDI environment


async def run(akube: AsyncClient, cluster: DraCluster, namespace: str, spec: str) -> Seen:
    """Apply the spec, wait for every pod to run, and read what each container got."""
    docs = load(spec)
    for d in docs:
        await akube.create(from_dict(d), namespace=namespace)  # type: ignore[call-overload]
    pods = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]

    async def all_running() -> list[Any] | None:
        got = [await akube.get(Pod, p, namespace=namespace) for p in pods]
        return got if all(status_of(p).phase == "Running" for p in got) else None

    running = cast(list[Any], await eventually(all_running, timeout=120))
    seen: Seen = {}
    for pod in running:
        node = cluster.nodes[pod.spec.nodeName]  # placed by the scheduler on a DRA node
        for c in pod.spec.containers:
            seen[(pod.metadata.name, c.name)] = node.dra.container_env(pod.metadata.uid, c.name)
    return seen


async def delete_and_check_unprepared(
    akube: AsyncClient, cluster: DraCluster, namespace: str, spec: str
) -> None:
    for d in reversed(load(spec)):
        await akube.delete(
            cast(Any, type(from_dict(d))), d["metadata"]["name"], namespace=namespace
        )

    async def unprepared() -> bool:
        for node in cluster.nodes.values():
            plugin_dir = node.root / "var/lib/kubelet/plugins" / nvidia.DRA_DRIVER
            if node.dra.claims or list((node.root / "var/run/cdi").glob("*claim_*")):
                return False
            if any((plugin_dir / "mps").glob("*")):
                return False
        return True

    await eventually(unprepared, timeout=60)


def mps_limits(cluster: DraCluster) -> list[dict[str, Any]]:
    """Every MPS daemon the plugins run, as their limits record it."""
    return [
        json.loads(p.read_text())
        for node in cluster.nodes.values()
        for p in (node.root / "var/lib/kubelet/plugins" / nvidia.DRA_DRIVER / "mps").glob(
            "*/limits.json"
        )
    ]


@pytest.mark.parametrize(
    "spec", ["gpu-test1", "gpu-test2", "gpu-test3", "gpu-test4", "gpu-test5", "gpu-test-mps"]
)
async def test_quickstart_spec(
    spec: str, cluster: DraCluster, akube: AsyncClient, namespace: str
) -> None:
    seen = await run(akube, cluster, namespace, spec)
    uuid = {k: env[VISIBLE] for k, env in seen.items()}
    assert all(u and "," not in u for u in uuid.values()), uuid  # one device each
    if spec == "gpu-test1":  # two pods, a claim each: two GPUs
        assert uuid[("pod1", "ctr")] != uuid[("pod2", "ctr")]
    elif spec == "gpu-test2":  # two containers, one claim: one GPU
        assert uuid[("pod", "ctr0")] == uuid[("pod", "ctr1")]
    elif spec == "gpu-test3":  # two pods, one claim: one GPU
        assert uuid[("pod1", "ctr")] == uuid[("pod2", "ctr")]
    elif spec == "gpu-test4":  # four MIG devices of one parent, one per container
        assert len(set(uuid.values())) == 4 and all(u.startswith("MIG-") for u in uuid.values())
        devices = await cluster.devices(akube, f"{MIG}-4")
        by_uuid = {d["attributes"]["uuid"]["string"]: d["attributes"] for d in devices.values()}
        profiles = {k[1]: by_uuid[u]["profile"]["string"] for k, u in uuid.items()}
        assert profiles == {
            "ctr0": "1g.5gb",
            "ctr1": "1g.5gb",
            "ctr2": "2g.10gb",
            "ctr3": "3g.20gb",
        }
        assert len({by_uuid[u]["parentUUID"]["string"] for u in uuid.values()}) == 1
    if spec == "gpu-test5":
        ts = [seen[("pod", c)] for c in ("ts-ctr0", "ts-ctr1")]
        mps = [seen[("pod", c)] for c in ("mps-ctr0", "mps-ctr1")]
        assert ts[0][VISIBLE] == ts[1][VISIBLE] != mps[0][VISIBLE] == mps[1][VISIBLE]
        assert all(e[INTERVAL] == "Long" and PIPE not in e for e in ts), ts
        assert all(PIPE in e and INTERVAL not in e for e in mps), mps
        (daemon,) = mps_limits(cluster)
        assert [d["uuid"] for d in daemon["devices"]] == [mps[0][VISIBLE]]
        assert daemon["devices"][0]["pinnedDeviceMemoryLimitMiB"] == 10240
        assert daemon["devices"][0]["activeThreadPercentage"] == 50
    elif spec == "gpu-test-mps":
        a, b = seen[("pod", "mps-ctr0")], seen[("pod", "mps-ctr1")]
        assert a[VISIBLE] == b[VISIBLE] and a[PIPE] == b[PIPE]
        (daemon,) = mps_limits(cluster)
        assert [d["uuid"] for d in daemon["devices"]] == [a[VISIBLE]]
    else:  # no sharing config: nobody is an MPS client or told of an interval
        assert all(PIPE not in e and INTERVAL not in e for e in seen.values()), seen
        assert mps_limits(cluster) == []
    await delete_and_check_unprepared(akube, cluster, namespace, spec)
