"""Root typer app. Sub-commands load lazily: `kubegpu device-plugin` imports only the
device plugin's code, which keeps each operand's memory small and an unrelated module's
import error from taking every command down."""

from __future__ import annotations

import importlib

import typer
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


class _LazyGroup(TyperGroup):
    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        target = getattr(importlib.import_module(module), attr)
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
