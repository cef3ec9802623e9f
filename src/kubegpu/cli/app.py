"""Root typer app. Sub-commands load lazily: `kubegpu device-plugin` imports only the
device plugin's code, which keeps each operand's memory small and an unrelated module's
import error from taking every command down."""

from __future__ import annotations

import importlib

import typer
from rich.markup import escape
from typer import _click
from typer.core import TyperGroup

# command name -> (module, attribute): a typer.Typer (a group) or a command function
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("kubegpu.cli.demo", "demo"),
    "doctor": ("kubegpu.cli.doctor", "doctor"),
    "mig": ("kubegpu.cli.mig", "app"),
    "plan": ("kubegpu.cli.plan", "plan"),
    "sim": ("kubegpu.cli.sim", "app"),
    "device-plugin": ("kubegpu.cli.device_plugin", "device_plugin"),
    "dra-plugin": ("kubegpu.cli.dra_plugin", "dra_plugin"),
    "mps-control-daemon": ("kubegpu.cli.mps", "mps_control_daemon"),
    "feature-discovery": ("kubegpu.cli.feature_discovery", "feature_discovery"),
    "node-labeller": ("kubegpu.cli.node_labeller", "node_labeller"),
    "mig-manager": ("kubegpu.cli.mig_manager", "mig_manager"),
    "exporter": ("kubegpu.cli.exporter", "exporter"),
    "validator": ("kubegpu.cli.validator", "app"),
    "operator": ("kubegpu.cli.operator", "app"),
    "what-if": ("kubegpu.cli.whatif", "app"),
    "why": ("kubegpu.cli.why", "why"),
}

# A module that only an optional extra installs -> that extra. The image carries no planner:
# there `kubegpu plan` is listed but refuses to run, naming what to install.
EXTRA_MODULES: dict[str, str] = {"highspy": "planner", "numpy": "planner"}


def _needs_extra(cmd_name: str, extra: str, missing: str) -> typer.Typer:
    """A stand-in for a command whose extra is not installed: listed in --help, and any
    invocation (--help included) exits 1 saying what to install."""
    message = (
        f"Error: `kubegpu {cmd_name}` needs the optional dependencies of kubegpu[{extra}] "
        f"(module {missing!r} is not installed): pip install 'kubegpu[{extra}]'"
    )
    stand_in = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @stand_in.command(
        cmd_name,
        help=escape(f"Not installed: needs kubegpu[{extra}]."),
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    def refuse() -> None:
        typer.echo(message, err=True)
        raise typer.Exit(1)

    return stand_in


class _LazyGroup(TyperGroup):
    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as error:
            top = (error.name or "").partition(".")[0]
            if top not in EXTRA_MODULES:
                raise
            target = _needs_extra(cmd_name, EXTRA_MODULES[top], top)
        else:
            target = getattr(loaded, attr)
        if not isinstance(target, typer.Typer):
            single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            single.command(cmd_name)(target)
            target = single
        command = typer.main.get_command(target)
        command.name = cmd_name
        return command


app = typer.Typer(
    name="kubegpu",
    cls=_LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """NVIDIA GPU node stack for Kubernetes: node components, MIG tools, planner and GPU simulator."""


def root_command() -> _click.Command:
    """`kubegpu` as a click command: what the simulator's in-process pods parse a
    container's command line with (kubegpu.sim.inprocess)."""
    return typer.main.get_command(app)
