"""`kubegpu sim`: the simulator's lab controls (faults, display mode, reboot) for a sim node."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import typer

from kubegpu.cli.options import SIM_NODE_OPTION, fail, read_kubeconfig
from kubegpu.nvml import BackendError, NvmlError, open_nvml
from kubegpu.nvml.sim import SimControls, SimNvml

app = typer.Typer(help="Simulated clusters, nodes and GPUs.", no_args_is_help=True)
gpu_app = typer.Typer(help="Lab controls for a simulated node's GPUs.", no_args_is_help=True)
app.add_typer(gpu_app, name="gpu")

SIM_NVML = typer.Option(..., "--nvml", envvar="KUBEGPU_NVML", help="sim:<state-file> of the node.")


def _sim(nvml: str, sim_node: str | None) -> SimNvml:
    if not nvml.startswith("sim:"):
        fail(f"--nvml {nvml!r}: lab controls work only on a simulated node (sim:<state-file>)")
    try:
        node = open_nvml(nvml, sim_node)
    except (BackendError, NvmlError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    assert isinstance(node, SimNvml)
    return node


def _lab(nvml: str, sim_node: str | None = None) -> SimControls:
    return SimControls.of(_sim(nvml, sim_node))


@gpu_app.command("show")
def show(nvml: str = SIM_NVML, sim_node: str | None = SIM_NODE_OPTION) -> None:
    """List the node's GPUs (and create the node when --sim-node is given)."""
    state = _lab(nvml, sim_node).raw_state()
    typer.echo(f"driver {state['driver_version']}, boot {state['boot_id']}")
    for g in state["gpus"]:
        mig = "on" if g["mig_current"] else "off"
        if g["mig_pending"] != g["mig_current"]:
            mig += f" (pending {'on' if g['mig_pending'] else 'off'})"
        lost = ", LOST" if g["lost"] else ""
        typer.echo(
            f"GPU {g['index']}: {g['model']} {g['uuid']} MIG {mig}, display {g['display_mode']}, {len(g['gpu_instances'])} GIs{lost}"
        )


@gpu_app.command("display-mode")
def display_mode(
    mode: str = typer.Argument(..., help="compute or graphics"),
    gpu: list[int] = typer.Option(None, "--gpu", "-i", help="GPU index (default: all)."),
    nvml: str = SIM_NVML,
) -> None:
    """Switch display mode, as DisplayModeSelector does on RTX PRO Workstation cards."""
    node = _sim(nvml, None)
    lab = SimControls.of(node)
    try:
        for i in gpu or range(node.device_count()):
            lab.set_display_mode(i, mode)
    except NvmlError as exc:
        fail(str(exc))


@gpu_app.command("xid")
def xid(
    code: int = typer.Argument(..., help="Xid number, e.g. 48 (double-bit ECC) or 79."),
    gpu: int = typer.Option(0, "--gpu", "-i"),
    nvml: str = SIM_NVML,
) -> None:
    """Inject an XID event."""
    try:
        _lab(nvml).inject_xid(gpu, code)
    except NvmlError as exc:
        fail(str(exc))


@gpu_app.command("lose")
def lose(gpu: int = typer.Option(0, "--gpu", "-i"), nvml: str = SIM_NVML) -> None:
    """Make a GPU fall off the bus (Xid 79) until reset or reboot."""
    try:
        _lab(nvml).lose_gpu(gpu)
    except NvmlError as exc:
        fail(str(exc))


@gpu_app.command("reset")
def reset(gpu: int = typer.Option(..., "--gpu", "-i"), nvml: str = SIM_NVML) -> None:
    """Reset one GPU: applies a pending MIG mode, drops instances."""
    try:
        _sim(nvml, None).reset(gpu)
    except NvmlError as exc:
        fail(str(exc))


@gpu_app.command("reboot")
def reboot(nvml: str = SIM_NVML) -> None:
    """Reboot the simulated node's GPUs: pending MIG modes apply, instances clear."""
    _lab(nvml).reboot()


# -- simulated clusters -------------------------------------------------------------------------

DEFAULT_WORKDIR = Path.home() / ".kubegpu" / "sim"


def kubectl_usage(kubeconfig: Path, bin_dir: Path) -> list[str]:
    """How to reach a simulated cluster from a shell: its kubeconfig and the kubectl that
    scripts/build-kubernetes built next to the control plane."""
    kubectl = bin_dir / "kubectl"
    lines = [f"export KUBECONFIG={kubeconfig}"]
    if kubectl.is_file():
        lines += [
            f"export PATH={bin_dir}:$PATH   # kubectl: {kubectl}",
            "kubectl get nodes",
        ]
    else:
        lines.append(f"kubectl is not built ({kubectl}): run scripts/build-kubernetes")
    return lines


