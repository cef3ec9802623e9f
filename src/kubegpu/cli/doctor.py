"""`kubegpu doctor`: check a cluster's GPU stack for the documented pitfalls (docs/doctor.md).

Exit code: 0 clean, 1 warnings only, 2 errors; 3 when the cluster or snapshot could not be
read (nothing was checked, so no verdict)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
import typer
from lightkube.core.exceptions import ApiError, ConfigError

from kubegpu.cli.options import (
    KUBECONFIG_PATH_OPTION,
    REPLAY_CHART_OPTION,
    REPLAY_OPTION,
    REPLAY_SETTLE_OPTION,
    read_kubeconfig,
)

if TYPE_CHECKING:
    from kubegpu.doctor.snapshot import Snapshot

UNREAD = 3


def doctor(
    kubeconfig: Path | None = KUBECONFIG_PATH_OPTION,
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    snapshot: Path | None = typer.Option(
        None,
        "--snapshot",
        help="Check a snapshot file (from --save-snapshot or `kubegpu what-if snapshot`) "
        "instead of a live cluster; '-' reads standard input.",
    ),
    save_snapshot: Path | None = typer.Option(
        None, "--save-snapshot", help="Also write what was read from the cluster to FILE."
    ),
    namespace: str | None = typer.Option(
        None,
        "--namespace",
        "-n",
        help="The operator's namespace (default gpu-operator; a snapshot names its own).",
    ),
    pod: str | None = typer.Option(
        None,
        "--pod",
        help="NS/NAME: say why this GPU pod is Pending instead (as `kubegpu why`).",
    ),
    replay: bool = REPLAY_OPTION,
    chart: Path | None = REPLAY_CHART_OPTION,
    settle_timeout: float = REPLAY_SETTLE_OPTION,
) -> None:
    """Check a cluster (or a snapshot of one) for the pitfalls of NVIDIA's GPU stack: each
    problem with its evidence and the fix. Exit code 0 clean, 1 warnings, 2 errors."""
    from rich.console import Console

    from kubegpu.doctor.checks import run_checks
    from kubegpu.doctor.findings import exit_code
    from kubegpu.doctor.report import render_table, report_json, summary_line
    from kubegpu.doctor.snapshot import SnapshotError, load_snapshot

    err = Console(stderr=True, highlight=False)
    if snapshot is not None and save_snapshot is not None:
        err.print(
            "[red]error:[/red] --save-snapshot writes what was read from a cluster; "
            "it cannot be combined with --snapshot"
        )
        raise typer.Exit(UNREAD)
    if save_snapshot is not None and (
        save_snapshot.is_dir() or not save_snapshot.parent.is_dir()
    ):  # said before the cluster is read, not after
        where = "is a directory" if save_snapshot.is_dir() else "its directory does not exist"
        err.print(f"[red]error:[/red] --save-snapshot {save_snapshot}: {where}", soft_wrap=True)
        raise typer.Exit(UNREAD)
    try:
        if snapshot is not None:
            snap = load_snapshot(snapshot)
        else:
            snap = asyncio.run(_capture(kubeconfig, namespace))
    except SnapshotError as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(UNREAD) from None
    except (ApiError, ConfigError, OSError, httpx2.HTTPError) as exc:
        err.print(f"[red]error:[/red] cannot read the cluster: {exc}", soft_wrap=True)
        raise typer.Exit(UNREAD) from None
    if snapshot is not None and namespace is not None and namespace != snap.operator_namespace:
        # the snapshot holds one namespace's objects: checking another would pass silently
        err.print(
            f"[red]error:[/red] --namespace {namespace}: {snapshot} was taken of the "
            f"operator namespace {snap.operator_namespace}",
            soft_wrap=True,
        )
        raise typer.Exit(UNREAD)
    if save_snapshot is not None:
        try:
            save_snapshot.write_text(snap.to_json())
        except OSError as exc:
            err.print(
                f"[red]error:[/red] --save-snapshot {save_snapshot}: cannot write: "
                f"{exc.strerror or exc}",
                soft_wrap=True,
            )
            raise typer.Exit(UNREAD) from None
    if pod is not None:
        from kubegpu.doctor.report import print_verdict
        from kubegpu.doctor.why import WhyError
        from kubegpu.whatif.pod_replay import explain

        try:
            verdict = asyncio.run(
                explain(
                    snap,
                    pod,
                    replay=replay,
                    chart=chart,
                    settle_timeout=settle_timeout,
                    say=lambda text: err.print(f"[cyan]twin:[/] {text}", soft_wrap=True),
                )
            )
        except WhyError as exc:
            err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
            raise typer.Exit(UNREAD) from None
        print_verdict(verdict, json_out=json_out)
        raise typer.Exit(0)
    findings = run_checks(snap)
    if json_out:
        sys.stdout.write(report_json(findings, snap))
    else:
        out = Console(highlight=False)
        if findings:
            out.print(render_table(findings))
        out.print(summary_line(findings, snap))
    raise typer.Exit(exit_code(findings))


async def _capture(kubeconfig: Path | None, namespace: str | None) -> Snapshot:
    from kubegpu.doctor.capture import capture_config

    return await capture_config(read_kubeconfig(kubeconfig), namespace)
