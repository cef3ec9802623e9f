"""One MIG writer at a time per node: `mig apply` processes and the node-wide MIG lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.mig.lock import MigLock, MigLockError, lock_path, read_holder
from kubegpu.nvml import open_nvml

runner = CliRunner()
KUBEGPU = [sys.executable, "-m", "kubegpu"]

ONE_G = """version: v1
mig-configs:
  small:
    - devices: all
      mig-enabled: true
      mig-devices: {1g.18gb: 7}
  big:
    - devices: all
      mig-enabled: true
      mig-devices: {3g.71gb: 2}
"""


def _node(tmp_path: Path, spec: str = "h200:4") -> tuple[str, Path]:
    state = tmp_path / "node.json"
    open_nvml(f"sim:{state}", spec)
    return f"sim:{state}", lock_path(open_nvml(f"sim:{state}"))


def _waits_on(pid: int, lock: Path) -> bool:
    """Whether process `pid` has the lock file open (it does so only to take the lock)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == str(lock.resolve()) for fd in fds.iterdir())
    except OSError:
        return False


def _until(condition, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_two_concurrent_applies_take_turns_and_the_last_one_wins(tmp_path: Path) -> None:
    nvml, lock = _node(tmp_path)
    configs = tmp_path / "c.yaml"
    configs.write_text(ONE_G)
    env = {**os.environ, "KUBEGPU_MIG_LOCK_TIMEOUT": "60"}

    def start(name: str) -> subprocess.Popen[str]:
        argv = [*KUBEGPU, "mig", "apply", "-f", str(configs), "-c", name, "--nvml", nvml]
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )

    # hold the lock while both start, so that both are certainly waiting at once
    gate = MigLock(lock, "test gate")
    gate.acquire()
    procs = {"small": start("small"), "big": start("big")}
    for p in procs.values():
        _until(lambda p=p: _waits_on(p.pid, lock))
    gate.release()
    order: list[int] = []
    while any(p.poll() is None for p in procs.values()):
        holder = read_holder(lock)
        if holder is not None and holder.pid != os.getpid() and holder.pid not in order:
            order.append(holder.pid)
        time.sleep(0.002)
    outs = {name: p.communicate() for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, outs[name][1]
        assert f"config {name!r} applied\n" in outs[name][0]
        assert "(nothing to change)" not in outs[name][0]
    assert sorted(order) == sorted(p.pid for p in procs.values()), "each held the lock in turn"
    last = next(name for name, p in procs.items() if p.pid == order[-1])
    other = "big" if last == "small" else "small"
    args = ["mig", "assert", "-f", str(configs), "--nvml", nvml]
    assert runner.invoke(app, [*args, "-c", last]).exit_code == 0
    assert runner.invoke(app, [*args, "-c", other]).exit_code == 1


def test_a_held_lock_times_out_naming_the_holder_and_changes_nothing(tmp_path: Path) -> None:
    nvml, lock = _node(tmp_path, "h200:1")
    configs = tmp_path / "c.yaml"
    configs.write_text(ONE_G)
    with MigLock(lock, "mig-manager"):
        started = time.monotonic()
        result = runner.invoke(
            app,
            [
                "mig",
                "apply",
                "-f",
                str(configs),
                "-c",
                "small",
                "--nvml",
                nvml,
                "--lock-timeout",
                "0.3",
            ],
        )
        waited = time.monotonic() - started
    assert result.exit_code == 1
    err = result.stderr
    assert f"another MIG writer holds this node's MIG lock {lock}" in err
    assert f"mig-manager (pid {os.getpid()} on " in err
    assert " since 20" in err
    assert "gave up after waiting 0.3s" in err
    assert "nothing was changed" in err
    assert waited >= 0.3
    assert "MIG disabled" in runner.invoke(app, ["mig", "show", "--nvml", nvml]).stdout


def test_the_lock_file_says_who_holds_it_and_is_cleared_on_release(tmp_path: Path) -> None:
    _, lock = _node(tmp_path, "h200:1")
    with MigLock(lock, "kubegpu mig apply"):
        holder = read_holder(lock)
        assert holder is not None
        assert (holder.pid, holder.component) == (os.getpid(), "kubegpu mig apply")
        assert abs(holder.since - time.time()) < 60
    assert read_holder(lock) is None


def test_a_dead_holder_does_not_block(tmp_path: Path) -> None:
    nvml, lock = _node(tmp_path, "h200:1")
    configs = tmp_path / "c.yaml"
    configs.write_text(ONE_G)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from kubegpu.mig.lock import MigLock\n"
        "MigLock(Path(sys.argv[1]), 'doomed').acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(lock)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    stale = read_holder(lock)
    assert stale is not None
    assert stale.component == "doomed"  # the record stays behind; the kernel's lock does not
    started = time.monotonic()
    result = runner.invoke(
        app,
        ["mig", "apply", "-f", str(configs), "-c", "small", "--nvml", nvml, "--lock-timeout", "5"],
    )
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started < 5


def test_a_stale_record_of_a_dead_pid_does_not_block(tmp_path: Path) -> None:
    nvml, lock = _node(tmp_path, "h200:1")
    configs = tmp_path / "c.yaml"
    configs.write_text(ONE_G)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(
        json.dumps({"pid": dead.pid, "component": "x", "command": "x", "host": "h", "since": 0.0})
    )
    args = ["mig", "apply", "-f", str(configs), "-c", "big", "--nvml", nvml, "--lock-timeout", "1"]
    assert runner.invoke(app, args).exit_code == 0


def test_nested_holds_by_one_owner_only_count(tmp_path: Path) -> None:
    _, lock = _node(tmp_path, "h200:1")
    mine = MigLock(lock, "mig-manager", timeout_s=0.1)
    other = MigLock(lock, "someone else", timeout_s=0.1)
    with mine, mine:
        assert mine.held
    with other:  # released completely
        assert other.held
    with pytest.raises(RuntimeError, match="released more often than acquired"):
        mine.release()


def test_bad_lock_timeouts_are_refused(tmp_path: Path) -> None:
    nvml, _ = _node(tmp_path, "h200:1")
    configs = tmp_path / "c.yaml"
    configs.write_text(ONE_G)
    args = ["mig", "apply", "-f", str(configs), "-c", "big", "--nvml", nvml]
    result = runner.invoke(app, [*args, "--lock-timeout", "-1"])
    assert result.exit_code == 1
    assert "--lock-timeout -1.0: expected 0 to 86400 seconds" in result.stderr
    result = runner.invoke(app, args, env={"KUBEGPU_MIG_LOCK_TIMEOUT": "soon"})
    assert result.exit_code != 0


class _RealHardware:
    """What lock_path asks of a backend on real hardware: no sim state file."""

    def state_file(self) -> None:
        return None


def test_the_lock_lives_beside_a_sim_node_or_in_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, lock = _node(tmp_path, "h200:1")
    assert lock == tmp_path / "node.json.mig.lock"
    monkeypatch.delenv("KUBEGPU_RUN_DIR", raising=False)
    assert lock_path(_RealHardware()) == Path("/run/kubegpu/mig.lock")  # type: ignore[arg-type]
    monkeypatch.setenv("KUBEGPU_RUN_DIR", str(tmp_path / "run"))
    assert lock_path(_RealHardware()) == tmp_path / "run" / "mig.lock"  # type: ignore[arg-type]


def test_an_unusable_lock_directory_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(
        MigLockError, match=r"cannot open the node's MIG lock .*set KUBEGPU_RUN_DIR"
    ):
        MigLock(blocker / "mig.lock", "x").acquire()


def test_a_waiter_that_is_told_to_stop_gives_up_at_once(tmp_path: Path) -> None:
    _, lock = _node(tmp_path, "h200:1")
    stop = threading.Event()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            MigLock(lock, "mig-manager", timeout_s=60).acquire(stop)
        except MigLockError as exc:
            outcome.append(exc)

    with MigLock(lock, "kubegpu mig apply"):
        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.2)
        stop.set()
        waiter.join(5)
    assert not waiter.is_alive()
    assert "stopped waiting for the MIG lock" in str(outcome[0])
