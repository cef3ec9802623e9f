"""`kubegpu feature-discovery`: GPU feature discovery, with gpu-feature-discovery's flags.

With `--node-name` (NODE_NAME) the labels are kept on that Node; without it they are
printed (or written to `--output-file` in NFD's features.d format), which is handy for
checking a node's labels by hand: `kubegpu feature-discovery --oneshot --nvml sim:n.json`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from kubegpu.cli.options import (
    KUBECONFIG_PATH_OPTION,
    NVML_OPTION,
    SIM_NODE_OPTION,
    fail,
    kubeconfig_text,
)
from kubegpu.feature_discovery import GfdOptions
from kubegpu.feature_discovery.program import FeatureDiscoveryProgram
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.runtime import run

log = logging.getLogger("kubegpu.feature_discovery")


def feature_discovery(
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
    node_name: str | None = typer.Option(
        None, "--node-name", envvar="NODE_NAME", help="Label this Node (default: print only)."
    ),
    config_file: Path | None = typer.Option(
        None,
        "--config-file",
        envvar=["GFD_CONFIG_FILE", "CONFIG_FILE"],
        help="Device-plugin config file (version: v1); re-read when it changes.",
    ),
    config_dir: Path | None = typer.Option(
        None,
        "--config-dir",
        envvar=["CONFIG_DIR", "CONFIG_FILE_SRCDIR"],
        help="A directory of named device-plugin configs (a mounted ConfigMap); the node "
        "label nvidia.com/device-plugin.config picks one. Takes the place of --config-file.",
    ),
    default_config: str | None = typer.Option(
        None,
        "--default-config",
        envvar="DEFAULT_CONFIG",
        help="With --config-dir: the named config used while the node has no label.",
    ),
    mig_strategy: str | None = typer.Option(
        None,
        "--mig-strategy",
        envvar=["GFD_MIG_STRATEGY", "MIG_STRATEGY"],
        help="none, single or mixed (overrides flags.migStrategy).",
    ),
    fail_on_init_error: bool | None = typer.Option(
        None,
        "--fail-on-init-error/--no-fail-on-init-error",
        envvar=["GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"],
        help="Exit when NVML cannot be opened (default true); otherwise label without GPUs.",
    ),
    oneshot: bool | None = typer.Option(
        None, "--oneshot/--no-oneshot", envvar="GFD_ONESHOT", help="Label once and exit."
    ),
    no_timestamp: bool | None = typer.Option(
        None,
        "--no-timestamp/--timestamp",
        envvar="GFD_NO_TIMESTAMP",
        help="Leave out nvidia.com/gfd.timestamp.",
    ),
    sleep_interval: str | None = typer.Option(
        None,
        "--sleep-interval",
        envvar="GFD_SLEEP_INTERVAL",
        help="Time between passes, e.g. 60s (default), or 'infinite'.",
    ),
    output_file: str | None = typer.Option(
        None,
        "--output-file",
        "-o",
        envvar="GFD_OUTPUT_FILE",
        help="Also write the labels as key=value lines (NFD features.d); '-' for stdout.",
    ),
    machine_type_file: str | None = typer.Option(
        None,
        "--machine-type-file",
        envvar="GFD_MACHINE_TYPE_FILE",
        help="Source of nvidia.com/gpu.machine (default /sys/class/dmi/id/product_name).",
    ),
    sysfs_root: Path = typer.Option(
        Path("/sys"), "--sysfs-root", help="Where PCI classes are read (nvidia.com/gpu.mode)."
    ),
    use_node_feature_api: bool | None = typer.Option(
        None,
        "--use-node-feature-api/--no-use-node-feature-api",
        envvar="GFD_USE_NODE_FEATURE_API",
        help="Accepted for compatibility and ignored: labels go straight to the Node.",
    ),
    kubeconfig: Path | None = KUBECONFIG_PATH_OPTION,
) -> None:
    """Compute the GPU labels (nvidia.com/gpu.product, MIG, sharing...) and keep them on the Node."""
    if mig_strategy is not None and mig_strategy not in {"none", "single", "mixed"}:
        fail(f"--mig-strategy {mig_strategy!r}: use none, single or mixed")
    if output_file and output_file != "-" and Path(output_file).is_dir():
        fail(f"--output-file {output_file}: is a directory; name the features file")
    options = GfdOptions(
        node_name=node_name,
        config_file=config_file,
        config_dir=config_dir,
        default_config=default_config or None,
        mig_strategy=mig_strategy,
        fail_on_init_error=fail_on_init_error,
        oneshot=oneshot,
        no_timestamp=no_timestamp,
        sleep_interval=sleep_interval,
        output_file=output_file,
        machine_type_file=machine_type_file,
        sysfs_root=sysfs_root,
    )

    def program() -> FeatureDiscoveryProgram:
        if use_node_feature_api:
            log.warning("--use-node-feature-api is ignored: kubegpu labels the Node directly")
        return FeatureDiscoveryProgram(
            options, gpu_backend(nvml, sim_node), kubeconfig_text(kubeconfig)
        )

    raise typer.Exit(run(program))
