"""kubegpu as a user installs it, on a simulated cluster: simulated nodes on the real control
plane, kubegpu installed with `helm install` from its chart, the operator running as its
Deployment's pod (a process on one of the simulated nodes).

`Stack` is that installation (the end-to-end tests drive it); `demo` is what
`kubegpu operator demo` shows on it: one node's GPUs cut into MIG slices, the others
time-sliced or MPS-shared, pods scheduled on each, and a summary of who got which device.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType
from rich.console import Console
from rich.table import Table

from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.nvml import parse_spec
from kubegpu.sharing.replicas import replica_id, split_replica
from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.controlplane.binaries import find_bin_dir
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

_S = TypeVar("_S")

CHART_ENV = "KUBEGPU_CHART"
CHART_IN_CHECKOUT = Path("deploy") / "helm" / "kubegpu"
NAMESPACE = "gpu-operator"
RELEASE = "kubegpu"
POLICY = "cluster-policy"
CRDS = ("clusterpolicies.nvidia.com", "gpuclusters.nvidia.com")
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"

Json = dict[str, Any]


class StackError(RuntimeError):
    """The stack could not be installed or did not reach the state waited for."""


class ChartNotFoundError(StackError):
    """No kubegpu Helm chart where one was named or searched for."""


def find_chart(explicit: Path | None = None, *, search: Sequence[Path] | None = None) -> Path:
    """The kubegpu Helm chart: `explicit`, else $KUBEGPU_CHART, else deploy/helm/kubegpu in a
    directory above one of `search` (default: this package, i.e. the source checkout it runs
    from, and the current directory)."""
    named = [(explicit, "--chart")] if explicit is not None else []
    if not named and os.environ.get(CHART_ENV):
        named = [(Path(os.environ[CHART_ENV]), f"${CHART_ENV}")]
    for path, source in named:
        if not (path / "Chart.yaml").is_file():
            raise ChartNotFoundError(f"{source} {path}: not a Helm chart (no Chart.yaml there)")
        return path
    starts = (
        [p.resolve() for p in search]
        if search is not None
        else [
            Path(__file__).resolve().parent,
            Path.cwd().resolve(),
        ]
    )
    for start in starts:
        for parent in (start, *start.parents):
            candidate = parent / CHART_IN_CHECKOUT
            if (candidate / "Chart.yaml").is_file():
                return candidate
    raise ChartNotFoundError(
        f"cannot find the kubegpu Helm chart: no {CHART_IN_CHECKOUT} above "
        f"{' or '.join(str(s) for s in starts)}; pass --chart or set ${CHART_ENV}"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def simulated_values(health_port: int, extra: Mapping[str, Any] | None = None) -> Json:
    """Chart values every simulated install needs, merged with `extra` (which wins)."""
    values: Json = {
        # no resources: the simulated kubelet reports every pod as BestEffort
        "operator": {"healthPort": health_port, "resources": None},
        # every simulated pod shares the host's network: no fixed metrics port
        "dcgmExporter": {
            "env": [
                {"name": "DCGM_EXPORTER_LISTEN", "value": "127.0.0.1:0"},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            ]
        },
    }
    return _merge(values, extra or {})


def _merge(base: Json, extra: Mapping[str, Any]) -> Json:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class Stack:
    """kubegpu installed by its chart on simulated nodes of a running control plane."""

    def __init__(
        self,
        control_plane: ControlPlane,
        nodes: Sequence[NodeEntry],
        workdir: Path,
        *,
        chart: Path,
        values: Mapping[str, Any] | None = None,
        field_manager: str = "kubegpu-stack",
        lease_interval_s: float = 10.0,
    ) -> None:
        self.control_plane = control_plane
        self.entries = list(nodes)
        self.workdir = workdir  # short, under /tmp: unix socket paths live below it
        self.chart = chart
        self.kubeconfig = control_plane.kubeconfig_path
        self.health_port = free_port()
        self.values = simulated_values(self.health_port, values)
        self.lease_interval_s = lease_interval_s
        self.client = AsyncClient(
            KubeConfig.from_file(self.kubeconfig), field_manager=field_manager
        )
        self.nodes: dict[str, SimNode] = {}

    # -- setup -------------------------------------------------------------------------------------
    def helm(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [str(find_bin_dir() / "helm"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"helm {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    async def start_nodes(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for entry in self.entries:
            node = SimNode(
                SimNodeConfig(
                    name=entry.name,
                    root=self.workdir / "nodes" / entry.name,
                    gpus=entry.gpus,
                    labels=dict(entry.labels),
                    cpu=entry.cpu,
                    memory=entry.memory,
                    nfd=entry.nfd,
                    lease_interval_s=self.lease_interval_s,
                ),
                self.kubeconfig,
            )
            await node.start()
            self.nodes[entry.name] = node

    async def install(self) -> None:
        """`helm install` (in a thread: the nodes keep serving meanwhile)."""
        values = self.workdir / "values.yaml"
        values.write_text(yaml.safe_dump(self.values))
        await asyncio.to_thread(
            self.helm,
            "install",
            RELEASE,
            str(self.chart),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            str(values),
        )

    async def up(self) -> None:
        await self.start_nodes()
        await self.install()

    async def down(self, *, uninstall: bool = True) -> None:
        """Stop the nodes; with `uninstall`, also remove what the install left in the API
        (for a control plane that lives on)."""
        if uninstall:
            with contextlib.suppress(StackError, subprocess.TimeoutExpired):
                await asyncio.to_thread(
                    self.helm,
                    "uninstall",
                    RELEASE,
                    "--namespace",
                    NAMESPACE,
                    "--wait",
                    "--timeout",
                    "60s",
                )
        for node in reversed(list(self.nodes.values())):
            with contextlib.suppress(Exception):
                await node.stop()
        if uninstall:
            for name in self.nodes:
                with contextlib.suppress(ApiError):
                    await self.client.delete(Node, name)
            # the nodes are gone, so no kubelet confirms its pods' deletion: force it, and
            # wait for the namespace to go, or the next install finds it terminating
            with contextlib.suppress(ApiError):
                async for pod in self.client.list(Pod, namespace=NAMESPACE):
                    pod_name = pod.metadata.name if pod.metadata else None
                    if pod_name:
                        with contextlib.suppress(ApiError):
                            await self.client.delete(
                                Pod, pod_name, namespace=NAMESPACE, grace_period=0
                            )
            with contextlib.suppress(ApiError):
                await self.client.delete(Namespace, NAMESPACE)
            with contextlib.suppress(StackError):
                await _wait(
                    f"namespace {NAMESPACE} deleted",
                    self._namespace_gone,
                    self.workdir,
                    timeout=120,
                )
            for crd in CRDS:
                with contextlib.suppress(ApiError):
                    await self.client.delete(CustomResourceDefinition, crd)
        await self.client.close()

    async def _namespace_gone(self) -> bool:
        try:
            await self.client.get(Namespace, NAMESPACE)
        except ApiError as exc:
            return exc.status.code == 404
        return False

    # -- looking ---------------------------------------------------------------------------------------
    async def policy(self, name: str = POLICY) -> Json:
        obj = await self.client.get(ClusterPolicyResource, name)
        return dict(obj)

    async def policy_state(self, name: str = POLICY) -> str | None:
        status = (await self.policy(name)).get("status") or {}
        state: str | None = status.get("state")
        return state

    async def daemonsets(self) -> dict[str, Json]:
        return {
            d.metadata.name: d.to_dict()
            async for d in self.client.list(
                DaemonSet, namespace=NAMESPACE, labels={MANAGED_BY_LABEL: "kubegpu-operator"}
            )
            if d.metadata and d.metadata.name
        }

    async def pods(self, **labels: str) -> list[Pod]:
        selector: dict[str, Any] | None = dict(labels) or None
        return [p async for p in self.client.list(Pod, namespace=NAMESPACE, labels=selector)]

    async def node(self, name: str) -> Node:
        return await self.client.get(Node, name)

    async def allocatable(self, name: str) -> dict[str, str]:
        node = await self.node(name)
        return dict(node.status.allocatable or {}) if node.status else {}

    # -- changing ------------------------------------------------------------------------------------
    async def patch_policy(self, spec: Json, name: str = POLICY) -> None:
        await self.client.patch(
            ClusterPolicyResource, name, {"spec": spec}, patch_type=PatchType.MERGE
        )

    async def label(self, node: str, labels: Mapping[str, str | None]) -> None:
        await self.client.patch(
            Node, node, {"metadata": {"labels": dict(labels)}}, patch_type=PatchType.MERGE
        )


@contextlib.asynccontextmanager
async def simulated_stack(
    spec: ClusterSpec,
    workdir: Path,
    *,
    chart: Path,
    values: Mapping[str, Any] | None = None,
    say: Callable[[str], None] = lambda _: None,
    before_install: Callable[[Stack], None] | None = None,
) -> AsyncIterator[Stack]:
    """A control plane of its own, the cluster file's nodes and kubegpu installed; all of it
    stopped on exit (the work directory is left to the caller). `before_install` sets the
    nodes up (e.g. a GPU's MIG mode) once they run, before kubegpu is installed."""
    say(f"starting the control plane and {len(spec.nodes)} simulated nodes")
    control_plane = ControlPlane(workdir / "control-plane")
    await asyncio.to_thread(control_plane.start)
    try:
        stack = Stack(control_plane, spec.nodes, workdir, chart=chart, values=values)
        try:
            await stack.start_nodes()
            if before_install is not None:
                before_install(stack)
            cwd = Path.cwd()
            say(
                f"helm install {RELEASE} {chart.relative_to(cwd) if chart.is_relative_to(cwd) else chart}"
            )
            await stack.install()
            yield stack
        finally:
            await stack.down(uninstall=False)  # the control plane goes with everything in it
    finally:
        await asyncio.to_thread(control_plane.stop)


# -- the demo ------------------------------------------------------------------------------------
DEMO_CONFIGS = {
    "default": "version: v1\n",
    "time-sliced": (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "      - name: nvidia.com/gpu\n        replicas: 4\n"
    ),
    "mps": (
        "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\nsharing:\n  mps:\n    resources:\n"
        "      - name: nvidia.com/gpu\n        replicas: 4\n"
    ),
}
DEMO_REPLICAS = 4  # what the time-sliced and mps configs above give each GPU
DEMO_VALUES: Json = {
    "devicePlugin": {
        "config": {
            "create": True,
            "name": "device-plugin-configs",
            "default": "default",
            "data": DEMO_CONFIGS,
        }
    }
}
DEMO_IMAGE = "nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04"  # runs without a process on the sim
DEMO_NAMESPACE = "default"


@dataclass(frozen=True)
class DemoPlan:
    """Which node is sliced how, what it should then advertise and how many pods it runs."""

    gpus: dict[str, dict[str, int]]  # node -> product name -> count (GPU nodes only)
    mig_node: str | None  # every GPU MIG-capable: gets `mig_config`
    mig_config: str | None
    shared: dict[str, str]  # node -> device-plugin config: "time-sliced" or "mps"
    layouts: dict[str, str]  # node -> how its GPUs are handed out, in words
    expect: dict[str, int]  # node -> nvidia.com/gpu it advertises once configured
    pods: dict[str, int]  # node -> pods the demo runs there


def plan_demo(spec: ClusterSpec) -> DemoPlan:
    """The first node whose GPUs all have MIG gets them cut into as many single-slice
    instances as fit; the first node without MIG is time-sliced and every other GPU node
    MPS-shared, 4 replicas per GPU. The MIG node and the time-sliced node run 3 pods each,
    the others 2."""
    gpu_nodes = [n for n in spec.nodes if n.gpus]
    models = {
        n.name: [m for m, count in parse_spec(str(n.gpus)).gpus for _ in range(count)]
        for n in gpu_nodes
    }
    gpus: dict[str, dict[str, int]] = {}
    for node, ms in models.items():
        counted = gpus.setdefault(node, {})
        for m in ms:
            counted[m.product_name] = counted.get(m.product_name, 0) + 1
    mig_node = next((n.name for n in gpu_nodes if all(m.mig for m in models[n.name])), None)
    rest = [n.name for n in gpu_nodes if n.name != mig_node]
    plain = [n for n in rest if not any(m.mig for m in models[n])]
    shared = {
        n: ("time-sliced" if n in plain[:1] or (not plain and i == 0) else "mps")
        for i, n in enumerate(rest)
    }
    layouts: dict[str, str] = {}
    expect: dict[str, int] = {}
    mig_config = None
    if mig_node:
        model = models[mig_node][0]
        assert model.mig
        profile = max(
            (
                p
                for p in model.mig.gpu_instance_profiles
                if p.compute_slices == 1 and p.variant == ""
            ),
            key=lambda p: p.max_count,
        )
        mig_config = f"all-{profile.name}"
        layouts[mig_node] = f"MIG {mig_config}"
        expect[mig_node] = profile.max_count * len(models[mig_node])
    for node, how in shared.items():
        layouts[node] = f"{how}, {DEMO_REPLICAS} replicas per GPU"
        expect[node] = DEMO_REPLICAS * len(models[node])
    pods = {n: 3 if n in (mig_node, *plain[:1]) else 2 for n in expect}
    return DemoPlan(gpus, mig_node, mig_config, shared, layouts, expect, pods)


@dataclass(frozen=True)
class NodeSummary:
    name: str
    gpus: dict[str, int]  # product name -> count
    layout: str
    advertised: dict[str, str]  # nvidia.com/* allocatable
    allocations: dict[str, list[str]]  # demo pod -> device IDs it was given


@dataclass(frozen=True)
class DemoSummary:
    nodes: list[NodeSummary]

    def node(self, name: str) -> NodeSummary:
        return next(n for n in self.nodes if n.name == name)


def demo_pod(name: str, node: str) -> Json:
    """A pod that asks for one nvidia.com/gpu on `node`."""
    return {
        "metadata": {"name": name, "namespace": DEMO_NAMESPACE},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "cuda",
                    "image": DEMO_IMAGE,
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ],
        },
    }


