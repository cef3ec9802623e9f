"""A simulated cluster from a short YAML file: the real control plane plus SimNodes.

name: demo
nodes:
  - name: gpu-h200
    gpus: h200-nvl:8
  - name: gpu-rtx
    gpus: rtx-pro-6000-ws:2
    labels: {team: graphics}
  - name: cpu-1          # no gpus: a plain node

Read through `kubegpu.base.loader` (bounds in docs/limits.md); errors name file, field, value.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kubegpu.base import loader
from kubegpu.base.process import pid_alive
from kubegpu.nvml import SpecError, parse_spec
from kubegpu.sim.controlplane import ControlPlane, ControlPlaneError
from kubegpu.sim.node import SimNode, SimNodeConfig
from kubegpu.sim.pods import kill_pod_processes

PID_FILE = "sim.pid"


class ClusterFileError(loader.InputError):
    """A cluster file that cannot be used; the message names the field and value."""


class NodeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    gpus: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    cpu: str = "32"
    memory: str = "256Gi"
    # Node Feature Discovery's labels (pci-10de.present...) on the node; false: a cluster
    # without NFD, where kubegpu's node labeller (chart value nfd.enabled=false) finds GPUs
    nfd: bool = True

    @field_validator("gpus")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_spec(value)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return value


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "kubegpu-sim"
    nodes: list[NodeEntry] = Field(min_length=1)

    @field_validator("nodes")
    @classmethod
    def _unique(cls, value: list[NodeEntry]) -> list[NodeEntry]:
        seen: set[str] = set()
        for n in value:
            if n.name in seen:
                raise ValueError(f"node name {loader.excerpt(n.name)} appears twice")
            seen.add(n.name)
        return value


def load_cluster(path: Path) -> ClusterSpec:
    data, source = loader.load_yaml(path, ClusterFileError)
    loader.require_mapping(data, source, ClusterFileError, "a mapping with 'nodes'")
    return loader.validate(ClusterSpec, data, source, ClusterFileError)


class SimCluster:
    """Control plane plus nodes, all in this process (nodes as asyncio tasks)."""

    def __init__(self, spec: ClusterSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = workdir
        self.control_plane = ControlPlane(workdir / "control-plane")
        self.nodes: list[SimNode] = []

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig_path

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.control_plane.start)
        try:
            for entry in self.spec.nodes:
                node = SimNode(
                    SimNodeConfig(
                        name=entry.name,
                        root=self.workdir / "nodes" / entry.name,
                        gpus=entry.gpus,
                        labels=entry.labels,
                        cpu=entry.cpu,
                        memory=entry.memory,
                        nfd=entry.nfd,
                    ),
                    self.kubeconfig,
                )
                await node.start()
                self.nodes.append(node)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                await node.stop()
        self.nodes.clear()
        await asyncio.to_thread(self.control_plane.stop)

    def node(self, name: str) -> SimNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


def write_pid(workdir: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / PID_FILE).write_text(str(os.getpid()))


def stop_running(workdir: Path, timeout_s: float = 30.0) -> str:
    """Stop a `kubegpu sim up` running from `workdir` and clean what a killed run left."""
    pid_file = workdir / PID_FILE
    message = "no simulated cluster was running"
    if pid_file.exists():
        pid = int(pid_file.read_text().strip() or 0)
        try:
            os.kill(pid, signal.SIGTERM)
            message = f"stopped simulated cluster (pid {pid})"
        except ProcessLookupError:
            message = f"simulated cluster pid {pid} was gone; cleaned up its leftovers"
        else:
            import time

            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if not pid_alive(pid):
                    break
                time.sleep(0.2)
            else:
                os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)
    try:
        ControlPlane.cleanup_stale(workdir / "control-plane")
    except ControlPlaneError as exc:
        message += f"; control plane left running: {exc}"
    killed = kill_pod_processes(workdir)
    if killed:
        message += f"; killed {killed} leftover pod process(es)"
    return message
