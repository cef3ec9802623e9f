"""`kubegpu why POD`: why a GPU pod is Pending, in one sentence with its evidence
(docs/doctor.md, "Why a pod is Pending"). Reads the cluster (list calls only) or a snapshot.

Exit code: 0 a verdict was given; 3 the cluster or snapshot could not be read, or the pod
is not in it."""

from __future__ import annotations

import asyncio
from pathlib import Path

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

UNREAD = 3


def why(
    pod: str = typer.Argument(..., help="NAMESPACE/NAME of the pod (NAME alone: 'default')."),
    kubeconfig: Path | None = KUBECONFIG_PATH_OPTION,
    snapshot: Path | None = typer.Option(
        None, "--snapshot", help="Judge from a doctor snapshot file ('-': standard input)."
    ),
    namespace: str | None = typer.Option(
        None, "--namespace", "-n", help="The operator's namespace (default gpu-operator)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    replay: bool = REPLAY_OPTION,
    chart: Path | None = REPLAY_CHART_OPTION,
    settle_timeout: float = REPLAY_SETTLE_OPTION,
) -> None:
    """Say why a GPU pod is Pending: the cause in one sentence, the evidence and the fix;
    replayed on a simulated twin of the cluster where the scheduler's reason is not enough."""
    from rich.console import Console

    from kubegpu.doctor.capture import capture_config
    from kubegpu.doctor.report import print_verdict
    from kubegpu.doctor.snapshot import SnapshotError, load_snapshot
    from kubegpu.doctor.why import WhyError
    from kubegpu.whatif.pod_replay import explain

    err = Console(stderr=True, highlight=False)
    try:
        if snapshot is not None:
            snap = load_snapshot(snapshot)
        else:
            snap = asyncio.run(capture_config(read_kubeconfig(kubeconfig), namespace))
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
    except (SnapshotError, WhyError) as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(UNREAD) from None
    except (ApiError, ConfigError, OSError, httpx2.HTTPError) as exc:
        err.print(f"[red]error:[/red] cannot read the cluster: {exc}", soft_wrap=True)
        raise typer.Exit(UNREAD) from None
    print_verdict(verdict, json_out=json_out)
