"""Root typer app; sub-apps register themselves here."""

from __future__ import annotations

import typer

from kubegpu.cli import demo, mig, sim

app = typer.Typer(
    name="kubegpu",
    help="NVIDIA GPU node stack for Kubernetes: MIG tools, GPU simulator and node components.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(mig.app, name="mig")
app.add_typer(sim.app, name="sim")
app.command("demo")(demo.demo)
