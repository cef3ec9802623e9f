"""`kubegpu mig-manager`: the MIG manager, with nvidia-mig-manager's flags and environment."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

import typer

from kubegpu.catalog import nvidia
from kubegpu.cli.options import (
    KUBECONFIG_PATH_OPTION,
    NVML_OPTION,
    SIM_NODE_OPTION,
    fail,
    kubeconfig_text,
)
from kubegpu.kube.kubelet import POD_RESOURCES_SOCKET
from kubegpu.mig_manager import DEFAULT_OPERANDS, MigManagerSettings
from kubegpu.mig_manager.program import MigManagerProgram
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.intervals import POLL, WAIT, check_seconds
from kubegpu.node.runtime import run

log = logging.getLogger("kubegpu.mig_manager")


def mig_manager(
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
    node_name: str = typer.Option(
        ..., "--node-name", envvar="NODE_NAME", help="This node (the only Node watched)."
    ),
    namespace: str = typer.Option(
        "default",
        "--namespace",
        envvar=["OPERATOR_NAMESPACE", "DEFAULT_GPU_CLIENTS_NAMESPACE", "POD_NAMESPACE"],
        help="The operator's namespace: where the generated <node>-mig-config ConfigMap lives.",
    ),
    pod_name: str | None = typer.Option(
        None, "--pod-name", envvar="POD_NAME", help="This pod: owner of the generated ConfigMap."
    ),
    config_file: Path | None = typer.Option(
        None,
        "--config-file",
        envvar="CONFIG_FILE",
        help="mig-parted config (a mounted ConfigMap); default: generated from the GPUs.",
    ),
    config_map: str | None = typer.Option(
        None,
        "--config-map",
        envvar="CONFIG_MAP",
        help="Or read the mig-parted config from this ConfigMap (key config.yaml).",
    ),
    default_config_file: Path | None = typer.Option(
        None,
        "--default-config-file",
        envvar="DEFAULT_CONFIG_FILE",
        help="Layouts to offer when none can be generated from this node's GPUs.",
    ),
    with_reboot: bool = typer.Option(
        False,
        "--with-reboot/--no-with-reboot",
        envvar="WITH_REBOOT",
        help="Reboot the node when a MIG mode change needs it.",
    ),
    reboot_command: str = typer.Option(
        "chroot /host reboot",
        "--reboot-command",
        envvar="REBOOT_COMMAND",
        help="How to reboot the node (a simulated node: touch <root>/run/kubegpu-sim/reboot-request).",
    ),
    cdi_enabled: bool = typer.Option(
        False,
        "--cdi-enabled/--no-cdi-enabled",
        envvar="CDI_ENABLED",
        help="Rewrite the management CDI spec after each change.",
    ),
    cdi_dir: Path = typer.Option(Path(nvidia.CDI_SPEC_DIR), "--cdi-dir", envvar="CDI_DIR"),
    driver_root: str = typer.Option(
        "/", "--driver-root", envvar="NVIDIA_DRIVER_ROOT", help="The driver root on the host."
    ),
    container_driver_root: Path = typer.Option(
        Path("/driver-root"),
        "--container-driver-root",
        envvar="DRIVER_ROOT_CTR_PATH",
        help="Where this container sees the driver root (its files go into the CDI spec).",
    ),
    pod_resources_socket: str = typer.Option(
        POD_RESOURCES_SOCKET,
        "--pod-resources-socket",
        envvar="POD_RESOURCES_SOCKET",
        help="The kubelet's pod-resources API, to see which pods hold GPUs ('' to not check).",
    ),
    pod_resources_timeout: float = typer.Option(
        300.0,
        "--pod-resources-timeout",
        envvar="POD_RESOURCES_TIMEOUT",
        help="Seconds a change keeps asking a kubelet that does not answer which pods hold "
        "GPUs (a loaded node answers late) before it fails.",
    ),
    busy_gpus: str = typer.Option(
        "refuse",
        "--busy-gpus",
        envvar="BUSY_GPUS",
        help="refuse (default) or proceed when a workload pod holds a GPU that must change.",
    ),
    operands: str = typer.Option(
        ",".join(DEFAULT_OPERANDS),
        "--operands",
        envvar="GPU_OPERANDS",
        help="Operands paused through nvidia.com/gpu.deploy.<operand> during a change.",
    ),
    pods_timeout: float = typer.Option(
        300.0, "--pods-timeout", help="Seconds to wait for the paused operands' pods to go."
    ),
    reboot_timeout: float = typer.Option(
        600.0, "--reboot-timeout", help="Seconds to wait for the node to reboot."
    ),
    unknown_config_wait: float = typer.Option(
        60.0,
        "--unknown-config-wait",
        envvar="UNKNOWN_CONFIG_WAIT",
        help="Seconds a config name the layouts lack is waited for (state pending, e.g. "
        "while the ConfigMap is switched) before the change fails; 0 fails at once.",
    ),
    poll_interval: float = typer.Option(1.0, "--poll-interval", help="Seconds between checks."),
    with_shutdown_host_gpu_clients: bool = typer.Option(
        False,
        "--with-shutdown-host-gpu-clients/--no-with-shutdown-host-gpu-clients",
        envvar="WITH_SHUTDOWN_HOST_GPU_CLIENTS",
        help="Accepted for compatibility; kubegpu does not stop host systemd services.",
    ),
    gpu_clients_file: str | None = typer.Option(
        None, "--gpu-clients-file", envvar="GPU_CLIENTS_FILE", help="Accepted and ignored."
    ),
    kubeconfig: Path | None = KUBECONFIG_PATH_OPTION,
) -> None:
    """Apply the MIG layout named by the node's nvidia.com/mig.config label, safely."""
    if busy_gpus not in {"refuse", "proceed"}:
        fail(f"--busy-gpus {busy_gpus!r}: use refuse or proceed")
    if config_file is not None and config_map is not None:
        fail("give --config-file or --config-map, not both")
    try:
        command = tuple(shlex.split(reboot_command))
    except ValueError as exc:  # an unbalanced quote
        fail(f"--reboot-command {reboot_command!r}: {exc}")
    if with_reboot and not command:
        fail("--with-reboot needs a --reboot-command")
    settings = MigManagerSettings(
        node_name=node_name,
        namespace=namespace,
        config_file=config_file,
        config_map=config_map,
        default_config_file=default_config_file,
        pod_name=pod_name,
        operands=tuple(o.strip() for o in operands.split(",") if o.strip()),
        with_reboot=with_reboot,
        reboot_command=command,
        reboot_timeout_s=reboot_timeout,
        pods_timeout_s=pods_timeout,
        unknown_config_wait_s=unknown_config_wait,
        poll_s=poll_interval,
        pod_resources_socket=Path(pod_resources_socket) if pod_resources_socket else None,
        pod_resources_timeout_s=pod_resources_timeout,
        busy_gpus="proceed" if busy_gpus == "proceed" else "refuse",
        cdi_enabled=cdi_enabled,
        cdi_dir=cdi_dir,
        driver_root=driver_root,
        container_driver_root=container_driver_root,
    )

    def program() -> MigManagerProgram:
        check_seconds(poll_interval, POLL, "--poll-interval")
        check_seconds(pods_timeout, WAIT, "--pods-timeout")
        check_seconds(reboot_timeout, WAIT, "--reboot-timeout")
        check_seconds(
            pod_resources_timeout, WAIT, "--pod-resources-timeout", "POD_RESOURCES_TIMEOUT"
        )
        check_seconds(unknown_config_wait, WAIT, "--unknown-config-wait", "UNKNOWN_CONFIG_WAIT")
        if with_shutdown_host_gpu_clients or gpu_clients_file:
            log.warning(
                "WITH_SHUTDOWN_HOST_GPU_CLIENTS / GPU_CLIENTS_FILE are ignored: kubegpu pauses "
                "GPU clients only through their nvidia.com/gpu.deploy.* labels, never host services"
            )
        return MigManagerProgram(settings, gpu_backend(nvml, sim_node), kubeconfig_text(kubeconfig))

    raise typer.Exit(run(program))
