"""The prepare checkpoint: round trips, keeps what a newer version wrote, reads what an
older or newer one wrote, and never overwrites a file it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

from kubegpu.dra.checkpoint import (
    Checkpoint,
    CheckpointFile,
    ClaimRecord,
    PreparedDevice,
    State,
)

DEVICE = PreparedDevice(
    ("gpu",), "node-a", "gpu-0", ("k8s.gpu.nvidia.com/claim=u1-gpu-0",), "GPU-a"
)


def _record(uid: str = "u1", state: State = State.PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid, "ml", "c", state, (DEVICE,), mps_directory="/m/u1")


def test_round_trip(tmp_path: Path) -> None:
    f = CheckpointFile(tmp_path / "checkpoint.json")
    assert f.load() == Checkpoint()
    cp = Checkpoint().with_claim(_record()).with_claim(_record("u2", State.PREPARE_STARTED))
    f.save(cp)
    assert f.load() == cp
    assert f.load().claims["u2"].state is State.PREPARE_STARTED
    assert json.loads(f.path.read_text())["version"] == 1
    f.save(f.load().without("u1"))
    assert set(f.load().claims) == {"u2"}


def test_the_file_format(tmp_path: Path) -> None:
    f = CheckpointFile(tmp_path / "checkpoint.json")
    f.save(Checkpoint().with_claim(_record()))
    assert json.loads(f.path.read_text()) == {
        "version": 1,
        "claims": {
            "u1": {
                "state": "PrepareCompleted",
                "namespace": "ml",
                "name": "c",
                "mpsDirectory": "/m/u1",
                "devices": [
                    {
                        "requestNames": ["gpu"],
                        "poolName": "node-a",
                        "deviceName": "gpu-0",
                        "cdiDeviceIDs": ["k8s.gpu.nvidia.com/claim=u1-gpu-0"],
                        "uuid": "GPU-a",
                    }
                ],
            }
        },
    }


def test_unknown_fields_are_read_past_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(
        json.dumps(
            {
                "version": 2,
                "bootID": "b-1",
                "claims": {
                    "u1": {
                        "state": "PrepareCompleted",
                        "namespace": "ml",
                        "name": "c",
                        "healthAt": "2026-01-01",
                        "devices": [{"deviceName": "gpu-0", "poolName": "node-a", "shareID": "s"}],
                    }
                },
            }
        )
    )
    f = CheckpointFile(path)
    cp = f.load()
    record = cp.claims["u1"]
    assert record.completed
    assert record.devices[0].device == "gpu-0"
    f.save(cp.with_claim(_record("u2")))
    data = json.loads(path.read_text())
    assert data["version"] == 2
    assert data["bootID"] == "b-1"
    assert data["claims"]["u1"]["healthAt"] == "2026-01-01"
    assert data["claims"]["u1"]["devices"][0]["shareID"] == "s"


def test_a_state_this_version_does_not_know_counts_as_unfinished(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"version": 1, "claims": {"u1": {"state": "PrepareVerified"}}}))
    assert not CheckpointFile(path).load().claims["u1"].completed


def test_an_unreadable_file_is_moved_aside_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text('{"version": 1, "claims": {')
    f = CheckpointFile(path)
    assert f.load() == Checkpoint()
    (aside,) = tmp_path.glob("checkpoint.json.corrupt-*")
    assert aside.read_text() == '{"version": 1, "claims": {'
    assert not path.exists()


def test_a_file_without_a_version_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"claims": {}}))
    assert CheckpointFile(path).load() == Checkpoint()
    assert list(tmp_path.glob("checkpoint.json.corrupt-*"))


def test_a_look_from_outside_the_lock_repairs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    f = CheckpointFile(path)
    assert f.peek() is None  # no file yet
    path.write_text('{"version": 1, "claims": {')
    assert f.peek() is None
    assert path.read_text() == '{"version": 1, "claims": {'  # left for the locked reader
    assert list(tmp_path.glob("checkpoint.json.corrupt-*")) == []
    path.write_text(json.dumps({"version": 1, "claims": {"u1": {"state": "PrepareCompleted"}}}))
    peeked = f.peek()
    assert peeked is not None and peeked.claims["u1"].completed
