"""The end-to-end cluster: simulated nodes on the real control plane, kubegpu installed
with `helm install` against the admin kubeconfig, the operator running as its Deployment's
pod (a process on one of the simulated nodes)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node, Pod

from kubegpu.kube.crds import ClusterPolicyResource
from kubegpu.sim.controlplane import ControlPlane, find_bin_dir
from kubegpu.sim.node import SimNode, SimNodeConfig

ROOT = Path(__file__).parents[2]
CHART = ROOT / "deploy" / "helm" / "kubegpu"
NAMESPACE = "gpu-operator"
RELEASE = "kubegpu"
POLICY = "cluster-policy"

MIG_NODE = "e2e-h100"
PLAIN_NODE = "e2e-l4"
CPU_NODE = "e2e-cpu"
NODES: list[tuple[str, str | None, dict[str, str]]] = [
    (MIG_NODE, "h100-80gb:1", {}),
    (PLAIN_NODE, "l4:1", {}),
    # the chart's operator prefers control-plane nodes; this one has no GPU
    (CPU_NODE, None, {"node-role.kubernetes.io/control-plane": ""}),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Stack:
    def __init__(self, control_plane: ControlPlane) -> None:
        self.cp = control_plane
        self.kubeconfig = control_plane.kubeconfig_path
        self.client = AsyncClient(
            KubeConfig.from_file(self.kubeconfig), field_manager="kubegpu-e2e"
        )
        self.nodes: dict[str, SimNode] = {}
        self.roots: list[str] = []
        self.health_port = free_port()
        self.values = Path(tempfile.mkdtemp(prefix="kg-e2e-")) / "values.yaml"

    # -- setup -------------------------------------------------------------------------------------
    def helm(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            [str(find_bin_dir() / "helm"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {result.stderr}")
        return result.stdout

    async def up(self) -> None:
        for name, gpus, labels in NODES:
            root = tempfile.mkdtemp(prefix="kg-", dir="/tmp")  # short: unix socket paths
            self.roots.append(root)
            node = SimNode(
                SimNodeConfig(
                    name=name, root=Path(root), gpus=gpus, labels=labels, lease_interval_s=5.0
                ),
                self.kubeconfig,
            )
            await node.start()
            self.nodes[name] = node
        self.values.write_text(
            yaml.safe_dump(
                {
                    # no resources: the simulated kubelet reports every pod as BestEffort
                    "operator": {"healthPort": self.health_port, "resources": None},
                    # every simulated pod shares the host's network: no fixed metrics port
                    "dcgmExporter": {
                        "env": [
                            {"name": "DCGM_EXPORTER_LISTEN", "value": "127.0.0.1:0"},
                            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                        ]
                    },
                    # the plugin check also runs a pod that asks for a GPU
                    "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "true"}]}},
                }
            )
        )
        self.helm(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--values",
            str(self.values),
        )

    async def down(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "60s")
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                await node.stop()
        for name in self.nodes:
            with contextlib.suppress(ApiError):
                await self.client.delete(Node, name)
        with contextlib.suppress(ApiError):
            await self.client.delete(Namespace, NAMESPACE)
        for crd in ("clusterpolicies.nvidia.com", "gpuclusters.nvidia.com"):
            with contextlib.suppress(ApiError):
                await self.client.delete(CustomResourceDefinition, crd)
        await self.client.close()
        for root in self.roots:
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(self.values.parent, ignore_errors=True)

    # -- looking ---------------------------------------------------------------------------------------
    async def policy(self, name: str = POLICY) -> dict[str, Any]:
        obj = await self.client.get(ClusterPolicyResource, name)
        return dict(obj)

    async def policy_state(self, name: str = POLICY) -> str | None:
        status = (await self.policy(name)).get("status") or {}
        return status.get("state")

    async def condition(self, kind: str, name: str = POLICY) -> dict[str, Any]:
        status = (await self.policy(name)).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})

    async def daemonsets(self) -> dict[str, dict[str, Any]]:
        return {
            d.metadata.name: d.to_dict()
            async for d in self.client.list(
                DaemonSet,
                namespace=NAMESPACE,
                labels={"app.kubernetes.io/managed-by": "kubegpu-operator"},
            )
        }

    async def pods(self, **labels: str) -> list[Pod]:
        return [p async for p in self.client.list(Pod, namespace=NAMESPACE, labels=labels or None)]

    async def operand_pods(self) -> list[Pod]:
        pods = await self.pods()
        return [
            p for p in pods if any(o.kind == "DaemonSet" for o in p.metadata.ownerReferences or [])
        ]

    async def node(self, name: str) -> Node:
        return await self.client.get(Node, name)

    async def allocatable(self, name: str) -> dict[str, str]:
        node = await self.node(name)
        return dict(node.status.allocatable or {}) if node.status else {}

    async def patch_policy(self, spec: dict[str, Any], name: str = POLICY) -> None:
        from lightkube.types import PatchType

        await self.client.patch(
            ClusterPolicyResource, name, {"spec": spec}, patch_type=PatchType.MERGE
        )

    async def label(self, node: str, labels: dict[str, str | None]) -> None:
        from lightkube.types import PatchType

        await self.client.patch(
            Node, node, {"metadata": {"labels": labels}}, patch_type=PatchType.MERGE
        )

    async def operator_metrics(self) -> dict[str, float]:
        """The running operator's counters (its probe port on the shared host network)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.health_port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        body = (await reader.read()).decode().split("\r\n\r\n", 1)[1]
        writer.close()
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out


async def wait_for(
    check: Any, timeout: float = 120.0, interval: float = 0.5, what: str = ""
) -> Any:
    """Poll an async check until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = await check()
            if value:
                return value
            last = value
        except (AssertionError, ApiError, OSError, KeyError, IndexError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what or check.__name__} not met within {timeout:.0f}s (last: {last!r})"
            )
        await asyncio.sleep(interval)
