"""A simulated cluster from a short YAML file: the real control plane plus SimNodes.

name: demo
nodes:
  - name: gpu-h200
    gpus: h200-nvl:8
  - name: gpu-rtx
    gpus: rtx-pro-6000-ws:2
    labels: {team: graphics}
  - name: cpu-1          # no gpus: a plain node
  - name: pool           # count: pool-000 ... pool-099, alike
    count: 100
    gpus: h200:8
components: process      # or inprocess: node components as tasks in the simulator
                         # (sim.inprocess); a node entry may choose its own
controlPlane:
  size: small            # or large: the flags of a ~1,000-node cluster (SIZE_PROFILES);
  kubeApiQps: 100        # any flag below overrides the size's value
  kubeApiBurst: 200
  maxRequestsInflight: 1000
  maxMutatingRequestsInflight: 500
  etcdQuotaBytes: 4294967296

Read through `kubegpu.base.loader` (bounds in docs/limits.md); errors name file, field, value.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kubegpu.base import loader
from kubegpu.base.process import pid_alive
from kubegpu.kube.label_syntax import key_problem, value_problem
from kubegpu.kube.quantity import quantity_problem
from kubegpu.nvml import SpecError, parse_spec
from kubegpu.sim.controlplane.plane import SIZE_PROFILES, ControlPlane, ControlPlaneSize
from kubegpu.sim.controlplane.process import ControlPlaneError
from kubegpu.sim.inprocess import RootCommand
from kubegpu.sim.kubelet.node import SimNode, SimNodeConfig
from kubegpu.sim.kubelet.processes import kill_pod_processes
from kubegpu.sim.runtime.config import RuntimeOptions

PID_FILE = "sim.pid"
MAX_NODES = 5000
NODE_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a DNS label: it names files and sockets
START_BATCH = 50  # nodes registering at once (their API requests overlap, not pile up)
Components = Literal["process", "inprocess"]


class ClusterFileError(loader.InputError):
    """A cluster file that cannot be used; the message names the field and value."""


class RuntimeEntry(BaseModel):
    """A node's container runtime (sim.runtime): containerd or CRI-O, its version, and
    whether the node enforces the runtime's contract (off by default for now)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["containerd", "cri-o"] = "containerd"
    version: str = Field(default="", pattern=r"^(\d+\.\d+\.\d+)?$")
    strict: bool = False

    def options(self) -> RuntimeOptions:
        return RuntimeOptions(name=self.name, version=self.version, strict=self.strict)


class NodeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NODE_NAME)
    gpus: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    cpu: str = "32"
    memory: str = "256Gi"
    # Node Feature Discovery's labels (pci-10de.present...) on the node; false: a cluster
    # without NFD, where kubegpu's node labeller (chart value nfd.enabled=false) finds GPUs
    nfd: bool = True
    # this many alike nodes, named <name>-000, <name>-001... (1: just <name>)
    count: int = Field(default=1, ge=1, le=MAX_NODES)
    components: Components | None = None  # None: the cluster's `components`
    runtime: RuntimeEntry = Field(default_factory=RuntimeEntry)

    @field_validator("gpus")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_spec(value)
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        # the API server would refuse the Node after the control plane started
        if (why := quantity_problem(value, positive=True)) is not None:
            raise ValueError(why)
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        # the API server would refuse the node halfway through `sim up`: say so now
        for key, text in value.items():
            if (why := key_problem(key)) is not None:
                raise ValueError(f"label key {loader.excerpt(key)}: {why}")
            if (why := value_problem(text)) is not None:
                raise ValueError(
                    f"label {loader.excerpt(key)}, value {loader.excerpt(text)}: {why}"
                )
        return value

    @model_validator(mode="after")
    def _names_fit(self) -> NodeEntry:
        longest = self.names()[-1]
        if len(longest) > 63:
            raise ValueError(f"node name {loader.excerpt(longest)} is longer than 63 characters")
        return self

    def names(self) -> list[str]:
        if self.count == 1:
            return [self.name]
        width = len(str(self.count - 1))
        return [f"{self.name}-{i:0{width}d}" for i in range(self.count)]


