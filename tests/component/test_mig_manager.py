"""The MIG manager's parts that need no cluster: layouts generated from the hardware, the
management CDI spec, failure messages, the reboot command and the command line. Its flow
against the API server is in tests/integration/test_mig_manager*.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.kube.podresources import HeldDevice, PodResourcesError
from kubegpu.mig.config import parse_config
from kubegpu.mig.parted import apply_config
from kubegpu.mig_manager import manager
from kubegpu.mig_manager.layouts import generate_for_node
from kubegpu.mig_manager.manager import Failed, run_command, summarise
from kubegpu.mig_manager.settings import MigManagerSettings
from kubegpu.nvml.sim import SimNvml

runner = CliRunner()


def test_layouts_are_generated_from_the_node_gpus(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "n.json", "h200-nvl:8")
    config = generate_for_node(nvml)
    assert {"all-disabled", "all-enabled", "all-balanced", "all-1g.18gb"} <= set(config.mig_configs)
    (entry,) = config.mig_configs["all-1g.18gb"]
    assert entry.devices == "all"
    assert entry.wanted() == {"1g.18gb": 7}
    assert "all-1g.18gb.me" in config.mig_configs  # `+` becomes `.` in the name


def test_several_models_get_device_filters(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "n.json", "h200-nvl:2,a100-80gb:2")
    balanced = generate_for_node(nvml).mig_configs["all-balanced"]
    assert {e.device_filter for e in balanced} == {("0x233B10DE",), ("0x20B210DE", "0x20B510DE")}


def test_without_mig_gpus_only_all_disabled_or_the_default_file(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "n.json", "l4:2")
    assert set(generate_for_node(nvml).mig_configs) == {"all-disabled"}
    default = tmp_path / "default.yaml"
    default.write_text(
        "version: v1\nmig-configs:\n  all-disabled: [{devices: all, mig-enabled: false}]\n"
        "  custom: [{devices: all, mig-enabled: false}]\n"
    )
    assert set(generate_for_node(nvml, default).mig_configs) == {"all-disabled", "custom"}


def test_the_management_cdi_spec_names_every_gpu_and_mig_device(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "n.json", "h200-nvl:2")
    layouts = parse_config(
        "version: v1\nmig-configs:\n  c:\n"
        "    - {devices: [0], mig-enabled: true, mig-devices: {'3g.71gb': 2}}\n"
        "    - {devices: [1], mig-enabled: false}\n"
    )
    apply_config(nvml, "c", layouts.mig_configs["c"])
    minors = tmp_path / "mig-minors"
    gi = nvml.mig_devices(0)[0].gpu_instance_id
    minors.write_text(f"config 1\nmonitor 2\ngpu0/gi{gi}/access 21\ngpu0/gi{gi}/ci0/access 22\n")
    settings = MigManagerSettings(
        node_name="n", cdi_dir=tmp_path / "cdi", container_driver_root=tmp_path / "none"
    )
    path = manager.write_management_spec(nvml, settings, minors)
    assert path.name == "management.nvidia.com-gpu.yaml"
    spec = yaml.safe_load(path.read_text())
    assert spec["kind"] == "management.nvidia.com/gpu"
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    names = [d["name"] for d in spec["devices"]]
    assert {"all", "0", "1", "0:0", "0:1"} <= set(names)
    first = next(d for d in spec["devices"] if d["name"] == "0:0")
    assert [n["path"] for n in first["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    (everything,) = [d for d in spec["devices"] if d["name"] == "all"]
    every = [n["path"] for n in everything["containerEdits"]["deviceNodes"]]
    assert every[:2] == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"]
    assert "/dev/nvidia1" in every
    assert not list((tmp_path / "cdi").glob(".*"))


def test_failure_messages_fold_the_same_error_on_many_gpus() -> None:
    message = "\n".join(
        f"config 'x', entry 0 (GPU {i}), field mig-devices: does not fit" for i in range(3)
    )
    assert summarise(message + "\nanother line") == (
        "config 'x', entry 0 (GPUs 0, 1, 2), field mig-devices: does not fit\nanother line"
    )
    assert summarise("entry 0 (GPU 4): bad") == "entry 0 (GPU 4): bad"


async def test_the_reboot_command_must_work() -> None:
    await run_command(["true"])
    with pytest.raises(Failed, match=r"'sh -c echo nope; exit 3' exited with 3: nope"):
        await run_command(["sh", "-c", "echo nope; exit 3"])
    with pytest.raises(Failed, match="cannot run 'no-such-reboot-command'"):
        await run_command(["no-such-reboot-command"])
    with pytest.raises(Failed, match="did not finish within 0s"):
        await run_command(["sleep", "5"], timeout_s=0.2)


def test_the_command_line_speaks_upstream_environment_names() -> None:
    result = runner.invoke(app, ["mig-manager", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in ("NODE_NAME", "CONFIG_FILE", "WITH_REBOOT", "WITH_SHUTDOWN_HOST_GPU_CLIENTS"):
        assert name in result.stdout
    result = runner.invoke(
        app, ["mig-manager", "--node-name", "n1", "--busy-gpus", "maybe", "--nvml", "sim:/x"]
    )
    assert result.exit_code == 1
    assert "use refuse or proceed" in result.stderr
    result = runner.invoke(
        app,
        ["mig-manager", "--node-name", "n1", "--config-file", "a", "--config-map", "b"],
    )
    assert result.exit_code == 1
    assert "not both" in result.stderr
    result = runner.invoke(app, ["mig-manager"], env={"NODE_NAME": ""})
    assert result.exit_code == 2  # NODE_NAME is required


def test_a_reboot_command_with_an_unbalanced_quote_is_refused_not_a_traceback() -> None:
    result = runner.invoke(
        app, ["mig-manager", "--node-name", "n1", "--reboot-command", "systemctl 'reboot"]
    )
    assert result.exit_code == 1
    assert '--reboot-command "systemctl \'reboot": No closing quotation' in result.stderr


async def test_a_kubelet_slow_to_answer_is_asked_again_before_the_change_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubelet busy restarting the pods a change stopped may miss one pod-resources
    deadline; that alone must not mark the node's MIG config `failed`."""
    answers: list[object] = []

    async def ask(socket: Path) -> list[HeldDevice]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    monkeypatch.setattr(manager, "list_held_devices", ask)
    monkeypatch.setattr(manager, "POD_RESOURCES_BACKOFF_S", (0.0, 0.0, 0.0))
    nvml = SimNvml.create(tmp_path / "gpus.json", "h100-80gb:2")
    # no time beyond the retries: this test is about them (the deadline is the next test's)
    settings = MigManagerSettings(node_name="n", pod_resources_timeout_s=0)
    mig = manager.MigManager(settings, None, nvml)  # type: ignore[arg-type]

    answers[:] = [PodResourcesError("Deadline Exceeded")] * 2 + [[]]
    await mig._check_busy([0, 1])  # nothing held: the change may go on
    assert answers == []

    answers[:] = [PodResourcesError("Deadline Exceeded")] * 3 + [
        [HeldDevice("ml", "train", "main", "nvidia.com/gpu", nvml.device(1).uuid)]
    ]
    with pytest.raises(Failed, match="ml/train"):
        await mig._check_busy([1])

    answers[:] = [PodResourcesError("no kubelet at kubelet.sock")] * 4
    with pytest.raises(Failed, match="cannot tell which pods hold GPUs: no kubelet"):
        await mig._check_busy([0])


