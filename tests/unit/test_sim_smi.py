"""The simulated `nvidia-smi` and CUDA samples: which pods run them and what they print."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.server import BadRequest, LogRequest, parse_log_request, tail
from kubegpu.sim.smi import run, visible, workload_program

CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


@pytest.mark.parametrize(
    ("image", "command", "program"),
    [
        (CUDA, ["nvidia-smi"], ["nvidia-smi"]),
        (CUDA, ["/usr/bin/nvidia-smi", "-L"], ["nvidia-smi", "-L"]),
        (
            CUDA,
            ["sh", "-c", "nvidia-smi --query-gpu=name --format=csv"],
            ["nvidia-smi", "--query-gpu=name", "--format=csv"],
        ),
        (CUDA, ["bash", "-c", "nvidia-smi -L"], ["nvidia-smi", "-L"]),
        (CUDA, ["/cuda-samples/vectorAdd"], ["vectorAdd"]),
        ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", [], ["vectorAdd"]),
        ("nvcr.io/nvidia/k8s/cuda-sample:devicequery-cuda12.5.0", [], ["deviceQuery"]),
        (CUDA, [], None),  # no command: the image's own, which we do not know
        (CUDA, ["sleep", "infinity"], None),
    ],
)
def test_which_containers_run_a_simulated_gpu_program(
    image: str, command: list[str], program: list[str] | None
) -> None:
    assert workload_program(image, command) == program


@pytest.fixture
def nvml(tmp_path: Path) -> SimNvml:
    return SimNvml.create(tmp_path / "gpus.json", "a100-40gb:2")


def test_only_the_allocated_devices_are_visible(nvml: SimNvml) -> None:
    uuids = [d.uuid for d in nvml.devices()]
    assert [d.index for d in visible(nvml, [f"{uuids[1]}::3"]).gpus] == [1]  # a replica
    assert [d.index for d in visible(nvml, ["0"]).gpus] == [0]
    assert [d.index for d in visible(nvml, ["all"]).gpus] == [0, 1]
    assert visible(nvml, []).gpus == []


def test_list_query_and_failures_read_like_nvidia_smi(nvml: SimNvml) -> None:
    d0 = nvml.devices()[0]
    code, out = run(["nvidia-smi", "-L"], nvml, [d0.uuid])
    assert (code, out) == (0, f"GPU 0: {d0.name} (UUID: {d0.uuid})")
    code, out = run(
        ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,nounits"], nvml, ["all"]
    )
    assert code == 0
    assert out.splitlines() == ["name, memory.total", *[f"{d0.name}, 40960"] * 2]
    code, out = run(["nvidia-smi", "--query-gpu=flux", "--format=csv"], nvml, ["all"])
    assert code == 2 and 'Field "flux" is not a valid field to query.' in out
    assert run(["nvidia-smi"], nvml, []) == (6, "No devices were found")
    code, out = run(["vectorAdd"], nvml, [d0.uuid])
    assert code == 0 and "Test PASSED" in out and d0.uuid in out


def test_log_requests_are_parsed_as_kubelet_does() -> None:
    assert parse_log_request("/containerLogs/ns/pod/ctr?follow=true&tailLines=5") == LogRequest(
        "ns", "pod", "ctr", follow=True, tail_lines=5
    )
    with pytest.raises(BadRequest, match="tailLines='x': not a whole number"):
        parse_log_request("/containerLogs/ns/pod/ctr?tailLines=x")
    with pytest.raises(BadRequest, match="not found: /exec/ns/pod/ctr"):
        parse_log_request("/exec/ns/pod/ctr")
    assert tail(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert tail(b"a\nb\n", 0) == b""
