"""The operator: a ClusterPolicy change to every affected DaemonSet updated, at 10 and 100 nodes.

Targets (issue: operator): under 5 s at 100 nodes, and the API requests the operator makes
for a spec change do not grow with the number of nodes.

The real control plane, the operator in-process (so its request counters can be read), and
N simulated GPU nodes whose pods run without a process (the operands' own start-up is not
what is measured). For each N: install a ClusterPolicy and wait until it is ready (all
DaemonSets rolled out on all N nodes); then change `mig.strategy` and measure
- "updated": until every DaemonSet that carries the strategy has the new spec and the
  DaemonSet controller has observed it (the operator's part);
- "rolled out": until the ClusterPolicy is ready again (pods replaced on every node);
- the operator's API requests between the change and "updated", by verb.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.types import PatchType

from kubegpu.kube.crds import crd_manifests
from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator.controller import FIELD_MANAGER, Operator, OperatorConfig
from kubegpu.operator.render import HASH_ANNOTATION
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

SIZES = [int(n) for n in os.environ.get("BENCH_OPERATOR_NODES", "10,100").split(",")]
NAMESPACE = "gpu-operator"
UPDATED_TARGET_S = 5.0
STRATEGY_DAEMONSETS = {
    "nvidia-device-plugin-daemonset",
    "nvidia-device-plugin-mps-control-daemon",
    "gpu-feature-discovery",
    "nvidia-operator-validator",
}
POLICY: dict[str, Any] = {
    "mig": {"strategy": "single"},
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.18.1",
    },
    "dcgm": {"enabled": False},
}


async def _until(check: Any, timeout: float, interval: float = 0.05) -> float:
    t0 = time.perf_counter()
    while not await check():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{check.__name__} not met in {timeout:.0f}s")
        await asyncio.sleep(interval)
    return time.perf_counter() - t0


async def _round(cp: ControlPlane, tmp: Path, size: int) -> dict[str, Any]:
    config = KubeConfig.from_file(cp.kubeconfig_path)
    client = AsyncClient(config, field_manager="kubegpu-bench")
    nodes: list[SimNode] = []
    op = Operator(
        AsyncClient(config, field_manager=FIELD_MANAGER), OperatorConfig(namespace=NAMESPACE)
    )
    try:
        t = time.perf_counter()
        for i in range(size):
            node = SimNode(
                SimNodeConfig(
                    name=f"bo-{size}-{i:03d}",
                    root=tmp / f"n{size}-{i:03d}",
                    gpus="h100-80gb:1",
                    kubegpu_images=(),  # every pod runs without a process
                    lease_interval_s=30.0,
                ),
                cp.kubeconfig_path,
            )
            await node.start()
            nodes.append(node)
        nodes_s = time.perf_counter() - t
        await op.start()
        await op.wait_synced()

        async def daemonsets() -> dict[str, dict[str, Any]]:
            return {
                d.metadata.name: d.to_dict()
                async for d in client.list(DaemonSet, namespace=NAMESPACE)
            }

        async def ready() -> bool:
            policy = await client.get(ClusterPolicyResource, "bench")
            return bool((policy.get("status") or {}).get("state") == "ready")

        before_install = Counter(op.api.counts)
        await client.create(ClusterPolicyResource(metadata=ObjectMeta(name="bench"), spec=POLICY))
        install_s = await _until(ready, timeout=600, interval=0.5)
        install_requests = Counter(op.api.counts) - before_install
        old = {
            n: d["metadata"]["annotations"][HASH_ANNOTATION]
            for n, d in (await daemonsets()).items()
        }

        async def updated() -> bool:
            current = await daemonsets()
            for name in STRATEGY_DAEMONSETS:
                d = current[name]
                if d["metadata"]["annotations"][HASH_ANNOTATION] == old[name]:
                    return False
                if d.get("status", {}).get("observedGeneration", 0) < d["metadata"]["generation"]:
                    return False
            return True

        await asyncio.sleep(2.0)  # let the install's last status writes settle
        before = Counter(op.api.counts)
        await client.patch(
            ClusterPolicyResource,
            "bench",
            {"spec": {"mig": {"strategy": "mixed"}}},
            patch_type=PatchType.MERGE,
        )
        updated_s = await _until(updated, timeout=120)
        change_requests = Counter(op.api.counts) - before
        rolled_s = updated_s + await _until(ready, timeout=600, interval=0.5)
        untouched = {
            n
            for n, d in (await daemonsets()).items()
            if d["metadata"]["annotations"][HASH_ANNOTATION] == old[n]
        }
        return {
            "size": size,
            "nodes_s": nodes_s,
            "install_s": install_s,
            "install_requests": install_requests,
            "updated_s": updated_s,
            "rolled_s": rolled_s,
            "change_requests": change_requests,
            "untouched": untouched,
            "reconciles": op.reconciles,
        }
    finally:
        with contextlib.suppress(Exception):
            await client.delete(ClusterPolicyResource, "bench")
        await op.stop()
        await op.api.client.close()
        for node in nodes:
            await node.stop()
        for node in nodes:
            with contextlib.suppress(Exception):
                await client.delete(Node, node.name)
        await client.close()


async def _bench(cp: ControlPlane, tmp: Path) -> int:
    client = AsyncClient(KubeConfig.from_file(cp.kubeconfig_path), field_manager="kubegpu-bench")
    for crd in crd_manifests():
        await client.apply(CustomResourceDefinition.from_dict(crd), force=True)  # type: ignore[attr-defined]
    await client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
    await asyncio.sleep(1.0)
    await client.close()
    results = []
    for size in SIZES:
        r = await _round(cp, tmp, size)
        results.append(r)

        def verbs(c: Counter[str]) -> str:
            return ", ".join(f"{v} {n}" for v, n in sorted(c.items())) or "none"

        print(
            f"{size:>4} nodes: started in {r['nodes_s']:.1f} s; install -> ready {r['install_s']:.1f} s "
            f"({verbs(r['install_requests'])})"
        )
        print(
            f"      mig.strategy change -> {len(STRATEGY_DAEMONSETS)} DaemonSets updated {r['updated_s']:.2f} s, "
            f"rolled out on every node {r['rolled_s']:.1f} s; operator requests: {verbs(r['change_requests'])} "
            f"(total {sum(r['change_requests'].values())}); untouched: {len(r['untouched'])} DaemonSets"
        )
    largest = max(results, key=lambda r: r["size"])
    smallest = min(results, key=lambda r: r["size"])
    writes = ("apply", "delete", "patch", "status")
    flat = all(largest["change_requests"][v] <= smallest["change_requests"][v] for v in writes)
    fast = largest["updated_s"] < UPDATED_TARGET_S
    print(
        f"operator targets: updated at {largest['size']} nodes {largest['updated_s']:.2f} s "
        f"(target < {UPDATED_TARGET_S:.0f} s) {'met' if fast else 'MISSED'}; "
        f"writes for a spec change independent of node count: {'met' if flat else 'MISSED'}"
    )
    return 0 if fast and flat else 1


def run() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="kgbo-", dir="/tmp"))
    try:
        with ControlPlane(tmp / "cp") as cp:
            return asyncio.run(_bench(cp, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(run())
