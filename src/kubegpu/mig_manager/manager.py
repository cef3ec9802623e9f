"""The MIG manager: makes this node's GPUs match its `nvidia.com/mig.config` label.

It watches only its own Node. Whenever the label's value changes (and once at start) it
reconfigures:

1. the named layout must exist and fit this node's GPUs, else `failed` and nothing touched;
   a name the layouts lack is first waited for (`pending`, `unknown_config_wait_s`): the
   operator may be moving this manager onto a new ConfigMap that has it. The layout is
   planned against the GPUs here, once (`mig.parted.ConfigPlan`), and that plan is carried
   through the steps below; it is planned once more under the node's MIG lock;
2. already applied: `success` with no disruption;
3. a GPU that must change but on which a workload pod holds a device is refused (unless
   configured to proceed), before any operand is disturbed (`mig.holders`; a kubelet that
   answers late is asked again until `pod_resources_timeout_s`);
4. `pending`: the GPU operands are paused through their `nvidia.com/gpu.deploy.*` labels
   (the values before are kept in an annotation, in the same patch) and their pods must go;
5. the layout is applied through the nvml seam; when a MIG mode change needs a reset and a
   reboot is allowed, the state becomes `rebooting` and the node reboots, and the manager
   that starts after the boot carries on;
6. the CDI spec is rewritten, the deploy labels get exactly their previous values back and
   the state becomes `success`.

Any error or timeout after step 4 restores the labels and ends in `failed` with the reason
(and the GPUs' actual state) in an Event, never in `pending`. Because the pause is recorded
on the Node, a manager killed at any step and started again converges.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from kubegpu.base.tasks import cancel_all, start_kept
from kubegpu.catalog import nvidia
from kubegpu.cdi.build import common_edits, gpu_devices, node_spec, write_spec
from kubegpu.cdi.driver import driver_edits, find_driver_files, hook_path
from kubegpu.cdi.nodes import MIG_MINORS, present_control_devices, read_mig_minors
from kubegpu.cdi.spec import ContainerEdits, Spec, file_name
from kubegpu.kube.labels import (
    API_ERRORS,
    annotations_of,
    labels_of,
    node_event,
    patch_node_metadata,
)
from kubegpu.kube.nodes import watch_node
from kubegpu.kube.podresources import HeldDevice, PodResourcesError, list_held_devices
from kubegpu.mig.config import ConfigError, MigPartedConfig
from kubegpu.mig.holders import busy_gpus, gpu_of_device, held_gpus
from kubegpu.mig.lock import MigLock, MigLockError
from kubegpu.mig.parted import (
    ApplyError,
    ApplyResult,
    ConfigPlan,
    apply_plan,
    assert_plan,
    describe_node,
    plan_config,
    read_node,
)
from kubegpu.mig_manager.layouts import Layouts
from kubegpu.mig_manager.settings import (
    COMPONENT,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    PAUSED,
    PAUSED_ANNOTATION,
    MigManagerSettings,
    State,
)
from kubegpu.nvml import Nvml, NvmlError
from kubegpu.sharing.facts import read_gpus
from kubegpu.sharing.replicas import physical_id

log = logging.getLogger(__name__)

RETRY_S = 2.0
POD_RESOURCES_BACKOFF_S = (1.0, 4.0, 16.0)  # between asks of a kubelet that did not answer
_TRANSIENT: tuple[type[Exception], ...] = (*API_ERRORS, OSError)
_CHECK_ERRORS: tuple[type[Exception], ...] = (NvmlError, *API_ERRORS)
_APPLY_ERRORS: tuple[type[Exception], ...] = (NvmlError, *API_ERRORS, OSError)

Step = Callable[[str], Awaitable[None]]
Reboot = Callable[[], Awaitable[None]]


class Failed(Exception):
    """The reconfiguration cannot finish; the message says why."""


class Superseded(Exception):
    """The label changed while this reconfiguration waited; the new value is handled next."""


async def _no_step(_: str) -> None:
    return None


@dataclass
class Outcome:
    state: State
    message: str
    seconds: float = 0.0
    changed_gpus: list[int] = field(default_factory=list)
    recorded: bool = True  # the state label says so; False: the API refused, try again


def _selector_keys(pod: Pod) -> set[str]:
    """Node label keys a pod's placement depends on (nodeSelector and required affinity)."""
    spec = pod.spec
    if spec is None:
        return set()
    keys = set((spec.nodeSelector or {}).keys())
    affinity = spec.affinity.nodeAffinity if spec.affinity else None
    required = affinity.requiredDuringSchedulingIgnoredDuringExecution if affinity else None
    for term in (required.nodeSelectorTerms if required else None) or []:
        keys |= {e.key for e in term.matchExpressions or []}
    return keys