@app.command("up")
def up(
    file: Path = typer.Option(
        ..., "--file", "-f", help="Cluster file (see examples/cluster.yaml)."
    ),
    workdir: Path = typer.Option(
        DEFAULT_WORKDIR, "--workdir", help="Where state, logs and the kubeconfig live."
    ),
) -> None:
    """Start the control plane and the simulated nodes; stay up until interrupted."""
    from kubegpu.sim.cluster import (
        ClusterFileError,
        SimCluster,
        load_cluster,
        stop_running,
        write_pid,
    )
    from kubegpu.sim.controlplane.binaries import find_bin_dir
    from kubegpu.sim.controlplane.process import ControlPlaneError

    try:
        spec = load_cluster(file)
    except ClusterFileError as exc:
        fail(str(exc))
    if (workdir / "sim.pid").exists():
        typer.echo(stop_running(workdir))
    write_pid(workdir)

    async def main() -> None:
        from kubegpu.cli.app import root_command  # in-process components parse with it

        cluster = SimCluster(spec, workdir, root_command)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await cluster.start()
        try:
            typer.echo(
                f"simulated cluster {spec.name!r} is up: {', '.join(n.name for n in cluster.nodes)}"
            )
            for line in kubectl_usage(cluster.kubeconfig, find_bin_dir()):
                typer.echo(line)
            typer.echo("stop with Ctrl-C or `kubegpu sim down`")
            await stop.wait()
        finally:
            await cluster.stop()
            (workdir / "sim.pid").unlink(missing_ok=True)

    try:
        asyncio.run(main())
    except ControlPlaneError as exc:
        (workdir / "sim.pid").unlink(missing_ok=True)
        fail(str(exc))


async def _print_nodes(kubeconfig: Path) -> None:
    """A table of the cluster's nodes as the API server sees them."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Node
    from rich.console import Console
    from rich.table import Table

    table = Table("node", "Ready", "GPU (NFD label)", "capacity")
    async with AsyncClient(KubeConfig.from_file(kubeconfig)) as client:
        async for n in client.list(Node):
            labels = (n.metadata.labels if n.metadata else None) or {}
            conditions = {
                c.type: c.status for c in (n.status.conditions if n.status else None) or []
            }
            gpu = labels.get("feature.node.kubernetes.io/pci-10de.present", "-")
            capacity = ", ".join(
                f"{k}={v}"
                for k, v in sorted(((n.status.capacity if n.status else None) or {}).items())
            )
            table.add_row(
                n.metadata.name if n.metadata else "?", conditions.get("Ready", "?"), gpu, capacity
            )
    Console(highlight=False, width=160).print(table)


@app.command("down")
def down(workdir: Path = typer.Option(DEFAULT_WORKDIR, "--workdir")) -> None:
    """Stop a running `kubegpu sim up` and clean up what a killed run left behind."""
    from kubegpu.sim.cluster import stop_running

    typer.echo(stop_running(workdir))


@app.command("node")
def node(
    name: str = typer.Option(..., "--name"),
    kubeconfig: Path = typer.Option(..., "--kubeconfig", envvar="KUBECONFIG"),
    root: Path = typer.Option(..., "--root", help="The node's root directory."),
    gpus: str | None = typer.Option(None, "--gpus", help="GPU spec, e.g. h200-nvl:8."),
    label: list[str] = typer.Option([], "--label", "-l", help="Extra node label key=value."),
) -> None:
    """Run one simulated node (the kubelet stand-in) against an existing cluster."""
    import re

    from lightkube.core.exceptions import ConfigError

    from kubegpu.base.loader import excerpt
    from kubegpu.kube.label_syntax import key_problem, value_problem
    from kubegpu.nvml import SpecError, parse_spec
    from kubegpu.sim.cluster import NODE_NAME
    from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig

    # every option checked before the node writes anything under --root
    if not re.fullmatch(NODE_NAME, name):
        fail(f"--name {excerpt(name)}: not a node name (lowercase letters, digits and '-')")
    if gpus is not None:
        try:
            parse_spec(gpus)
        except SpecError as exc:
            fail(f"--gpus: {exc}")
    try:
        read_kubeconfig(kubeconfig)  # the file and context the node's client will use
    except ConfigError as exc:
        fail(f"--kubeconfig: {exc}")
    labels: dict[str, str] = {}
    for item in label:  # each one checked: a dropped `--label gpu` would start a wrong node
        key, eq, value = item.partition("=")
        why = "expected KEY=VALUE" if not eq else key_problem(key) or value_problem(value)
        if why is not None:
            fail(f"--label {excerpt(item)}: {why}")
        labels[key] = value

    async def main() -> None:
        sim = SimNode(SimNodeConfig(name=name, root=root, gpus=gpus, labels=labels), kubeconfig)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await sim.start()
        typer.echo(f"node {name} is up (root {root})")
        try:
            await stop.wait()
        finally:
            await sim.stop()

    asyncio.run(main())
