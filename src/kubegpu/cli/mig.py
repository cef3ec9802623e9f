"""`kubegpu mig`: MIG geometry and a mig-parted compatible tool.

validate / apply / assert / export / generate follow nvidia-mig-parted's flags,
environment variables and semantics; `models` and `layouts` explore the catalog. The
work is done by kubegpu.mig.commands; this module is options and one call each.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.table import Table

from kubegpu.cli.options import NVML_OPTION, SIM_NODE_OPTION, fail, nvml_from
from kubegpu.mig import commands
from kubegpu.mig.lock import ENV_TIMEOUT
from kubegpu.nvml import Nvml

app = typer.Typer(
    help="MIG geometry and mig-parted compatible configuration.", no_args_is_help=True
)
console = Console(highlight=False)
T = TypeVar("T")

CONFIG_FILE = typer.Option(
    ...,
    "--config-file",
    "-f",
    envvar="MIG_PARTED_CONFIG_FILE",
    help="mig-parted config file ('-' for stdin).",
)
SELECTED = typer.Option(
    None,
    "--selected-config",
    "-c",
    envvar="MIG_PARTED_SELECTED_CONFIG",
    help="Config name (optional when the file has one).",
)
MODE_ONLY = typer.Option(
    False, "--mode-only", "-m", envvar="MIG_PARTED_MODE_CHANGE_ONLY", help="Only the MIG mode."
)
OUTPUT = typer.Option(
    "yaml", "--output-format", "-o", envvar="MIG_PARTED_OUTPUT_FORMAT", help="yaml or json."
)


def _run(command: Callable[[], T]) -> T:
    """Run one command; its CommandError becomes `error: ...` lines and the exit code."""
    try:
        return command()
    except commands.CommandError as exc:
        fail(str(exc), code=exc.code)


def _gpus(nvml: str | None, sim_node: str | None) -> Callable[[], Nvml]:
    return lambda: nvml_from(nvml, sim_node)


@app.command("models")
def models(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the GPU models in the catalog with their MIG profiles."""
    rows = commands.model_rows()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
        return
    table = Table("id", "product", "memory", "MIG profiles", "unconfirmed facts")
    for r in rows:
        table.add_row(
            r.id,
            r.product,
            f"{r.memory_mib} MiB",
            ", ".join(r.profiles) or "[dim]not MIG-capable[/dim]",
            str(len(r.unconfirmed)),
        )
    console.print(table)


@app.command("layouts")
def layouts(
    model: str = typer.Option(..., "--model", "-m", help="Catalog model id, e.g. a100-40gb."),
    profiles: str = typer.Option(
        "", "--profiles", help="Comma-separated profiles to use (default: all)."
    ),
    all_layouts: bool = typer.Option(False, "--all", help="Include non-maximal layouts."),
) -> None:
    """Enumerate the valid MIG layouts of a model (maximal ones by default)."""
    for line in _run(lambda: commands.layouts(model, profiles, all_layouts)):
        typer.echo(line)


@app.command("validate")
def validate(
    config_file: str = CONFIG_FILE,
    selected: str | None = SELECTED,
    model: str | None = typer.Option(
        None,
        "--model",
        help="Check for a node of this model; 'h200:8' (1 to 64 GPUs) judges it exactly as "
        "apply and assert would on such a node.",
    ),
) -> None:
    """Check a config file against the catalog (or one model) without touching any GPU."""
    typer.echo(_run(lambda: commands.validate(config_file, selected, model)))


@app.command("apply")
def apply(
    config_file: str = CONFIG_FILE,
    selected: str | None = SELECTED,
    mode_only: bool = MODE_ONLY,
    skip_reset: bool = typer.Option(
        False,
        "--skip-reset",
        "-s",
        envvar="MIG_PARTED_SKIP_RESET",
        help="Do not reset GPUs after a mode change.",
    ),
    lock_timeout: float | None = typer.Option(
        None,
        "--lock-timeout",
        envvar=ENV_TIMEOUT,
        help="Seconds to wait for another MIG writer on this node to finish (default 120).",
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Apply a config to this node's GPUs (MIG mode first, then instances)."""
    done = _run(
        lambda: commands.apply(
            config_file,
            selected,
            _gpus(nvml, sim_node),
            mode_only=mode_only,
            skip_reset=skip_reset,
            lock_timeout_s=lock_timeout,
            report=typer.echo,
        )
    )
    typer.echo(done)


@app.command("assert")
def assert_(
    config_file: str = CONFIG_FILE,
    selected: str | None = SELECTED,
    mode_only: bool = MODE_ONLY,
    valid_config: bool = typer.Option(
        False,
        "--valid-config",
        "-a",
        envvar="MIG_PARTED_VALID_CONFIG",
        help="Only check that the file parses and the config exists.",
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Exit 0 when this node's GPUs match the config, 1 otherwise (every GPU must be covered)."""
    typer.echo(
        _run(
            lambda: commands.assert_applied(
                config_file,
                selected,
                _gpus(nvml, sim_node),
                mode_only=mode_only,
                valid_config=valid_config,
            )
        )
    )


@app.command("export")
def export(
    output: str = OUTPUT,
    label: str = typer.Option(
        "current",
        "--config-label",
        "-l",
        envvar="MIG_PARTED_CONFIG_LABEL",
        help="Name of the exported config.",
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Print this node's current MIG state as a mig-parted config."""
    typer.echo(_run(lambda: commands.export(_gpus(nvml, sim_node), label, output)), nl=False)


@app.command("generate")
def generate(
    model: list[str] = typer.Option(
        None, "--model", help="Generate for these models instead of this node's GPUs."
    ),
    output: str = OUTPUT,
    out_file: Path | None = typer.Option(
        None, "--file", "-f", help="Write to this file instead of stdout."
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """The standard configs (all-disabled, all-enabled, all-balanced, all-<profile>) for a model or node."""
    text = _run(lambda: commands.generate(model or [], _gpus(nvml, sim_node), output, out_file))
    if text is not None:
        typer.echo(text, nl=False)


@app.command("show")
def show(nvml: str | None = NVML_OPTION, sim_node: str | None = SIM_NODE_OPTION) -> None:
    """One line per GPU: MIG mode and MIG devices."""
    typer.echo(_run(lambda: commands.show(_gpus(nvml, sim_node))))
