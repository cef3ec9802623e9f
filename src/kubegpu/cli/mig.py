"""`kubegpu mig`: MIG geometry and a mig-parted compatible tool.

validate / apply / assert / export / generate follow nvidia-mig-parted's flags,
environment variables and semantics; `models` and `layouts` explore the catalog.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.table import Table

from kubegpu.catalog import UnknownModelError, all_models, get_model
from kubegpu.cli.options import NVML_OPTION, SIM_NODE_OPTION, fail, nvml_from
from kubegpu.mig.config import ConfigError, MigConfigEntry, MigPartedConfig, load_config
from kubegpu.mig.geometry import LayoutError, iter_layouts
from kubegpu.mig.parted import (
    ApplyError,
    apply_config,
    assert_config,
    describe_node,
    export_config,
    generate_config,
)
from kubegpu.mig.targets import check_against_catalog, check_against_model
from kubegpu.nvml import NvmlError

app = typer.Typer(
    help="MIG geometry and mig-parted compatible configuration.", no_args_is_help=True
)
console = Console(highlight=False)

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


def _load(path: str) -> MigPartedConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        fail(str(exc))


def _selected(config_file: str, selected: str | None) -> tuple[str, tuple[MigConfigEntry, ...]]:
    """The config named by -c (or the file's only one), or exit with the reason."""
    try:
        return _load(config_file).select(selected, config_file)
    except ConfigError as exc:
        fail(str(exc))


def _config_errors(config_file: str, exc: ConfigError) -> str:
    """A static-check failure, one line per problem, each naming the file."""
    return "\n".join(f"{config_file}: {line}" for line in str(exc).splitlines())


def _print_config(cfg: MigPartedConfig, fmt: str, out: Path | None = None) -> None:
    if fmt not in {"yaml", "json"}:
        fail(f"--output-format {fmt!r}: use yaml or json")
    text = (
        cfg.to_yaml()
        if fmt == "yaml"
        else json.dumps(yaml.safe_load(cfg.to_yaml()), indent=2) + "\n"
    )
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)


@app.command("models")
def models(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the GPU models in the catalog with their MIG profiles."""
    if as_json:
        rows = [
            {
                "id": m.id,
                "product": m.product_name,
                "memory_mib": m.memory_mib,
                "mig": bool(m.mig),
                "profiles": [p.name for p in m.mig.gpu_instance_profiles] if m.mig else [],
                "unconfirmed": m.unconfirmed_facts(),
            }
            for m in all_models()
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("id", "product", "memory", "MIG profiles", "unconfirmed facts")
    for m in all_models():
        names = ", ".join(p.name for p in m.mig.gpu_instance_profiles) if m.mig else ""
        table.add_row(
            m.id,
            m.product_name,
            f"{m.memory_mib} MiB",
            names or "[dim]not MIG-capable[/dim]",
            str(len(m.unconfirmed_facts())),
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
    try:
        gpu = get_model(model)
        if gpu.mig is None:
            raise LayoutError(f"{gpu.id} ({gpu.product_name}) is not MIG-capable")
        chosen = [gpu.mig.profile(p.strip()) for p in profiles.split(",") if p.strip()] or None
    except UnknownModelError as exc:
        fail(str(exc))
    except KeyError as exc:
        fail(f"profile {exc.args[0]!r} does not exist on {model}")
    except LayoutError as exc:
        fail(str(exc))
    n = 0
    for layout in iter_layouts(gpu, chosen, maximal_only=not all_layouts):
        n += 1
        typer.echo(" + ".join(str(pi) for pi in sorted(layout, key=lambda pi: pi.start)))
    typer.echo(f"{n} layouts")


@app.command("validate")
def validate(
    config_file: str = CONFIG_FILE,
    selected: str | None = SELECTED,
    model: str | None = typer.Option(
        None,
        "--model",
        help="Check for a node of this model; 'h200:8' also range-checks GPU indexes.",
    ),
) -> None:
    """Check a config file against the catalog (or one model) without touching any GPU."""
    cfg = _load(config_file)
    try:
        names = [cfg.select(selected, config_file)[0]] if selected else sorted(cfg.mig_configs)
    except ConfigError as exc:
        fail(str(exc))
    try:
        gpu = None
        count = None
        if model:
            name, _, n = model.partition(":")
            gpu = get_model(name)
            count = int(n) if n else None
    except UnknownModelError as exc:
        fail(str(exc))
    except ValueError:
        fail(f"--model {model!r}: expected MODEL or MODEL:COUNT")
    problems = []
    for name in names:
        entries = cfg.mig_configs[name]
        try:
            if gpu is not None:
                check_against_model(name, entries, gpu, count)
            else:
                check_against_catalog(name, entries)
        except ConfigError as exc:
            problems.append(_config_errors(config_file, exc))
    if problems:
        fail("\n".join(problems))
    target = f" for {model}" if model else ""
    typer.echo(f"{config_file}: {len(names)} config(s) valid{target}: {', '.join(names)}")


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
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Apply a config to this node's GPUs (MIG mode first, then instances)."""
    name, entries = _selected(config_file, selected)
    gpus = nvml_from(nvml, sim_node)
    try:
        result = apply_config(
            gpus, name, entries, mode_only=mode_only, skip_reset=skip_reset, report=typer.echo
        )
    except ConfigError as exc:
        fail(_config_errors(config_file, exc) + "\nnothing was applied")
    except (ApplyError, NvmlError) as exc:
        fail(str(exc))
    if result.reset_required:
        ids = ",".join(map(str, result.reset_required))
        fail(
            f"MIG mode change pending on GPU(s) {ids}: reset them (nvidia-smi -r -i {ids}) or reboot the node, then apply again",
            code=3,
        )
    typer.echo(f"config {name!r} applied" + ("" if result.changed else " (nothing to change)"))


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
    name, entries = _selected(config_file, selected)
    if valid_config:
        typer.echo(f"config {name!r} is valid")
        return
    try:
        problems = assert_config(nvml_from(nvml, sim_node), name, entries, mode_only=mode_only)
    except ConfigError as exc:
        fail(_config_errors(config_file, exc))
    except NvmlError as exc:
        fail(str(exc))
    if problems:
        fail(
            "\n".join(
                ["assertion failure: selected configuration not currently applied", *problems]
            )
        )
    typer.echo(f"config {name!r} is applied")


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
    try:
        cfg = export_config(nvml_from(nvml, sim_node), label)
    except NvmlError as exc:
        fail(str(exc))
    _print_config(cfg, output)


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
    try:
        if model:
            gpus = [get_model(m) for m in model]
        else:
            node = nvml_from(nvml, sim_node)
            gpus = [get_model(d.model_id) for d in node.devices() if d.model_id]
        cfg = generate_config(gpus)
    except UnknownModelError as exc:
        fail(str(exc))
    except (ConfigError, NvmlError) as exc:
        fail(str(exc))
    _print_config(cfg, output, out_file)


@app.command("show")
def show(nvml: str | None = NVML_OPTION, sim_node: str | None = SIM_NODE_OPTION) -> None:
    """One line per GPU: MIG mode and MIG devices."""
    typer.echo(describe_node(nvml_from(nvml, sim_node)))
