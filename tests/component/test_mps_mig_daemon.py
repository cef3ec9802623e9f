"""The MPS control daemon with `sharing.mps.migInstances`: one daemon per MIG instance, in its
own directory with the instance's limits, the resource served once all of them run, and a
config change stopping exactly the daemons no longer wanted."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kubegpu.device_plugin import MpsControlDaemon, MpsOptions, RecordingMps
from kubegpu.mig.config import MigConfigEntry
from kubegpu.mig.parted import apply_config
from kubegpu.node.mps import LIMITS_FILE
from kubegpu.nvml.sim import SimNvml

BIG = "nvidia.com/mig-3g.71gb.shared"
SMALL = "nvidia.com/mig-1g.18gb.shared"


def config(root: Path, *entries: str) -> str:
    body = "".join(f"    - {e}\n" for e in entries)
    return (
        f"flags: {{migStrategy: mixed, mpsRoot: {root}}}\nsharing:\n  mps:\n"
        f"    migInstances: true\n    renameByDefault: true\n    resources:\n{body}"
    )


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.fixture
def short_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_one_daemon_per_instance_and_a_change_stops_only_the_unwanted(
    short_root: Path,
) -> None:
    nvml = SimNvml.create(short_root / "gpus.json", "h200-nvl:1")
    entry = MigConfigEntry.model_validate(
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 1, "1g.18gb": 2}}
    )
    apply_config(nvml, "layout", [entry])
    migs = nvml.mig_devices(0)
    big = next(m for m in migs if m.profile == "3g.71gb")
    small = [m for m in migs if m.profile == "1g.18gb"]
    root = short_root / "mps"
    file = short_root / "config.yaml"
    both = ("{name: mig-3g.71gb, replicas: 2}", "{name: mig-1g.18gb, replicas: 4}")
    file.write_text(config(root, *both))
    daemon = MpsControlDaemon(
        nvml, MpsOptions(mps_root=root, config_file=file, poll_s=0.05), RecordingMps()
    )
    task = asyncio.create_task(daemon.run())
    try:
        await until((root / ".ready").exists)
        assert (root / BIG / ".started").exists() and (root / SMALL / ".started").exists()
        assert sorted(daemon.running) == sorted(
            [f"{BIG}/{big.uuid}", *(f"{SMALL}/{m.uuid}" for m in small)]
        )
        for m in small:
            d = root / SMALL / m.uuid
            assert (d / "pipe").is_dir() and (d / "log").is_dir()
            record = json.loads((d / LIMITS_FILE).read_text())
            assert record["pipeDirectory"] == str(d / "pipe")
            assert record["commands"] == [
                f"set_default_device_pinned_mem_limit 0 {m.memory_mib // 4}M",
                "set_default_active_thread_percentage 25",
            ]
        # the 3g.71gb instance is no longer shared: its daemon stops, the others keep running
        file.write_text(config(root, both[1]))
        await until(lambda: not (root / BIG / big.uuid / LIMITS_FILE).exists())
        assert not (root / BIG / ".started").exists()
        assert (root / SMALL / ".started").exists()
        assert all((root / SMALL / m.uuid / LIMITS_FILE).exists() for m in small)
    finally:
        daemon.stop()
        await asyncio.wait_for(task, 10)
    assert not any(root.glob(f"**/{LIMITS_FILE}"))  # every daemon stopped on the way out
