"""`kubegpu operator`: run the operator, or show what it would deploy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import typer
import yaml

from kubegpu.cli.options import fail
from kubegpu.kube.crds import crd_manifests, parse_policy_spec
from kubegpu.operator.render import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    IMAGE_ENV,
    ClusterFacts,
    dump_yaml,
    render,
)

app = typer.Typer(
    help="The operator: reconciles a ClusterPolicy into the GPU node stack.",
    invoke_without_command=True,
)

NAMESPACE = typer.Option(
    DEFAULT_NAMESPACE,
    "--namespace",
    envvar="OPERATOR_NAMESPACE",
    help="Namespace the operands run in.",
)
IMAGE = typer.Option(
    DEFAULT_IMAGE,
    "--image",
    envvar="KUBEGPU_IMAGE",
    help="The kubegpu image our operands run (the operator's own).",
)


@app.callback()
def operator(
    ctx: typer.Context,
    namespace: str = NAMESPACE,
    image: str = IMAGE,
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", envvar="KUBECONFIG", help="Default: in-cluster, then ~/.kube/config."
    ),
    health_address: str = typer.Option(
        "0.0.0.0", "--health-address", envvar="HEALTH_ADDRESS", help="Probe endpoint address."
    ),
    health_port: int = typer.Option(
        8081, "--health-port", envvar="HEALTH_PORT", help="/healthz, /readyz, /metrics (0: any)."
    ),
    renew_s: float = typer.Option(
        60.0, "--watch-renew-seconds", help="Renew every watch this often; liveness fails after 3x."
    ),
) -> None:
    """Run the operator (one replica)."""
    if ctx.invoked_subcommand is not None:
        return
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(_run(namespace, image, kubeconfig, health_address, health_port, renew_s))


async def _run(
    namespace: str,
    image: str,
    kubeconfig: Path | None,
    health_address: str,
    health_port: int,
    renew_s: float,
) -> None:
    from lightkube import AsyncClient, KubeConfig

    from kubegpu.operator.controller import FIELD_MANAGER, Operator, OperatorConfig
    from kubegpu.operator.health import HealthServer

    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    client = AsyncClient(config, field_manager=FIELD_MANAGER)
    image_env = {v: os.environ[v] for v in IMAGE_ENV.values() if os.environ.get(v)}
    op = Operator(
        client,
        OperatorConfig(
            namespace=namespace, kubegpu_image=image, image_env=image_env, renew_s=renew_s
        ),
    )
    health = HealthServer(op.live, op.ready, op.metrics, health_address, health_port)
    # a replaced operator pod may still hold the port for its grace period
    for attempt in range(30):
        try:
            await health.start()
            break
        except OSError as exc:
            if attempt == 29:
                raise
            logging.getLogger(__name__).warning("probe port %d: %s; retrying", health_port, exc)
            await asyncio.sleep(1.0)
    logging.getLogger(__name__).info(
        "kubegpu operator: namespace %s, image %s, probes on :%d", namespace, image, health.port
    )
    task = asyncio.create_task(op.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await health.stop()
        await client.close()


@app.command("render")
def render_cmd(
    file: Path = typer.Option(..., "--file", "-f", help="A ClusterPolicy (YAML)."),
    namespace: str = NAMESPACE,
    image: str = IMAGE,
    gpu_nodes: int = typer.Option(1, "--gpu-nodes", help="GPU nodes to assume (0: no DaemonSets)."),
    os_tag: str | None = typer.Option(
        None, "--os-tag", help="Driver image OS suffix, e.g. ubuntu24.04."
    ),
) -> None:
    """Print the objects the operator would apply for a ClusterPolicy, in state order."""
    try:
        doc = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        fail(f"{file}: {exc}")
    if not isinstance(doc, dict) or doc.get("kind") != "ClusterPolicy":
        fail(f"{file}: not a ClusterPolicy")
    spec = parse_policy_spec(doc.get("spec"))
    image_env = {v: os.environ[v] for v in IMAGE_ENV.values() if os.environ.get(v)}
    rendered = render(
        spec,
        ClusterFacts(
            namespace=namespace,
            kubegpu_image=image,
            gpu_nodes=gpu_nodes,
            os_tag=os_tag,
            image_env=image_env,
        ),
    )
    problems = [*rendered.problems, *(f"{s.name}: {s.error}" for s in rendered.states if s.error)]
    if problems:
        fail("\n".join(problems))
    typer.echo(dump_yaml(rendered.objects()), nl=False)


@app.command("crds")
def crds_cmd() -> None:
    """Print the CustomResourceDefinitions (ClusterPolicy, GPUCluster)."""
    typer.echo(dump_yaml(crd_manifests()), nl=False)


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
DEMO_IMAGE = "nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04"  # runs without a process on the sim


@app.command("demo")
def demo_cmd(
    file: Path = typer.Option(
        Path("examples/cluster.yaml"), "--file", "-f", help="The simulated cluster."
    ),
    keep: bool = typer.Option(False, "--keep", help="Leave the cluster running (Ctrl-C stops it)."),
) -> None:
    """On a simulated cluster: helm install kubegpu, wait for the ClusterPolicy, cut one node's
    GPUs into MIG slices, time-slice and MPS-share the others, schedule pods on each, and
    show nodes, GPUs, layouts and allocations."""
    from kubegpu.sim.cluster import ClusterFileError, load_cluster

    try:
        spec = load_cluster(file)
    except ClusterFileError as exc:
        fail(str(exc))
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(_demo(spec, keep))


def _short(device: str) -> str:
    """GPU-3c1f...::2 -> GPU-3c1f8a2e::2 (the UUID's first block keeps IDs apart)."""
    uuid, sep, replica = device.partition("::")
    return uuid[:12] + sep + replica


async def _demo(spec: object, keep: bool, keep_files: bool = False) -> None:
    import shutil
    import socket
    import subprocess
    import tempfile
    import time
    from typing import Any, cast

    from lightkube.resources.core_v1 import Node, Pod
    from lightkube.types import PatchType
    from rich.console import Console
    from rich.table import Table

    from kubegpu.kube.crds import ClusterPolicyResource
    from kubegpu.nvml import parse_spec
    from kubegpu.sim.cluster import ClusterSpec, SimCluster
    from kubegpu.sim.controlplane import find_bin_dir

    assert isinstance(spec, ClusterSpec)
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    t0 = time.monotonic()

    def step(text: str) -> None:
        console.print(f"[bold cyan]{time.monotonic() - t0:6.1f}s[/] {text}")

    work = Path(tempfile.mkdtemp(prefix="kubegpu-demo-", dir="/tmp"))
    cluster = SimCluster(spec, work)
    step(f"starting the control plane and {len(spec.nodes)} simulated nodes")
    await cluster.start()
    try:
        from lightkube import AsyncClient, KubeConfig

        client = AsyncClient(KubeConfig.from_file(cluster.kubeconfig), field_manager="kubegpu-demo")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            health_port = s.getsockname()[1]
        values = {
            "operator": {"healthPort": health_port, "resources": None},
            "dcgmExporter": {
                "env": [
                    {"name": "DCGM_EXPORTER_LISTEN", "value": "127.0.0.1:0"},
                    {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                ]
            },
            "devicePlugin": {
                "config": {
                    "create": True,
                    "name": "device-plugin-configs",
                    "default": "default",
                    "data": DEMO_CONFIGS,
                }
            },
        }
        values_file = work / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        chart = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "kubegpu"
        step(
            f"helm install kubegpu {chart.relative_to(Path.cwd()) if chart.is_relative_to(Path.cwd()) else chart}"
        )
        subprocess.run(
            [
                str(find_bin_dir() / "helm"),
                "install",
                "kubegpu",
                str(chart),
                "--namespace",
                "gpu-operator",
                "--create-namespace",
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--values",
                str(values_file),
            ],
            check=True,
            capture_output=True,
        )

        async def wait(what: str, check: Any, timeout: float = 300, state: Any = None) -> None:
            deadline = time.monotonic() + timeout
            while not await check():
                if time.monotonic() > deadline:
                    now = f" ({await state()})" if state else ""
                    fail(f"{what}: not within {timeout:.0f}s{now}; logs under {work}")
                await asyncio.sleep(1.0)

        async def policy_ready() -> bool:
            policy = await client.get(ClusterPolicyResource, "cluster-policy")
            return bool((policy.get("status") or {}).get("state") == "ready")

        async def allocatable(node: str) -> dict[str, str]:
            n = await client.get(Node, node)
            return dict(n.status.allocatable or {}) if n.status else {}

        await wait("ClusterPolicy ready", policy_ready)
        step("ClusterPolicy cluster-policy is ready: every operand runs on every GPU node")

        # one MIG-capable node gets MIG slices; others are time-sliced or MPS-shared
        gpu_nodes = [n for n in spec.nodes if n.gpus]
        models = {
            n.name: [m for m, count in parse_spec(str(n.gpus)).gpus for _ in range(count)]
            for n in gpu_nodes
        }
        mig_node = next((n.name for n in gpu_nodes if all(m.mig for m in models[n.name])), None)
        rest = [n.name for n in gpu_nodes if n.name != mig_node]
        plain = [n for n in rest if not any(m.mig for m in models[n])]
        shared = {
            n: ("time-sliced" if n in plain[:1] or (not plain and i == 0) else "mps")
            for i, n in enumerate(rest)
        }
        layouts: dict[str, str] = {}
        expect: dict[str, int] = {}
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
            config = f"all-{profile.name}"
            layouts[mig_node] = f"MIG {config}"
            expect[mig_node] = profile.max_count * len(models[mig_node])
            await client.patch(
                Node,
                mig_node,
                {"metadata": {"labels": {"nvidia.com/mig.config": config}}},
                patch_type=PatchType.MERGE,
            )
            step(f"{mig_node}: labelled nvidia.com/mig.config={config}")
        for node, how in shared.items():
            layouts[node] = f"{how}, 4 replicas per GPU"
            expect[node] = 4 * len(models[node])
            await client.patch(
                Node,
                node,
                {"metadata": {"labels": {"nvidia.com/device-plugin.config": how}}},
                patch_type=PatchType.MERGE,
            )
            step(f"{node}: labelled nvidia.com/device-plugin.config={how}")

        async def advertised() -> bool:
            for node, n in expect.items():
                if (await allocatable(node)).get("nvidia.com/gpu") != str(n):
                    return False
            return True

        async def advertised_now() -> str:
            shown = []
            for n, c in expect.items():
                shown.append(
                    f"{n}: nvidia.com/gpu={(await allocatable(n)).get('nvidia.com/gpu')} (want {c})"
                )
            return "; ".join(shown)

        await wait("devices advertised", advertised, timeout=120, state=advertised_now)
        step(
            "the device plugin advertises: "
            + ", ".join(f"{n} nvidia.com/gpu={c}" for n, c in expect.items())
        )

        pods: dict[str, list[str]] = {}
        for node, count in ((n, 3 if n in (mig_node, *plain[:1]) else 2) for n in expect):
            for i in range(count):
                name = f"demo-{node}-{i}"
                pods.setdefault(node, []).append(name)
                manifest = {
                    "metadata": {"name": name, "namespace": "default"},
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
                await client.create(cast(Pod, Pod.from_dict(manifest)))

        async def all_running() -> bool:
            for names in pods.values():
                for name in names:
                    p = await client.get(Pod, name, namespace="default")
                    if not p.status or p.status.phase != "Running":
                        return False
            return True

        await wait("pods running", all_running)
        step(f"{sum(len(v) for v in pods.values())} pods scheduled by kube-scheduler and running")

        table = Table(title="kubegpu on a simulated cluster")
        for column in ("node", "GPUs", "layout", "advertised", "allocations"):
            table.add_column(column)
        for n in spec.nodes:
            sim = cluster.node(n.name)
            gpus = "-"
            if n.gpus:
                counted: dict[str, int] = {}
                for m in models[n.name]:
                    counted[m.product_name] = counted.get(m.product_name, 0) + 1
                gpus = ", ".join(f"{c}x {name}" for name, c in counted.items())
            adv = {
                k: v for k, v in (await allocatable(n.name)).items() if k.startswith("nvidia.com/")
            }
            uids = {}
            for names in pods.values():
                for name in names:
                    p = await client.get(Pod, name, namespace="default")
                    if p.metadata and p.metadata.uid:
                        uids[p.metadata.uid] = name
            allocs = [
                f"{uids[uid].removeprefix('demo-')} -> "
                + ", ".join(_short(d) for ds in a.devices.values() for d in ds)
                for (uid, _), a in sorted(
                    sim.devices.allocations.items(), key=lambda kv: uids.get(kv[0][0], "")
                )
                if uid in uids
            ]
            table.add_row(
                n.name,
                gpus,
                layouts.get(n.name, "whole GPUs" if n.gpus else "no GPU"),
                "\n".join(f"{k}: {v}" for k, v in sorted(adv.items())) or "-",
                "\n".join(allocs) or "-",
            )
        console.print(table)
        await client.close()
        if keep:
            console.print(f"KUBECONFIG={cluster.kubeconfig}  (Ctrl-C stops the cluster)")
            await asyncio.Event().wait()
    finally:
        step("stopping the simulated cluster")
        await cluster.stop()
        if not keep_files:
            shutil.rmtree(work, ignore_errors=True)
