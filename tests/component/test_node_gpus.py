"""The GPU backend `--nvml` chooses: NVML, the CUDA probe and the MPS backend come
together, so no component asks which kind of node it runs on."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.node.cuda import LibcudaProbe, ProbeFailed, SimCudaProbe
from kubegpu.node.gpus import GpusUnavailable, gpu_backend
from kubegpu.node.mps import RecordingMps, SystemMps
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import ENV_NVML, ENV_SIM_NODE, NvmlError


@pytest.fixture(autouse=True)
def _no_backend_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_NVML, raising=False)
    monkeypatch.delenv(ENV_SIM_NODE, raising=False)


def test_a_simulated_node_comes_with_its_probe_and_recording_mps(tmp_path: Path) -> None:
    gpus = gpu_backend(f"sim:{tmp_path / 'n.json'}", "l4:2")
    assert gpus.name == f"sim:{tmp_path / 'n.json'}"
    assert isinstance(gpus.cuda, SimCudaProbe) and isinstance(gpus.mps, RecordingMps)
    assert gpus.driver_ready_file is False
    nvml = gpus.open()  # creates the node on first use
    try:
        assert nvml.device_count() == 2
    finally:
        nvml.close()
    assert (tmp_path / "n.json").exists()


def test_real_hardware_comes_with_libcuda_and_the_mps_control_daemon() -> None:
    gpus = gpu_backend("real")
    assert gpus.name == "real"
    assert isinstance(gpus.cuda, LibcudaProbe) and isinstance(gpus.mps, SystemMps)
    assert gpus.driver_ready_file is True


def test_the_choice_defaults_to_the_environment_then_real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gpu_backend().name == "real"
    monkeypatch.setenv(ENV_NVML, f"sim:{tmp_path / 'e.json'}")
    monkeypatch.setenv(ENV_SIM_NODE, "h200-nvl:8")
    gpus = gpu_backend()
    assert gpus.name == f"sim:{tmp_path / 'e.json'}"
    nvml = gpus.open()
    assert nvml.device_count() == 8
    nvml.close()


@pytest.mark.parametrize("spec", ["gpu", "sim:", "simulated"])
def test_a_value_naming_no_backend_is_refused(spec: str) -> None:
    with pytest.raises(ComponentError, match=rf"--nvml '{spec}': use 'real' or 'sim:<state-file>'"):
        gpu_backend(spec)


def test_a_missing_state_file_without_a_node_spec_fails_when_opened(tmp_path: Path) -> None:
    gpus = gpu_backend(f"sim:{tmp_path / 'missing.json'}")
    with pytest.raises(GpusUnavailable, match="does not exist; give --sim-node") as caught:
        gpus.open()
    assert isinstance(caught.value, NvmlError)
    with pytest.raises(ComponentError, match=r"cannot open the GPUs: .*does not exist"):
        gpus.open_or_fail()


def test_a_bad_node_spec_fails_when_opened(tmp_path: Path) -> None:
    with pytest.raises(NvmlError, match="cannot open the GPUs"):
        gpu_backend(f"sim:{tmp_path / 'n.json'}", "no-such-gpu:2").open()


def test_the_simulated_cuda_probe_runs_a_process_on_a_visible_device(tmp_path: Path) -> None:
    gpus = gpu_backend(f"sim:{tmp_path / 'n.json'}", "l4:2")
    first = gpus.open()
    second_uuid = first.device(1).uuid
    first.close()
    assert gpus.cuda.run(None, None).startswith("a workload ran on GPU-")
    assert gpus.cuda.run(second_uuid, None) == f"a workload ran on {second_uuid}"
    nvml = gpus.open()
    assert all(not nvml.processes(i) for i in range(2))  # the probe's process is gone
    nvml.close()


def test_the_simulated_cuda_probe_fails_without_a_visible_device(tmp_path: Path) -> None:
    gpus = gpu_backend(f"sim:{tmp_path / 'n.json'}", "l4:1")
    with pytest.raises(ProbeFailed, match="no CUDA device"):
        gpus.cuda.run("GPU-00000000-0000-0000-0000-000000000000", None)


def test_the_libcuda_probe_says_when_there_is_no_driver(tmp_path: Path) -> None:
    with pytest.raises(ProbeFailed, match="libcuda is not available"):
        LibcudaProbe(library=str(tmp_path / "libcuda.so.1")).run(None, tmp_path)
