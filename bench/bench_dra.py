"""The DRA plugin over its real sockets: NodePrepareResources latency for a static device and
for a dynamic MIG device, and the time from start to the node's ResourceSlices for 8 GPUs x
7 MIG devices.

Targets (issue #12): prepare p99 < 20 ms for a static device; slices published < 1 s;
pod create -> Running with one claim no more than 1.5x the same through a device plugin.

`kubegpu dra-plugin` runs in this process (DraPluginProgram) on a simulated H200 node, with
the API server replaced by an in-memory claim reader and a publisher that records when the
slices were handed over; this process also plays kubelet (gRPC client on the plugin's
socket, in the same event loop, so each figure includes the client's share).

The pod figure runs on the real control plane (kube-scheduler allocates the claims) with
two simulated nodes: one with the DRA plugin (in process, publishing through the API
server), one with a device plugin serving 8 devices (tests/integration/fake_plugin.py, the
one bench_sim uses); the same pods, one device each, 8 at a time, 3 rounds. The claim pods
run twice: from a ResourceClaimTemplate (the resource-claim controller makes each pod's
claim) and naming a ResourceClaim created before the pod. For both, a per-step breakdown:
timestamps from watches (claim created, claim allocated and reserved, pod bound, Running)
and from wrappers around the simulated kubelet's prepare and the plugin's (no code changed).
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate

from kubegpu.dra.classes import device_classes
from kubegpu.dra.partitions import Pool
from kubegpu.dra.program import DraPluginFlags, DraPluginProgram
from kubegpu.kube.kubelet import dra_v1_pb2 as dra
from kubegpu.kube.kubelet import dra_v1_pb2_grpc as dra_grpc
from kubegpu.kube.kubelet import unix_target
from kubegpu.node.gpus import sim_backend
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

sys.path.insert(0, str(Path(__file__).parents[1]))
import contextlib

from tests.integration.fake_plugin import FakePlugin

NODE = "bench-node"
PREPARE_TARGET_MS = 20.0
SLICES_TARGET_S = 1.0
STATIC_CALLS = 300
DYNAMIC_CALLS = 40
POD_RATIO_TARGET = 1.5
ROUNDS = 3
PER_ROUND = 8


class _Api:
    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))

    def add(self, name: str, uid: str, device: str) -> dra.Claim:
        self.claims[("bench", name)] = {
            "metadata": {"namespace": "bench", "name": name, "uid": uid},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.nvidia.com",
                                "pool": NODE,
                                "device": device,
                            }
                        ],
                        "config": [],
                    }
                }
            },
        }
        return dra.Claim(namespace="bench", name=name, uid=uid)


class _Publisher:
    def __init__(self) -> None:
        self.first: float | None = None
        self.devices = 0

    async def publish(self, pool: Pool, force: bool = False) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.devices = len(pool.devices)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _flags(root: Path, gates: str = "") -> DraPluginFlags:
    return DraPluginFlags(
        node_name=NODE,
        plugins_registry=root / "registry",
        plugins_dir=root / "plugins",
        cdi_root=root / "cdi",
        device_plugin_dir=None,
        feature_gates=gates or None,
        poll_s=1.0,
    )


async def _started(program: DraPluginProgram) -> asyncio.Task[None]:
    task = asyncio.create_task(program.run())
    ready = asyncio.create_task(program.ready.wait())
    await asyncio.wait({task, ready}, timeout=30, return_when="FIRST_COMPLETED")
    ready.cancel()
    if task.done():
        task.result()
    return task


async def _stop(program: DraPluginProgram, task: asyncio.Task[None]) -> None:
    program.stop()
    await asyncio.wait_for(task, 30)


async def _prepare_latency(
    root: Path, spec: str, device: str, calls: int, gates: str = "", mig_gpu: int | None = None
) -> list[float]:
    state = root / "gpus.json"
    with SimNvml.create(state, spec) as gpus:
        if mig_gpu is not None:
            gpus.set_mig_mode(mig_gpu, True)
            if gpus.mig_mode(mig_gpu).change_pending:
                gpus.reset(mig_gpu)
    api = _Api()
    program = DraPluginProgram(
        _flags(root, gates), sim_backend(state), read_claim=api.read, publisher=_Publisher()
    )
    task = await _started(program)
    times: list[float] = []
    try:
        async with grpc.aio.insecure_channel(unix_target(program.endpoint)) as channel:
            stub = dra_grpc.DRAPluginStub(channel)
            for i in range(calls + 5):
                claim = api.add(f"c{i}", f"uid-{i}", device)
                t = time.perf_counter()
                reply = await stub.NodePrepareResources(
                    dra.NodePrepareResourcesRequest(claims=[claim]), timeout=30
                )
                elapsed = (time.perf_counter() - t) * 1000
                error = reply.claims[claim.uid].error
                if error:
                    raise RuntimeError(f"prepare {device}: {error}")
                if i >= 5:  # warm-up
                    times.append(elapsed)
                await stub.NodeUnprepareResources(
                    dra.NodeUnprepareResourcesRequest(claims=[claim]), timeout=30
                )
    finally:
        await _stop(program, task)
    return times


async def _slices(root: Path) -> tuple[float, int]:
    """8 H200 in MIG mode with 7 x 1g.18gb each: seconds from start to the first publish."""
    state = root / "gpus.json"
    with SimNvml.create(state, "h200-nvl:8") as gpus:
        for index in range(8):
            gpus.set_mig_mode(index, True)
            if gpus.mig_mode(index).change_pending:
                gpus.reset(index)
            profile = next(p for p in gpus.gpu_instance_profiles(index) if p.name == "1g.18gb")
            for _ in range(7):
                gi = gpus.create_gpu_instance(index, profile.id)
                ci = next(
                    c
                    for c in gpus.compute_instance_profiles(index, gi.id)
                    if c.slice_count == profile.slice_count
                )
                gpus.create_compute_instance(index, gi.id, ci.id)
    publisher = _Publisher()
    program = DraPluginProgram(
        _flags(root), sim_backend(state), read_claim=_Api().read, publisher=publisher
    )
    t0 = time.perf_counter()
    task = await _started(program)
    try:
        while publisher.first is None:
            await asyncio.sleep(0.001)
    finally:
        await _stop(program, task)
    return publisher.first - t0, publisher.devices


def _pod(name: str, node: str, claim: str | None) -> Pod:
    container: dict[str, Any] = {"name": "c", "image": "example/app:1"}
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [container],
    }
    if claim == "template":
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    elif claim == "claim":
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-claim"}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        container["resources"] = {"limits": {"example.com/gpu": "1"}}
    return Pod.from_dict({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


ONE_GPU: dict[str, Any] = {
    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
}


def _claim(name: str) -> ResourceClaim:
    return ResourceClaim.from_dict(  # type: ignore[attr-defined,no-any-return]
        {"metadata": {"name": name, "namespace": "default"}, "spec": ONE_GPU}
    )


class Marks:
    """When each pod passed each step (first time seen), by pod name."""

    def __init__(self) -> None:
        self.at: dict[str, dict[str, float]] = {}

    def mark(self, pod: str, step: str) -> None:
        self.at.setdefault(pod, {}).setdefault(step, time.perf_counter())

    def breakdown(self, steps: list[str]) -> list[tuple[str, float, float]]:
        """(from -> to, p50 ms, p99 ms) for consecutive steps every pod passed."""
        out = []
        for a, b in itertools.pairwise(steps):
            d = [m[b] - m[a] for m in self.at.values() if a in m and b in m]
            if d:
                out.append((f"{a} -> {b}", statistics.median(d) * 1000, _pct(d, 0.99) * 1000))
        return out


def _owner(obj: Any) -> str | None:
    refs = obj.metadata.ownerReferences if obj.metadata else None
    return refs[0].name if refs else None


async def _rounds(
    client: AsyncClient, node: str, claim: str | None, prefix: str, marks: Marks | None = None
) -> tuple[list[float], list[float]]:
    """create -> Running seconds of ROUNDS x PER_ROUND pods, PER_ROUND at a time, and of
    those the create -> bound (scheduled) part. `claim`: None (device plugin), "template"
    (a ResourceClaimTemplate) or "claim" (a ResourceClaim created before the pod)."""
    marks = marks if marks is not None else Marks()
    out: list[float] = []
    bound_part: list[float] = []

    async def watch() -> None:
        async for _, pod in client.watch(Pod, namespace="default"):
            if not pod.metadata or not pod.metadata.name:
                continue
            if pod.spec and pod.spec.nodeName:
                marks.mark(pod.metadata.name, "bound")
            if pod.status and pod.status.phase == "Running":
                marks.mark(pod.metadata.name, "Running")

    async def watch_claims() -> None:
        async for _, obj in client.watch(ResourceClaim, namespace="default"):
            pod = _owner(obj) or (obj.metadata.name or "").removesuffix("-claim")
            marks.mark(pod, "claim created")
            status = obj.status
            if status is not None and status.allocation is not None and status.reservedFor:
                marks.mark(pod, "claim allocated")

    watchers = [asyncio.create_task(watch()), asyncio.create_task(watch_claims())]
    await asyncio.sleep(0.5)
    try:
        for r in range(ROUNDS):
            created: dict[str, float] = {}
            names = [f"{prefix}-{r}-{i}" for i in range(PER_ROUND)]
            if claim == "claim":
                for name in names:
                    await client.create(_claim(f"{name}-claim"))
                await asyncio.sleep(0.2)  # the claims reach the scheduler's informer
            for name in names:
                created[name] = time.perf_counter()
                marks.mark(name, "created")
                await client.create(_pod(name, node, claim))
            deadline = time.perf_counter() + 120
            while (
                any("Running" not in marks.at.get(n, {}) for n in created)
                and time.perf_counter() < deadline
            ):
                await asyncio.sleep(0.05)
            at = {n: marks.at.get(n, {}) for n in created}
            out += [m["Running"] - m["created"] for m in at.values() if "Running" in m]
            bound_part += [m["bound"] - m["created"] for m in at.values() if "bound" in m]
            for name in created:
                await client.delete(Pod, name, namespace="default", grace_period=0)
            while True:  # the devices come back once the pods are gone
                left = {p.metadata.name async for p in client.list(Pod, namespace="default")}
                if not left & set(created):
                    break
                await asyncio.sleep(0.1)
            if claim == "claim":
                for name in names:
                    await client.delete(ResourceClaim, f"{name}-claim", namespace="default")
    finally:
        for w in watchers:
            w.cancel()
    return out, bound_part


Figures = tuple[list[float], list[float]]
CLAIM_STEPS = [
    "created",
    "claim created",
    "claim allocated",
    "bound",
    "kubelet prepares",
    "plugin called",
    "plugin done",
    "kubelet prepared",
    "Running",
]


def _instrument(node: SimNode, program: DraPluginProgram, marks: Marks) -> None:
    """Timestamps from inside the simulated kubelet and the plugin (wrapping, no change)."""
    dra_manager = node.dra
    prepare_pod = dra_manager.prepare_pod
    preparer = program._preparer
    assert preparer is not None
    prepare = preparer.prepare

    async def timed_prepare_pod(pod: dict[str, Any], waiting: Any = None) -> None:
        name = pod["metadata"]["name"]
        marks.mark(name, "kubelet prepares")
        await prepare_pod(pod, waiting)
        marks.mark(name, "kubelet prepared")

    async def timed_prepare(refs: Any) -> Any:
        pods = [r.name.rsplit("-gpu-", 1)[0].removesuffix("-claim") for r in refs]
        for pod in pods:
            marks.mark(pod, "plugin called")
        out = await prepare(refs)
        for pod in pods:
            marks.mark(pod, "plugin done")
        return out

    dra_manager.prepare_pod = timed_prepare_pod  # type: ignore[method-assign]
    preparer.prepare = timed_prepare  # type: ignore[method-assign]


async def _pods(cp: ControlPlane, tmp: Path) -> tuple[Figures, Figures, Figures, list[Marks]]:
    client = AsyncClient(KubeConfig.from_file(cp.kubeconfig_path))
    dp_node = SimNode(
        SimNodeConfig(name="dp-node", root=tmp / "dp", gpus="h200-nvl:8"), cp.kubeconfig_path
    )
    dra_node = SimNode(
        SimNodeConfig(name="dra-node", root=tmp / "dra", gpus="h200-nvl:8"), cp.kubeconfig_path
    )
    await dp_node.start()
    await dra_node.start()
    plugin = FakePlugin(
        dp_node.devices.plugin_dir, "example.com/gpu", [f"gpu-{i}" for i in range(PER_ROUND)]
    )
    await plugin.start()
    for body in device_classes():
        await client.create(DeviceClass.from_dict(body))  # type: ignore[attr-defined]
    await client.create(
        ResourceClaimTemplate.from_dict(  # type: ignore[attr-defined]
            {"metadata": {"name": "one-gpu", "namespace": "default"}, "spec": {"spec": ONE_GPU}}
        )
    )
    root = dra_node.root
    program = DraPluginProgram(
        DraPluginFlags(
            node_name=dra_node.name,
            kubeconfig=str(cp.kubeconfig_path),
            plugins_registry=root / "var/lib/kubelet/plugins_registry",
            plugins_dir=root / "var/lib/kubelet/plugins",
            cdi_root=root / "var/run/cdi",
            device_plugin_dir=None,
        ),
        sim_backend(dra_node.gpu_state),
    )
    task = await _started(program)
    template_marks, claim_marks = Marks(), Marks()
    try:
        while True:
            node = await client.get(Node, dp_node.name)
            alloc = (node.status.allocatable or {}) if node.status else {}
            if alloc.get("example.com/gpu") == str(PER_ROUND) and program.registered.is_set():
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # the slices reach the scheduler's informer
        dp = await _rounds(client, dp_node.name, None, "dp")
        _instrument(dra_node, program, template_marks)
        claims = await _rounds(client, dra_node.name, "template", "dra", template_marks)
        _instrument(dra_node, program, claim_marks)
        named = await _rounds(client, dra_node.name, "claim", "rc", claim_marks)
    finally:
        await _stop(program, task)
        await plugin.stop()
        await dra_node.stop()
        await dp_node.stop()
        for name in (dp_node.name, dra_node.name):
            with contextlib.suppress(ApiError):
                await client.delete(Node, name)
        await client.close()
    return dp, claims, named, [template_marks, claim_marks]


def _report(name: str, times: list[float], target: float | None) -> bool:
    p50, p99 = statistics.median(times), _pct(times, 0.99)
    ok = target is None or p99 < target
    goal = f"(target p99 < {target:.0f} ms)" if target else "(no target)"
    print(f"  {name:<40} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  {goal} {'ok' if ok else 'MISSED'}")
    return ok


async def _main() -> int:
    failed = 0
    print("dra: the DRA plugin (in process, real gRPC sockets, simulated GPUs)")
    for label, spec, device, calls, gates, mig in (
        ("prepare, 1 whole GPU (8x H200)", "h200-nvl:8", "gpu-3", STATIC_CALLS, "", None),
        (
            "prepare, dynamic MIG 1g.18gb (create+CDI)",
            "h200-nvl:1",
            "gpu-0-mig-1g18gb-19-0",
            DYNAMIC_CALLS,
            "DynamicMIG=true",
            0,
        ),
    ):
        root = Path(tempfile.mkdtemp(prefix="kg-bdra-", dir="/tmp"))
        try:
            times = await _prepare_latency(root, spec, device, calls, gates, mig)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        target = PREPARE_TARGET_MS if mig is None else None
        failed += not _report(label, times, target)
    root = Path(tempfile.mkdtemp(prefix="kg-bdra-", dir="/tmp"))
    try:
        seconds, devices = await _slices(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ok = seconds < SLICES_TARGET_S and devices == 56
    failed += not ok
    print(
        f"  {'slices, 8 GPUs x 7 MIG devices':<40} {seconds * 1000:6.0f} ms from start, "
        f"{devices} devices (target < {SLICES_TARGET_S:.0f} s) {'ok' if ok else 'MISSED'}"
    )
    return failed


def _pod_figures(dp_figures: Figures, claim_figures: Figures, named_figures: Figures) -> int:
    (dp, dp_bound), (claims, claims_bound) = dp_figures, claim_figures
    named, named_bound = named_figures
    want = ROUNDS * PER_ROUND
    dp50, dra50 = statistics.median(dp) * 1000, statistics.median(claims) * 1000
    dp99, dra99 = _pct(dp, 0.99) * 1000, _pct(claims, 0.99) * 1000
    ratio = dra50 / dp50
    ok = len(dp) == len(claims) == want and ratio <= POD_RATIO_TARGET
    print(
        f"  pod create -> Running, device plugin     p50 {dp50:6.0f} ms  p99 {dp99:6.0f} ms  "
        f"({len(dp)}/{want}); create -> bound p50 {statistics.median(dp_bound) * 1000:.0f} ms"
    )
    print(
        f"  pod create -> Running, one DRA claim     p50 {dra50:6.0f} ms  p99 {dra99:6.0f} ms  "
        f"({len(claims)}/{want}); {ratio:.2f}x (target <= {POD_RATIO_TARGET}x) "
        f"{'ok' if ok else 'MISSED'}; create -> bound p50 "
        f"{statistics.median(claims_bound) * 1000:.0f} ms"
    )
    n50, n99 = statistics.median(named) * 1000, _pct(named, 0.99) * 1000
    print(
        f"  pod create -> Running, existing claim    p50 {n50:6.0f} ms  p99 {n99:6.0f} ms  "
        f"({len(named)}/{want}); {n50 / dp50:.2f}x; create -> bound p50 "
        f"{statistics.median(named_bound) * 1000:.0f} ms (no target: no template to expand)"
    )
    return 0 if ok else 1


def _breakdown(label: str, marks: Marks, skip: str = "") -> None:
    print(f"  {label}: per step, p50 / p99 ms")
    for step, p50, p99 in marks.breakdown([s for s in CLAIM_STEPS if s != skip]):
        print(f"    {step:<36} {p50:7.1f} {p99:7.1f}")


def run() -> int:
    failed = asyncio.run(_main())
    tmp = Path(tempfile.mkdtemp(prefix="kgb-dra-", dir="/tmp"))
    try:
        with ControlPlane(tmp / "cp") as cp:
            dp, claims, named, marks = asyncio.run(_pods(cp, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    failed += _pod_figures(dp, claims, named)
    _breakdown("one DRA claim from a template", marks[0])
    _breakdown("one existing ResourceClaim", marks[1], skip="claim created")
    return failed


if __name__ == "__main__":
    raise SystemExit(run())
