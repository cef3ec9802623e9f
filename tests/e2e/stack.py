"""The end-to-end cluster: kubegpu's `Stack` (simulated nodes on the real control plane,
kubegpu installed with `helm install`, the operator running as its Deployment's pod) on the
package's control plane, plus what the tests look at beyond it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from kube_objects import meta
from kubegpu.sim.cluster import NodeEntry
from kubegpu.sim.stack import NAMESPACE, POLICY, Stack

__all__ = ["CPU_NODE", "MIG_NODE", "NAMESPACE", "NODES", "PLAIN_NODE", "POLICY", "E2EStack"]

MIG_NODE = "e2e-h100"
PLAIN_NODE = "e2e-l4"
CPU_NODE = "e2e-cpu"
NODES = [
    NodeEntry(name=MIG_NODE, gpus="h100-80gb:1"),
    NodeEntry(name=PLAIN_NODE, gpus="l4:1"),
    # the chart's operator prefers control-plane nodes; this one has no GPU
    NodeEntry(name=CPU_NODE, labels={"node-role.kubernetes.io/control-plane": ""}),
]
# the plugin check also runs a pod that asks for a GPU
VALUES = {"validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "true"}]}}}


class E2EStack(Stack):
    async def ready(self) -> bool:
        """The ClusterPolicy's state is `ready`: what every wait on the operator waits for."""
        return await self.policy_state() == "ready"

    async def condition(self, kind: str, name: str = POLICY) -> dict[str, Any]:
        status = (await self.policy(name)).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})

    async def operand_pods(self) -> list[Pod]:
        pods = await self.pods()
        return [
            p for p in pods if any(o.kind == "DaemonSet" for o in meta(p).ownerReferences or [])
        ]

    async def operator_metrics(self) -> dict[str, float]:
        """The running operator's counters (its probe port, on its node's address)."""
        pods = await self.pods(**{"app.kubernetes.io/name": "kubegpu-operator"})
        ips = [p.status.podIP for p in pods if p.status and p.status.phase == "Running"]
        reader, writer = await asyncio.open_connection(ips[0], self.health_port)
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
