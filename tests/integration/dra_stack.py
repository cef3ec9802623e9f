"""A simulated DRA cluster for tests on the real control plane: simulated GPU nodes, each
with `kubegpu dra-plugin` running as its own process (as its DaemonSet pod would), the
DeviceClasses applied, and the helpers the DRA tests share (published devices, claim
templates, pods, a pod process's environment).

Plain context managers, not fixtures: a test module wraps the ones it needs in a fixture
of its own (the control plane and the API client are the caller's). No device plugin runs
on these nodes (the DRA plugin refuses to start beside one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice

from kubegpu.catalog import nvidia
from kubegpu.dra.classes import device_classes
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.kubelet.node import SimNode

from .helpers import eventually
from .simnodes import sim_node

Json = dict[str, Any]
#: GPU index -> MIG profiles to create on it; () only enables MIG mode (dynamic MIG).
MigLayout = Mapping[int, Sequence[str]]
#: A pod process's image when the test only needs it to run (the sim runs the command).
SLEEP = [sys.executable, "-c", "import time; time.sleep(3600)"]
IMAGE = "ghcr.io/kubegpu/kubegpu:test"


# -- the GPUs --------------------------------------------------------------------------------
def enable_mig(state: Path, index: int) -> None:
    with SimNvml(state) as nvml:
        nvml.set_mig_mode(index, True)
        if nvml.mig_mode(index).change_pending:
            nvml.reset(index)


def create_mig_device(state: Path, index: int, profile: str) -> None:
    """One MIG device of `profile` (a GPU instance and its full compute instance)."""
    with SimNvml(state) as nvml:
        gi_profile = next(p for p in nvml.gpu_instance_profiles(index) if p.name == profile)
        gi = nvml.create_gpu_instance(index, gi_profile.id)
        ci_profile = next(
            c
            for c in nvml.compute_instance_profiles(index, gi.id)
            if c.slice_count == gi_profile.slice_count
        )
        nvml.create_compute_instance(index, gi.id, ci_profile.id)


def apply_mig(state: Path, layout: MigLayout) -> None:
    for index, profiles in layout.items():
        enable_mig(state, index)
        for profile in profiles:
            create_mig_device(state, index, profile)


# -- one node --------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def sim_gpu_node(
    control_plane: ControlPlane,
    akube: AsyncClient,
    name: str,
    gpus: str,
    *,
    mig: MigLayout | None = None,
    nfd: bool = True,
) -> AsyncIterator[SimNode]:
    """A started simulated node with `gpus` (e.g. "h200-nvl:2"), MIG as `mig` says; on exit
    stopped (no pod process left behind) and its Node object deleted. `nfd=False`: without
    Node Feature Discovery's labels, so an operator in the same cluster leaves it alone."""
    async with sim_node(
        control_plane.kubeconfig_path, akube, name, gpus=gpus, lease_interval_s=1.0, nfd=nfd
    ) as node:
        apply_mig(node.gpu_state, mig or {})
        yield node


# -- its plugin ------------------------------------------------------------------------------
@dataclass
class DraPlugin:
    """`kubegpu dra-plugin` for one simulated node, as a process of its own."""

    node: SimNode
    kubeconfig: Path
    log_path: Path
    feature_gates: str = ""
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def plugin_dir(self) -> Path:
        return self.node.root / "var/lib/kubelet/plugins" / nvidia.DRA_DRIVER

    @property
    def cdi_root(self) -> Path:
        return self.node.root / "var/run/cdi"

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / "checkpoint.json"

    def command(self) -> list[str]:
        root = self.node.root
        argv = [
            sys.executable,
            "-m",
            "kubegpu",
            "dra-plugin",
            "--node-name",
            self.node.name,
            "--kubeconfig",
            str(self.kubeconfig),
            "--nvml",
            f"sim:{self.node.gpu_state}",
            "--plugins-registry",
            str(root / "var/lib/kubelet/plugins_registry"),
            "--plugins-dir",
            str(root / "var/lib/kubelet/plugins"),
            "--cdi-root",
            str(self.cdi_root),
            "--device-plugin-dir",
            str(root / "var/lib/kubelet/device-plugins"),
        ]
        return argv + (["--feature-gates", self.feature_gates] if self.feature_gates else [])

    def start(self) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill(self) -> int:
        """kill -9 (no clean-up of any kind); returns the pid killed."""
        assert self.proc is not None, "the plugin is not running"
        pid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.proc.wait()
        return pid

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after 15 s."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


@contextlib.contextmanager
def dra_plugin(
    node: SimNode, control_plane: ControlPlane, log_dir: Path, feature_gates: str = ""
) -> Iterator[DraPlugin]:
    """The node's plugin, started; stopped on exit and the end of its log printed."""
    plugin = DraPlugin(
        node, control_plane.kubeconfig_path, log_dir / f"dra-plugin-{node.name}.log", feature_gates
    )
    plugin.start()
    try:
        yield plugin
    finally:
        plugin.close()
        print(f"--- {plugin.log_path}\n{plugin.log_tail()}")


