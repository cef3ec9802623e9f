"""`kubegpu operator demo --dra`: the DRA stack on a simulated cluster.

kubegpu is installed by its chart with a GPUCluster instead of a ClusterPolicy
(`gpuCluster.deployCR=true`); the operator renders the DRA plugin, the DeviceClasses and
the exporter. One GPU node has whole GPUs and one GPU in MIG mode without instances, which
the plugin (gate `DynamicMIG`) publishes as partitionable devices. The example claims of
`examples/dra` are applied with their pods; the real kube-scheduler allocates them, the
pods run `nvidia-smi -L` and list the devices they were given. The MIG claim's device does
not exist until its pod is prepared and is destroyed once the pod is gone: the summary
shows it both ways.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate, ResourceSlice
from rich.console import Console
from rich.table import Table

from kubegpu.base.tasks import cancel_all
from kubegpu.catalog import nvidia
from kubegpu.kube.policy import GPUClusterResource
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.stack import Stack, StackError, _wait, present

Json = dict[str, Any]

DRA_NODE = "dra-gpu"
DRA_GPUS = "h200-nvl:6"
MIG_GPU = 5  # in MIG mode, no instances: dynamic MIG devices are cut from it
DRA_CLUSTER = ClusterSpec(name="kubegpu-dra-demo", nodes=[NodeEntry(name=DRA_NODE, gpus=DRA_GPUS)])
DRA_VALUES: Json = {
    "clusterPolicy": {"deployCR": False},
    "gpuCluster": {"deployCR": True},
    "draDriver": {"featureGates": {"DynamicMIG": True, "TimeSlicingSettings": True}},
}
DRA_NAMESPACE = "default"
_UUID = re.compile(r"UUID: ((?:GPU|MIG)-[0-9a-f-]+)")


def examples_dir(chart: Path) -> Path:
    """examples/dra of the checkout the chart is in."""
    path = chart.resolve().parents[2] / "examples" / "dra"
    if not path.is_dir():
        raise StackError(f"no examples/dra next to the chart {chart} (looked in {path})")
    return path


def load_examples(directory: Path) -> list[tuple[str, list[Json]]]:
    """Each example file's documents, as written (their pods' shells list their GPUs with
    `nvidia-smi -L`, then sleep)."""
    return [
        (path.stem, [d for d in yaml.safe_load_all(path.read_text()) if d])
        for path in sorted(directory.glob("*.yaml"))
    ]


def enable_mig(state: Path, index: int) -> None:
    with SimNvml(state) as gpus:
        gpus.set_mig_mode(index, True)
        if gpus.mig_mode(index).change_pending:
            gpus.reset(index)


def mig_devices(state: Path, index: int) -> list[str]:
    with SimNvml(state) as gpus:
        return [m.uuid for m in gpus.mig_devices(index)]


@dataclass(frozen=True)
class PodSummary:
    example: str
    pod: str
    phase: str
    devices: list[str]  # allocated: <pool>/<device>
    seen: list[str]  # UUIDs the containers' nvidia-smi -L listed


@dataclass(frozen=True)
class DraSummary:
    node: str
    gpus: str
    published: list[str]  # device names in the node's slices before any claim
    pods: list[PodSummary]
    dynamic_mig: str | None  # the MIG device created for the MIG claim
    dynamic_mig_destroyed: bool


async def gpu_cluster_state(stack: Stack) -> str | None:
    try:
        obj = dict(await stack.client.get(GPUClusterResource, "gpu-cluster"))
    except ApiError:
        return None
    state: str | None = (obj.get("status") or {}).get("state")
    return state


async def published_devices(stack: Stack, node: str) -> list[str]:
    names: list[str] = []
    async for s in stack.client.list(
        ResourceSlice, fields={"spec.driver": nvidia.DRA_DRIVER, "spec.nodeName": node}
    ):
        names += [str(d["name"]) for d in s.to_dict()["spec"].get("devices") or []]
    return sorted(names)


def _log_dir(stack: Stack, pod: Any) -> Path:
    root = stack.nodes[pod.spec.nodeName].root
    return (
        root / "var/log/pods" / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid}"
    )


def _listed(stack: Stack, pod: Any) -> bool:
    """Every container of the pod has printed its `nvidia-smi -L`."""
    directory = _log_dir(stack, pod)
    return all(
        any(_UUID.search(p.read_text()) for p in (directory / c.name).glob("*.log"))
        for c in pod.spec.containers
    )


def _logged_uuids(stack: Stack, pod: Any) -> list[str]:
    directory = _log_dir(stack, pod)
    text = "".join(p.read_text() for p in sorted(directory.glob("*/*.log")))
    uuids = sorted(set(_UUID.findall(text)))
    # `nvidia-smi -L` heads MIG devices with their parent GPU's line: the MIG devices are
    # what the container was given
    migs = [u for u in uuids if u.startswith("MIG-")]
    return migs or uuids


async def record_allocations(stack: Stack, namespace: str, into: dict[str, list[str]]) -> None:
    """Pod name -> <pool>/<device> of its claims, from the claims allocated now (a claim
    made from a template is deleted once its pod is done: look while they exist)."""
    async for claim in stack.client.list(ResourceClaim, namespace=namespace):
        obj = claim.to_dict()
        owners = [o["name"] for o in obj["metadata"].get("ownerReferences") or []]
        allocation = (obj.get("status") or {}).get("allocation") or {}
        results = allocation.get("devices", {}).get("results") or []
        for owner in owners:
            if results:
                into[owner] = [f"{r['pool']}/{r['device']}" for r in results]


async def run_dra_demo(stack: Stack, chart: Path, say: Callable[[str], None]) -> DraSummary:
    logs = stack.workdir

    async def ready() -> bool:
        return await gpu_cluster_state(stack) == "ready"

    await _wait("GPUCluster ready", ready, logs, state=lambda: _state(stack))
    say("GPUCluster gpu-cluster is ready: the DRA plugin and the exporter run on the GPU node")

    async def published() -> bool:
        return any("-mig-" in d for d in await published_devices(stack, DRA_NODE))

    await _wait("ResourceSlices published", published, logs, timeout=120)
    devices = await published_devices(stack, DRA_NODE)
    whole = [d for d in devices if "-mig-" not in d]
    say(
        f"{DRA_NODE} publishes {len(whole)} GPUs and {len(devices) - len(whole)} MIG "
        f"placements of GPU {MIG_GPU} (none exists yet)"
    )

    allocated: dict[str, list[str]] = {}

    async def watch_claims() -> None:
        while True:
            await record_allocations(stack, DRA_NAMESPACE, allocated)
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch_claims())
    pods: dict[str, str] = {}  # pod -> example
    for example, docs in load_examples(examples_dir(chart)):
        for doc in docs:
            doc["metadata"]["namespace"] = DRA_NAMESPACE
            if doc["kind"] == "ResourceClaimTemplate":
                template = cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict(doc))
                await stack.client.create(template)
            elif doc["kind"] == "Pod":
                await stack.client.create(cast(Pod, Pod.from_dict(doc)))
                pods[doc["metadata"]["name"]] = example
    say(f"applied {len(pods)} example pods with their ResourceClaimTemplates (examples/dra)")

    async def listed() -> bool:
        for name in pods:
            p = await stack.client.get(Pod, name, namespace=DRA_NAMESPACE)
            if not p.status or p.status.phase != "Running" or not _listed(stack, p):
                return False
        return True

    try:
        await _wait("example pods listed their GPUs", listed, logs, timeout=180)
    finally:
        await cancel_all([watcher])
    summaries = []
    dynamic = None
    for name, example in pods.items():
        p = await stack.client.get(Pod, name, namespace=DRA_NAMESPACE)
        seen = _logged_uuids(stack, p)
        if example.startswith("mig"):
            dynamic = next((u for u in seen if u.startswith("MIG-")), None)
        summaries.append(
            PodSummary(
                example,
                name,
                str(p.status.phase if p.status else "?"),
                allocated.get(name, []),
                seen,
            )
        )
    say(
        f"kube-scheduler allocated every claim; the MIG claim's device {dynamic or '?'} "
        "was created at prepare"
    )
    for name in pods:
        await stack.client.delete(Pod, name, namespace=DRA_NAMESPACE, grace_period=0)
    state = stack.nodes[DRA_NODE].gpu_state

    async def destroyed() -> bool:
        return not await asyncio.to_thread(mig_devices, state, MIG_GPU)

    await _wait("dynamic MIG device destroyed", destroyed, logs, timeout=120)
    say("pods deleted: claims unprepared, the dynamic MIG device destroyed")
    return DraSummary(DRA_NODE, DRA_GPUS, devices, summaries, dynamic, True)


async def _state(stack: Stack) -> str:
    return f"GPUCluster state {await gpu_cluster_state(stack)}"


def dra_summary_table(summary: DraSummary) -> Table:
    table = Table(title=f"DRA on a simulated cluster: {summary.node} ({summary.gpus})")
    for column in ("example", "pod", "phase", "allocated (pool/device)", "seen by nvidia-smi"):
        table.add_column(column)
    for p in summary.pods:
        table.add_row(
            p.example,
            p.pod,
            p.phase,
            "\n".join(p.devices) or "-",
            "\n".join(u[:16] for u in p.seen) or "-",
        )
    mig = summary.dynamic_mig or "-"
    gone = "destroyed" if summary.dynamic_mig_destroyed else "still there"
    table.caption = f"dynamic MIG device {mig[:16]}: created at prepare, {gone} at unprepare"
    return table


async def dra_demo(chart: Path, console: Console, *, keep: bool = False) -> DraSummary:
    """Start the cluster, install kubegpu with a GPUCluster, run the example claims, print
    the summary. The work directory is removed unless the demo failed."""
    return await present(
        DRA_CLUSTER,
        chart,
        console,
        values=DRA_VALUES,
        run=lambda stack, step: run_dra_demo(stack, chart, step),
        table=dra_summary_table,
        keep=keep,
        prefix="kubegpu-dra-",
        before_install=lambda stack: enable_mig(stack.nodes[DRA_NODE].gpu_state, MIG_GPU),
    )
