"""`kubegpu operator`: run the operator, or show what it would deploy."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kubegpu.base.loader import InputError, load_yaml
from kubegpu.cli.options import fail, read_kubeconfig
from kubegpu.kube.crds import crd_manifests
from kubegpu.kube.policy import policy_from_file
from kubegpu.node.runtime import log_level_problem, run
from kubegpu.operator.render import (
    DEFAULT_IMAGE,
    DEFAULT_NAMESPACE,
    IMAGE_ENV,
    ClusterFacts,
    dump_yaml,
    render,
)

if TYPE_CHECKING:
    pass

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
    raw_level = os.environ.get("LOG_LEVEL") or "INFO"
    level = raw_level.strip().lower()  # the docs and node components write it in lower case
    if log_level_problem(level) is not None:  # the node components' levels, any case
        fail(f"LOG_LEVEL {raw_level!r}: use debug, info, warn or error")
    from lightkube.core.exceptions import ConfigError

    try:
        config = read_kubeconfig(kubeconfig)  # before anything starts
    except ConfigError as exc:
        fail(f"--kubeconfig: {exc}")
    from kubegpu.operator.program import OperatorFlags, OperatorProgram

    flags = OperatorFlags(
        namespace=namespace,
        image=image,
        image_env={v: os.environ[v] for v in IMAGE_ENV.values() if os.environ.get(v)},
        health_address=health_address,
        health_port=health_port,
        renew_s=renew_s,
    )
    raise typer.Exit(run(lambda: OperatorProgram(flags, config), log_level=level))


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
        doc, source = load_yaml(file, InputError)
        spec = policy_from_file(doc, source)
    except InputError as exc:
        fail(str(exc))
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
@app.command("demo")
def demo_cmd(
    file: Path = typer.Option(
        Path("examples/cluster.yaml"), "--file", "-f", help="The simulated cluster."
    ),
    chart: Path | None = typer.Option(
        None,
        "--chart",
        help="The kubegpu Helm chart (default: $KUBEGPU_CHART, else deploy/helm/kubegpu in "
        "this source checkout).",
    ),
    keep: bool = typer.Option(False, "--keep", help="Leave the cluster running (Ctrl-C stops it)."),
    dra: bool = typer.Option(
        False,
        "--dra",
        help="The DRA stack instead: a GPUCluster, the example claims of examples/dra "
        "allocated by kube-scheduler, one dynamic MIG device created and destroyed.",
    ),
) -> None:
    """On a simulated cluster: helm install kubegpu, wait for the ClusterPolicy, cut one node's
    GPUs into MIG slices, time-slice and MPS-share the others, schedule pods on each, and
    show nodes, GPUs, layouts and allocations."""
    from rich.console import Console

    from kubegpu.sim.cluster import ClusterFileError, load_cluster
    from kubegpu.sim.stack import StackError, demo, find_chart

    try:
        found = find_chart(chart)
        spec = None if dra else load_cluster(file)
    except (ClusterFileError, StackError) as exc:
        fail(str(exc))
    logging.basicConfig(level=logging.ERROR)
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    try:
        if spec is None:
            from kubegpu.sim.dra_demo import dra_demo

            asyncio.run(dra_demo(found, console, keep=keep))
        else:
            asyncio.run(demo(spec, found, console, keep=keep))
    except StackError as exc:
        fail(str(exc))
