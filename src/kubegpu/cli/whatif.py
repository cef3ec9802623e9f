"""`kubegpu what-if`: snapshot a cluster, then try a change on its simulated twin."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path

import typer

from kubegpu.cli.options import KUBECONFIG_OPTION, fail

app = typer.Typer(
    name="what-if",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Try a change on a simulated twin of a cluster before making it.",
)

INPUT_ERROR = 3  # exit code when what-if itself could not run (0/1/2: see `run --help`)


@app.command("snapshot")
def snapshot_cmd(
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    namespace: str = typer.Option(
        "gpu-operator", "--namespace", "-n", help="Where kubegpu (the operator) runs."
    ),
) -> None:
    """Read the cluster (nodes and their GPU labels, the ClusterPolicy or GPUCluster, the
    operator's ConfigMaps, GPU pods with their requests) and print it as JSON. Only reads."""
    from kubegpu.whatif.command import read_source

    try:
        snapshot = asyncio.run(read_source(kubeconfig, namespace))
    except Exception as exc:  # the API server's or the kubeconfig's own message
        fail(f"cannot read the cluster: {exc}", INPUT_ERROR)
    typer.echo(snapshot.to_json(), nl=False)


@app.command("run")
def run_cmd(
    snapshot: Path = typer.Argument(..., help="A `kubegpu what-if snapshot` file (- for stdin)."),
    policy_patch: Path | None = typer.Option(
        None,
        "--policy-patch",
        help="A JSON or YAML merge patch of the ClusterPolicy, e.g. {spec: {mig: {strategy: mixed}}}.",
    ),
    config_map: list[Path] = typer.Option(
        [],
        "--configmap",
        help="A ConfigMap manifest to create or replace in the operator namespace "
        "(device-plugin configs, mig-parted layouts). Repeatable.",
    ),
    mig_config: list[str] = typer.Option(
        [], "--mig-config", help="NODE=LAYOUT: label the node nvidia.com/mig.config. Repeatable."
    ),
    device_plugin_config: list[str] = typer.Option(
        [],
        "--device-plugin-config",
        help="NODE=NAME: label the node nvidia.com/device-plugin.config. Repeatable.",
    ),
    plan: Path | None = typer.Option(
        None, "--plan", help="A `kubegpu plan --out` directory: its ConfigMaps, values and labels."
    ),
    settle_timeout: float = typer.Option(
        300.0, "--settle-timeout", min=10, help="Seconds to wait for the twin after the change."
    ),
    chart: Path | None = typer.Option(
        None, "--chart", help="The kubegpu Helm chart (default: as `kubegpu operator demo`)."
    ),
    as_json: bool = typer.Option(False, "--json", help="The report as JSON, for tools."),
) -> None:
    """Build a simulated twin of the snapshot's cluster, apply the change to the twin (never
    to the cluster), and report which nodes repartition, which pods block it, what every node
    advertises before and after, which pods stay Pending, and the doctor's findings.
    Exit code: 0 clean, 1 the doctor warns, 2 not all of it goes through (or doctor errors),
    3 what-if could not run."""
    from rich.console import Console

    from kubegpu.base.loader import InputError
    from kubegpu.sim.stack import StackError
    from kubegpu.whatif.command import load_change, prepare, run
    from kubegpu.whatif.report import render, report_json
    from kubegpu.whatif.twin import TwinError
    from kubegpu.whatif.twin_spec import TwinSpecError

    try:
        change = load_change(
            policy_patch=policy_patch,
            config_maps=config_map,
            mig_configs=mig_config,
            device_plugin_configs=device_plugin_config,
            plan_dir=plan,
        )
        spec = prepare(snapshot, change)
    except (InputError, TwinSpecError) as exc:
        fail(str(exc), INPUT_ERROR)
    if change.empty:
        fail("no change given: use --policy-patch, --configmap, --mig-config, "
             "--device-plugin-config or --plan", INPUT_ERROR)  # fmt: skip
    logging.basicConfig(level=logging.ERROR)
    err = Console(stderr=True, highlight=False)
    t0 = time.monotonic()

    def say(text: str) -> None:
        err.print(f"[bold cyan]{time.monotonic() - t0:6.1f}s[/] {text}")

    try:
        report = asyncio.run(run(spec, change, chart=chart, settle_timeout=settle_timeout, say=say))
    except (TwinError, StackError) as exc:
        fail(str(exc), INPUT_ERROR)
    if as_json:
        typer.echo(json.dumps(report_json(report), indent=2, sort_keys=True))
    else:
        Console(highlight=False, width=None if sys.stdout.isatty() else 120).print(render(report))
    raise typer.Exit(report.exit_code)
