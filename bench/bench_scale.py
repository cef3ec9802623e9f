"""Scale: N simulated nodes x 8 GPUs, node components in-process, on the real control plane.

`make bench-scale` (not part of `make bench` nor `make test`): for each N of
BENCH_SCALE_NODES (default 10,100,300,1000) a fresh control plane with the `large` size
profile (sim.controlplane.plane.SIZE_PROFILES), N SimNodes (h100-80gb:8) whose kubegpu pods run
in-process (sim.inprocess), and the operator in-process. Measured per N:

- start: the nodes registered; install: ClusterPolicy created -> `ready` (every operand
  Running on every node); change: `mig.strategy` single -> mixed -> the affected
  DaemonSets updated (the operator's part) and rolled out (ready again), with
  `daemonsets.rollingUpdate.maxUnavailable: 100%`;
- fleet MIG: every node relabelled `nvidia.com/mig.config=all-1g.10gb` at once -> every
  node's `mig.config.state=success`; then 8 pods per node, each asking one
  `nvidia.com/mig-1g.10gb`, through the real scheduler -> all Running (throughput);
  then min(100, N) nodes relabelled to `all-3g.40gb` at once -> all `success`;
- API requests: the API server's own `apiserver_request_total` (every client) per phase,
  and the operator's requests for the spec change;
- CPU seconds of the simulator and of each control-plane process per phase, and the
  simulator's RSS (memory per node, per in-process component).

- exporters: every node's exporter scraped once after the install (each must answer for
  its eight GPUs).

BENCH_SCALE_LAST_PHASE (install, change, mig, pods; default: all) ends each run early;
BENCH_SCALE_MERGE=1 keeps the other sizes of the last report on its table and curves.
Writes bench/scale.md (a table, the limits, load average) and PNG plots beside it. Exits
non-zero when a run did not converge; the targets (issue #15) are reported, not asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from kubegpu.catalog import nvidia
from kubegpu.cli.app import root_command
from kubegpu.kube.crds import crd_manifests
from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator.controller import FIELD_MANAGER, Operator, OperatorConfig
from kubegpu.operator.operands.context import EXPORTER_PORT
from kubegpu.operator.render import HASH_ANNOTATION
from kubegpu.sim.controlplane.plane import SIZE_PROFILES, ControlPlane
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

HERE = Path(__file__).parent
SIZES = [int(n) for n in os.environ.get("BENCH_SCALE_NODES", "10,100,300,1000").split(",")]
NAMESPACE = "gpu-operator"
WORKLOADS = "scale-workloads"
GPUS_PER_NODE = 8
GPUS = f"h100-80gb:{GPUS_PER_NODE}"
PODS_PER_NODE = int(os.environ.get("BENCH_SCALE_PODS_PER_NODE", "8"))
RELABEL_MAX = 100
MIG_FLEET = "all-1g.10gb"
MIG_RELABEL = "all-3g.40gb"
MIG_RESOURCE = f"{nvidia.MIG_RESOURCE_PREFIX}1g.10gb"
# what a node advertises once each config is applied (mig.strategy mixed, 8 H100 80GB)
MIG_EXPECTED = {
    MIG_FLEET: (MIG_RESOURCE, 8 * 7),
    MIG_RELABEL: (f"{nvidia.MIG_RESOURCE_PREFIX}3g.40gb", 8 * 2),
}
TIMEOUT_S = float(os.environ.get("BENCH_SCALE_TIMEOUT_S", "1800"))
# where a run stops: install (and the exporters' scrape), change, mig, pods or relabel
# (everything); a 1,000-node run that must fit an afternoon can stop early
LAST_PHASE = os.environ.get("BENCH_SCALE_LAST_PHASE", "relabel")
INSTALL_TARGET_S = 60.0
UPDATED_TARGET_S = 5.0
POLICY: dict[str, Any] = {
    "mig": {"strategy": "single"},
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.18.1",
    },
    "dcgm": {"enabled": False},  # the exporter reads the simulated NVML itself
    "daemonsets": {"rollingUpdate": {"maxUnavailable": "100%"}},
}
STRATEGY_DAEMONSETS = (
    "nvidia-device-plugin-daemonset",
    "gpu-feature-discovery",
    "nvidia-operator-validator",
)


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int | None = None) -> float:
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Probe:
    """What the machine did between two points: API requests, CPU seconds per process."""

    cp: ControlPlane

    def requests(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for (verb, kind, _), n in self.cp.request_counts().items():
            counts[f"{verb} {kind}"] += n
        return counts

    def cpu(self) -> dict[str, float]:
        out = {"simulator": _cpu_s()}
        for name, pid in self.cp.pids.items():
            with contextlib.suppress(OSError):
                out[name] = _cpu_s(pid)
        return out

    def snapshot(self) -> tuple[Counter[str], dict[str, float], float]:
        return self.requests(), self.cpu(), time.perf_counter()


@dataclass
class Phase:
    seconds: float
    requests: int
    by_verb: dict[str, int]
    cpu: dict[str, float]

    @classmethod
    def between(
        cls,
        a: tuple[Counter[str], dict[str, float], float],
        b: tuple[Counter[str], dict[str, float], float],
    ) -> Phase:
        delta = b[0] - a[0]
        verbs: Counter[str] = Counter()
        for key, n in delta.items():
            verbs[key.split(" ", 1)[0]] += n
        cpu = {k: round(b[1][k] - a[1].get(k, 0.0), 1) for k in b[1]}
        return cls(round(b[2] - a[2], 2), sum(delta.values()), dict(verbs), cpu)


@dataclass
class Result:
    nodes: int
    load_before: str
    phases: dict[str, Phase] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    operator_change_requests: dict[str, int] = field(default_factory=dict)
    peak_label_patches_in_flight: int = 0
    pods_per_s: float | None = None
    pods_per_node: int = PODS_PER_NODE
    exporters_answered: int | None = None
    failed: str | None = None


async def _answered(check: Callable[[], Awaitable[bool]]) -> bool:
    """A check whose request timed out (the machine is saturated) has not passed yet."""
    try:
        return await check()
    except (httpx.HTTPError, OSError):
        return False


async def _until(check: Callable[[], Awaitable[bool]], timeout: float, interval: float) -> None:
    t0 = time.perf_counter()
    while not await _answered(check):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{check.__name__} not met in {timeout:.0f}s")
        await asyncio.sleep(interval)


_DONE: list[Result] = []  # sizes measured so far: the report is rewritten after each phase


_EARLIER: list[Result] = []  # other sizes kept from the last report (BENCH_SCALE_MERGE)


def _checkpoint(result: Result) -> None:
    write_report(sorted([*_EARLIER, *_DONE, result], key=lambda r: r.nodes), HERE / "scale.md")


async def _run_size(cp: ControlPlane, tmp: Path, size: int, result: Result) -> None:
    config = KubeConfig.from_file(cp.kubeconfig_path)
    client = AsyncClient(config, field_manager="kubegpu-bench")
    probe = Probe(cp)
    nodes: list[SimNode] = []
    op = Operator(
        AsyncClient(config, field_manager=FIELD_MANAGER), OperatorConfig(namespace=NAMESPACE)
    )
    interval = max(0.5, size / 200)
    try:
        for crd in crd_manifests():
            await client.apply(CustomResourceDefinition.from_dict(crd), force=True)  # type: ignore[attr-defined]
        for ns in (NAMESPACE, WORKLOADS):
            await client.create(Namespace(metadata=ObjectMeta(name=ns)))
        rss0 = _rss_mib()
        s0 = probe.snapshot()
        for i in range(0, size, 50):
            batch = [
                SimNode(
                    SimNodeConfig(
                        name=f"gpu-{j:04d}",
                        root=tmp / f"n{j:04d}",
                        gpus=GPUS,
                        components="inprocess",
                        root_command=root_command,
                    ),
                    cp.kubeconfig_path,
                )
                for j in range(i, min(size, i + 50))
            ]
            nodes.extend(batch)
            await asyncio.gather(*(n.start() for n in batch))
        s1 = probe.snapshot()
        result.phases["start"] = Phase.between(s0, s1)
        _checkpoint(result)
        rss1 = _rss_mib()
        result.memory["per_node_idle_mib"] = round((rss1 - rss0) / size, 2)
        await op.start()
        await op.wait_synced()

        async def ready() -> bool:
            policy = await client.get(ClusterPolicyResource, "scale")
            return bool((policy.get("status") or {}).get("state") == "ready")

        s1 = probe.snapshot()
        await client.create(ClusterPolicyResource(metadata=ObjectMeta(name="scale"), spec=POLICY))
        await _until(ready, TIMEOUT_S, interval)
        s2 = probe.snapshot()
        result.phases["install"] = Phase.between(s1, s2)
        _checkpoint(result)
        result.peak_label_patches_in_flight = op.api.peak_label_patches_in_flight
        rss2 = _rss_mib()
        in_process = sum(
            1 for n in nodes for r in n.runners.values() for c in r.containers if c.inproc
        )
        result.memory["rss_mib"] = round(rss2, 1)
        result.memory["per_node_with_components_mib"] = round((rss2 - rss0) / size, 2)
        result.memory["in_process_containers"] = in_process
        if in_process:
            result.memory["per_component_mib"] = round((rss2 - rss1) / in_process, 2)

        s2 = probe.snapshot()
        result.exporters_answered = await scrape_exporters(nodes)
        result.phases["scrape"] = Phase.between(s2, probe.snapshot())
        _checkpoint(result)
        if result.exporters_answered != size:
            raise RuntimeError(f"{size - result.exporters_answered} exporter(s) did not answer")
        if LAST_PHASE == "install":
            return

        async def daemonsets() -> dict[str, dict[str, Any]]:
            return {
                d.metadata.name: d.to_dict()  # type: ignore[union-attr]
                async for d in client.list(DaemonSet, namespace=NAMESPACE)
            }

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

        await asyncio.sleep(2.0)
        before = Counter(op.api.counts)
        s2 = probe.snapshot()
        await client.patch(
            ClusterPolicyResource,
            "scale",
            {"spec": {"mig": {"strategy": "mixed"}}},
            patch_type=PatchType.MERGE,
        )
        await _until(updated, 300, 0.1)
        s3 = probe.snapshot()
        result.phases["change_updated"] = Phase.between(s2, s3)
        _checkpoint(result)
        result.operator_change_requests = dict(Counter(op.api.counts) - before)
        await _until(ready, TIMEOUT_S, interval)
        s4 = probe.snapshot()
        result.phases["change_rolled_out"] = Phase.between(s2, s4)
        _checkpoint(result)
        if LAST_PHASE == "change":
            return

        async def mig_state(names: list[str], config: str) -> bool:
            """Every node labelled `config`, its MIG manager says `success`, and its device
            plugin advertises the config's MIG devices (the state label alone still says
            `success` for the previous config until the MIG manager starts)."""
            wanted = set(names)
            resource, count = MIG_EXPECTED[config]
            done = 0
            async for n in client.list(Node):
                labels = n.metadata.labels or {}  # type: ignore[union-attr]
                alloc = (n.status.allocatable or {}) if n.status else {}  # type: ignore[union-attr]
                if (
                    n.metadata.name in wanted  # type: ignore[union-attr]
                    and labels.get(nvidia.MIG_CONFIG) == config
                    and labels.get(nvidia.MIG_CONFIG_STATE) == nvidia.MIG_STATE_SUCCESS
                    and int(alloc.get(resource, "0")) == count
                ):
                    done += 1
            return done == len(wanted)

        async def relabel(names: list[str], config: str) -> None:
            gate = asyncio.Semaphore(32)

            async def one(name: str) -> None:
                async with gate:
                    await client.patch(
                        Node,
                        name,
                        {"metadata": {"labels": {nvidia.MIG_CONFIG: config}}},
                        patch_type=PatchType.MERGE,
                    )

            await asyncio.gather(*(one(n) for n in names))

        all_names = [n.name for n in nodes]
        s4 = probe.snapshot()
        await relabel(all_names, MIG_FLEET)
        await _until(lambda: mig_state(all_names, MIG_FLEET), TIMEOUT_S, interval)
        await _until(ready, TIMEOUT_S, interval)
        s5 = probe.snapshot()
        result.phases["mig_fleet"] = Phase.between(s4, s5)
        _checkpoint(result)
        if LAST_PHASE == "mig":
            return

        total = size * PODS_PER_NODE
        s5 = probe.snapshot()
        gate = asyncio.Semaphore(32)

        async def create(i: int) -> None:
            async with gate:
                await client.create(
                    Pod.from_dict(  # type: ignore[attr-defined]
                        {
                            "metadata": {"name": f"mig-{i:05d}", "namespace": WORKLOADS},
                            "spec": {
                                "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 0,
                                "containers": [
                                    {
                                        "name": "w",
                                        "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"limits": {MIG_RESOURCE: "1"}},
                                    }
                                ],
                            },
                        }
                    ),
                    namespace=WORKLOADS,
                )

        await asyncio.gather(*(create(i) for i in range(total)))

        async def running() -> bool:
            n = 0
            async for p in client.list(Pod, namespace=WORKLOADS):
                if p.status and p.status.phase == "Running":  # type: ignore[union-attr]
                    n += 1
            return n == total

        await _until(running, TIMEOUT_S, interval)
        s6 = probe.snapshot()
        result.phases["pods"] = Phase.between(s5, s6)
        _checkpoint(result)
        result.pods_per_s = round(total / max(0.01, s6[2] - s5[2]), 1)
        if LAST_PHASE == "pods":
            return
        await client.deletecollection(Pod, namespace=WORKLOADS, grace_period=0)

        async def no_pods() -> bool:
            """All gone; a pod the collection delete did not reach (an API server that
            timed out part way through) is deleted on its own."""
            left = [p async for p in client.list(Pod, namespace=WORKLOADS)]
            for p in left:
                if p.metadata and not p.metadata.deletionTimestamp:
                    with contextlib.suppress(httpx.HTTPError, ApiError):
                        await client.delete(
                            Pod, str(p.metadata.name), namespace=WORKLOADS, grace_period=0
                        )
            return not left

        await _until(no_pods, TIMEOUT_S, interval)

        async def released() -> bool:  # the kubelets have let go of the pods' devices
            return not any(n.devices.allocations for n in nodes)

        await _until(released, TIMEOUT_S, 0.2)
        chosen = all_names[:RELABEL_MAX]
        s6 = probe.snapshot()
        await relabel(chosen, MIG_RELABEL)
        try:
            await _until(lambda: mig_state(chosen, MIG_RELABEL), TIMEOUT_S, interval)
        except TimeoutError:
            seen = []
            async for n in client.list(Node):
                labels = n.metadata.labels or {}  # type: ignore[union-attr]
                alloc = (n.status.allocatable or {}) if n.status else {}  # type: ignore[union-attr]
                seen.append(
                    (
                        labels.get(nvidia.MIG_CONFIG),
                        labels.get(nvidia.MIG_CONFIG_STATE),
                        {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")},
                    )
                )
            raise TimeoutError(f"relabel to {MIG_RELABEL} not reached: {seen[:3]}") from None
        s7 = probe.snapshot()
        result.phases["mig_relabel"] = Phase.between(s6, s7)
        _checkpoint(result)
    finally:
        await op.stop()
        await op.api.client.close()
        await asyncio.gather(*(n.stop() for n in nodes), return_exceptions=True)
        await client.close()


async def scrape_exporters(nodes: list[SimNode]) -> int:
    """Scrape every node's exporter once, as Prometheus would; how many answered with a
    utilisation series for each of the node's GPUs."""
    gate = asyncio.Semaphore(32)

    async def one(http: httpx.AsyncClient, node: SimNode) -> bool:
        async with gate:
            try:
                reply = await http.get(f"http://{node.address}:{EXPORTER_PORT}/metrics")
            except httpx.HTTPError:
                return False
        gpus = {
            m.group(1)
            for m in re.finditer(r'^DCGM_FI_DEV_GPU_UTIL\{[^}]*gpu="(\d+)"', reply.text, re.M)
        }
        return reply.status_code == 200 and len(gpus) == GPUS_PER_NODE

    async with httpx.AsyncClient(timeout=60) as http:
        answered = await asyncio.gather(*(one(http, n) for n in nodes))
    return sum(answered)