async def _wait(
    what: str,
    check: Callable[[], Awaitable[bool]],
    logs: Path,
    timeout: float = 300,
    state: Callable[[], Awaitable[str]] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            now = f" ({await state()})" if state else ""
            raise StackError(f"{what}: not within {timeout:.0f}s{now}; logs under {logs}")
        await asyncio.sleep(1.0)


async def run_demo(stack: Stack, spec: ClusterSpec, say: Callable[[str], None]) -> DemoSummary:
    """On an installed stack: wait for the ClusterPolicy, configure the nodes as planned,
    run the pods and collect who got which device."""
    plan = plan_demo(spec)
    logs = stack.workdir

    async def policy_ready() -> bool:
        return await stack.policy_state() == "ready"

    await _wait("ClusterPolicy ready", policy_ready, logs)
    say("ClusterPolicy cluster-policy is ready: every operand runs on every GPU node")

    if plan.mig_node and plan.mig_config:
        await stack.label(plan.mig_node, {"nvidia.com/mig.config": plan.mig_config})
        say(f"{plan.mig_node}: labelled nvidia.com/mig.config={plan.mig_config}")
    for node, how in plan.shared.items():
        await stack.label(node, {"nvidia.com/device-plugin.config": how})
        say(f"{node}: labelled nvidia.com/device-plugin.config={how}")

    async def advertised() -> bool:
        for node, n in plan.expect.items():
            if (await stack.allocatable(node)).get("nvidia.com/gpu") != str(n):
                return False
        return True

    async def advertised_now() -> str:
        shown = []
        for n, c in plan.expect.items():
            have = (await stack.allocatable(n)).get("nvidia.com/gpu")
            shown.append(f"{n}: nvidia.com/gpu={have} (want {c})")
        return "; ".join(shown)

    await _wait("devices advertised", advertised, logs, timeout=120, state=advertised_now)
    say(
        "the device plugin advertises: "
        + ", ".join(f"{n} nvidia.com/gpu={c}" for n, c in plan.expect.items())
    )

    pods: dict[str, list[str]] = {}
    for node, count in plan.pods.items():
        for i in range(count):
            name = f"demo-{node}-{i}"
            pods.setdefault(node, []).append(name)
            await stack.client.create(cast(Pod, Pod.from_dict(demo_pod(name, node))))

    async def all_running() -> bool:
        for names in pods.values():
            for name in names:
                p = await stack.client.get(Pod, name, namespace=DEMO_NAMESPACE)
                if not p.status or p.status.phase != "Running":
                    return False
        return True

    await _wait("pods running", all_running, logs)
    say(f"{sum(len(v) for v in pods.values())} pods scheduled by kube-scheduler and running")

    uids: dict[str, str] = {}
    for names in pods.values():
        for name in names:
            p = await stack.client.get(Pod, name, namespace=DEMO_NAMESPACE)
            if p.metadata and p.metadata.uid:
                uids[p.metadata.uid] = name
    nodes = []
    for entry in spec.nodes:
        allocatable = await stack.allocatable(entry.name)
        given: dict[str, list[str]] = {}
        for (uid, _), a in stack.nodes[entry.name].devices.allocations.items():
            if uid in uids:
                given.setdefault(uids[uid], []).extend(d for ds in a.devices.values() for d in ds)
        nodes.append(
            NodeSummary(
                name=entry.name,
                gpus=plan.gpus.get(entry.name, {}),
                layout=plan.layouts.get(entry.name, "whole GPUs" if entry.gpus else "no GPU"),
                advertised={k: v for k, v in allocatable.items() if k.startswith("nvidia.com/")},
                allocations=dict(sorted(given.items())),
            )
        )
    return DemoSummary(nodes)


def summary_table(summary: DemoSummary) -> Table:
    table = Table(title="kubegpu on a simulated cluster")
    for column in ("node", "GPUs", "layout", "advertised", "allocations"):
        table.add_column(column)
    for n in summary.nodes:
        table.add_row(
            n.name,
            ", ".join(f"{c}x {name}" for name, c in n.gpus.items()) or "-",
            n.layout,
            "\n".join(f"{k}: {v}" for k, v in sorted(n.advertised.items())) or "-",
            "\n".join(
                f"{pod.removeprefix('demo-')} -> " + ", ".join(_short(d) for d in devices)
                for pod, devices in n.allocations.items()
            )
            or "-",
        )
    return table


def _short(device: str) -> str:
    """GPU-3c1f...::2 -> GPU-3c1f8a2e::2 (the UUID's first block keeps IDs apart)."""
    uuid, replica = split_replica(device)
    return uuid[:12] if replica is None else replica_id(uuid[:12], replica)


async def demo(
    spec: ClusterSpec, chart: Path, console: Console, *, keep: bool = False
) -> DemoSummary:
    """`kubegpu operator demo`: start the cluster, install kubegpu, run the demo, print the
    summary; with `keep`, leave it running until cancelled."""
    return await present(
        spec,
        chart,
        console,
        values=DEMO_VALUES,
        run=lambda stack, step: run_demo(stack, spec, step),
        table=summary_table,
        keep=keep,
        prefix="kubegpu-demo-",
    )


async def present(
    spec: ClusterSpec,
    chart: Path,
    console: Console,
    *,
    values: Mapping[str, Any],
    run: Callable[[Stack, Callable[[str], None]], Awaitable[_S]],
    table: Callable[[_S], Table],
    keep: bool,
    prefix: str,
    before_install: Callable[[Stack], None] | None = None,
) -> _S:
    """Run a demo on a simulated stack of its own, with timed steps and its summary table
    printed; with `keep`, leave the cluster running until cancelled. The work directory is
    removed, unless the demo failed: its logs are named in the error."""
    t0 = time.monotonic()

    def step(text: str) -> None:
        console.print(f"[bold cyan]{time.monotonic() - t0:6.1f}s[/] {text}")

    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    keep_work = False
    try:
        async with simulated_stack(
            spec, work, chart=chart, values=values, say=step, before_install=before_install
        ) as stack:
            try:
                summary = await run(stack, step)
                console.print(table(summary))
                if keep:
                    console.print(f"KUBECONFIG={stack.kubeconfig}  (Ctrl-C stops the cluster)")
                    await asyncio.Event().wait()
            finally:
                step("stopping the simulated cluster")
        return summary
    except StackError:
        keep_work = True
        raise
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
