"""Running the pods bound to a simulated node, by kubelet's rules: its pod workers.

Pods whose image is kubegpu's own run their containers as local processes, each in a
private mount namespace with the pod's volumes (`volumes`) at their mount paths and the
pod's environment (`podenv`). Workload containers whose command is `nvidia-smi` or a CUDA
sample run its simulated equivalent (`smi`), which prints what the pod was allocated and
exits; one whose command is a shell (`sh -c "nvidia-smi -L; sleep 3600"`) runs that shell
for real with the simulated driver binaries on its PATH. On a strict node the runtime
(`sim.runtime`) decides: the sandbox's handler, which GPUs and driver files a container
gets, NVIDIA's toolkit pod. Other pods become Running without a process. Restart policy,
backoff, container statuses and pod phase follow kubelet; what of the status the kubelet
owns and how it is written are the status manager's rules (`status`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import PodStatus
from lightkube.resources.node_v1 import RuntimeClass
from lightkube.types import PatchType

from kubegpu.base.tasks import cancel_all
from kubegpu.catalog.nvidia import NVIDIA_VISIBLE_DEVICES, VISIBLE_DEVICES_VOID
from kubegpu.cdi.registry import Registry, node_spec_dirs
from kubegpu.nvml import ENV_NVML
from kubegpu.sim.inprocess import (
    ContainerSpec,
    InProcessContainer,
    RootCommand,
    in_process_command,
)
from kubegpu.sim.kubelet.devicemanager import AdmissionError, ContainerAllocation, DeviceManager
from kubegpu.sim.kubelet.dramanager import DraManager, dra_backed_resources
from kubegpu.sim.kubelet.events import pod_event
from kubegpu.sim.kubelet.mounted import MountedObjects, ObjectKey
from kubegpu.sim.kubelet.podchecks import container_refusal
from kubegpu.sim.kubelet.podenv import base_env, container_env, field_value
from kubegpu.sim.kubelet.qos import qos_class
from kubegpu.sim.kubelet.server import LogSource
from kubegpu.sim.kubelet.status import (
    PodStatusManager,
)
from kubegpu.sim.kubelet.volumes import (
    PodObjects,
    container_mounts,
    holds_token,
    prepare_volume,
    volume_dir,
    volume_files,
    write_files,
)
from kubegpu.sim.runtime.config import Runtime, sandbox_event_message
from kubegpu.sim.runtime.driver import PROGRAMS, install_binaries, with_driver
from kubegpu.sim.runtime.injection import (
    Injection,
    NodeGpu,
    cdi_requests,
    inject,
    is_nvidia_binary,
)
from kubegpu.sim.runtime.shm import ContainerShm, container_shm
from kubegpu.sim.runtime.toolkit import (
    ContainerFs,
    is_toolkit_image,
    run_cleanup,
    run_installer,
)
from kubegpu.sim.smi import ENV_DEVICES as SMI_DEVICES
from kubegpu.sim.smi import workload_program

log = logging.getLogger(__name__)

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
# what preparing a pod's volumes or a container's environment may raise: a bad object or
# file, the API server's refusal, a request that timed out or lost its connection (under
# load); each is tried again
CONFIG_FAILURES: tuple[type[Exception], ...] = (ApiError, httpx.HTTPError, ValueError)
VOLUME_FAILURES: tuple[type[Exception], ...] = (*CONFIG_FAILURES, OSError)
Json = dict[str, Any]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class NodeContext:
    """What a pod needs from its node."""

    name: str
    root: Path
    client: AsyncClient
    devices: DeviceManager
    api_host: str
    api_port: int
    extra_env: dict[str, str]
    kubegpu_images: tuple[str, ...] = ("kubegpu",)
    python: str = sys.executable
    address: str = "127.0.0.1"  # the node's InternalIP: every pod's hostIP and podIP
    bind_ip: str | None = None  # where pod processes' wildcard binds go (controlplane.addr)
    dra: DraManager | None = None  # prepares the pod's resource claims (kubelet.dramanager)
    mounted: MountedObjects = field(kw_only=True)  # ConfigMaps and Secrets, watched
    # set: kubegpu's node components run in-process (sim.inprocess), parsed by this command
    root_command: RootCommand | None = None
    runtime: Runtime | None = None  # the node's container runtime (sim.runtime)
    gpus: Callable[[], list[NodeGpu]] = list  # the node's GPUs as the runtime names them

    @property
    def strict(self) -> bool:
        """The node enforces its runtime's contract (handlers, injection, the toolkit)."""
        return self.runtime is not None and self.runtime.options.strict

    def runs_process(self, image: str) -> bool:
        repo = image.rsplit("@", 1)[0].rsplit(":", 1)[0] if "/" in image or ":" in image else image
        return any(marker in repo.rsplit("/", 1)[-1] for marker in self.kubegpu_images)