_GPU_IN_LINE = re.compile(r"\(GPU (\d+)\)")
EVENT_BUDGET = 1000


def summarise(message: str) -> str:
    """Fold lines that differ only in `(GPU n)` into one line naming all those GPUs."""
    groups: dict[str, list[str]] = {}
    for line in message.splitlines():
        gpus = _GPU_IN_LINE.findall(line)
        key = _GPU_IN_LINE.sub("(GPU *)", line)
        groups.setdefault(key, []).extend(gpus)
    out = []
    for key, gpus in groups.items():
        if len(gpus) > 1:
            out.append(key.replace("(GPU *)", f"(GPUs {', '.join(gpus)})"))
        else:
            out.append(key.replace("(GPU *)", f"(GPU {gpus[0]})") if gpus else key)
    return "\n".join(out)


def _ref(pod: Pod) -> str:
    meta = pod.metadata
    return f"{meta.namespace}/{meta.name}" if meta else "?"


async def run_command(command: Iterable[str], timeout_s: float = 60.0) -> None:
    """Run a command (the node's reboot command); Failed when it cannot run or fails."""
    argv = list(command)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        raise Failed(f"cannot run {' '.join(argv)!r}: {exc.strerror}") from None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise Failed(f"{' '.join(argv)!r} did not finish within {timeout_s:.0f}s") from None
    if proc.returncode:
        text = out.decode(errors="replace").strip()
        raise Failed(f"{' '.join(argv)!r} exited with {proc.returncode}: {text}")


