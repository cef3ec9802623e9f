"""Each pod's /dev/shm and the MPS pairing it decides."""

from __future__ import annotations

from pathlib import Path

from kubegpu.sim.runtime.shm import container_shm, shares_mps


def test_a_pod_has_its_own_shm_unless_a_volume_is_mounted_there(tmp_path: Path) -> None:
    own = container_shm(tmp_path / "pod-a", [], {})
    assert own.shm == tmp_path / "pod-a/shm" and own.pipe is None
    host = tmp_path / "run/nvidia/mps/shm"
    host.mkdir(parents=True)
    mounted = container_shm(tmp_path / "pod-b", [(str(host), "/dev/shm", False)], {})
    assert mounted.shm == host.resolve()


def test_an_mps_client_pairs_only_with_a_daemon_sharing_pipe_and_shm(tmp_path: Path) -> None:
    shm, pipe = tmp_path / "mps/shm", tmp_path / "mps/gpu/pipe"
    shm.mkdir(parents=True)
    pipe.mkdir(parents=True)
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/mps/gpu/pipe"}
    daemon = container_shm(
        tmp_path / "d", [(str(shm), "/dev/shm", False), (str(pipe), "/mps/gpu/pipe", False)], env
    )
    client = container_shm(
        tmp_path / "c", [(str(shm), "/dev/shm", False), (str(pipe), "/mps/gpu/pipe/", False)], env
    )
    assert shares_mps(client, daemon)
    lonely = container_shm(tmp_path / "c2", [(str(pipe), "/mps/gpu/pipe", False)], env)
    assert not shares_mps(lonely, daemon)  # its own /dev/shm
    no_pipe = container_shm(tmp_path / "c3", [(str(shm), "/dev/shm", False)], env)
    assert not shares_mps(no_pipe, daemon)
