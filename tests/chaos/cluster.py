"""The chaos suite's cluster: kubegpu installed by its chart on three simulated nodes, and
the hands that break it (pod processes killed, kubelets restarted, nodes rebooted, GPU
faults) plus what the invariants read (labels, the kubelet's device bookkeeping, the GPUs).
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from e2e.stack import E2EStack
from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.mig.config import MigConfigEntry
from kubegpu.mig_manager.layouts import generate_for_node
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.cluster import NodeEntry
from kubegpu.sim.kubelet.node import SimNode
from kubegpu.sim.kubelet.podworkers import PodRunner

MIG_NODE = "chaos-h100"
PLAIN_NODE = "chaos-l4"
CPU_NODE = "chaos-cpu"
PLAIN_GPUS = 4
NODES = [
    NodeEntry(name=MIG_NODE, gpus="h100-80gb:2"),
    NodeEntry(name=PLAIN_NODE, gpus=f"l4:{PLAIN_GPUS}"),
    # the chart's operator prefers control-plane nodes: it runs here, apart from the GPUs
    NodeEntry(name=CPU_NODE, labels={"node-role.kubernetes.io/control-plane": ""}),
]
GPU_NODES = (MIG_NODE, PLAIN_NODE)
# A device marked unhealthy by an XID is healthy again after this long without one (the
# plugin's default is 300 s; short here so a storm's recovery fits the settle time).
HEALTH_RECOVERY_S = 5
VALUES: dict[str, Any] = {
    "devicePlugin": {
        "env": [
            {"name": "PASS_DEVICE_SPECS", "value": "true"},
            {"name": "FAIL_ON_INIT_ERROR", "value": "true"},
            {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"},
            {"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"},
            {"name": "DP_HEALTH_RECOVERY_PERIOD", "value": str(HEALTH_RECOVERY_S)},
        ]
    },
}
OPERATOR_APP = "kubegpu-operator"
MIG_MANAGER_APP = "nvidia-mig-manager"
DEVICE_PLUGIN_APP = "nvidia-device-plugin-daemonset"
WORKLOAD_NAMESPACE = "default"
WORKLOAD_LABEL = "kubegpu.io/chaos"
WORKLOAD_IMAGE = "nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04"  # Running without a process


class ChaosStack(E2EStack):
    """The installation, with access to each simulated node's kubelet and GPUs."""

    def sim(self, node: str) -> SimNode:
        return self.nodes[node]

    def gpus(self, node: str) -> SimNvml:
        """A fresh NVML handle on the node's simulated GPUs (reads see every writer)."""
        return SimNvml(self.sim(node).gpu_state)

    def mig_entries(self, node: str, config: str) -> tuple[MigConfigEntry, ...]:
        """The entries of `config` in the layouts the MIG manager generates for the node."""
        layouts = generate_for_node(self.gpus(node))
        _, entries = layouts.select(config, f"the generated layouts of {node}")
        return entries

    def runner(self, node: str, app: str) -> PodRunner | None:
        """The kubelet's handle on the node's pod labelled app=<app> (by either key)."""
        for runner in self.sim(node).runners.values():
            labels = runner.pod["metadata"].get("labels") or {}
            if app in (labels.get("app"), labels.get("app.kubernetes.io/name")):
                return runner
        return None

    def kill_pod(self, node: str, app: str) -> list[int]:
        """kill -9 every process of the node's `app` pod (each container's process group);
        the kubelet restarts them under the pod's restart policy. Returns the pids."""
        runner = self.runner(node, app)
        pids = runner.pids() if runner is not None else []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        return pids

    async def node_labels(self, node: str) -> dict[str, str]:
        labels = meta(await self.node(node)).labels
        return dict(labels or {})

    async def deploy_labels(self, node: str) -> dict[str, str]:
        return {
            k: v
            for k, v in (await self.node_labels(node)).items()
            if k.startswith(nvidia.DEPLOY_PREFIX)
        }