@dataclass
class ContainerState:
    name: str
    spec: Json
    init: bool
    restart_count: int = 0
    state: Json = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Json = field(default_factory=dict)
    process: asyncio.subprocess.Process | None = None
    inproc: InProcessContainer | None = None  # the component's task (in-process mode)
    ready: bool = False

    def status(self, image: str) -> Json:
        return {
            "name": self.name,
            "image": image,
            "imageID": image,
            "containerID": f"kubegpu-sim://{self.name}-{self.restart_count}",
            "ready": self.ready,
            "started": "running" in self.state,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }


def is_shell(command: list[str]) -> bool:
    """`sh -c ...` / `bash -c ...`: a command a runtime runs as the shell it is."""
    return (
        len(command) >= 3 and os.path.basename(command[0]) in {"sh", "bash"} and command[1] == "-c"
    )


def resource_wants(container: Json, is_device: Callable[[str], bool]) -> dict[str, int]:
    """Extended resources a container asks for (limits win over requests, as in kubelet)."""
    res = container.get("resources") or {}
    merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    return {k: int(str(v)) for k, v in merged.items() if is_device(k) and int(str(v)) > 0}


class PodRunner:
    """One pod on the node: admission, volumes, container processes, status."""

    def __init__(
        self, node: NodeContext, pod: Json, on_exit: Callable[[PodRunner], Awaitable[None]]
    ) -> None:
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.name: str = meta["name"]
        self.namespace: str = meta.get("namespace", "default")
        self.dir: Path = node.root / "var/lib/kubelet/pods" / self.uid
        self.log_dir: Path = node.root / "var/log/pods" / f"{self.namespace}_{self.name}_{self.uid}"
        spec = pod["spec"]
        self.init = [ContainerState(c["name"], c, True) for c in spec.get("initContainers") or []]
        self.containers = [
            ContainerState(c["name"], c, False) for c in spec.get("containers") or []
        ]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.allocations: dict[str, ContainerAllocation] = {}
        self.start_time = now()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._on_exit = on_exit
        self._status = PodStatusManager(
            f"status of pod {self.namespace}/{self.name}",
            self.status,
            self._patch_status,
            lambda: self._stopping,
            self._tasks,
        )
        self._volume_sources: dict[str, Path] = {}
        self._objects = PodObjects(
            node.client,
            self.namespace,
            str(spec.get("serviceAccountName") or "default"),
            node.mounted,
        )
        self._volumes_changed = asyncio.Event()
        self._changed_objects: set[ObjectKey] = set()
        self._stop_listening: Callable[[], None] = lambda: None
        self.handler: str | None = None  # the runtime handler its sandbox runs with
        self.shm: dict[str, ContainerShm] = {}  # each container's /dev/shm (sim.runtime.shm)

    @property
    def container_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.containers)

    def log_source(self, container: str) -> LogSource | None:
        """The container's log files (one per run, oldest first), for `kubectl logs`."""
        c = next((x for x in [*self.init, *self.containers] if x.name == container), None)
        if c is None:
            return None
        directory = self.log_dir / container
        runs = sorted(
            (int(p.stem), p)
            for p in (directory.glob("*.log") if directory.is_dir() else [])
            if p.stem.isdigit()
        )
        files = [p for _, p in runs] or [directory / f"{c.restart_count}.log"]
        return LogSource(files, lambda: "running" in c.state)

    # -- lifecycle ------------------------------------------------------------------------
    def _listen(self) -> None:
        """Hear of changes to the objects the volumes show; called before the volumes are
        written, so no change slips in between."""
        mounted = set().union(*map(self._objects.mounted, self.pod["spec"].get("volumes") or []))
        if mounted:
            self._stop_listening = self.node.mounted.listen(mounted, self._object_changed)

    def _object_changed(self, key: ObjectKey) -> None:
        self._changed_objects.add(key)
        self._volumes_changed.set()

    async def start(self) -> None:
        self._listen()
        try:
            await self._admit()
        except AdmissionError as exc:
            self.phase, self.reason, self.message = "Failed", "UnexpectedAdmissionError", str(exc)
            await self._push_status()
            return
        try:
            await self._prepare_volumes()
        except VOLUME_FAILURES as exc:
            for c in [*self.init, *self.containers]:
                c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            await self._push_status()
            self._tasks.append(asyncio.create_task(self._retry_volumes()))
            return
        self._tasks.append(
            asyncio.create_task(self._run(), name=f"pod:{self.namespace}/{self.name}")
        )

    async def _retry_volumes(self) -> None:
        delay = BACKOFF_START_S
        while not self._stopping:
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
            try:
                await self._prepare_volumes()
            except VOLUME_FAILURES:
                continue
            await self._run()
            return

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop every container (SIGTERM, then SIGKILL after the grace period)."""
        self._stopping = True
        grace = (
            grace_s
            if grace_s is not None
            else float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
        )
        await asyncio.gather(
            *(self._kill(c, min(grace, 10.0)) for c in [*self.init, *self.containers])
        )
        await cancel_all(self._tasks)
        self._stop_listening()

    async def restart_all(self) -> None:
        """After a node reboot: every container starts again, counting a restart."""
        await self.stop(0)
        self._stopping = False
        self._listen()
        for c in [*self.init, *self.containers]:
            if "running" in c.state or "terminated" in c.state:
                c.restart_count += 1
                c.last_state = {
                    "terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now()}
                }
            c.state = {"waiting": {"reason": "ContainerCreating"}}
            c.ready = False
        if self.phase in {"Running", "Pending"}:
            self.phase = "Pending"
            self._tasks.append(asyncio.create_task(self._run()))

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- admission: devices from the device plugins ------------------------------------------
    async def _admit(self) -> None:
        for c in [*self.init, *self.containers]:
            wants = resource_wants(c.spec, self.node.devices.is_device_resource)
            unknown = {
                k: v
                for k, v in resource_wants(
                    c.spec,
                    lambda name: (
                        "/" in name and not name.startswith(("kubernetes.io/", "hugepages-"))
                    ),
                ).items()
                if not self.node.devices.is_device_resource(k)
                and k not in dra_backed_resources(self.pod, c.name)  # a DRA claim serves it
            }
            if unknown:
                name = next(iter(unknown))
                raise AdmissionError(
                    f"Allocate failed due to no healthy devices present; cannot allocate unhealthy devices {name}, which is unexpected"
                )
            if wants:
                self.allocations[c.name] = await self.node.devices.allocate(self.uid, c.name, wants)

    # -- volumes and environment ---------------------------------------------------------
    async def _prepare_volumes(self) -> None:
        for vol in self.pod["spec"].get("volumes") or []:
            self._volume_sources[vol["name"]] = await prepare_volume(
                vol, self.node.root, self.dir, self._objects, self._field
            )

    async def _refresh_volumes(self) -> None:
        """Keep ConfigMap, Secret and token volumes current, as kubelet does: a volume is
        rewritten when an object it shows changes (the node's watch says so, `kubelet.mounted`),
        one with a service-account token also when the token is due for refresh. A rewrite
        that fails is tried again with backoff."""
        volumes = self.pod["spec"].get("volumes") or []
        delay = BACKOFF_START_S
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                due = self._objects.token_refresh_in()
                await asyncio.wait_for(self._volumes_changed.wait(), timeout=due)
            self._volumes_changed.clear()
            changed, self._changed_objects = self._changed_objects, set()
            renew = self._objects.token_refresh_in() == 0.0
            failed = False
            for vol in volumes:
                if not (self._objects.mounted(vol) & changed or (renew and holds_token(vol))):
                    continue
                try:
                    files = await volume_files(vol, self._objects, self._field)
                    write_files(volume_dir(self.dir, vol["name"]), files)
                except VOLUME_FAILURES as exc:
                    log.warning(
                        "pod %s/%s volume %s: %s; trying again in %.0fs",
                        self.namespace,
                        self.name,
                        vol["name"],
                        str(exc) or type(exc).__name__,
                        delay,
                    )
                    failed = True
            if not failed:
                delay = BACKOFF_START_S
                continue
            self._changed_objects |= changed  # the next round tries these again
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
            self._volumes_changed.set()

    def _field(self, path: str) -> str:
        return field_value(self.pod, self.node.name, path)

    async def _env(self, c: ContainerState) -> dict[str, str]:
        base = base_env(
            self.name, self.node.api_host, self.node.api_port, self.node.root, self.node.extra_env
        )
        env = await container_env(
            c.spec, base, self._objects, self._field, self.allocations.get(c.name)
        )
        if self.node.dra is not None:  # the runtime applies the claims' CDI edits last
            env.update(self.node.dra.container_env(self.uid, c.name))
        return env

    def _mounts(self, c: ContainerState) -> list[tuple[str, str, bool]]:
        return container_mounts(
            c.spec, self._volume_sources, self.allocations.get(c.name), self.node.root
        )

    def _command(self, c: ContainerState) -> list[str]:
        command = [*(c.spec.get("command") or []), *(c.spec.get("args") or [])]
        if not c.spec.get("command"):
            command = ["kubegpu", *command]
        if command[0] == "kubegpu" or command[0].endswith("/kubegpu"):
            command = [self.node.python, "-m", "kubegpu", *command[1:]]
        return command

    # -- running ----------------------------------------------------------------------------
    async def _run(self) -> None:
        if self.node.dra is not None:  # claims are prepared before any container starts
            await self.node.dra.prepare_pod(self.pod, self._push_status)
        if self.node.strict and not await self._create_sandbox():
            return
        self._tasks.append(asyncio.create_task(self._refresh_volumes()))
        for c in self.init:
            while not self._stopping:
                code = await self._run_once(c)
                if code == 0:
                    break
                if self.restart_policy == "Never":
                    self.phase, self.reason = "Failed", "InitContainerFailed"
                    await self._on_exit(self)
                    await self._push_status()
                    return
                await self._backoff(c)
        if self._stopping:
            return
        self.phase = "Running"
        await asyncio.gather(*(self._keep_running(c) for c in self.containers))
        if self._stopping:
            return
        codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in self.containers]
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        # devices first: once the API server has the terminal phase the scheduler may bind
        # the next pod to them, and its admission must find them free (a kubelet's device
        # manager counts only active pods' devices)
        await self._on_exit(self)
        await self._push_status()

    # -- the runtime: sandbox, injection, the toolkit (strict nodes) -------------------------
    async def _runtime_handler(self) -> str | None:
        """The handler of the pod's RuntimeClass (its name when the object cannot be read)."""
        name = self.pod["spec"].get("runtimeClassName")
        if not name:
            return None
        try:
            rc = await self.node.client.get(RuntimeClass, name)
        except (ApiError, httpx.HTTPError):
            return str(name)
        return str(rc.handler)

    async def _create_sandbox(self) -> bool:
        """Run the pod's sandbox with its handler, retrying with backoff as a kubelet does
        while the runtime refuses it (the runtime's words in the event and the statuses)."""
        assert self.node.runtime is not None
        handler = await self._runtime_handler()
        delay = BACKOFF_START_S
        while not self._stopping:
            error = self.node.runtime.sandbox_error(handler, self.uid)
            if error is None:
                self.handler = handler
                return True
            for c in [*self.init, *self.containers]:
                c.state = {"waiting": {"reason": "ContainerCreating", "message": error}}
            await self._push_status()
            await pod_event(
                self.node.client,
                self.node.name,
                self.pod,
                "FailedCreatePodSandBox",
                sandbox_event_message(error),
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
        return False

    def _injection(self, c: ContainerState, env: dict[str, str]) -> Injection:
        """What the runtime gives the container (sim.runtime.injection)."""
        runtime = self.node.runtime
        assert runtime is not None
        allocation = self.allocations.get(c.name)
        cri = [*(allocation.cdi_devices if allocation else [])]
        if self.node.dra is not None:
            cri += self.node.dra.cdi_devices(self.uid, c.name)
        annotations = {
            **(self.pod["metadata"].get("annotations") or {}),
            **(allocation.annotations if allocation else {}),
        }
        names = cdi_requests(cri, annotations)
        specs = Registry.scan(node_spec_dirs(self.node.root) if names else [])
        return inject(
            nvidia_handler=is_nvidia_binary(runtime.handler_binary(self.handler)),
            env=env,
            cdi_names=names,
            cdi_specs=specs,
            gpus=self.node.gpus(),
        )

    async def _run_toolkit(self, c: ContainerState, log_path: Path) -> int:
        """NVIDIA's toolkit installer, stood in for (sim.runtime.toolkit): it configures the
        node's runtime through the pod's env and mounts, then waits to be stopped."""
        assert self.node.runtime is not None
        try:
            env = await self._env(c)
            mounts = self._mounts(c)
        except CONFIG_FAILURES as exc:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            await self._push_status()
            return 1
        fs = ContainerFs(mounts, self.dir / "rootfs" / c.name)
        result = await asyncio.to_thread(run_installer, env, fs, self.node.runtime)
        with log_path.open("a") as out:
            out.writelines(line + "\n" for line in result.log)
        started = now()
        if result.error is None:
            c.state = {"running": {"startedAt": started}}
            c.ready = not c.init
            await self._push_status()
            if not c.init:
                try:
                    await asyncio.Event().wait()  # waits for its signal until the pod stops
                finally:  # its signal: it reverts the runtime's config
                    undone = run_cleanup(env, fs, self.node.runtime)
                    with log_path.open("a") as out:
                        out.writelines(line + "\n" for line in undone.log)
        code = result.exit_code
        c.ready = False
        c.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now(),
            }
        }
        if not self._stopping:
            await self._push_status()
        return code

    async def _keep_running(self, c: ContainerState) -> None:
        while not self._stopping:
            code = await self._run_once(c)
            if self._stopping:
                return
            if self.restart_policy == "Never" or (self.restart_policy == "OnFailure" and code == 0):
                return
            await self._backoff(c)

    async def _backoff(self, c: ContainerState) -> None:
        delay = min(BACKOFF_START_S * 2 ** min(c.restart_count, 10), BACKOFF_MAX_S)
        if "waiting" in c.state:  # never created (CreateContainerConfigError): a kubelet
            await asyncio.sleep(delay)  # retries, keeps the reason and counts no restart
            return
        c.last_state = {"terminated": c.state.get("terminated", {})}
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:.0f}s restarting failed container={c.name} pod={self.name}",
            }
        }
        c.restart_count += 1
        await self._push_status()
        await asyncio.sleep(delay)

    def _in_process_argv(self, c: ContainerState) -> list[str] | None:
        """The `kubegpu` arguments of a container this node runs in-process, else None."""
        if self.node.root_command is None:
            return None
        command = [*(c.spec.get("command") or []), *(c.spec.get("args") or [])]
        if not c.spec.get("command"):
            command = ["kubegpu", *command]
        return command[1:] if in_process_command(command) else None

    def _workload(self, c: ContainerState) -> list[str] | None:
        """The simulated GPU program (nvidia-smi, a CUDA sample) for a workload container."""
        image = c.spec.get("image", "")
        if self.node.runs_process(image):
            return None
        return workload_program(
            image, [*(c.spec.get("command") or []), *(c.spec.get("args") or [])]
        )

    async def _run_once(self, c: ContainerState) -> int:
        if (refused := container_refusal(self.pod, c.spec)) is not None:  # as a kubelet would
            c.state = {"waiting": {"reason": refused.reason, "message": refused.message}}
            self.phase = "Pending" if not (c.init or c.last_state) else self.phase
            await self._push_status()
            await asyncio.Event().wait()  # it waits as long as the pod is the same
        image = c.spec.get("image", "")
        if self.node.strict and is_toolkit_image(image):
            log_path = self.log_dir / c.name / f"{c.restart_count}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            return await self._run_toolkit(c, log_path)
        workload = self._workload(c)
        if workload is None and not self.node.runs_process(image):
            c.state = {"running": {"startedAt": now()}}
            c.ready = not c.init
            await self._push_status()
            if c.init:
                c.state = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now(),
                        "finishedAt": now(),
                    }
                }
                return 0
            await asyncio.Event().wait()  # runs until the pod stops
            return 0
        log_path = self.log_dir / c.name / f"{c.restart_count}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            env = await self._env(c)
            mounts = self._mounts(c)
            command = self._command(c) if workload is None else workload
        except CONFIG_FAILURES as exc:
            message = str(exc) or type(exc).__name__
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": message}}
            await self._push_status()
            return 1
        in_process = self._in_process_argv(c) if workload is None else None
        self.shm[c.name] = container_shm(self.dir, mounts, env)
        waiter: asyncio.Task[int] | None = None
        real: list[str] | None = None  # a strict node runs a workload's own command
        if self.node.strict:
            injected = self._injection(c, env)
            if injected.error is not None:
                message = injected.error
                c.state = {"waiting": {"reason": "CreateContainerError", "message": message}}
                await self._push_status()
                return 1
            env.update(injected.edits.env_map())  # CDI edits: the spec's env, as given
            env[SMI_DEVICES] = ",".join(injected.devices)
            if injected.driver:
                programs = tuple(p for p in PROGRAMS if injected.has_program(p))
                bin_dir = install_binaries(self.node.root, self.node.python, programs)
                env["PATH"] = with_driver(env.get("PATH", ""), bin_dir)
            else:
                env.pop(ENV_NVML, None)  # no driver injected: no NVML for the process
            if workload is not None:
                real = self._workload_command(c)
                if real is None or shutil.which(real[0], path=env.get("PATH")) is None:
                    return await self._start_error(c, real[0] if real else "")
        if real is not None:
            argv = real
        elif in_process is not None:
            c.inproc = InProcessContainer(
                ContainerSpec(
                    argv=in_process,
                    env=env,
                    mounts=mounts,
                    namespace=self.namespace,
                    log_path=log_path,
                    kubeconfig_path=self.dir / "inprocess" / f"{c.name}.kubeconfig",
                    api_host=self.node.api_host,
                    api_port=self.node.api_port,
                    node_ip=self.node.address,
                ),
                self.node.root_command,  # type: ignore[arg-type]
            )
            c.inproc.start()
            waiter = asyncio.ensure_future(c.inproc.wait())
        elif workload is not None:  # answers from the simulated GPUs; needs no mounts
            allocation = self.allocations.get(c.name)
            given = [d for ds in (allocation.devices.values() if allocation else []) for d in ds]
            visible = env.get(NVIDIA_VISIBLE_DEVICES)
            if not given and visible not in (None, "", VISIBLE_DEVICES_VOID):
                given = str(visible).split(",")  # "all", or the GPUs of the pod's claims
            env[SMI_DEVICES] = ",".join(given)
            own = self._workload_command(c)
            if own is not None and is_shell(own):  # a shell runs for real, the driver on PATH
                bin_dir = install_binaries(self.node.root, self.node.python)
                env["PATH"] = with_driver(env.get("PATH", ""), bin_dir)
                argv = own
            else:
                argv = [self.node.python, "-m", "kubegpu.sim.smi", *command]
        else:
            argv = [self.node.python, "-m", "kubegpu.sim.kubelet.podexec"]
            if self.node.bind_ip:
                argv += ["--bind-ip", self.node.bind_ip]
            for src, dst, ro in mounts:
                argv += ["--mount", f"{src}:{dst}" + (":ro" if ro else "")]
            argv += ["--", *command]
        if waiter is None:
            with log_path.open("ab") as out:
                c.process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            waiter = asyncio.ensure_future(c.process.wait())
        if self._stopping:  # stop() ran while the process was being started
            await self._kill(c, 0)
            return 137
        started = now()
        c.state = {"running": {"startedAt": started}}
        c.ready = not c.init
        await self._push_status()
        code = await waiter
        c.process = None
        c.inproc = None
        c.ready = False
        reason = "Completed" if code == 0 else ("Error" if code > 0 else "Killed")
        c.state = {
            "terminated": {
                "exitCode": code if code >= 0 else 128 - code,
                "reason": reason,
                "startedAt": started,
                "finishedAt": now(),
            }
        }
        if not self._stopping:
            await self._push_status()
        return code

    def _workload_command(self, c: ContainerState) -> list[str] | None:
        """The workload's own command (its image's entrypoint: the CUDA sample), as a
        runtime would exec it."""
        command = [*(c.spec.get("command") or []), *(c.spec.get("args") or [])]
        if command:
            return command
        return workload_program(c.spec.get("image", ""), [])

    async def _start_error(self, c: ContainerState, binary: str) -> int:
        """The runtime could not exec the container's binary (not on its PATH)."""
        c.state = {
            "terminated": {
                "exitCode": 128,
                "reason": "StartError",
                "message": f'exec: "{binary}": executable file not found in $PATH',
                "startedAt": now(),
                "finishedAt": now(),
            }
        }
        await self._push_status()
        return 128

    async def _kill(self, c: ContainerState, grace: float) -> None:
        if c.inproc is not None:
            await c.inproc.terminate(grace)
            return
        proc = c.process
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    def pids(self) -> list[int]:
        return [
            c.process.pid
            for c in [*self.init, *self.containers]
            if c.process and c.process.returncode is None
        ]

    # -- status -----------------------------------------------------------------------------
    def status(self) -> Json:
        spec = self.pod["spec"]
        images = {
            c["name"]: c.get("image", "")
            for c in [*(spec.get("initContainers") or []), *spec["containers"]]
        }
        ready = (
            bool(self.containers)
            and all(c.ready for c in self.containers)
            and self.phase == "Running"
        )
        init_done = all(
            "terminated" in c.state and c.state["terminated"].get("exitCode") == 0
            for c in self.init
        )
        t = now()
        status: Json = {
            "phase": self.phase,
            "hostIP": self.node.address,
            "hostIPs": [{"ip": self.node.address}],
            "podIP": self.node.address,  # every simulated pod shares its node's network
            "podIPs": [{"ip": self.node.address}],
            "startTime": self.start_time,
            "qosClass": qos_class(spec),
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": self.start_time},
                {"type": "Initialized", "status": str(init_done), "lastTransitionTime": t},
                {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": t},
                {"type": "Ready", "status": str(ready), "lastTransitionTime": t},
            ],
            "containerStatuses": [c.status(images[c.name]) for c in self.containers],
            "initContainerStatuses": [c.status(images[c.name]) for c in self.init],
            "reason": self.reason,
            "message": self.message,
        }
        return status

    def observe(self, pod: Json) -> None:
        """A newer version of the pod from the watch (see `status.PodStatusManager`)."""
        self._status.observe(pod)

    async def _push_status(self) -> None:
        """Write the pod's status until the API server has it (`status.PodStatusManager`)."""
        await self._status.push()

    async def _patch_status(self, status: Json) -> str | None:
        written = await self.node.client.patch(
            PodStatus,
            self.name,
            {"status": status},
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
        )
        return written.metadata.resourceVersion if written.metadata else None
