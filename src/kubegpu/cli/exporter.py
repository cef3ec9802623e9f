"""`kubegpu exporter`: GPU metrics for Prometheus, with DCGM exporter's names, labels and flags.

kubegpu exporter --nvml sim:/tmp/n.json --sim-node h200:8 -a 127.0.0.1:9400
curl -s localhost:9400/metrics
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from kubegpu.cli.options import NVML_OPTION, SIM_NODE_OPTION
from kubegpu.exporter import DEFAULT_ADDRESS, ExporterConfig
from kubegpu.exporter.program import ExporterProgram
from kubegpu.kube.kubelet import POD_RESOURCES_SOCKET
from kubegpu.node.gpus import gpu_backend
from kubegpu.node.runtime import run

log = logging.getLogger("kubegpu.exporter")


def exporter(
    collectors: Path | None = typer.Option(
        None,
        "--collectors",
        "-f",
        envvar="DCGM_EXPORTER_COLLECTORS",
        help="Counters file (DCGM exporter's CSV: field, type, help); default: the built-in set.",
    ),
    address: str = typer.Option(
        DEFAULT_ADDRESS,
        "--address",
        "-a",
        envvar="DCGM_EXPORTER_LISTEN",
        help="Listen address, HOST:PORT (HOST empty: every interface; '[::]:9400' for IPv6).",
    ),
    collect_interval_ms: int = typer.Option(
        30000,
        "--collect-interval",
        "-c",
        envvar="DCGM_EXPORTER_INTERVAL",
        min=0,
        help="Read the GPUs at most this often, in ms; a scrape gets the latest reading.",
    ),
    kubernetes: bool = typer.Option(
        False,
        "--kubernetes",
        "-k",
        envvar="DCGM_EXPORTER_KUBERNETES",
        help="Add pod, namespace and container labels from the kubelet's pod-resources API.",
    ),
    pod_resources_socket: Path = typer.Option(
        Path(POD_RESOURCES_SOCKET),
        "--pod-resources-kubelet-socket",
        envvar="DCGM_POD_RESOURCES_KUBELET_SOCKET",
        help="The kubelet's pod-resources socket.",
    ),
    virtual_gpus: bool = typer.Option(
        False,
        "--kubernetes-virtual-gpus",
        envvar="KUBERNETES_VIRTUAL_GPUS",
        help="Shared GPUs: one copy of each series per pod, with a vgpu label.",
    ),
    enable_dra: bool = typer.Option(
        False,
        "--kubernetes-enable-dra",
        envvar="KUBERNETES_ENABLE_DRA",
        help="Attribute GPUs and MIG devices held through DRA claims (dra_* labels).",
    ),
    process_metrics: bool = typer.Option(
        False,
        "--kubernetes-process-metrics",
        envvar="KUBEGPU_EXPORTER_PROCESS_METRICS",
        help="Per-pod values from each pod's GPU processes (attribution label) and each "
        "pod's isolation; needs --kubernetes, --node-name, API read of pods and the host's "
        "/proc (see docs/exporter.md).",
    ),
    proc_root: Path = typer.Option(
        Path("/proc"),
        "--proc-root",
        envvar="KUBEGPU_EXPORTER_PROC_ROOT",
        help="Where the host's /proc is seen (process -> pod, for --kubernetes-process-metrics).",
    ),
    kubeconfig: str | None = typer.Option(
        None,
        "--kubeconfig",
        envvar="KUBECONFIG",
        help="API credentials outside a pod (--kubernetes-process-metrics only).",
    ),
    resource_names: str = typer.Option(
        "",
        "--nvidia-resource-names",
        envvar="NVIDIA_RESOURCE_NAMES",
        help="More resource names to attribute, comma-separated (nvidia.com/gpu, "
        "nvidia.com/gpu.shared and nvidia.com/mig-* always are).",
    ),
    pod_labels: bool = typer.Option(
        False,
        "--kubernetes-enable-pod-labels",
        envvar="DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        help="Accepted for compatibility and ignored, with a warning: no pod-label labels.",
    ),
    pod_uid: bool = typer.Option(
        False,
        "--kubernetes-enable-pod-uid",
        envvar="DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        help="Accepted for compatibility and ignored, with a warning: no pod UID label.",
    ),
    no_hostname: bool = typer.Option(
        False, "--no-hostname", "-n", help="Leave out the Hostname label."
    ),
    replace_blanks: bool = typer.Option(
        False, "--replace-blanks-in-model-name", help="modelName with '-' instead of spaces."
    ),
    node_name: str | None = typer.Option(
        None, "--node-name", envvar="NODE_NAME", help="The Hostname label (default: host name)."
    ),
    nvml: str | None = NVML_OPTION,
    sim_node: str | None = SIM_NODE_OPTION,
) -> None:
    """Serve GPU metrics on /metrics (and /health), as NVIDIA's DCGM exporter does."""
    config = ExporterConfig(
        address=address,
        collect_interval_s=collect_interval_ms / 1000,
        kubernetes=kubernetes,
        pod_resources_socket=pod_resources_socket,
        hostname=node_name,
        no_hostname=no_hostname,
        replace_blanks_in_model_name=replace_blanks,
        virtual_gpus=virtual_gpus,
        enable_dra=enable_dra,
        nvidia_resource_names=tuple(n.strip() for n in resource_names.split(",") if n.strip()),
        process_metrics=process_metrics,
        proc_root=proc_root,
    )

    def program() -> ExporterProgram:
        # DCGM exporter's pod-label and pod-UID labels (ClusterPolicy enablePodLabels /
        # enablePodUID) are not exported: say so rather than let them look applied
        for flag, env, given in (
            (
                "--kubernetes-enable-pod-labels",
                "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
                pod_labels,
            ),
            ("--kubernetes-enable-pod-uid", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", pod_uid),
        ):
            if given:
                log.warning(
                    "%s / %s is accepted and ignored: kubegpu's exporter does not "
                    "add that label (docs/exporter.md)",
                    flag,
                    env,
                )
        return ExporterProgram(
            config, collectors, gpu_backend(nvml, sim_node), kubeconfig=kubeconfig
        )

    raise typer.Exit(run(program))
