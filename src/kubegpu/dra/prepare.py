"""NodePrepareResources / NodeUnprepareResources: claims into CDI specs, and back.

Per claim, in this order, so that a crash at any point is repaired by the next call:

1. a claim already `PrepareCompleted` in the checkpoint, its CDI spec in place, returns its
   stored devices (the kubelet retries calls it got no answer for);
2. a claim left `PrepareStarted` (the plugin died while preparing it), or completed but
   without its CDI spec (a reboot emptied /var/run), is rolled back;
3. the claim is read from the API server and planned (`claims.plan_claim`): any problem is
   the claim's error and nothing is changed;
4. the checkpoint says `PrepareStarted`; the MPS daemon (if the config asks for one) is
   started and the CDI spec written; the checkpoint says `PrepareCompleted`.

Unprepare stops the MPS daemon, deletes the CDI spec and forgets the claim; a claim the
plugin does not know is already unprepared. One claim at a time: an asyncio lock in the
process and a file lock beside the checkpoint against a second plugin process (a rolling
update), as upstream takes a node-wide lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock, Timeout

from kubegpu.catalog import nvidia
from kubegpu.cdi.build import (
    ClaimDevice,
    ConfigEdits,
    claim_cdi_id,
    claim_file_name,
    claim_spec,
    common_edits,
    temporary_path,
    write_spec,
)
from kubegpu.cdi.driver import DEFAULT_HOOK_PATH, driver_edits, find_driver_files
from kubegpu.cdi.nodes import MIG_MINORS, gpu_node, mig_cap_nodes, read_mig_minors
from kubegpu.cdi.spec import ContainerEdits
from kubegpu.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    ClaimRecord,
    PreparedDevice,
    State,
)
from kubegpu.dra.claims import AllocatedDevice, ClaimError, ClaimPlan, ClaimRef, plan_claim
from kubegpu.dra.config import FeatureGates
from kubegpu.dra.dynamic import MigDeviceError, MigWriter
from kubegpu.dra.slices import DraDevice
from kubegpu.node.mps import MpsBackend
from kubegpu.sharing.mps import MpsLimit, MpsResource

Json = dict[str, Any]
#: Reads a claim (namespace, name) from the API server; None when it does not exist.
ClaimReader = Callable[[str, str], Awaitable[Json | None]]

log = logging.getLogger(__name__)
T = TypeVar("T")

LOCK_TIMEOUT_S = 10.0
DRIVER_CACHE_S = 300.0  # how long the driver's files found are used before a new look


@dataclass(frozen=True)
class Outcome:
    """The answer for one claim: its devices, or an error (then devices are empty)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class PrepareSettings:
    node_name: str
    plugin_dir: Path  # <plugins>/gpu.nvidia.com: checkpoint, MPS directories
    cdi_root: Path
    gates: FeatureGates = field(default_factory=FeatureGates)
    driver_root: Path = Path("/")  # the driver root on the host (MIG capability table)
    # where this process sees the driver's files (their host paths: under driver_root)
    container_driver_root: Path = Path("/driver-root")
    hook_path: str = DEFAULT_HOOK_PATH  # the nvidia-cdi-hook binary the specs name
    dev_root: str = "/"
    control_devices: tuple[str, ...] = ()


