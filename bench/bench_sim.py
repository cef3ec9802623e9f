"""The simulated cluster: node registration, pod start latency, and how many nodes one
process carries.

Targets (issue: the simulated cluster): 100 nodes x 8 GPUs with heartbeats under one
core. Also reported: node registration time, and bind -> Allocate -> Running latency
for 100 pods that each take one device.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lightkube import AsyncClient, KubeConfig
from lightkube.models.core_v1 import Container, PodSpec, ResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.integration.fake_plugin import FakePlugin

SCALE_NODES = int(os.environ.get("BENCH_SIM_NODES", "100"))
PODS = 100
CPU_WINDOW_S = 30.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _ready(client: AsyncClient, name: str) -> None:
    while True:
        try:
            node = await client.get(Node, name)
            if node.status and any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            ):
                return
        except Exception:
            pass
        await asyncio.sleep(0.05)


async def _bench(cp: ControlPlane, tmp: Path) -> int:
    client = AsyncClient(KubeConfig.from_file(cp.kubeconfig_path))
    # -- node registration --------------------------------------------------------------
    reg = []
    nodes: list[SimNode] = []
    for i in range(5):
        t = time.perf_counter()
        node = SimNode(
            SimNodeConfig(name=f"reg-{i}", root=tmp / f"reg-{i}", gpus="h200:8"), cp.kubeconfig_path
        )
        await node.start()
        await _ready(client, node.name)
        reg.append(time.perf_counter() - t)
        nodes.append(node)
    print(f"node registration to Ready: median {statistics.median(reg) * 1000:.0f} ms")
    # -- 100 pods, one device each ---------------------------------------------------------
    plugin = FakePlugin(
        nodes[0].devices.plugin_dir, "example.com/dev", [f"dev-{i:03d}" for i in range(PODS)]
    )
    await plugin.start()
    while (await client.get(Node, nodes[0].name)).status.allocatable.get("example.com/dev") != str(
        PODS
    ):
        await asyncio.sleep(0.05)
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    watcher = asyncio.create_task(_watch_running(client, running))
    await asyncio.sleep(0.5)
    t0 = time.perf_counter()
    for i in range(PODS):
        pod = Pod(
            metadata=ObjectMeta(name=f"p{i}"),
            spec=PodSpec(
                nodeSelector={"kubernetes.io/hostname": nodes[0].name},
                containers=[
                    Container(
                        name="c",
                        image="example/app:1",
                        resources=ResourceRequirements(limits={"example.com/dev": "1"}),
                    )
                ],
            ),
        )
        created[f"p{i}"] = time.perf_counter()
        await client.create(pod, namespace="default")
    while len(running) < PODS and time.perf_counter() - t0 < 120:
        await asyncio.sleep(0.1)
    watcher.cancel()
    lat = [running[n] - created[n] for n in running]
    total = max(running.values()) - t0 if running else float("nan")
    print(
        f"{len(running)}/{PODS} pods create -> scheduled -> Allocate -> Running: p50 {_pct(lat, 0.5) * 1000:.0f} ms, "
        f"p99 {_pct(lat, 0.99) * 1000:.0f} ms, all running after {total:.1f} s; Allocate calls {len(plugin.allocate_calls)}"
    )
    await plugin.stop()
    for n in nodes:
        await n.stop()
    # -- many nodes in one process --------------------------------------------------------------
    t = time.perf_counter()
    many = []
    for i in range(SCALE_NODES):
        node = SimNode(
            SimNodeConfig(name=f"scale-{i:03d}", root=tmp / f"s{i:03d}", gpus="h200:8"),
            cp.kubeconfig_path,
        )
        await node.start()
        many.append(node)
    started = time.perf_counter() - t
    c0, w0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(CPU_WINDOW_S)
    cores = (time.process_time() - c0) / (time.perf_counter() - w0)
    ready = sum(1 for n in await _list_nodes(client) if n.startswith("scale-"))
    print(
        f"{SCALE_NODES} nodes x 8 GPUs: started in {started:.1f} s, {ready} registered; "
        f"steady state with lease heartbeats uses {cores:.2f} cores (target < 1)"
    )
    for n in many:
        await n.stop()
    await client.close()
    return 0 if cores < 1.0 and len(running) == PODS else 1


async def _list_nodes(client: AsyncClient) -> list[str]:
    return [n.metadata.name async for n in client.list(Node) if n.metadata and n.metadata.name]


async def _watch_running(client: AsyncClient, running: dict[str, float]) -> None:
    async for _, pod in client.watch(Pod, namespace="default"):
        if pod.status and pod.status.phase == "Running" and pod.metadata and pod.metadata.name:
            running.setdefault(pod.metadata.name, time.perf_counter())


def run() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="kgb-", dir="/tmp"))
    try:
        with ControlPlane(tmp / "cp") as cp:
            return asyncio.run(_bench(cp, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
