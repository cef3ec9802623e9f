"""`kubegpu validator`: the node validator, with the upstream validator's environment.

kubegpu validator check --component driver     # COMPONENT=driver; writes driver-ready
kubegpu validator wait toolkit-ready           # an operand's init container
kubegpu validator hold                         # the validator pod's main container
kubegpu validator metrics                      # the node status exporter
"""

from __future__ import annotations

from pathlib import Path

import typer

from kubegpu.cli.options import (
    KUBECONFIG_PATH_OPTION,
    NVML_OPTION,
    SIM_NODE_OPTION,
    kubeconfig_text,
)
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.runtime import run
from kubegpu.validator import COMPONENTS, DEFAULT_OUTPUT_DIR, ValidatorSettings, program
from kubegpu.validator.checks import DEFAULT_CDI_DIRS

app = typer.Typer(
    help="Validate a GPU node and write the ready files other operands wait on.",
    no_args_is_help=True,
)

OUTPUT_DIR = typer.Option(
    DEFAULT_OUTPUT_DIR, "--output-dir", envvar="OUTPUT_DIR", help="Where the ready files are."
)


@app.command("check")
def check(
    component: str = typer.Option(
        ..., "--component", "-c", envvar="COMPONENT", help=f"One of: {', '.join(COMPONENTS)}."
    ),
    with_wait: bool = typer.Option(
        False, "--with-wait/--no-with-wait", envvar="WITH_WAIT", help="Retry until it passes."
    ),
    with_workload: bool = typer.Option(
        False,
        "--with-workload/--no-with-workload",
        envvar="WITH_WORKLOAD",
        help="cuda/plugin: run a workload pod on the node.",
    ),
    sleep_interval: float = typer.Option(
        5.0, "--sleep-interval", envvar="SLEEP_INTERVAL_SECONDS", help="Seconds between retries."
    ),
    output_dir: Path = OUTPUT_DIR,
    node_name: str | None = typer.Option(None, "--node-name", envvar="NODE_NAME"),
    namespace: str = typer.Option("gpu-operator", "--namespace", envvar="OPERATOR_NAMESPACE"),
    mig_strategy: str = typer.Option("single", "--mig-strategy", envvar="MIG_STRATEGY"),
    driver_root: str = typer.Option(
        "/", "--driver-root", envvar="NVIDIA_DRIVER_ROOT", help="The driver's root on the host."
    ),
    container_driver_root: Path = typer.Option(
        Path("/driver-root"), "--container-driver-root", envvar="DRIVER_ROOT_CTR_PATH"
    ),
    host_root: Path = typer.Option(
        Path("/host"),
        "--host-root",
        envvar="HOST_ROOT_MOUNT",
        help="Where the host's root is mounted (a pre-installed driver is checked there).",
    ),
    cdi_dir: list[Path] = typer.Option(
        list(DEFAULT_CDI_DIRS), "--cdi-dir", help="Where CDI specs are."
    ),
    image: str | None = typer.Option(
        None, "--image", envvar="VALIDATOR_IMAGE", help="Workload pods' image."
    ),
    image_pull_policy: str = typer.Option(
        "IfNotPresent", "--image-pull-policy", envvar="VALIDATOR_IMAGE_PULL_POLICY"
    ),
    image_pull_secrets: str = typer.Option(
        "",
        "--image-pull-secrets",
        envvar="VALIDATOR_IMAGE_PULL_SECRETS",
        help="Workload pods' image pull secrets, comma-separated.",
    ),
    runtime_class: str | None = typer.Option(
        None, "--runtime-class", envvar="VALIDATOR_RUNTIME_CLASS"
    ),
    plugin_timeout: float = typer.Option(
        150.0, "--plugin-timeout", help="Seconds to wait for devices."
    ),
    kubeconfig: Path | None = KUBECONFIG_PATH_OPTION,
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Validate one component; write <component>-ready when it passes."""
    settings = ValidatorSettings(
        component=component,
        output_dir=output_dir,
        with_wait=with_wait,
        with_workload=with_workload,
        sleep_interval_s=sleep_interval,
        node_name=node_name,
        namespace=namespace,
        mig_strategy=mig_strategy,
        driver_root=driver_root,
        container_driver_root=container_driver_root,
        host_root=host_root,
        cdi_dirs=tuple(cdi_dir),
        image=image,
        image_pull_policy=image_pull_policy,
        image_pull_secrets=tuple(n.strip() for n in image_pull_secrets.split(",") if n.strip()),
        runtime_class=runtime_class or None,
        plugin_timeout_s=plugin_timeout,
    )
    raise typer.Exit(
        run(
            lambda: program.check(
                settings, gpu_backend(nvml, sim_node), kubeconfig_text(kubeconfig)
            )
        )
    )


@app.command("wait")
def wait(
    files: list[str] = typer.Argument(..., help="Ready files (or components), e.g. toolkit-ready."),
    output_dir: Path = OUTPUT_DIR,
    interval: float = typer.Option(2.0, "--interval", help="Seconds between looks."),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Give up after this long (exit 1)."
    ),
) -> None:
    """Wait until the ready files exist (an operand's init container)."""
    raise typer.Exit(run(lambda: program.wait(output_dir, files, interval, timeout)))


@app.command("hold")
def hold(output_dir: Path = OUTPUT_DIR) -> None:
    """Stay up while the validations hold; on SIGTERM remove every *-ready file (as the
    upstream validator's preStop hook does), so operands wait again for a new validation."""
    raise typer.Exit(run(lambda: program.Hold(output_dir)))


@app.command("metrics")
def metrics(
    output_dir: Path = OUTPUT_DIR,
    port: int = typer.Option(8000, "--port", envvar="METRICS_PORT"),
    address: str = typer.Option("0.0.0.0", "--address", envvar="METRICS_ADDRESS"),
    node_name: str | None = typer.Option(None, "--node-name", envvar="NODE_NAME"),
) -> None:
    """Serve the node's validation state on /metrics (the node status exporter)."""
    raise typer.Exit(run(lambda: program.StatusExporter(output_dir, address, port, node_name)))


@app.command("workload")
def workload(
    kind: str = typer.Argument(..., help="cuda, or plugin (the container was given a GPU)."),
    visible: str | None = typer.Option(None, "--visible-devices", envvar="NVIDIA_VISIBLE_DEVICES"),
    container_driver_root: Path | None = typer.Option(None, "--container-driver-root"),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """The workload pods' command: the GPU accepts a workload."""
    raise typer.Exit(
        run(
            lambda: program.workload(
                kind, gpu_backend(nvml, sim_node), visible, container_driver_root
            )
        )
    )
