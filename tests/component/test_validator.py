"""`kubegpu validator` on a simulated node: each check, the ready files, and the commands the
operator's DaemonSets run (check, wait, hold, metrics, workload)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli import app
from kubegpu.node.gpus import GpuBackend, real_backend, sim_backend
from kubegpu.nvml import NvmlError
from kubegpu.nvml.sim import SimNvml
from kubegpu.sharing.allocate import CDI_KIND
from kubegpu.validator import CheckFailed, ReadyFiles, Validator, ValidatorSettings
from kubegpu.validator.checks import (
    NVIDIA_CDI_KINDS,
    check_plugin_cdi,
    cuda_targets,
    gpu_resources,
    workload_resource,
)

runner = CliRunner()


@pytest.fixture
def node(tmp_path: Path) -> SimNvml:
    return SimNvml.create(tmp_path / "gpus.json", "a100-40gb:2")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "validations"


def validator(node: SimNvml, out: Path, component: str, **kw: Any) -> Validator:
    settings = ValidatorSettings(
        component=component, output_dir=out, cdi_dirs=(out.parent / "cdi",), **kw
    )
    return Validator(settings, sim_backend(node.store.path))


def gpus_opened_by(opener: Callable[[], SimNvml]) -> GpuBackend:
    """Real hardware whose NVML is `opener` (e.g. one that fails as a missing driver does)."""
    return replace(real_backend(), opener=opener)


def write_spec(directory: Path, devices: list[str], kind: str = CDI_KIND) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{kind.replace('/', '-')}.json"
    spec = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "devices": [{"name": d, "containerEdits": {}} for d in devices],
    }
    path.write_text(json.dumps(spec))
    return path


def apply_mig(node: SimNvml, tmp_path: Path, config: str) -> None:
    generated = runner.invoke(app, ["mig", "generate", "--model", "a100-40gb"])
    configs = tmp_path / "mig.yaml"
    configs.write_text(generated.stdout)
    result = runner.invoke(
        app, ["mig", "apply", "-f", str(configs), "-c", config, "--nvml", f"sim:{node.store.path}"]
    )
    assert result.exit_code == 0, result.stderr


# -- driver ---------------------------------------------------------------------------------------------
async def test_driver_ready_is_an_env_file_for_a_host_driver(node: SimNvml, out: Path) -> None:
    result = await validator(node, out, "driver").run()
    assert "host driver" in result.message and "2 GPU(s)" in result.message
    env = ReadyFiles(out).read_env("driver-ready")
    assert env["IS_HOST_DRIVER"] == "true"
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    assert env["DRIVER_VERSION"] == node.system().driver_version


async def test_driver_ready_names_a_containerized_drivers_root(node: SimNvml, out: Path) -> None:
    await validator(node, out, "driver", driver_root="/run/nvidia/driver").run()
    env = ReadyFiles(out).read_env("driver-ready")
    assert env["IS_HOST_DRIVER"] == "false"
    assert env["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert env["DRIVER_ROOT_CTR_PATH"] == "/driver-root"


async def test_a_failed_check_removes_a_stale_ready_file(out: Path) -> None:
    files = ReadyFiles(out)
    files.write("driver")

    def broken() -> SimNvml:
        raise NvmlError("NVML_ERROR_DRIVER_NOT_LOADED")

    # a host driver is checked through the host root: one without the driver fails
    settings = ValidatorSettings(component="driver", output_dir=out, host_root=out.parent / "host")
    v = Validator(settings, gpus_opened_by(broken))
    with pytest.raises(CheckFailed, match=r"no pre-installed driver"):
        await v.run()
    assert not files.exists("driver")


# -- toolkit / CDI ----------------------------------------------------------------------------------------
async def test_toolkit_is_ready_when_the_container_sees_the_gpus(node: SimNvml, out: Path) -> None:
    result = await validator(node, out, "toolkit").run()
    assert result.message == "2 GPU(s) visible in the container, no CDI spec"
    assert ReadyFiles(out).exists("toolkit-ready")


async def test_toolkit_checks_the_plugins_cdi_spec_against_the_gpus(
    node: SimNvml, out: Path
) -> None:
    assert CDI_KIND in NVIDIA_CDI_KINDS
    uuids = [d.uuid for d in node.devices()]
    write_spec(out.parent / "cdi", [uuids[0], "0", uuids[1], "1", "all"])
    assert "CDI specs consistent" in (await validator(node, out, "toolkit").run()).message


@pytest.mark.parametrize(
    ("devices", "problem"),
    [
        (["0", "all"], "GPU 1 (GPU-"),
        (["0", "1", "7"], "device 7: there is no GPU 7"),
        (["0", "1", "GPU-00000000-0000-0000-0000-000000000000"], "is not on this node"),
    ],
)
async def test_an_inconsistent_toolkit_cdi_spec_fails_the_toolkit_check(
    node: SimNvml, out: Path, devices: list[str], problem: str
) -> None:
    write_spec(out.parent / "cdi", devices, kind=nvidia.CDI_RUNTIME_KIND)
    with pytest.raises(CheckFailed, match=re.escape(problem)):
        await validator(node, out, "toolkit").run()
    assert not ReadyFiles(out).exists("toolkit")


@pytest.mark.parametrize(
    ("devices", "kind"),
    [
        (["0", "1", "0:3"], CDI_KIND),  # MIG devices removed after the plugin wrote it
        (["0", "all"], CDI_KIND),  # even a whole GPU: the plugin rewrites it when it starts
        (["0", "1", "0:3", "MIG-00000000-0000-0000-0000-000000000000"], nvidia.CDI_RUNTIME_KIND),
    ],
)
async def test_a_stale_spec_whose_writer_comes_later_does_not_block_the_toolkit_check(
    node: SimNvml, out: Path, devices: list[str], kind: str
) -> None:
    """The device plugin writes its spec only after toolkit-ready: failing on it would make
    the validator and the plugin wait for each other for good (issue 17)."""
    write_spec(out.parent / "cdi", devices, kind=kind)
    result = await validator(node, out, "toolkit").run()
    assert "to be rewritten by their writers (not blocking)" in result.message
    assert ReadyFiles(out).exists("toolkit-ready")


def test_the_plugin_check_holds_the_plugins_own_spec_to_the_gpus(node: SimNvml, out: Path) -> None:
    cdi = out.parent / "cdi"
    opener = sim_backend(node.store.path).open
    assert check_plugin_cdi(opener, [cdi]) == "no device-plugin CDI spec"
    spec = write_spec(cdi, ["0", "1", "0:3"])
    with pytest.raises(CheckFailed, match=r"device plugin's CDI spec .* no such MIG device"):
        check_plugin_cdi(opener, [cdi])
    spec.unlink()
    uuids = [d.uuid for d in node.devices()]
    write_spec(cdi, [uuids[0], "0", uuids[1], "1", "all"])
    assert check_plugin_cdi(opener, [cdi]) == "its CDI spec is consistent"


async def test_other_vendors_cdi_specs_are_not_ours_to_check(node: SimNvml, out: Path) -> None:
    write_spec(out.parent / "cdi", ["7"], kind="vendor.example.com/fpga")
    await validator(node, out, "toolkit").run()


async def test_with_wait_the_check_runs_until_it_passes(node: SimNvml, out: Path) -> None:
    spec = write_spec(out.parent / "cdi", ["0", "9"], kind=nvidia.CDI_RUNTIME_KIND)
    task = asyncio.create_task(
        validator(node, out, "toolkit", with_wait=True, sleep_interval_s=0.05).run()
    )
    await asyncio.sleep(0.3)
    assert not task.done()
    spec.unlink()  # the toolkit rewrote it
    await asyncio.wait_for(task, 5)
    assert ReadyFiles(out).exists("toolkit-ready")


# -- CUDA ---------------------------------------------------------------------------------------------------
async def test_cuda_runs_a_workload_on_the_gpu_and_leaves_nothing_behind(
    node: SimNvml, out: Path
) -> None:
    result = await validator(node, out, "cuda").run()
    assert result.message == f"a workload ran on {node.device(0).uuid}"
    assert ReadyFiles(out).exists("cuda-ready")
    assert node.processes(0) == []


async def test_cuda_uses_a_mig_device_when_mig_is_on(
    node: SimNvml, out: Path, tmp_path: Path
) -> None:
    apply_mig(node, tmp_path, "all-1g.5gb")
    targets = cuda_targets(node)
    assert len(targets) == 14 and all(mig for _, mig, _ in targets)
    result = await validator(node, out, "cuda").run()
    assert result.message == f"a workload ran on {targets[0][1]}"


async def test_cuda_fails_when_mig_is_on_without_instances(
    node: SimNvml, out: Path, tmp_path: Path
) -> None:
    apply_mig(node, tmp_path, "all-enabled")
    with pytest.raises(CheckFailed, match="no CUDA device"):
        await validator(node, out, "cuda").run()


def test_visible_devices_restrict_the_cuda_devices(node: SimNvml) -> None:
    second = node.device(1).uuid
    assert [t[2] for t in cuda_targets(node, second)] == [second]
    assert [t[0] for t in cuda_targets(node, "1")] == [1]
    assert len(cuda_targets(node, "all")) == 2


# -- plugin (the parts that need no cluster) ---------------------------------------------------------------
def test_gpu_resources_are_gpus_and_mig_devices_with_a_count() -> None:
    allocatable = {
        "cpu": "32",
        "nvidia.com/gpu": "0",
        "nvidia.com/gpu.shared": "8",
        "nvidia.com/mig-1g.5gb": "14",
        "example.com/foo": "1",
    }
    assert gpu_resources(allocatable) == {"nvidia.com/gpu.shared": 8, "nvidia.com/mig-1g.5gb": 14}
    assert (
        workload_resource({"nvidia.com/gpu": 2, "nvidia.com/mig-1g.5gb": 3}, "mixed")
        == "nvidia.com/mig-1g.5gb"
    )
    assert (
        workload_resource({"nvidia.com/gpu": 2, "nvidia.com/mig-1g.5gb": 3}, "single")
        == "nvidia.com/gpu"
    )


def test_plugin_and_workload_pods_need_the_api(node: SimNvml, out: Path) -> None:
    with pytest.raises(CheckFailed, match="needs the Kubernetes API and NODE_NAME"):
        asyncio.run(validator(node, out, "plugin").run())


def test_the_workload_pod_is_pinned_to_the_node_and_runs_the_validators_image(
    node: SimNvml, out: Path
) -> None:
    v = validator(
        node,
        out,
        "plugin",
        node_name="n1",
        namespace="gpu-operator",
        image="kg:1",
        runtime_class="nvidia",
    )
    pod = v.workload_pod_manifest("plugin", "nvidia.com/mig-1g.5gb")
    assert pod["metadata"]["namespace"] == "gpu-operator"
    assert pod["metadata"]["labels"] == {"app": "nvidia-device-plugin-validator"}
    spec = pod["spec"]
    assert (spec["nodeName"], spec["restartPolicy"], spec["runtimeClassName"]) == (
        "n1",
        "Never",
        "nvidia",
    )
    (c,) = spec["containers"]
    assert c["image"] == "kg:1"
    assert c["command"] == ["kubegpu", "validator", "workload", "plugin"]
    assert c["resources"] == {"limits": {"nvidia.com/mig-1g.5gb": 1}}
    assert "imagePullSecrets" not in spec


def test_the_workload_pod_pulls_with_the_validators_secrets(node: SimNvml, out: Path) -> None:
    secrets = ("regcred", "mirror")
    v = validator(node, out, "cuda", node_name="n1", image="r/kg:1", image_pull_secrets=secrets)
    spec = v.workload_pod_manifest("cuda", None)["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]


# -- the commands --------------------------------------------------------------------------------------------
def test_check_command_writes_the_ready_file(node: SimNvml, out: Path) -> None:
    result = runner.invoke(
        app,
        ["validator", "check", "--nvml", f"sim:{node.store.path}", "--output-dir", str(out)],
        env={"COMPONENT": "driver"},
    )
    assert result.exit_code == 0, result.stderr
    assert (out / "driver-ready").is_file()
    bad = runner.invoke(app, ["validator", "check", "-c", "gpu", "--output-dir", str(out)])
    assert bad.exit_code == 1
    assert "--component 'gpu': use one of driver, toolkit, cuda, plugin" in bad.stderr


def test_check_command_refuses_a_mig_strategy_it_would_read_as_another(
    node: SimNvml, out: Path
) -> None:
    """`Mixed` or a typo would make the plugin workload ask for a whole GPU, as `single`."""
    result = runner.invoke(
        app,
        ["validator", "check", "--nvml", f"sim:{node.store.path}", "--output-dir", str(out)],
        env={"COMPONENT": "driver", "MIG_STRATEGY": "Mixed"},
    )
    assert result.exit_code == 1
    assert "--mig-strategy / MIG_STRATEGY 'Mixed': use one of none, single, mixed" in result.stderr
    assert not (out / "driver-ready").exists()


def test_wait_command_returns_once_the_files_exist(out: Path) -> None:
    ReadyFiles(out).write("toolkit")
    result = runner.invoke(app, ["validator", "wait", "toolkit-ready", "--output-dir", str(out)])
    assert result.exit_code == 0, result.stderr
    timeout = runner.invoke(
        app,
        [
            "validator",
            "wait",
            "cuda",
            "--output-dir",
            str(out),
            "--interval",
            "0.01",
            "--timeout",
            "0.1",
        ],
    )
    assert timeout.exit_code == 1
    assert "cuda not ready after 0.1s" in timeout.stderr


def test_an_output_dir_that_is_a_file_or_a_nan_timeout_is_refused_at_start(
    node: SimNvml, tmp_path: Path
) -> None:
    # the check used to pass and then end in a traceback writing <file>/driver-ready; a NaN
    # timeout never compared true, so the wait never gave up
    not_a_dir = tmp_path / "ready"
    not_a_dir.write_text("")
    result = runner.invoke(
        app,
        ["validator", "check", "-c", "driver", "--nvml", f"sim:{node.store.path}",
         "--output-dir", str(not_a_dir)],
    )  # fmt: skip
    assert result.exit_code == 1
    assert f"--output-dir {not_a_dir}: is a file, not a directory" in result.stderr
    wait = runner.invoke(
        app, ["validator", "wait", "cuda", "--output-dir", str(tmp_path), "--timeout", "nan"]
    )
    assert wait.exit_code == 1
    assert "--timeout nan: must be 0 or more seconds" in wait.stderr


def test_workload_command_refuses_a_container_without_an_allocated_device(node: SimNvml) -> None:
    result = runner.invoke(
        app, ["validator", "workload", "plugin", "--nvml", f"sim:{node.store.path}"]
    )
    assert result.exit_code == 1
    assert "the device plugin allocated no device" in result.stderr
    ok = runner.invoke(
        app,
        ["validator", "workload", "plugin", "--nvml", f"sim:{node.store.path}"],
        env={"NVIDIA_VISIBLE_DEVICES": node.device(1).uuid},
    )
    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout.strip() == f"a workload ran on {node.device(1).uuid}"


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def _start(procs: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "kubegpu", "validator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    procs.append(p)
    return p


def _line(p: subprocess.Popen[str], pattern: str, timeout: float = 20.0) -> re.Match[str]:
    assert p.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if m := re.search(pattern, line):
            return m
    raise AssertionError(f"no line matching {pattern!r}")


def test_hold_removes_every_ready_file_when_the_pod_stops(
    out: Path, spawn: list[subprocess.Popen[str]]
) -> None:
    files = ReadyFiles(out)
    for name in ("driver", "toolkit", "cuda", "plugin"):
        files.write(name)
    p = _start(spawn, "hold", "--output-dir", str(out))
    _line(
        p, "all validations are successful: cuda-ready, driver-ready, plugin-ready, toolkit-ready"
    )
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    assert files.present() == []


def test_metrics_reports_each_validation(out: Path, spawn: list[subprocess.Popen[str]]) -> None:
    ReadyFiles(out).write("driver")
    p = _start(
        spawn,
        "metrics",
        "--output-dir",
        str(out),
        "--port",
        "0",
        "--address",
        "127.0.0.1",
        "--node-name",
        "n1",
    )
    port = int(_line(p, r"node status exporter on 127\.0\.0\.1:(\d+)").group(1))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'kubegpu_node_validation_ready{component="driver",node="n1"} 1.0' in body
    assert 'kubegpu_node_validation_ready{component="plugin",node="n1"} 0.0' in body
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


async def test_cuda_runs_on_a_gpu_without_mig(tmp_path: Path, out: Path) -> None:
    l4 = SimNvml.create(tmp_path / "l4.json", "l4:1")
    assert cuda_targets(l4) == [(0, None, l4.device(0).uuid)]
    await validator(l4, out, "cuda").run()


async def test_a_containerized_driver_waits_for_its_container(out: Path) -> None:
    def no_driver_yet() -> SimNvml:
        raise NvmlError("libnvidia-ml.so.1: cannot open shared object file")

    settings = ValidatorSettings(
        component="driver", output_dir=out, driver_root="/run/nvidia/driver"
    )
    with pytest.raises(CheckFailed, match="the driver container is not ready yet"):
        await Validator(settings, gpus_opened_by(no_driver_yet)).run()
