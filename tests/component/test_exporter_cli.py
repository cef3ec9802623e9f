"""`kubegpu exporter` as a process: DCGM exporter's flags and environment, clean exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubegpu.nvml.sim import SimControls

KUBEGPU = [sys.executable, "-m", "kubegpu"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fetch(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        body: bytes = response.read()
        return body


def wait_healthy(proc: subprocess.Popen[str], port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exporter exited early:\n{proc.communicate()[1]}")
        try:
            if fetch(port, "/health") == b"OK":
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("exporter never became healthy")


@dataclass
class Served:
    port: int
    returncode: int | None = None
    stderr: str = ""


@contextmanager
def serving(state: Path, spec: str, env: dict[str, str]) -> Iterator[Served]:
    """`kubegpu exporter` on the sim node `spec` (state file `state`) at a free port, with
    `env` on top of this process's; healthy on entry, stopped with SIGTERM on leaving, when
    its exit code and standard error are kept."""
    served = Served(free_port())
    proc = subprocess.Popen(
        [*KUBEGPU, "exporter", "--nvml", f"sim:{state}", "--sim-node", spec],
        env={**os.environ, "DCGM_EXPORTER_LISTEN": f"127.0.0.1:{served.port}", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(proc, served.port)
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        _, served.stderr = proc.communicate(timeout=15)
        served.returncode = proc.returncode


def test_serves_the_sim_node_with_dcgm_flags_and_env_and_exits_on_sigterm(
    tmp_path: Path,
) -> None:
    state = tmp_path / "gpus.json"
    env = {"DCGM_EXPORTER_INTERVAL": "0", "NODE_NAME": "gpu-node-7"}
    with serving(state, "l4:2;seed=cli", env) as served:
        SimControls(state).start_process(1, pid=9, used_memory_mib=300, sm_percent=20)
        text = fetch(served.port, "/metrics").decode()
    stderr = served.stderr
    assert served.returncode == 0, stderr
    util = {
        s.labels["gpu"]: (s.value, s.labels["Hostname"])
        for f in text_string_to_metric_families(text)
        if f.name == "DCGM_FI_DEV_GPU_UTIL"
        for s in f.samples
    }
    assert util == {"0": (0, "gpu-node-7"), "1": (20, "gpu-node-7")}
    assert "exporter listening on 127.0.0.1:" in stderr


def test_a_counters_file_with_an_unknown_field_is_refused_with_its_line(tmp_path: Path) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(
        "# ok so far\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
        "DCGM_FI_DEV_GPU_TEMPERATURE, gauge, a typo\n"
        "DCGM_FI_DEV_POWER_USAGE, gauge\n"
    )
    result = subprocess.run(
        [*KUBEGPU, "exporter", "-f", str(counters), "--nvml", f"sim:{tmp_path / 'n.json'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert f"{counters}:3: unknown DCGM field 'DCGM_FI_DEV_GPU_TEMPERATURE'" in result.stderr
    assert f"{counters}:4: expected 3 comma-separated fields" in result.stderr
    assert not (tmp_path / "n.json").exists()  # refused before touching anything


def test_a_bad_listen_address_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [*KUBEGPU, "exporter", "-a", "localhost", "--nvml", f"sim:{tmp_path / 'n.json'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "listen address 'localhost'" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["-c", "100000000000"], {}, "--collect-interval / DCGM_EXPORTER_INTERVAL 1e+11: must be"),
        ([], {"DCGM_EXPORTER_INTERVAL": "86400001"}, "must be 0 to 86400000 ms"),
        ([], {"NVIDIA_RESOURCE_NAMES": ",".join(["a/b"] * 65)}, "65 names; at most 64"),
        ([], {"NVIDIA_RESOURCE_NAMES": "nvidia.com/" + "x" * 300}, "longer than 253 characters"),
    ],
    ids=["interval-flag", "interval-env", "too-many-names", "long-name"],
)
def test_flags_over_their_bounds_are_refused_before_any_gpu_is_read(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    result = subprocess.run(
        [*KUBEGPU, "exporter", *args, "--nvml", f"sim:{tmp_path / 'n.json'}", "--sim-node", "l4:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "n.json").exists()


def test_pod_label_and_uid_env_the_operator_sets_are_warned_about_not_dropped(
    tmp_path: Path,
) -> None:
    """ClusterPolicy dcgmExporter.enablePodLabels / enablePodUID reach the exporter as DCGM's
    env vars; kubegpu adds neither label, and says so once at start."""
    env = {
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true",
    }
    with serving(tmp_path / "n.json", "l4:1", env) as served:
        pass
    stderr = served.stderr
    assert served.returncode == 0, stderr
    for env_name in (
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
    ):
        assert stderr.count(f"{env_name} is accepted and ignored") == 1, stderr