class ControlPlaneEntry(BaseModel):
    """The control plane's size: a named profile, and flags that override its values."""

    model_config = ConfigDict(extra="forbid")

    size: Literal["small", "large"] = "small"
    kubeApiQps: int | None = Field(default=None, ge=1, le=100_000)
    kubeApiBurst: int | None = Field(default=None, ge=1, le=100_000)
    maxRequestsInflight: int | None = Field(default=None, ge=1, le=100_000)
    maxMutatingRequestsInflight: int | None = Field(default=None, ge=1, le=100_000)
    etcdQuotaBytes: int | None = Field(default=None, ge=64 * 1024**2, le=8 * 1024**3)

    def resolved(self) -> ControlPlaneSize:
        base = SIZE_PROFILES[self.size]
        given = {
            "kube_api_qps": self.kubeApiQps,
            "kube_api_burst": self.kubeApiBurst,
            "max_requests_inflight": self.maxRequestsInflight,
            "max_mutating_requests_inflight": self.maxMutatingRequestsInflight,
            "etcd_quota_bytes": self.etcdQuotaBytes,
        }
        return replace(base, **{k: v for k, v in given.items() if v is not None})


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "kubegpu-sim"
    nodes: list[NodeEntry] = Field(min_length=1)
    components: Components = "process"
    controlPlane: ControlPlaneEntry = Field(default_factory=ControlPlaneEntry)

    @field_validator("nodes")
    @classmethod
    def _unique(cls, value: list[NodeEntry]) -> list[NodeEntry]:
        seen: set[str] = set()
        for n in value:
            for name in n.names():
                if name in seen:
                    raise ValueError(f"node name {loader.excerpt(name)} appears twice")
                seen.add(name)
        if len(seen) > MAX_NODES:
            raise ValueError(f"{len(seen)} nodes: at most {MAX_NODES}")
        return value


def load_cluster(path: Path) -> ClusterSpec:
    data, source = loader.load_yaml(path, ClusterFileError)
    loader.require_mapping(data, source, ClusterFileError, "a mapping with 'nodes'")
    return loader.validate(ClusterSpec, data, source, ClusterFileError, strict=True)


class SimCluster:
    """Control plane plus nodes, all in this process (nodes as asyncio tasks).

    `root_command` (kubegpu.cli.app.root_command) is needed by nodes whose components
    run in-process."""

    def __init__(
        self, spec: ClusterSpec, workdir: Path, root_command: RootCommand | None = None
    ) -> None:
        self.spec = spec
        self.workdir = workdir
        self.root_command = root_command
        self.control_plane = ControlPlane(
            workdir / "control-plane", size=spec.controlPlane.resolved()
        )
        self.nodes: list[SimNode] = []

    def node_configs(self) -> list[SimNodeConfig]:
        """Every node's config, in file order (count entries expanded)."""
        return [
            SimNodeConfig(
                name=name,
                root=self.workdir / "nodes" / name,
                gpus=entry.gpus,
                labels=entry.labels,
                cpu=entry.cpu,
                memory=entry.memory,
                nfd=entry.nfd,
                components=entry.components or self.spec.components,
                root_command=self.root_command,
                runtime=entry.runtime.options(),
            )
            for entry in self.spec.nodes
            for name in entry.names()
        ]

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig_path

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.control_plane.start)
        configs = self.node_configs()
        if self.root_command is None and any(c.components == "inprocess" for c in configs):
            raise ValueError("in-process node components need the kubegpu root command")
        try:
            for i in range(0, len(configs), START_BATCH):
                batch = [SimNode(c, self.kubeconfig) for c in configs[i : i + START_BATCH]]
                self.nodes.extend(batch)  # stop() stops what started, even on failure
                await asyncio.gather(*(n.start() for n in batch))
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
