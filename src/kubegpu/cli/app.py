"""Root typer app; sub-apps register themselves here."""

from __future__ import annotations

import typer

from kubegpu.cli import mig as mig_cli

app = typer.Typer(
    name="kubegpu",
    help="NVIDIA GPU node stack for Kubernetes: MIG tools, simulator and (soon) node components.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(mig_cli.app, name="mig")
