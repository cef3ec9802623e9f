"""SimNode: the kubelet stand-in for one simulated GPU node.

It registers its Node (capacity, Ready condition, NFD-style GPU labels), renews its Lease,
serves the kubelet's device-plugin Registration and pod-resources APIs under its own root
directory, runs the pods bound to it and owns the node's simulated GPUs. It runs
in-process (`await node.start()`) or as `kubegpu sim node`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, NodeStatus, Pod
from lightkube.types import PatchType, on_error_retry

from kubegpu.base.tasks import bounded_stop, cancel_all, start_kept
from kubegpu.kube.kubelet import DEVICE_PLUGIN_PATH, POD_RESOURCES_SOCKET
from kubegpu.nvml import NvmlError
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.sim import inprocess
from kubegpu.sim.controlplane import addr as netaddr
from kubegpu.sim.controlplane.addr import NodeAddress
from kubegpu.sim.inprocess import ComponentsMode, RootCommand
from kubegpu.sim.kubelet import gpuload, mounted
from kubegpu.sim.kubelet.devicemanager import DeviceManager
from kubegpu.sim.kubelet.dramanager import DraManager
from kubegpu.sim.kubelet.mounted import MountedObjects
from kubegpu.sim.kubelet.podresources import PodRef, PodResourcesServer
from kubegpu.sim.kubelet.podworkers import NodeContext, PodRunner, now
from kubegpu.sim.kubelet.processes import kill_pod_processes
from kubegpu.sim.kubelet.server import KubeletServer, LogSource, serving_context
from kubegpu.sim.kubelet.status import send_until_taken
from kubegpu.sim.runtime.config import Runtime, RuntimeOptions
from kubegpu.sim.runtime.injection import NodeGpu

log = logging.getLogger(__name__)

KUBELET_VERSION = "v1.35.8"
LEASE_NAMESPACE = "kube-node-lease"
NVIDIA_PCI_VENDOR = "10de"
# A pod with this node path mounted asks for a reboot by creating the file (what the MIG
# manager's reboot command does on a simulated node); the node removes it and reboots.
REBOOT_REQUEST = "run/kubegpu-sim/reboot-request"
REBOOT_POLL_S = 0.2


def gpu_node_labels(has_gpus: bool) -> dict[str, str]:
    """The labels Node Feature Discovery puts on a node with NVIDIA GPUs."""
    labels = {
        "feature.node.kubernetes.io/kernel-version.full": platform.release(),
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    }
    if has_gpus:
        labels |= {
            f"feature.node.kubernetes.io/pci-{NVIDIA_PCI_VENDOR}.present": "true",
            f"feature.node.kubernetes.io/pci-0302_{NVIDIA_PCI_VENDOR}.present": "true",
            "feature.node.kubernetes.io/pci-0300_1a03.present": "true",
        }
    return labels


@dataclass
class SimNodeConfig:
    name: str
    root: Path
    gpus: str | None = None  # sim node spec, e.g. "h200-nvl:8"; None: a CPU-only node
    labels: dict[str, str] = field(default_factory=dict)
    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"
    lease_interval_s: float = 10.0
    status_interval_s: float = 60.0
    kubegpu_images: tuple[str, ...] = ("kubegpu",)
    nfd: bool = True  # Node Feature Discovery runs: the node carries its labels
    # how kubegpu's node components run in their pods: a process each (isolated), or as
    # tasks in this interpreter (sim.inprocess; 1,000 nodes on one machine), parsed by
    # `root_command` (kubegpu.cli.app.root_command, which the simulator cannot import)
    components: ComponentsMode = "process"
    root_command: RootCommand | None = None
    # the node's container runtime (sim.runtime): containerd or CRI-O; `strict` enforces
    # its contract (handlers, GPU injection, the toolkit), off by default for now
    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)


def write_pci_devices(sysfs: Path, nvml: SimNvml) -> None:
    """The simulated GPUs on the node's PCI bus (`<root>/sys/bus/pci/devices/<address>`),
    where a host-path /sys mount shows them to the node's pods (the node labeller).
    A card in graphics display mode is a VGA controller (0x0300), as on real hardware;
    otherwise a 3D controller (0x0302), as data-centre GPUs."""
    graphics = {
        g["pci_bus_id"].lower()
        for g in SimControls.of(nvml).raw_state()["gpus"]
        if g.get("display_mode") == "graphics"
    }
    for d in nvml.devices():
        entry = sysfs / "bus/pci/devices" / d.pci_bus_id.lower()[-12:]
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "vendor").write_text(f"0x{d.pci_device_id & 0xFFFF:04x}\n")
        (entry / "device").write_text(f"0x{d.pci_device_id >> 16:04x}\n")
        vga = d.pci_bus_id.lower() in graphics
        (entry / "class").write_text("0x030000\n" if vga else "0x030200\n")


class SimNode:
    def __init__(self, config: SimNodeConfig, kubeconfig: Path) -> None:
        self.config = config
        self.name = config.name
        self.root = config.root
        self.kubeconfig = kubeconfig
        self.boot_id = str(uuid.uuid4())
        self.nvml: SimNvml | None = None
        self.lab: SimControls | None = None  # faults, reboots, busy devices
        self.client: AsyncClient | None = None
        self.mounted: MountedObjects | None = None  # shared with the process's other nodes
        self.devices = DeviceManager(
            self.root / DEVICE_PLUGIN_PATH.strip("/"), self._capacity_changed
        )
        self.devices.on_allocations = self._allocations_changed
        self.dra = DraManager(self.name, self.root)  # DRA plugins and resource claims
        self.pod_resources = PodResourcesServer(
            self.root / POD_RESOURCES_SOCKET.strip("/"),
            self.devices,
            self._pod_refs,
            self.dra.dynamic_resources,
        )
        self.runners: dict[str, PodRunner] = {}
        self._terminating: set[str] = set()  # uids of pods being stopped for deletion
        self._tasks: list[asyncio.Task[None]] = []
        self._status_lock = asyncio.Lock()
        self._last_resources: dict[str, tuple[int, int]] = {}
        self._ctx: NodeContext | None = None
        self.network: NodeAddress | None = None  # claimed at start, released at stop
        self.kubelet: KubeletServer | None = None  # the logs endpoint the API server proxies to
        self.runtime = Runtime(self.root, config.runtime)  # its config on the host root

    def _node_gpus(self) -> list[NodeGpu]:
        """The node's GPUs as the runtime names them (index, UUID, minor, MIG devices)."""
        if self.nvml is None:
            return []
        gpus = []
        for d in self.nvml.devices():
            try:
                migs = (
                    {f"{d.index}:{m.index}": m.uuid for m in self.nvml.mig_devices(d.index)}
                    if self.nvml.mig_mode(d.index).current
                    else {}
                )
            except NvmlError:
                migs = {}
            gpus.append(NodeGpu(d.index, d.uuid, d.index, migs))
        return gpus

    @property
    def gpu_state(self) -> Path:
        return self.root / "var/lib/kubegpu-sim/gpus.json"

    @property
    def address(self) -> str:
        """The node's InternalIP (its own address once started, see sim.controlplane.addr)."""
        return self.network.ip if self.network else "127.0.0.1"

    @property
    def reboot_request(self) -> Path:
        return self.root / REBOOT_REQUEST

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        if self.config.components == "inprocess" and self.config.root_command is None:
            raise ValueError(f"node {self.name}: in-process components need a root command")
        if self.config.components == "inprocess":
            inprocess.provide_threads(asyncio.get_running_loop())
        self.root.mkdir(parents=True, exist_ok=True)
        if self.config.gpus:
            self.nvml = SimNvml.create(self.gpu_state, self.config.gpus)
            self.lab = SimControls.of(self.nvml)
            write_pci_devices(self.root / "sys", self.nvml)
        config = KubeConfig.from_file(self.kubeconfig)
        self.client = AsyncClient(config, field_manager="kubegpu-sim-kubelet")
        self.mounted = mounted.acquire(self.kubeconfig)
        context = config.get()
        if context is None:
            raise ValueError(f"{self.kubeconfig}: no current context")
        cluster = context.cluster
        server = str(cluster.server)
        host, _, port = server.removeprefix("https://").partition(":")
        extra_env = {"KUBEGPU_NVML": f"sim:{self.gpu_state}"} if self.nvml else {}
        self.network = await asyncio.to_thread(netaddr.claim, str(self.root.resolve()))
        await asyncio.to_thread(self.runtime.start)
        self._ctx = NodeContext(
            name=self.name,
            root=self.root,
            client=self.client,
            devices=self.devices,
            api_host=host,
            api_port=int(port or 443),
            extra_env=extra_env,
            kubegpu_images=self.config.kubegpu_images,
            address=self.network.ip,
            bind_ip=self.network.ip if self.network.rewrites_binds else None,
            dra=self.dra,
            mounted=self.mounted,
            runtime=self.runtime,
            gpus=self._node_gpus,
            root_command=(
                self.config.root_command if self.config.components == "inprocess" else None
            ),
        )
        await self.devices.start()
        await self.pod_resources.start()
        await self.dra.start(self.client)  # wipes the node's ResourceSlices first
        tls = serving_context(self.root / "var/lib/kubelet/pki", self.name, [self.address])
        self.kubelet = KubeletServer(self._log_source, self.address, tls)
        await self.kubelet.start()
        await self._register()
        self._tasks = [
            asyncio.create_task(self._lease_loop(), name=f"{self.name}:lease"),
            asyncio.create_task(self._status_loop(), name=f"{self.name}:status"),
            asyncio.create_task(self._watch_pods(), name=f"{self.name}:pods"),
            asyncio.create_task(self._reboot_requests(), name=f"{self.name}:reboot"),
        ]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        await asyncio.gather(*(r.stop(0) for r in self.runners.values()))
        self.runners.clear()
        if self.mounted is not None:
            await mounted.release(self.kubeconfig, self.mounted)
            self.mounted = None
        # a process whose start raced with the stop has no runner handle: find it by marker
        kill_pod_processes(self.root)
        await bounded_stop(self.pod_resources.stop(), f"node {self.name}: pod-resources server")
        await bounded_stop(self.devices.stop(), f"node {self.name}: device manager")
        await bounded_stop(self.dra.stop(), f"node {self.name}: DRA manager")
        if self.kubelet is not None:
            await bounded_stop(self.kubelet.stop(), f"node {self.name}: kubelet server")
            self.kubelet = None
        if self.network is not None:
            await asyncio.to_thread(netaddr.release, self.network)
            self.network = None
        if self.client is not None:
            await self.client.close()
            self.client = None

    async def __aenter__(self) -> SimNode:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def pids(self) -> list[int]:
        return [pid for r in self.runners.values() for pid in r.pids()]

    # -- the Node object ---------------------------------------------------------------------
    def _base_resources(self) -> dict[str, str]:
        return {
            "cpu": self.config.cpu,
            "memory": self.config.memory,
            "pods": self.config.pods,
            "ephemeral-storage": "500Gi",
        }

    def _node_status(self) -> dict[str, Any]:
        t = now()
        capacity: dict[str, Any] = dict(self._base_resources())
        allocatable: dict[str, Any] = dict(self._base_resources())
        for resource, (cap, alloc) in self.devices.resources().items():
            capacity[resource] = str(cap)
            allocatable[resource] = str(alloc)
        for gone in set(self._last_resources) - set(self.devices.resources()):
            capacity[gone] = None
            allocatable[gone] = None
        return {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubegpu sim kubelet is posting ready status",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                },
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                },
                {
                    "type": "DiskPressure",
                    "status": "False",
                    "reason": "KubeletHasNoDiskPressure",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                },
                {
                    "type": "PIDPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientPID",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                },
            ],
            "addresses": [
                {"type": "InternalIP", "address": self.address},
                {"type": "Hostname", "address": self.name},
            ],
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.name)),
                "bootID": self.boot_id,
                "kernelVersion": platform.release(),
                "osImage": "kubegpu simulated node",
                "containerRuntimeVersion": self.runtime.options.container_runtime_version,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "daemonEndpoints": {
                "kubeletEndpoint": {"Port": self.kubelet.port if self.kubelet else 10250}
            },
        }

    async def _register(self) -> None:
        assert self.client is not None
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "kubegpu-sim",
            **(gpu_node_labels(bool(self.nvml)) if self.config.nfd else {}),
            **self.config.labels,
        }
        try:
            await self.client.create(Node(metadata=ObjectMeta(name=self.name, labels=labels)))
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            await self.client.patch(
                Node, self.name, {"metadata": {"labels": labels}}, patch_type=PatchType.MERGE
            )
        await self._push_status()

    async def _push_status(self) -> None:
        assert self.client is not None
        async with self._status_lock:
            status = self._node_status()
            await self.client.patch(
                NodeStatus, self.name, {"status": status}, patch_type=PatchType.MERGE
            )
            self._last_resources = self.devices.resources()

    async def _capacity_changed(self) -> None:
        if self.client is None:
            return
        try:
            await self._push_status()
        except Exception as exc:  # the next status sync retries; never kill the plugin stream
            log.warning("node %s: status update failed: %s", self.name, str(exc) or repr(exc))

    async def _status_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.status_interval_s)
            await self._capacity_changed()

    async def _lease_loop(self) -> None:
        assert self.client is not None
        while True:
            renew = datetime.now(UTC)
            lease = Lease(
                metadata=ObjectMeta(name=self.name, namespace=LEASE_NAMESPACE),
                spec=LeaseSpec(holderIdentity=self.name, leaseDurationSeconds=40, renewTime=renew),
            )
            try:
                await self.client.apply(lease, force=True)
            except (ApiError, httpx.HTTPError) as exc:  # renewed next time; the loop lives on
                log.warning("lease of %s: %s", self.name, str(exc) or type(exc).__name__)
            await asyncio.sleep(self.config.lease_interval_s)

    # -- pods -------------------------------------------------------------------------------
    def _pod_refs(self) -> list[PodRef]:
        return [
            PodRef(r.uid, r.name, r.namespace, r.container_names) for r in self.runners.values()
        ]

    async def _watch_pods(self) -> None:
        assert self.client is not None
        async for op, pod in self.client.watch(
            Pod, namespace="*", fields={"spec.nodeName": self.name}, on_error=on_error_retry
        ):
            data = pod.to_dict()
            uid = data["metadata"]["uid"]
            try:
                if op == "DELETED":
                    await self._forget(uid)
                elif data["metadata"].get("deletionTimestamp"):
                    if uid not in self._terminating:  # a pod's grace period is its own:
                        self._terminating.add(uid)  # others' events go on meanwhile
                        start_kept(self._tasks, self._terminate(data))
                elif uid in self.runners:
                    self.runners[uid].observe(data)
                elif data.get("status", {}).get("phase") not in {
                    "Succeeded",
                    "Failed",
                }:
                    runner = PodRunner(self._context(), data, self._pod_exited)
                    self.runners[uid] = runner
                    try:
                        await runner.start()
                    except Exception:
                        # not started: forget it, so the pod's next event tries again
                        self.runners.pop(uid, None)
                        await runner.stop(0)
                        raise
            except Exception:  # one bad pod must not stop the node
                log.exception(
                    "handling pod %s/%s",
                    data["metadata"].get("namespace"),
                    data["metadata"]["name"],
                )

    def _log_source(self, namespace: str, pod: str, container: str) -> LogSource | None:
        for runner in self.runners.values():
            if runner.namespace == namespace and runner.name == pod:
                return runner.log_source(container)
        return None

    def _context(self) -> NodeContext:
        assert self._ctx is not None
        return self._ctx

    async def _terminate(self, data: dict[str, Any]) -> None:
        """A pod being deleted: stop it within its grace period, free what it held, and
        delete it for good, as kubelet does once its containers are gone; that last delete
        is sent again until the API server has it (a timeout under load left the pod
        Terminating for good)."""
        assert self.client is not None
        meta = data["metadata"]
        uid = meta["uid"]
        try:
            runner = self.runners.get(uid)  # still the node's while it stops
            grace = meta.get("deletionGracePeriodSeconds")
            if runner is not None:
                await runner.stop(float(grace) if grace is not None else None)
                runner.cleanup()
                self.runners.pop(uid, None)
            self.devices.release(uid)
            self.dra.release(uid)
            client = self.client
            with contextlib.suppress(ApiError):  # gone already (404), or not ours to finish
                await send_until_taken(
                    lambda: client.delete(
                        Pod, meta["name"], namespace=meta["namespace"], grace_period=0
                    ),
                    f"deleting pod {meta['namespace']}/{meta['name']}",
                )
        finally:
            self._terminating.discard(uid)

    async def _forget(self, uid: str) -> None:
        runner = self.runners.pop(uid, None)
        if runner is not None:
            await runner.stop(0)
            runner.cleanup()
        self.devices.release(uid)
        self.dra.release(uid)

    async def _pod_exited(self, runner: PodRunner) -> None:
        """A pod finished (Succeeded/Failed): its devices go back to the pool."""
        self.devices.release(runner.uid)
        self.dra.release(runner.uid)

    # -- lab controls ---------------------------------------------------------------------------
    async def reboot(self) -> None:
        """Reboot: processes stop, pending MIG modes apply, kubelet restarts, pods start again."""
        for runner in self.runners.values():
            await runner.stop(0)
        kill_pod_processes(self.root)  # a reboot leaves no process behind
        if self.lab is not None:
            self.lab.reboot()
        if self.nvml is not None:  # a display mode switched since shows from this boot on
            write_pci_devices(self.root / "sys", self.nvml)
        self.boot_id = str(uuid.uuid4())
        await self.devices.restart()
        await self.dra.restart()
        await self._push_status()
        for runner in list(self.runners.values()):
            await runner.restart_all()

    async def restart_kubelet(self) -> None:
        """Kubelet restart without a reboot: plugins register again, the node's
        ResourceSlices are wiped (DRA drivers republish them); pods keep running."""
        await self.devices.restart()
        await self.dra.restart()
        await self._push_status()

    async def _reboot_requests(self) -> None:
        self.reboot_request.parent.mkdir(parents=True, exist_ok=True)
        while True:
            await asyncio.sleep(REBOOT_POLL_S)
            if self.reboot_request.exists():
                self.reboot_request.unlink(missing_ok=True)
                log.warning("node %s: reboot requested through %s", self.name, REBOOT_REQUEST)
                try:
                    await self.reboot()
                except Exception:  # the next request may succeed; never stop listening
                    log.exception("node %s: reboot failed", self.name)

    def _allocations_changed(self) -> None:
        """GPUs and MIG devices held by pods run a synthetic load on the simulated GPUs, so
        their telemetry (utilisation, memory, power...) reflects what is allocated."""
        if self.lab is None:
            return
        # each container's load is a simulated CUDA process, traceable to its pod (gpuload)
        pods = {uid: r.pod for uid, r in self.runners.items()}
        loads = gpuload.container_loads(self.devices.allocations, pods)
        pids = gpuload.assign_pids(loads)
        try:
            self.lab.set_workloads(gpuload.workloads(loads, pids))
            gpuload.write_proc(self.root, loads, pids)
        except Exception as exc:  # telemetry only; never fail an admission for it
            log.warning("node %s: cannot mark allocated GPUs busy: %s", self.name, exc)

    def _gpus(self) -> SimControls:
        if self.lab is None:
            raise ValueError(f"node {self.name} has no GPUs")
        return self.lab

    def inject_xid(self, gpu: int, xid: int) -> None:
        """An XID error on one GPU, seen by every process that waits for GPU events."""
        self._gpus().inject_xid(gpu, xid)

    def lose_gpu(self, gpu: int) -> None:
        """The GPU falls off the bus (Xid 79) until the node reboots."""
        self._gpus().lose_gpu(gpu)