# -- the cluster-wide pieces -----------------------------------------------------------------
@contextlib.asynccontextmanager
async def device_classes_applied(akube: AsyncClient) -> AsyncIterator[None]:
    """The DeviceClasses gpu.nvidia.com and mig.nvidia.com, deleted on exit."""
    for body in device_classes():
        with contextlib.suppress(ApiError):  # left by an earlier test: the same content
            await akube.create(DeviceClass.from_dict(body))  # type: ignore[call-overload]
    try:
        yield
    finally:
        for body in device_classes():
            with contextlib.suppress(ApiError):
                await akube.delete(DeviceClass, body["metadata"]["name"])


async def published_slices(akube: AsyncClient, node: str) -> list[Json]:
    """The node's pool as a reader must see it: the highest generation, once all its slices
    are there; [] until then."""
    found = [
        s.to_dict()
        async for s in akube.list(
            ResourceSlice, fields={"spec.driver": nvidia.DRA_DRIVER, "spec.nodeName": node}
        )
    ]
    if not found:
        return []
    top = max(s["spec"]["pool"]["generation"] for s in found)
    pool = [s for s in found if s["spec"]["pool"]["generation"] == top]
    return pool if len(pool) == pool[0]["spec"]["pool"]["resourceSliceCount"] else []


async def published_devices(akube: AsyncClient, node: str) -> dict[str, Json]:
    """Device name -> the published device (with attributes); {} until published."""
    return {
        d["name"]: d
        for s in await published_slices(akube, node)
        for d in s["spec"].get("devices") or []
    }


async def wait_published(akube: AsyncClient, node: str, timeout: float = 60) -> dict[str, Json]:
    return await eventually(lambda: published_devices(akube, node), timeout=timeout)


async def wait_registered(node: SimNode, timeout: float = 30) -> None:
    async def registered() -> bool:
        return bool(node.dra.plugins.get(nvidia.DRA_DRIVER))

    await eventually(registered, timeout=timeout)


def device_uuid(device: Json) -> str:
    value: str = device["attributes"]["uuid"]["string"]
    return value


@dataclass
class DraCluster:
    """Started nodes and their plugins, by node name."""

    nodes: dict[str, SimNode]
    plugins: dict[str, DraPlugin]

    async def devices(self, akube: AsyncClient, node: str) -> dict[str, Json]:
        return await published_devices(akube, node)


@contextlib.asynccontextmanager
async def dra_cluster(
    control_plane: ControlPlane,
    akube: AsyncClient,
    nodes: Mapping[str, str],
    workdir: Path,
    *,
    feature_gates: str = "",
    mig: Mapping[str, MigLayout] | None = None,
    nfd: bool = True,
) -> AsyncIterator[DraCluster]:
    """`nodes` (name -> GPU spec) each with its DRA plugin, registered with the node's
    kubelet and its slices published; the DeviceClasses applied. Node names must be unique
    in the session (the control plane is shared)."""
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(device_classes_applied(akube))
        cluster = DraCluster({}, {})
        for name, gpus in nodes.items():
            node = await stack.enter_async_context(
                sim_gpu_node(control_plane, akube, name, gpus, mig=(mig or {}).get(name), nfd=nfd)
            )
            cluster.nodes[name] = node
            cluster.plugins[name] = stack.enter_context(
                dra_plugin(node, control_plane, workdir, feature_gates)
            )
        for name, node in cluster.nodes.items():
            await wait_registered(node)
            await wait_published(akube, name)
        yield cluster


# -- objects and what a pod sees -------------------------------------------------------------
def claim_spec(requests: Sequence[tuple[str, str, Sequence[str]]]) -> Json:
    """A ResourceClaim spec: (request name, device class, CEL selectors) per request."""
    out = []
    for name, device_class, cel in requests:
        exactly: Json = {"deviceClassName": device_class}
        if cel:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in cel]
        out.append({"name": name, "exactly": exactly})
    return {"devices": {"requests": out}}


def claim_template(name: str, requests: Sequence[tuple[str, str, Sequence[str]]]) -> Json:
    """A ResourceClaimTemplate body (create it with `ResourceClaimTemplate.from_dict`)."""
    return {"metadata": {"name": name}, "spec": {"spec": claim_spec(requests)}}


def resource_claim(name: str, requests: Sequence[tuple[str, str, Sequence[str]]]) -> Json:
    """A ResourceClaim body (a claim pods name directly, no template)."""
    return {"metadata": {"name": name}, "spec": claim_spec(requests)}


def claim_pod(
    name: str,
    templates: Mapping[str, str] | None = None,
    *,
    claims: Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
    node: str | None = None,
) -> Json:
    """A Pod body whose one container uses every pod claim: `templates` maps a pod claim
    name to a ResourceClaimTemplate, `claims` to an existing ResourceClaim."""
    refs = [{"name": n, "resourceClaimTemplateName": t} for n, t in (templates or {}).items()]
    refs += [{"name": n, "resourceClaimName": c} for n, c in (claims or {}).items()]
    spec: Json = {
        "terminationGracePeriodSeconds": 1,
        "resourceClaims": refs,
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "command": list(command or SLEEP),
                "resources": {"claims": [{"name": r["name"]} for r in refs]},
            }
        ],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}


def environ(pid: int) -> dict[str, str]:
    """A running pod process's environment."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if b"=" in item)
