"""Options shared by every command that touches GPUs, and error printing."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

from kubegpu.nvml import ENV_NVML, ENV_SIM_NODE, BackendError, Nvml, NvmlError, open_nvml

err_console = Console(stderr=True, highlight=False)

NVML_OPTION = typer.Option(
    None,
    "--nvml",
    envvar=ENV_NVML,
    help="GPU backend: 'real' (default) or 'sim:<state-file>' for a simulated node.",
)
SIM_NODE_OPTION = typer.Option(
    None,
    "--sim-node",
    envvar=ENV_SIM_NODE,
    help="With --nvml sim:FILE, create FILE on first use with these GPUs, e.g. 'h200-nvl:8'.",
)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: ...` (one line per problem) to stderr and exit non-zero."""
    for line in message.splitlines() or [""]:
        err_console.print(f"[red]error:[/red] {line}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def nvml_from(nvml: str | None, sim_node: str | None) -> Nvml:
    try:
        return open_nvml(nvml, sim_node)
    except (BackendError, NvmlError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
