"""`kubegpu mig`: MIG geometry and the mig-parted tool (validate, apply, assert, export, generate)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from kubegpu.catalog import UnknownModelError, all_models, get_model
from kubegpu.mig.geometry import LayoutError, iter_layouts

app = typer.Typer(
    help="MIG geometry and mig-parted compatible configuration.", no_args_is_help=True
)
console = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


@app.command("models")
def models(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the GPU models in the catalog with their MIG capability."""
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
    if as_json:
        print(json.dumps(rows, indent=2))
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
        raise fail(str(exc)) from None
    except KeyError as exc:
        raise fail(f"profile {exc.args[0]!r} does not exist on {model}") from None
    except LayoutError as exc:
        raise fail(str(exc)) from None
    n = 0
    for layout in iter_layouts(gpu, chosen, maximal_only=not all_layouts):
        n += 1
        typer.echo(" + ".join(str(pi) for pi in sorted(layout, key=lambda pi: pi.start)))
    console.print(f"[bold]{n}[/bold] layouts")