async def test_a_kubelet_that_answers_after_the_retries_is_waited_for_until_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded node: the kubelet is busy (the pods a change stopped restart, the device
    plugin registers and advertises late) and does not answer pod-resources for longer
    than the three retries take. The change may still land: it waits, never `failed`,
    until --pod-resources-timeout has passed."""
    answers_at = time.monotonic() + 1.0
    asked = 0

    async def late(socket: Path) -> list[HeldDevice]:
        nonlocal asked
        asked += 1
        if time.monotonic() < answers_at:
            raise PodResourcesError("Deadline Exceeded")
        return []

    monkeypatch.setattr(manager, "list_held_devices", late)
    monkeypatch.setattr(manager, "POD_RESOURCES_BACKOFF_S", (0.05, 0.05, 0.1))
    nvml = SimNvml.create(tmp_path / "gpus.json", "h100-80gb:2")
    slow_ok = MigManagerSettings(node_name="n", pod_resources_timeout_s=30)
    mig = manager.MigManager(slow_ok, None, nvml)  # type: ignore[arg-type]
    await mig._check_busy([0, 1])  # answered at last, nothing held: the change goes on
    assert asked > len(manager.POD_RESOURCES_BACKOFF_S) + 1

    async def never(socket: Path) -> list[HeldDevice]:
        raise PodResourcesError("Deadline Exceeded")

    monkeypatch.setattr(manager, "list_held_devices", never)
    short = MigManagerSettings(node_name="n", pod_resources_timeout_s=0.5)
    mig = manager.MigManager(short, None, nvml)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(Failed, match=r"did not answer within --pod-resources-timeout 0.5s"):
        await mig._check_busy([0])
    assert time.monotonic() - started >= 0.5


def test_the_pod_resources_timeout_is_checked_at_start() -> None:
    result = runner.invoke(
        app,
        ["mig-manager", "--node-name", "n1", "--pod-resources-timeout", "-1", "--nvml", "sim:/x"],
    )
    assert result.exit_code == 1
    assert "--pod-resources-timeout / POD_RESOURCES_TIMEOUT -1: must be" in result.stderr
