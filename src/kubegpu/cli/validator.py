"""`kubegpu validator`: the node validator, with the upstream validator's environment.

kubegpu validator check --component driver     # COMPONENT=driver; writes driver-ready
kubegpu validator wait toolkit-ready           # an operand's init container
kubegpu validator hold                         # the validator pod's main container
kubegpu validator metrics                      # the node status exporter
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import typer

from kubegpu.cli.options import NVML_OPTION, SIM_NODE_OPTION, fail
from kubegpu.nvml import BackendError, Nvml, NvmlError, open_nvml
from kubegpu.validator import (
    COMPONENTS,
    DEFAULT_OUTPUT_DIR,
    CheckFailed,
    ReadyFiles,
    Validator,
    ValidatorSettings,
)

app = typer.Typer(
    help="Validate a GPU node and write the ready files other operands wait on.",
    no_args_is_help=True,
)
log = logging.getLogger("kubegpu.validator")

OUTPUT_DIR = typer.Option(
    DEFAULT_OUTPUT_DIR, "--output-dir", envvar="OUTPUT_DIR", help="Where the ready files are."
)


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _opener(nvml: str | None, sim_node: str | None) -> Nvml:
    try:
        return open_nvml(nvml, sim_node)
    except (BackendError, FileNotFoundError, ValueError) as exc:
        raise NvmlError(str(exc)) from None


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
    cdi_dir: list[Path] = typer.Option(
        [Path("/var/run/cdi"), Path("/etc/cdi")], "--cdi-dir", help="Where CDI specs are."
    ),
    image: str | None = typer.Option(
        None, "--image", envvar="VALIDATOR_IMAGE", help="Workload pods' image."
    ),
    image_pull_policy: str = typer.Option(
        "IfNotPresent", "--image-pull-policy", envvar="VALIDATOR_IMAGE_PULL_POLICY"
    ),
    runtime_class: str | None = typer.Option(
        None, "--runtime-class", envvar="VALIDATOR_RUNTIME_CLASS"
    ),
    plugin_timeout: float = typer.Option(
        150.0, "--plugin-timeout", help="Seconds to wait for devices."
    ),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="Outside a pod: the kubeconfig."
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Validate one component; write <component>-ready when it passes."""
    _logging()
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
        cdi_dirs=tuple(cdi_dir),
        image=image,
        image_pull_policy=image_pull_policy,
        runtime_class=runtime_class or None,
        plugin_timeout_s=plugin_timeout,
    )
    if component not in COMPONENTS:
        fail(f"--component {component!r}: use one of {', '.join(COMPONENTS)}")
    needs_api = component == "plugin" or (component == "cuda" and with_workload)

    async def main() -> None:
        client = None
        if needs_api:
            from kubegpu.cli.feature_discovery import kube_client

            client = kube_client(kubeconfig, "kubegpu-validator")
        try:
            await Validator(settings, lambda: _opener(nvml, sim_node), client).run()
        finally:
            if client is not None:
                await client.close()

    try:
        asyncio.run(main())
    except CheckFailed as exc:
        fail(f"{component}: {exc}")


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
    _logging()
    log.info("waiting for %s in %s", ", ".join(files), output_dir)
    if not asyncio.run(ReadyFiles(output_dir).wait(files, interval_s=interval, timeout_s=timeout)):
        fail(f"{', '.join(files)} not ready after {timeout}s")
    log.info("%s ready", ", ".join(files))


@app.command("hold")
def hold(output_dir: Path = OUTPUT_DIR) -> None:
    """Stay up while the validations hold; on SIGTERM remove every *-ready file (as the
    upstream validator's preStop hook does), so operands wait again for a new validation."""
    _logging()
    files = ReadyFiles(output_dir)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("all validations are successful: %s", ", ".join(files.present()) or "(none)")
        await stop.wait()

    asyncio.run(main())
    removed = files.clear_all()
    log.info("stopping: removed %s", ", ".join(removed) or "nothing")


@app.command("metrics")
def metrics(
    output_dir: Path = OUTPUT_DIR,
    port: int = typer.Option(8000, "--port", envvar="METRICS_PORT"),
    address: str = typer.Option("0.0.0.0", "--address", envvar="METRICS_ADDRESS"),
    node_name: str | None = typer.Option(None, "--node-name", envvar="NODE_NAME"),
) -> None:
    """Serve the node's validation state on /metrics (the node status exporter)."""
    _logging()
    from prometheus_client import CollectorRegistry, start_http_server

    from kubegpu.validator.metrics import ValidationCollector

    registry = CollectorRegistry()
    registry.register(ValidationCollector(ReadyFiles(output_dir), node_name))
    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        fail(f"cannot listen on {address}:{port}: {exc.strerror or exc}")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info("node status exporter on %s:%d", address, server.server_port)
        await stop.wait()

    asyncio.run(main())
    server.shutdown()
    thread.join(timeout=5)


@app.command("workload")
def workload(
    kind: str = typer.Argument(..., help="cuda, or plugin (the container was given a GPU)."),
    visible: str | None = typer.Option(None, "--visible-devices", envvar="NVIDIA_VISIBLE_DEVICES"),
    container_driver_root: Path | None = typer.Option(None, "--container-driver-root"),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """The workload pods' command: the GPU accepts a workload."""
    from kubegpu.validator.checks import check_cuda_here

    _logging()
    if kind not in {"cuda", "plugin"}:
        fail(f"workload {kind!r}: use cuda or plugin")
    if kind == "plugin" and (not visible or visible in {"all", "void", "none"}):
        fail("plugin workload: the device plugin allocated no device to this container")
    try:
        result = check_cuda_here(lambda: _opener(nvml, sim_node), visible, container_driver_root)
    except CheckFailed as exc:
        fail(str(exc))
    typer.echo(result.message)
