"""`kubegpu sim up` / `down` as a user runs them, including after a killed run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Node

from kube_objects import meta

pytestmark = pytest.mark.cluster

CLUSTER = """\
name: t
nodes:
  - name: up-gpu
    gpus: h100-80gb:2
  - name: up-cpu
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text().split()
    return stat[2] != "Z"


def _wait_for(path: Path, text: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {path}: {path.read_text() if path.exists() else ''}")


def test_up_registers_nodes_and_a_killed_run_is_cleaned_by_down(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    workdir = Path(f"/tmp/kgup-{os.getpid()}")
    log = tmp_path / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubegpu",
                "sim",
                "up",
                "-f",
                str(cluster),
                "--workdir",
                str(workdir),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        text = _wait_for(log, "kubectl get nodes")
        kubeconfig = text.split("export KUBECONFIG=")[1].split()[0]
        # the kubectl scripts/build-kubernetes built, as `sim up` tells the user to run it
        kubectl = text.split("# kubectl: ")[1].split()[0]
        got = subprocess.run(
            [kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert got.returncode == 0, got.stderr
        assert sorted(got.stdout.split()) == ["node/up-cpu", "node/up-gpu"]
        client = Client(KubeConfig.from_file(kubeconfig))
        nodes = {meta(n).name: n for n in client.list(Node)}
        assert set(nodes) == {"up-gpu", "up-cpu"}
        assert (
            cast(dict[str, str], meta(nodes["up-gpu"]).labels)[
                "feature.node.kubernetes.io/pci-10de.present"
            ]
            == "true"
        )
        assert "feature.node.kubernetes.io/pci-10de.present" not in cast(
            dict[str, str], meta(nodes["up-cpu"]).labels
        )
        assert "up-gpu" in text  # the status table
        client.close()
        control_plane_pids = [
            int(line.split()[1])
            for line in (workdir / "control-plane" / "pids").read_text().splitlines()
            if line.strip()
        ]
        up.send_signal(signal.SIGKILL)  # a killed run leaves the control plane behind
        up.wait(10)
        assert any(_alive(p) for p in control_plane_pids)
        down = subprocess.run(
            [sys.executable, "-m", "kubegpu", "sim", "down", "--workdir", str(workdir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert down.returncode == 0, down.stderr
        assert "gone; cleaned up its leftovers" in down.stdout
        assert not any(_alive(p) for p in control_plane_pids)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        subprocess.run(
            [sys.executable, "-m", "kubegpu", "sim", "down", "--workdir", str(workdir)],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(workdir, ignore_errors=True)


def test_up_refuses_a_bad_cluster_file(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes:\n  - name: a\n    gpus: h200:99\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubegpu",
            "sim",
            "up",
            "-f",
            str(cluster),
            "--workdir",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "field nodes.0.gpus, value 'h200:99'" in result.stderr
    assert "count 99 for h200 must be 1..16" in result.stderr
