"""Options shared by the commands, and error printing. The only module the sub-commands
share: a sub-command never imports another."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from kubegpu.nvml import ENV_NVML, ENV_SIM_NODE, BackendError, Nvml, NvmlError, open_nvml

if TYPE_CHECKING:
    from lightkube import KubeConfig

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
LOG_LEVEL_OPTION = typer.Option(
    "info", "--log-level", envvar="LOG_LEVEL", help="debug, info, warning or error."
)
KUBECONFIG_PATH_OPTION = typer.Option(
    None, "--kubeconfig", help="Outside a pod: the kubeconfig to use."
)
# `kubegpu why` and `kubegpu doctor --pod`: the replay on the what-if twin
REPLAY_OPTION = typer.Option(
    True,
    "--replay/--no-replay",
    help="Where the scheduler's reason is not enough, replay the pod on a simulated twin of "
    "the cluster (minutes; docs/doctor.md).",
)
REPLAY_CHART_OPTION = typer.Option(
    None, "--chart", help="The kubegpu Helm chart the twin installs (default: as `what-if run`)."
)
REPLAY_SETTLE_OPTION = typer.Option(
    300.0, "--settle-timeout", min=10, help="Seconds to wait for the twin after a relabel."
)

# the device plugin's config options, shared with the MPS control daemon
CONFIG_FILE_OPTION = typer.Option(
    None,
    "--config-file",
    envvar="CONFIG_FILE",
    help="The device plugin config file (YAML or JSON).",
)
CONFIG_DIR_OPTION = typer.Option(
    None,
    "--config-dir",
    envvar=["CONFIG_DIR", "CONFIG_FILE_SRCDIR"],
    help="A directory of named configs (a mounted ConfigMap); the node label "
    "nvidia.com/device-plugin.config picks one. Takes the place of --config-file.",
)
DEFAULT_CONFIG_OPTION = typer.Option(
    None,
    "--default-config",
    envvar="DEFAULT_CONFIG",
    help="The named config used while the node has no label.",
)
NODE_NAME_OPTION = typer.Option(
    None,
    "--node-name",
    envvar="NODE_NAME",
    help="This node's name: watch its config label and record Node events (needs API access).",
)
KUBECONFIG_OPTION = typer.Option(
    None, "--kubeconfig", envvar="KUBECONFIG", help="Kubeconfig outside a cluster."
)


def kubeconfig_text(path: Path | None) -> str | None:
    return str(path) if path else None


def read_kubeconfig(path: Path | str | None) -> KubeConfig:
    """The kubeconfig at `path` (None: in-cluster, else $KUBECONFIG or ~/.kube/config) with
    its current context resolved. Whatever lightkube's reading raises for a file that cannot
    be used (a YAML error, a missing `clusters`) comes out as its ConfigError, never as a
    traceback."""
    from lightkube import KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        config = KubeConfig.from_file(str(path)) if path else KubeConfig.from_env()
        config.get()
    except ConfigError:
        raise
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        name = path or "the kubeconfig"
        raise ConfigError(
            f"{name}: not a usable kubeconfig ({type(exc).__name__}: {first})"
        ) from None
    return config


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: ...` (one line per problem) to stderr and exit non-zero."""
    from rich.console import Console  # only when there is an error to show

    console = Console(stderr=True, highlight=False)
    for line in message.splitlines() or [""]:
        console.print(f"[red]error:[/red] {line}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def nvml_from(nvml: str | None, sim_node: str | None) -> Nvml:
    try:
        return open_nvml(nvml, sim_node)
    except (BackendError, NvmlError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
