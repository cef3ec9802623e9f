"""What the plugin has prepared, on disk, so a restart neither loses nor repeats a claim.

One JSON file: `{"version": 1, "claims": {"<uid>": {"state": "PrepareStarted" |
"PrepareCompleted", "namespace", "name", "devices": [...], ...}}}`. A claim is marked
`PrepareStarted` before anything is changed on the node and `PrepareCompleted` after, so a
plugin killed in between finds the claim half done and rolls it back before preparing it
again (reference/dcgm-dra.md section 2.8).

Readable by the next version and by the previous one: fields this version does not know
are kept as they are, at every level, and written back; a newer `version` is read as far
as its known fields go. A file that is not JSON at all is moved aside (`.corrupt`), never
silently overwritten, and the plugin starts with nothing prepared: the kubelet asks again
for every claim it needs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

Json = dict[str, Any]

log = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "checkpoint.json"


class State(Enum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim, as NodePrepareResources returns it."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    uuid: str = ""
    # dynamic MIG: (GPU index, GI profile id, placement start) of the MIG device created
    # for the claim; recorded before it is created, so a rollback finds it after any crash
    dynamic_mig: tuple[int, int, int] | None = None
    extra: Json = field(default_factory=dict, compare=False)

    def to_json(self) -> Json:
        out = {
            **self.extra,
            "requestNames": list(self.request_names),
            "poolName": self.pool,
            "deviceName": self.device,
            "cdiDeviceIDs": list(self.cdi_ids),
            "uuid": self.uuid,
        }
        if self.dynamic_mig is not None:
            gpu, profile, start = self.dynamic_mig
            out["dynamicMig"] = {"gpu": gpu, "profileId": profile, "start": start}
        return out

    @classmethod
    def from_json(cls, data: Json) -> PreparedDevice:
        known = {"requestNames", "poolName", "deviceName", "cdiDeviceIDs", "uuid", "dynamicMig"}
        dyn = data.get("dynamicMig")
        dynamic_mig = None
        if isinstance(dyn, dict):
            try:
                dynamic_mig = (int(dyn["gpu"]), int(dyn["profileId"]), int(dyn["start"]))
            except (KeyError, TypeError, ValueError):
                log.warning("checkpoint: unreadable dynamicMig %r, ignored", dyn)
        return cls(
            dynamic_mig=dynamic_mig,
            request_names=tuple(str(r) for r in data.get("requestNames") or ()),
            pool=str(data.get("poolName", "")),
            device=str(data.get("deviceName", "")),
            cdi_ids=tuple(str(c) for c in data.get("cdiDeviceIDs") or ()),
            uuid=str(data.get("uuid", "")),
            extra={k: v for k, v in data.items() if k not in known},
        )


@dataclass(frozen=True)
class ClaimRecord:
    """One claim the plugin started or finished preparing."""

    uid: str
    namespace: str
    name: str
    state: State
    devices: tuple[PreparedDevice, ...] = ()
    mps_directory: str = ""  # the claim's MPS daemon, when one was started
    extra: Json = field(default_factory=dict, compare=False)

    @property
    def completed(self) -> bool:
        return self.state is State.PREPARE_COMPLETED

    def to_json(self) -> Json:
        out: Json = {
            **self.extra,
            "state": self.state.value,
            "namespace": self.namespace,
            "name": self.name,
            "devices": [d.to_json() for d in self.devices],
        }
        if self.mps_directory:
            out["mpsDirectory"] = self.mps_directory
        return out

    @classmethod
    def from_json(cls, uid: str, data: Json) -> ClaimRecord:
        known = {"state", "namespace", "name", "devices", "mpsDirectory"}
        try:
            state = State(data.get("state"))
        except ValueError:
            # a state this version does not know: treat it as unfinished, so it is rolled
            # back and prepared again rather than trusted
            state = State.PREPARE_STARTED
        return cls(
            uid=uid,
            namespace=str(data.get("namespace", "")),
            name=str(data.get("name", "")),
            state=state,
            devices=tuple(
                PreparedDevice.from_json(d)
                for d in data.get("devices") or ()
                if isinstance(d, dict)
            ),
            mps_directory=str(data.get("mpsDirectory", "")),
            extra={k: v for k, v in data.items() if k not in known},
        )


@dataclass(frozen=True)
class Checkpoint:
    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    version: int = VERSION
    extra: Json = field(default_factory=dict, compare=False)

    def with_claim(self, record: ClaimRecord) -> Checkpoint:
        return replace(self, claims={**self.claims, record.uid: record})

    def without(self, uid: str) -> Checkpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})

    def to_json(self) -> Json:
        return {
            **self.extra,
            "version": max(self.version, VERSION),
            "claims": {uid: c.to_json() for uid, c in sorted(self.claims.items())},
        }

    @classmethod
    def from_json(cls, data: Json) -> Checkpoint:
        version = data.get("version")
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"field version, value {version!r}: expected a number from 1")
        if version > VERSION:
            log.warning(
                "checkpoint version %d is newer than this plugin's (%d): reading the fields "
                "it knows",
                version,
                VERSION,
            )
        raw = data.get("claims") or {}
        if not isinstance(raw, dict):
            raise ValueError(f"field claims: expected an object, got {type(raw).__name__}")
        return cls(
            claims={
                str(uid): ClaimRecord.from_json(str(uid), c)
                for uid, c in raw.items()
                if isinstance(c, dict)
            },
            version=version,
            extra={k: v for k, v in data.items() if k not in ("version", "claims")},
        )


class CheckpointFile:
    """The checkpoint at `path`, read and written whole, atomically (a temporary file
    renamed over it), so a reader — the next plugin process after a kill -9 — sees the old
    or the new checkpoint, never a mix.

    Not fsynced: that would guard only against an OS crash or power loss, and what the
    checkpoint describes does not survive those either (CDI specs live under /var/run, MIG
    devices and MPS daemons go with the GPU reset of a reboot), while two fsyncs were most
    of a prepare's time and all of its tail. A checkpoint left empty or torn by a crash is
    moved aside (see `load`) and a record whose CDI spec is gone is prepared again
    (`kubegpu.dra.prepare`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Checkpoint:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return Checkpoint()
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError(f"expected an object, got {type(data).__name__}")
            return Checkpoint.from_json(data)
        except ValueError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            log.error(
                "checkpoint %s is unreadable (%s): moved to %s, starting with no prepared "
                "claims (the kubelet prepares what it needs again)",
                self.path,
                exc,
                aside.name,
            )
            return Checkpoint()

    def peek(self) -> Checkpoint | None:
        """The checkpoint as it is now, repairing nothing (None when there is none or it is
        unreadable): a look from outside the lock, which must never move the file aside."""
        try:
            data = json.loads(self.path.read_text())
            return Checkpoint.from_json(data) if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None

    def save(self, checkpoint: Checkpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        # one write of the whole text (json.dump would write it piece by piece)
        tmp.write_text(json.dumps(checkpoint.to_json(), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)