class MigManager:
    """One node's MIG manager. `await run()` until `stop()`; `reconcile(name)` does one change."""

    def __init__(
        self,
        settings: MigManagerSettings,
        client: AsyncClient,
        nvml: Nvml,
        *,
        reboot: Reboot | None = None,
        on_step: Step | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.nvml = nvml
        self.layouts = Layouts(settings, client, nvml)
        self._reboot = reboot or self._reboot_command
        self._step = on_step or _no_step
        # the node-wide lock every MIG writer takes; held from the last busy check until
        # the change is asserted, so no other writer interleaves
        self.mig_lock = MigLock.for_node(nvml, COMPONENT)
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._desired = ""
        self._retry = False
        self._seen_state: str | None = None
        self.handled: str | None = None
        self.last: Outcome | None = None
        self.ready = asyncio.Event()  # set once the manager has seen its Node

    @property
    def node_name(self) -> str:
        return self.settings.node_name

    # -- lifecycle ---------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        await self.layouts.prepare()
        tasks: list[asyncio.Task[None]] = []
        start_kept(tasks, self._watch(), name="mig-manager:watch")
        start_kept(tasks, self._work(), name="mig-manager:work")
        start_kept(tasks, self._wait_stop(), name="mig-manager:stop")
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()
        finally:
            await cancel_all(tasks)

    async def _wait_stop(self) -> None:
        await self._stop.wait()

    async def _watch(self) -> None:
        async for node in watch_node(self.client, self.node_name):
            if node is None:
                continue
            labels = labels_of(node)
            desired = labels.get(MIG_CONFIG_LABEL, "")
            state = labels.get(MIG_STATE_LABEL, "")
            # removing the state label asks for another attempt with the same value
            if self._seen_state and not state and desired:
                self._retry = True
            self._seen_state = state
            if desired != self._desired or self._retry or not self.ready.is_set():
                self._desired = desired
                self._wake.set()
            self.ready.set()

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            desired = self._desired
            if not desired or (desired == self.handled and not self._retry):
                continue
            self._retry = False
            self.handled = desired
            try:
                self.last = await self.reconcile(desired)
            except _TRANSIENT as exc:
                log.warning(
                    "node %s: reconfiguring to %r: %s (trying again)",
                    self.node_name,
                    desired,
                    str(exc) or type(exc).__name__,
                )
                self.last = None
            if self.last is None or not self.last.recorded:
                # the outcome could not be written to the Node: try the whole change again
                self.handled = None
                await asyncio.sleep(RETRY_S)
                self._wake.set()

    # -- one reconfiguration -----------------------------------------------------------------
    async def reconcile(self, config_name: str) -> Outcome:
        """One change to the config the label names. The config is planned against the
        node once here and that plan is carried through every step; it is planned once
        more under the node's MIG lock, where the GPUs cannot change underneath."""
        started = time.monotonic()
        log.info("node %s: reconfiguring MIG to %r", self.node_name, config_name)
        node = await self.client.get(Node, self.node_name)
        labels = labels_of(node)
        previous_state = labels.get(MIG_STATE_LABEL, "")
        paused = self._recorded_pause(node)
        try:
            try:
                plan = await self._validate(config_name)
            except Superseded as exc:
                log.info("node %s: %r no longer wanted: %s", self.node_name, config_name, exc)
                return Outcome(State.PENDING, str(exc))
            await self._step("validated")
            states = await asyncio.to_thread(read_node, self.nvml)
            changing = plan.changing(states)
            if not changing:
                await self._write_cdi()
                return await self._succeed(config_name, paused, started, "was already applied")
            if previous_state == State.REBOOTING.value:
                mode = await asyncio.to_thread(assert_plan, self.nvml, plan, mode_only=True)
                if mode:
                    raise Failed(
                        "the MIG mode change did not take effect after rebooting: "
                        + "; ".join(mode)
                    )
            await self._check_busy(changing)
        except (Failed, ConfigError) as exc:
            return await self._fail(config_name, str(exc), paused, started)
        except _CHECK_ERRORS as exc:
            return await self._fail(config_name, f"cannot check the node: {exc}", paused, started)
        # from here on, operands are paused: every way out restores them
        locked = False
        try:
            paused = await self._pause(config_name, node, paused)
            await self._step("paused")
            await self._wait_operands_gone(set(paused))
            await self._step("operands-gone")
            await self._take_lock()
            locked = True
            await self._check_busy(changing)
            # the one plan again: under the lock, against the GPUs as they are now
            plan = await asyncio.to_thread(plan_config, self.nvml, config_name, plan.entries)
            if self.settings.with_reboot and await self._mode_needs_reboot(plan):
                await self._step("rebooting")
                await self._patch(labels={MIG_STATE_LABEL: State.REBOOTING.value})
                await node_event(
                    self.client,
                    node,
                    reason="MigConfigRebooting",
                    message=(
                        f"rebooting the node to change the MIG mode for config {config_name!r}"
                    ),
                    component=COMPONENT,
                )
                try:
                    await self._reboot()
                    await asyncio.sleep(self.settings.reboot_timeout_s)
                    raise Failed(
                        f"the node did not reboot within {self.settings.reboot_timeout_s:.0f}s"
                    )
                except Failed:
                    await asyncio.to_thread(self._revert_pending_modes)
                    raise
            result = await asyncio.to_thread(self._apply, plan)
            await self._step("applied")
            if result.reset_required:
                await asyncio.to_thread(self._revert_pending_modes)
                gpus = ", ".join(map(str, result.reset_required))
                raise Failed(
                    f"GPUs {gpus} need a GPU reset or a node reboot for the MIG mode change "
                    "(set WITH_REBOOT=true to let the MIG manager reboot the node)"
                )
            left = await asyncio.to_thread(assert_plan, self.nvml, plan)
            if left:
                raise Failed("the config is not in place after applying it: " + "; ".join(left))
            await self._write_cdi()
            await self._step("cdi")
        except asyncio.CancelledError:
            if (await self._current_state()) != State.REBOOTING.value:
                await asyncio.shield(
                    self._fail(
                        config_name, "the MIG manager was stopped mid-change", paused, started
                    )
                )
            raise
        except (Failed, ConfigError, ApplyError, MigLockError) as exc:
            return await self._fail(config_name, str(exc), paused, started)
        except _APPLY_ERRORS as exc:
            return await self._fail(config_name, f"{type(exc).__name__}: {exc}", paused, started)
        except Exception as exc:  # a bug must not leave the operands paused either
            log.exception("node %s: unexpected error", self.node_name)
            return await self._fail(config_name, f"unexpected error: {exc!r}", paused, started)
        finally:
            if locked:
                self.mig_lock.release()
        return await self._succeed(config_name, paused, started, "applied", changing)

    async def _validate(self, config_name: str) -> ConfigPlan:
        """The layouts' entries for `config_name`, planned against this node's GPUs (every
        GPU covered, every entry possible); ConfigError or Failed says why not."""
        layouts = await self.layouts.load()
        if config_name not in layouts.mig_configs and self.settings.unknown_config_wait_s > 0:
            layouts = await self._wait_for_config_name(config_name)
        _, entries = layouts.select(config_name, self.layouts.source)
        plan = await asyncio.to_thread(plan_config, self.nvml, config_name, entries)
        plan.covered()
        return plan

    async def _wait_for_config_name(self, config_name: str) -> MigPartedConfig:
        """The label names a config the layouts lack: while the ConfigMap is being switched
        (the operator rolls this pod onto the new one) that is a wait, state `pending`, not
        a failure. After `unknown_config_wait_s` the caller's select() fails with the names
        the layouts do have. A new label value ends the wait (Superseded)."""
        wait_s = self.settings.unknown_config_wait_s
        await self._patch(labels={MIG_STATE_LABEL: State.PENDING.value})
        await node_event(
            self.client,
            self.node_name,
            reason="MigConfigWaiting",
            message=(
                f"MIG config {config_name!r} is not in {self.layouts.source} (yet); waiting "
                f"up to {wait_s:.0f}s for it, e.g. while the MIG manager moves to a new "
                "ConfigMap"
            ),
            component=COMPONENT,
        )
        log.info(
            "node %s: config %r not in %s; waiting",
            self.node_name,
            config_name,
            self.layouts.source,
        )
        deadline = time.monotonic() + wait_s
        while True:
            await asyncio.sleep(min(self.settings.poll_s * 5, wait_s))
            if self._desired != config_name:
                raise Superseded(f"the label now asks for {self._desired!r}")
            over = time.monotonic() >= deadline
            try:
                layouts = await self.layouts.load()
            except ConfigError:
                if over:  # the source itself is broken: that is the failure to report
                    raise
                continue
            if config_name in layouts.mig_configs:
                return layouts
            if over:
                known = ", ".join(sorted(layouts.mig_configs))
                raise Failed(
                    f"unknown config name {config_name!r}: not in {self.layouts.source} after "
                    f"waiting {wait_s:.0f}s (known: {known})"
                )

    def _apply(self, plan: ConfigPlan) -> ApplyResult:
        return apply_plan(
            self.nvml,
            plan,
            report=lambda line: log.info("%s", line),
            lock=self.mig_lock,
        )

    def _revert_pending_modes(self) -> None:
        """Undo MIG mode changes left pending for a reset or reboot that will not come, so a
        later reboot does not change the node behind everyone's back."""
        for state in read_node(self.nvml):
            if state.mig_capable and state.pending != state.enabled:
                try:
                    self.nvml.set_mig_mode(state.index, state.enabled)
                except NvmlError as exc:
                    log.error("GPU %d: cannot undo the pending MIG mode: %s", state.index, exc)

    async def _mode_needs_reboot(self, plan: ConfigPlan) -> bool:
        """Set the MIG modes only (no reset): whether a GPU now waits for a reset."""
        result = await asyncio.to_thread(
            functools.partial(
                apply_plan, self.nvml, plan, mode_only=True, skip_reset=True, lock=self.mig_lock
            )
        )
        return bool(result.reset_required)

    async def _take_lock(self) -> None:
        """Wait for the node's MIG lock in a worker thread; if this task is cancelled
        meanwhile, a lock the thread still gets is given back, never leaked."""
        stop = threading.Event()
        taking = asyncio.ensure_future(asyncio.to_thread(self.mig_lock.acquire, stop))
        try:
            await asyncio.shield(taking)
        except asyncio.CancelledError:
            stop.set()
            with contextlib.suppress(Exception):
                await taking
                self.mig_lock.release()
            raise

    # -- workloads and operands ------------------------------------------------------------------
    async def _held_devices(self, socket: Path) -> list[HeldDevice]:
        """What the node's pods hold, from the kubelet. A kubelet that does not answer is
        asked again (it may be busy starting the pods a change stopped, or a device plugin
        that registers late): first after each of POD_RESOURCES_BACKOFF_S, then every last
        backoff until `pod_resources_timeout_s` has passed. Only then does the change fail:
        a slow node is not a failed one."""
        deadline = time.monotonic() + self.settings.pod_resources_timeout_s
        backoff = iter(POD_RESOURCES_BACKOFF_S)
        while True:
            try:
                return await list_held_devices(socket)
            except PodResourcesError as exc:
                left = deadline - time.monotonic()
                delay = next(backoff, None)
                if delay is None:
                    if left <= 0:
                        waited = self.settings.pod_resources_timeout_s
                        raise Failed(
                            f"cannot tell which pods hold GPUs: {exc} (the kubelet did not "
                            f"answer within --pod-resources-timeout {waited:g}s)"
                        ) from None
                    delay = min(POD_RESOURCES_BACKOFF_S[-1], left)
                log.warning("node %s: %s; asking again in %.0fs", self.node_name, exc, delay)
                await asyncio.sleep(delay)

    async def _check_busy(self, changing: list[int]) -> None:
        socket = self.settings.pod_resources_socket
        if socket is None or not changing:
            return
        held = await self._held_devices(socket)
        gpu_of = await asyncio.to_thread(gpu_of_device, self.nvml)
        holders = held_gpus(
            ((h.pod_ref, h.resource, physical_id(h.device_id)) for h in held), gpu_of
        )
        busy = busy_gpus(holders, changing)
        if not busy:
            return
        what = "; ".join(f"GPU {i}: {', '.join(sorted(p))}" for i, p in sorted(busy.items()))
        if self.settings.busy_gpus == "proceed":
            log.warning("repartitioning GPUs that pods hold (configured to proceed): %s", what)
            return
        raise Failed(f"refusing to repartition GPUs that workload pods hold devices on: {what}")

    def _recorded_pause(self, node: Node) -> dict[str, str]:
        raw = annotations_of(node).get(PAUSED_ANNOTATION)
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            log.warning("ignoring an unreadable %s annotation: %r", PAUSED_ANNOTATION, raw)
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    async def _pause(self, name: str, node: Node, recorded: dict[str, str]) -> dict[str, str]:
        """Pause the operands; returns every label paused by this manager -> its value before."""
        labels = labels_of(node)
        paused = dict(recorded)
        for key in self.settings.deploy_labels:
            value = labels.get(key)
            if value is None or value in {"false", PAUSED} or key in paused:
                continue
            paused[key] = value
        await self._patch(
            labels={MIG_STATE_LABEL: State.PENDING.value, **dict.fromkeys(paused, PAUSED)},
            annotations={PAUSED_ANNOTATION: json.dumps(paused, sort_keys=True)},
        )
        operands = ", ".join(k.rsplit(".", 1)[-1] for k in sorted(paused)) or "none"
        await node_event(
            self.client,
            node,
            reason="MigConfigPending",
            message=f"applying MIG config {name!r}; paused operands: {operands}",
            component=COMPONENT,
        )
        return paused

    async def _operand_pods(self, keys: set[str]) -> list[Pod]:
        return [
            p
            async for p in self.client.list(
                Pod, namespace="*", fields={"spec.nodeName": self.node_name}
            )
            if _selector_keys(p) & keys
            and (p.status is None or p.status.phase not in {"Succeeded", "Failed"})
        ]

    async def _wait_operands_gone(self, keys: set[str]) -> None:
        if not keys:
            return
        deadline = time.monotonic() + self.settings.pods_timeout_s
        while True:
            pods = await self._operand_pods(keys)
            if not pods:
                return
            if time.monotonic() >= deadline:
                names = ", ".join(sorted(_ref(p) for p in pods))
                raise Failed(
                    f"operand pods still on the node after {self.settings.pods_timeout_s:.0f}s: {names}"
                )
            await asyncio.sleep(self.settings.poll_s)

    # -- endings -------------------------------------------------------------------------------
    async def _current_state(self) -> str:
        try:
            node = await self.client.get(Node, self.node_name)
        except API_ERRORS:
            return ""
        return labels_of(node).get(MIG_STATE_LABEL, "")

    async def _patch(
        self,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> Node:
        return await patch_node_metadata(
            self.client, self.node_name, labels=labels, annotations=annotations
        )

    async def _restore_patch(self, paused: dict[str, str], state: State) -> None:
        """One patch: the state, and each paused label back to its value before (unless
        someone changed it meanwhile); the record of the pause goes."""
        node = await self.client.get(Node, self.node_name)
        current = labels_of(node)
        paused = {**self._recorded_pause(node), **paused}
        labels: dict[str, str | None] = {MIG_STATE_LABEL: state.value}
        labels |= {k: v for k, v in paused.items() if current.get(k) == PAUSED}
        annotations: dict[str, str | None] | None = (
            {PAUSED_ANNOTATION: None} if PAUSED_ANNOTATION in annotations_of(node) else None
        )
        await self._patch(labels=labels, annotations=annotations)

    async def _write_cdi(self) -> None:
        if self.settings.cdi_enabled:
            path = await asyncio.to_thread(write_management_spec, self.nvml, self.settings)
            log.info("wrote the management CDI spec %s", path)

    async def _succeed(
        self,
        name: str,
        paused: dict[str, str],
        started: float,
        how: str,
        changed: list[int] | None = None,
    ) -> Outcome:
        await self._restore_patch(paused, State.SUCCESS)
        seconds = time.monotonic() - started
        message = f"MIG config {name!r} {how} in {seconds:.1f}s"
        log.info("node %s: %s", self.node_name, message)
        await node_event(
            self.client,
            self.node_name,
            reason="MigConfigSuccess",
            message=message,
            component=COMPONENT,
        )
        return Outcome(State.SUCCESS, message, seconds, changed or [])

    async def _fail(self, name: str, why: str, paused: dict[str, str], started: float) -> Outcome:
        gpus = await asyncio.to_thread(describe_node, self.nvml)
        why = summarise(why)
        tail = f"\nGPUs now:\n{gpus}"
        room = max(200, EVENT_BUDGET - len(tail) - len(name) - 30)
        if len(why) > room:
            why = why[: room - 3] + "..."
        message = f"MIG config {name!r} failed: {why}{tail}"
        log.error("node %s: %s", self.node_name, message)
        recorded = True
        try:
            await self._restore_patch(paused, State.FAILED)
        except API_ERRORS as exc:
            log.error(
                "node %s: cannot record the failure: %s",
                self.node_name,
                str(exc) or type(exc).__name__,
            )
            recorded = False
        await node_event(
            self.client,
            self.node_name,
            reason="MigConfigFailed",
            message=message,
            component=COMPONENT,
            warning=True,
        )
        return Outcome(State.FAILED, message, time.monotonic() - started, recorded=recorded)

    async def _reboot_command(self) -> None:
        log.warning("node %s: rebooting with %s", self.node_name, self.settings.reboot_command)
        await run_command(self.settings.reboot_command)


# -- the management CDI spec ------------------------------------------------------------------

#: Management containers (DCGM, the exporter, validators) ask for
#: `management.nvidia.com/gpu=all`; it is rewritten after each MIG change so that its MIG
#: entries name the current instances.
MANAGEMENT_SPEC_FILE = file_name(nvidia.CDI_MANAGEMENT_KIND, suffix=".yaml")


def management_spec(nvml: Nvml, mig_minors: dict[str, int], common: ContainerEdits) -> Spec:
    """Every GPU and MIG device by UUID and index, plus `all`; `common`: the spec-wide
    edits (control nodes, the driver's files)."""
    devices = gpu_devices(read_gpus(nvml), None, mig_minors)
    return node_spec(nvidia.CDI_MANAGEMENT_KIND, devices, common)


def write_management_spec(
    nvml: Nvml, settings: MigManagerSettings, mig_minors: Path = Path("/") / MIG_MINORS
) -> Path:
    driver = driver_edits(
        find_driver_files(settings.container_driver_root),
        settings.driver_root,
        hook_path(os.environ),
    )
    common = common_edits(present_control_devices(Path("/")), "/", driver)
    spec = management_spec(nvml, read_mig_minors(mig_minors), common)
    return write_spec(settings.cdi_dir, MANAGEMENT_SPEC_FILE, spec)