def _measure(size: int) -> Result:
    load = Path("/proc/loadavg").read_text().split()[:3]
    result = Result(size, " ".join(load))
    tmp = Path(tempfile.mkdtemp(prefix="h8-scale-", dir="/tmp"))
    try:
        with ControlPlane(tmp / "cp", size=SIZE_PROFILES["large"], verbosity=0) as cp:
            try:
                asyncio.run(_run_size(cp, tmp, size, result))
            except Exception as exc:  # report what converged and what did not
                traceback.print_exc()
                result.failed = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _limit(r: Result, phase: str) -> str:
    p = r.phases.get(phase)
    if p is None:
        return "not reached"
    busiest = max(p.cpu.items(), key=lambda kv: kv[1])
    share = busiest[1] / max(0.01, p.seconds)
    return f"{busiest[0]} ({busiest[1]:.0f} CPU s in {p.seconds:.0f} s, {share:.2f} cores)"


def write_report(results: list[Result], out: Path) -> None:
    rows = [
        "| nodes | start | install -> ready | change -> updated | change -> rolled out | "
        "MIG all nodes | MIG pods Running (per node) | relabel 100 | API requests (install) | "
        "operator requests (change) | exporters scraped | sim RSS | per node | per component |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def sec(r: Result, name: str) -> str:
        p = r.phases.get(name)
        return f"{p.seconds:.1f} s" if p else "-"

    for r in results:
        install = r.phases.get("install")
        rows.append(
            f"| {r.nodes} | {sec(r, 'start')} | {sec(r, 'install')} | {sec(r, 'change_updated')} | "
            f"{sec(r, 'change_rolled_out')} | {sec(r, 'mig_fleet')} | {sec(r, 'pods')}"
            f" ({r.pods_per_node}{f', {r.pods_per_s} pods/s' if r.pods_per_s else ''}) | "
            f"{sec(r, 'mig_relabel')} | "
            f"{install.requests if install else '-'} | "
            f"{sum(r.operator_change_requests.values()) if r.operator_change_requests else '-'} | "
            f"{'-' if r.exporters_answered is None else r.exporters_answered}/{r.nodes}"
            f" in {sec(r, 'scrape')} | "
            f"{r.memory.get('rss_mib', '-')} MiB | {r.memory.get('per_node_with_components_mib', '-')} MiB | "
            f"{r.memory.get('per_component_mib', '-')} MiB |"
        )
    limits = []
    for r in results:
        limits.append(
            f"- {r.nodes} nodes (load before: {r.load_before})"
            + (f": FAILED {r.failed}" if r.failed else "")
        )
        for phase in (
            "start",
            "install",
            "scrape",
            "change_rolled_out",
            "mig_fleet",
            "pods",
            "mig_relabel",
        ):
            if phase in r.phases:
                limits.append(
                    f"  - {phase}: busiest {_limit(r, phase)}; CPU s {r.phases[phase].cpu}"
                )
    text = [
        "# Scale: N simulated nodes x 8 GPUs (`make bench-scale`, bench/bench_scale.py)",
        "",
        "Generated by the benchmark; the targets, the method and what limits each curve are",
        'in bench/README.md (section "scale"). Raw results: scale.json.',
        "",
        *rows,
        "",
        "## Where the CPU went (the limit of each phase)",
        "",
        *limits,
        "",
    ]
    out.write_text("\n".join(text))
    (out.parent / "scale.json").write_text(json.dumps([asdict(r) for r in results], indent=1))


def plot(results: list[Result], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if r.phases]
    if len(ok) < 2:
        return  # a curve needs two sizes
    xs = [r.nodes for r in ok]

    def series(phase: str, attr: str = "seconds") -> list[float]:
        return [getattr(r.phases[phase], attr) if phase in r.phases else float("nan") for r in ok]

    fig, ax = plt.subplots(figsize=(6, 4))
    for phase, label in (
        ("install", "install -> ready"),
        ("change_updated", "change -> updated"),
        ("change_rolled_out", "change -> rolled out"),
        ("mig_fleet", "MIG, every node"),
        ("pods", "MIG pods Running"),
        ("mig_relabel", "relabel 100 nodes"),
    ):
        ax.plot(xs, series(phase), marker="o", label=label)
    ax.axhline(INSTALL_TARGET_S, color="grey", linestyle=":", label="install target 60 s")
    ax.set(
        xlabel="nodes (8 GPUs each)",
        ylabel="seconds",
        xscale="log",
        title="time to converge",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "scale-time.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for phase in ("start", "install", "change_rolled_out", "mig_fleet", "pods"):
        ax.plot(xs, series(phase, "requests"), marker="o", label=f"{phase}")
    ax.plot(
        xs,
        [sum(r.operator_change_requests.values()) for r in ok],
        marker="s",
        label="operator, spec change",
    )
    ax.set(
        xlabel="nodes",
        ylabel="API requests (apiserver_request_total)",
        xscale="log",
        title="API requests per phase",
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "scale-requests.png", dpi=100)
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 4))
    for name in (
        "simulator",
        "kube-apiserver",
        "etcd",
        "kube-controller-manager",
        "kube-scheduler",
    ):
        a1.plot(
            xs,
            [
                r.phases["install"].cpu.get(name, float("nan"))
                if "install" in r.phases
                else float("nan")
                for r in ok
            ],
            marker="o",
            label=name,
        )
    a1.set(
        xlabel="nodes",
        ylabel="CPU seconds during install",
        xscale="log",
        title="CPU by process (install)",
    )
    a1.legend(fontsize=7)
    a2.plot(
        xs, [r.memory.get("rss_mib", float("nan")) for r in ok], marker="o", label="simulator RSS"
    )
    a2.set(xlabel="nodes", ylabel="MiB", xscale="log", title="simulator memory")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "scale-resources.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [r.pods_per_s or float("nan") for r in ok], marker="o")
    ax.set(
        xlabel="nodes",
        ylabel="pods/s (created -> Running)",
        xscale="log",
        title="scheduler throughput, MIG pods",
    )
    fig.tight_layout()
    fig.savefig(out_dir / "scale-scheduler.png", dpi=100)
    plt.close(fig)


def _earlier() -> list[Result]:
    """With BENCH_SCALE_MERGE=1, the sizes of the last report that this run does not
    measure (so a long size can be run on its own and still land on the curves)."""
    path = HERE / "scale.json"
    if os.environ.get("BENCH_SCALE_MERGE") != "1" or not path.exists():
        return []
    out = []
    for raw in json.loads(path.read_text()):
        if raw["nodes"] in SIZES:
            continue
        raw["phases"] = {k: Phase(**v) for k, v in raw["phases"].items()}
        out.append(Result(**raw))
    return out


def run() -> int:
    # the simulator's own warnings (a status write sent again, a kubelet call that failed)
    # belong in the run's output, not lost behind the in-process containers' log handler
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _EARLIER[:] = _earlier()
    results: list[Result] = []
    for size in SIZES:
        r = _measure(size)
        results.append(r)
        _DONE.append(r)
        print(json.dumps(asdict(r)), flush=True)
        report = sorted([*_EARLIER, *results], key=lambda x: x.nodes)
        write_report(report, HERE / "scale.md")
        plot(report, HERE)
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(run())