class Preparer:
    def __init__(
        self,
        settings: PrepareSettings,
        read_claim: ClaimReader,
        published: Callable[[], Mapping[str, DraDevice]],
        mps: MpsBackend,
        mig: MigWriter | None = None,
    ) -> None:
        self.settings = settings
        self.mig = mig
        self.read_claim = read_claim
        self.published = published
        self.mps = mps
        self.checkpoint = CheckpointFile(settings.plugin_dir / "checkpoint.json")
        self._lock = asyncio.Lock()
        self._file_lock = FileLock(str(settings.plugin_dir / "checkpoint.lock"))
        self._driver: tuple[float, ContainerEdits] | None = None  # (when found, edits)

    # -- the two calls --------------------------------------------------------------------
    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        return {ref.uid: await self._prepare_one(ref) for ref in refs}

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        out = {}
        for ref in refs:
            try:
                async with self._lock:
                    await asyncio.to_thread(self._under_file_lock, self._unprepare, ref.uid)
                out[ref.uid] = Outcome()
            except (ClaimError, MigDeviceError, OSError) as exc:
                log.warning("unprepare of claim %s failed: %s", ref, exc)
                out[ref.uid] = Outcome(error=f"claim {ref}: {exc}")
        return out

    # -- prepare --------------------------------------------------------------------------
    async def _prepare_one(self, ref: ClaimRef) -> Outcome:
        try:
            # a retried call for a finished claim is answered from the checkpoint without
            # the API server; the read needs no lock (the file is replaced atomically) and
            # anything else is decided again under the lock below
            now = self.checkpoint.peek()
            done = self._finished(now, ref.uid) if now is not None else None
            if done is not None:
                return Outcome(devices=done)
            claim = await self._read(ref)
            async with self._lock:
                devices = await asyncio.to_thread(
                    self._under_file_lock, self._prepare_locked, claim, ref
                )
            return Outcome(devices=devices)
        except (ClaimError, MigDeviceError) as exc:
            log.warning("%s", exc)
            return Outcome(error=str(exc))
        except Exception as exc:
            log.exception("prepare of claim %s failed", ref)
            return Outcome(error=f"claim {ref}: {type(exc).__name__}: {exc}")

    async def _read(self, ref: ClaimRef) -> Json:
        try:
            claim = await self.read_claim(ref.namespace, ref.name)
        except Exception as exc:
            raise ClaimError(f"claim {ref}: cannot read it from the API server: {exc}") from None
        if claim is None:
            raise ClaimError(f"claim {ref}: not found in the API server")
        return claim

    def _under_file_lock(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker thread, holding the file lock (NVML and MIG lock waits
        must not stall the event loop that serves the kubelet)."""
        with self._locked():
            return fn(*args)

    def _prepare_locked(self, claim: Json, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        cp = self.checkpoint.load()
        done = self._finished(cp, ref.uid)
        if done is not None:
            return done
        if ref.uid in cp.claims:  # half prepared, or its CDI spec is gone
            self._rollback(cp.claims[ref.uid])
            cp = self.checkpoint.load()
        plan = plan_claim(
            claim, ref, self.settings.node_name, self.published(), self.settings.gates
        )
        return self._apply(plan, cp)

    def created_placements(self) -> set[tuple[int, int, int]]:
        """The dynamic MIG devices the plugin created (or is creating) for claims."""
        # read from the publishing thread, outside the lock: a look that repairs nothing
        return {
            d.dynamic_mig
            for record in (self.checkpoint.peek() or Checkpoint()).claims.values()
            for d in record.devices
            if d.dynamic_mig is not None
        }

    def _finished(self, cp: Checkpoint, uid: str) -> tuple[PreparedDevice, ...] | None:
        """The stored devices of a claim prepared to the end whose CDI spec is still there
        (specs under /var/run do not survive a reboot; the checkpoint does)."""
        record = cp.claims.get(uid)
        if record is None or not record.completed or not self._spec_path(uid).exists():
            return None
        return record.devices

    def _rollback(self, record: ClaimRecord) -> None:
        if record.completed:
            log.warning(
                "claim %s/%s is in the checkpoint but its CDI spec is gone (a reboot?): "
                "preparing it again",
                record.namespace,
                record.name,
            )
        else:
            log.warning(
                "claim %s/%s was left half prepared (the plugin stopped while preparing it): "
                "rolling it back",
                record.namespace,
                record.name,
            )
        self._unprepare(record.uid)

    def _apply(self, plan: ClaimPlan, cp: Checkpoint) -> tuple[PreparedDevice, ...]:
        ref, s = plan.ref, self.settings
        if any(d.device.dynamic for d in plan.devices) and self.mig is None:
            raise ClaimError(f"claim {ref}: dynamic MIG devices need the DynamicMIG gate")
        devices = tuple(
            PreparedDevice(
                request_names=(d.request,),
                pool=s.node_name,
                device=d.device.name,
                cdi_ids=(claim_cdi_id(ref.uid, d.device.name),),
                uuid=d.device.uuid,
                dynamic_mig=(d.device.gpu_index, d.device.gi_profile_id, d.device.start)
                if d.device.dynamic
                else None,
            )
            for d in plan.devices
        )
        mps_dir = self._mps_directory(ref.uid) if plan.mps else None
        record = ClaimRecord(
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            state=State.PREPARE_STARTED,
            devices=devices,
            mps_directory=str(mps_dir or ""),
        )
        cp = cp.with_claim(record)
        self.checkpoint.save(cp)
        created: list[tuple[int, int, int]] = []
        try:
            spec_devices, devices = self._create_migs(plan, devices, created)
            configs = _config_edits(plan)
            if plan.mps is not None and mps_dir is not None:
                pipe = mps_dir / "pipe"
                for sub in (pipe, mps_dir / "log"):
                    sub.mkdir(parents=True, exist_ok=True)
                self.mps.start(plan.mps, mps_dir)
                # only the MPS devices' requests: a container given another device of the
                # claim is no MPS client
                configs.append(
                    ConfigEdits(
                        frozenset(a.request for a in plan.devices if a.mps),
                        {nvidia.CUDA_MPS_PIPE_DIRECTORY: str(pipe)},
                        (str(pipe),),
                    )
                )
            driver = self._driver_edits()
            spec = claim_spec(
                ref.uid,
                spec_devices,
                configs,
                common_edits(s.control_devices, s.dev_root, driver, dict(plan.env)),
                s.dev_root,
            )
            write_spec(s.cdi_root, claim_file_name(ref.uid), spec)
        except Exception:
            # destroy only what this call created: a placement that could not be created
            # may hold somebody else's MIG device
            if self.mig is not None:
                for placement in created:
                    self.mig.destroy(*placement)
            self._unprepare(ref.uid, migs=False)
            raise
        self.checkpoint.save(
            cp.with_claim(
                ClaimRecord(
                    uid=record.uid,
                    namespace=record.namespace,
                    name=record.name,
                    state=State.PREPARE_COMPLETED,
                    devices=devices,
                    mps_directory=record.mps_directory,
                )
            )
        )
        log.info("prepared claim %s: %s", ref, ", ".join(f"{d.device}" for d in devices))
        return devices

    def _create_migs(
        self,
        plan: ClaimPlan,
        devices: tuple[PreparedDevice, ...],
        created: list[tuple[int, int, int]],
    ) -> tuple[list[ClaimDevice], tuple[PreparedDevice, ...]]:
        """Create the claim's dynamic MIG devices (each one created is added to `created`);
        the CDI devices and the prepared devices with the new UUIDs."""
        spec: list[ClaimDevice] = []
        out: list[PreparedDevice] = []
        for a, p in zip(plan.devices, devices, strict=True):
            d = a.device
            gi, ci, prepared = d.gpu_instance_id, d.compute_instance_id, p
            if d.dynamic and self.mig is not None:
                uuid, gi, ci = self.mig.create(d.gpu_index, d.gi_profile_id, d.start)
                created.append((d.gpu_index, d.gi_profile_id, d.start))
                prepared = replace(p, uuid=uuid)
            spec.append(ClaimDevice(d.name, a.request, prepared.uuid, self._nodes(d, gi, ci)))
            out.append(prepared)
        return spec, tuple(out)

    def _nodes(self, device: DraDevice, gi: int, ci: int) -> tuple[str, ...]:
        gpu = gpu_node(device.gpu_minor)
        if device.kind != "mig":
            return (gpu,)
        table = read_mig_minors(self.settings.driver_root / MIG_MINORS)
        return (gpu, *mig_cap_nodes(table, device.gpu_minor, gi, ci))

    def _driver_edits(self) -> ContainerEdits:
        """The driver's files and hooks, looked up again after DRIVER_CACHE_S (as upstream
        caches its common edits), or at once while none was found (a containerized driver
        not mounted yet)."""
        now = time.monotonic()
        if self._driver is None or not self._driver[1] or now - self._driver[0] > DRIVER_CACHE_S:
            s = self.settings
            files = find_driver_files(s.container_driver_root)
            self._driver = (now, driver_edits(files, str(s.driver_root), s.hook_path))
        return self._driver[1]

    def _mps_directory(self, uid: str) -> Path:
        return self.settings.plugin_dir / "mps" / uid

    def _spec_path(self, uid: str) -> Path:
        return self.settings.cdi_root / claim_file_name(uid)

    def _spec_tmp_path(self, uid: str) -> Path:
        return temporary_path(self._spec_path(uid))

    # -- unprepare ------------------------------------------------------------------------
    def _unprepare(self, uid: str, migs: bool = True) -> None:
        """Undo whatever part of the claim exists; forget it last. A claim left half
        prepared by a plugin that died may have created its dynamic MIG devices or not:
        whatever sits at their placements goes (`migs`)."""
        cp = self.checkpoint.load()
        record = cp.claims.get(uid)
        if record is not None and record.mps_directory:
            directory = Path(record.mps_directory)
            # the backend stops by UUID; the limits themselves no longer matter
            limits = tuple(MpsLimit(-1, d.uuid, 1, 0, 0) for d in record.devices)
            self.mps.stop(MpsResource(f"claim {record.namespace}/{record.name}", limits), directory)
            shutil.rmtree(directory, ignore_errors=True)
        for d in record.devices if record is not None else ():
            if migs and d.dynamic_mig is not None and self.mig is not None:
                self.mig.destroy(*d.dynamic_mig)
        self._spec_path(uid).unlink(missing_ok=True)
        self._spec_tmp_path(uid).unlink(missing_ok=True)  # a write the plugin died in
        if record is not None:
            self.checkpoint.save(cp.without(uid))
            log.info("unprepared claim %s/%s", record.namespace, record.name)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            with self._file_lock.acquire(timeout=LOCK_TIMEOUT_S):
                yield
        except Timeout:
            raise ClaimError(
                f"another process holds {self._file_lock.lock_file} for over "
                f"{LOCK_TIMEOUT_S:.0f}s (a second DRA plugin on this node?)"
            ) from None


def _config_edits(plan: ClaimPlan) -> list[ConfigEdits]:
    """Each config's own edits (the time-slice interval) with the requests it applies to."""
    groups: dict[int, list[AllocatedDevice]] = {}
    for a in plan.devices:
        groups.setdefault(id(a.config), []).append(a)
    return [
        ConfigEdits(frozenset(a.request for a in group), dict(group[0].env))
        for group in groups.values()
        if group[0].env
    ]
