"""`kubegpu feature-discovery` against simulated GPUs, without a cluster: the labels it
prints or writes (NFD's features.d format), its flags and environment, and its errors."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.feature_discovery import FeatureDiscovery, GfdOptions
from kubegpu.mig.config import parse_config
from kubegpu.mig.parted import apply_config
from kubegpu.nvml.sim import SimNvml

runner = CliRunner()

LAYOUTS = parse_config(
    """
version: v1
mig-configs:
  all-1g.18gb: [{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]
"""
)


def labels_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["feature-discovery", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def h200(tmp_path: Path) -> str:
    SimNvml.create(tmp_path / "gpus.json", "h200-nvl:8")
    return f"sim:{tmp_path / 'gpus.json'}"


def test_oneshot_prints_the_labels_of_the_node(h200: str) -> None:
    code, out, _ = run("--oneshot", "--no-timestamp", "--nvml", h200)
    assert code == 0
    labels = labels_of(out)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-NVL"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert "nvidia.com/gfd.timestamp" not in labels
    assert out.splitlines() == sorted(out.splitlines())  # stable order


def test_gfd_environment_variables_choose_the_strategy(h200: str) -> None:
    apply_config(SimNvml(h200[4:]), "all-1g.18gb", LAYOUTS.mig_configs["all-1g.18gb"])
    env = {"GFD_MIG_STRATEGY": "single", "GFD_ONESHOT": "true", "GFD_NO_TIMESTAMP": "true"}
    code, out, _ = run("--nvml", h200, env=env)
    assert code == 0
    labels = labels_of(out)
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-NVL-MIG-1g.18gb"
    assert labels["nvidia.com/gpu.count"] == "56"
    code, out, _ = run("--nvml", h200, env={**env, "GFD_MIG_STRATEGY": "mixed"})
    assert labels_of(out)["nvidia.com/mig-1g.18gb.count"] == "56"


def test_the_output_file_and_the_machine_type(h200: str, tmp_path: Path) -> None:
    machine = tmp_path / "product_name"
    machine.write_text("PowerEdge XE9680\n")
    out_file = tmp_path / "features.d/gfd"
    code, out, _ = run(
        "--oneshot",
        "--nvml",
        h200,
        "--output-file",
        str(out_file),
        "--machine-type-file",
        str(machine),
    )
    assert code == 0
    assert out == ""
    labels = labels_of(out_file.read_text())
    assert labels["nvidia.com/gpu.machine"] == "PowerEdge-XE9680"
    assert labels["nvidia.com/gfd.timestamp"].isdigit()
    assert not list(out_file.parent.glob(".*"))  # written atomically, no temp file left


def test_an_output_file_that_is_a_directory_is_refused_before_any_write(
    h200: str, tmp_path: Path
) -> None:
    # was a traceback after the labels were computed, with `.gfd.tmp` left beside it
    out_dir = tmp_path / "gfd"
    out_dir.mkdir()
    code, out, err = run("--oneshot", "--nvml", h200, "--output-file", str(out_dir))
    assert (code, out) == (1, "")
    assert f"--output-file {out_dir}: is a directory" in err
    assert list(out_dir.iterdir()) == []
    assert not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("source", ["/dev/zero", "big"])
def test_a_huge_machine_type_file_is_read_only_in_part(
    h200: str, tmp_path: Path, source: str
) -> None:
    machine = Path(source) if source.startswith("/") else tmp_path / source
    if not source.startswith("/"):
        machine.write_text("Big Box " + "x" * 50_000_000)
    code, out, _ = run("--oneshot", "--nvml", h200, "--machine-type-file", str(machine))
    assert code == 0
    assert len(labels_of(out)["nvidia.com/gpu.machine"]) <= 63


def test_the_device_plugin_config_file_drives_sharing_labels(h200: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nflags: {gfd: {noTimestamp: true}}\n"
        "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 3}]}}\n"
    )
    code, out, _ = run("--oneshot", "--nvml", h200, "--config-file", str(config))
    assert code == 0
    labels = labels_of(out)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-NVL-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "3"
    assert "nvidia.com/gfd.timestamp" not in labels  # flags.gfd.noTimestamp from the file


def test_a_bad_config_names_the_file_and_field(h200: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags: {migStrategy: sideways}\n")
    code, out, err = run("--oneshot", "--nvml", h200, "--config-file", str(config))
    assert code == 1
    assert out == ""
    assert f"{config}: field flags.migStrategy" in err


def test_mps_with_mig_enabled_fails_the_oneshot_run(h200: str, tmp_path: Path) -> None:
    apply_config(SimNvml(h200[4:]), "all-1g.18gb", LAYOUTS.mig_configs["all-1g.18gb"])
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nflags: {mpsRoot: /run/nvidia/mps}\n"
        "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"
    )
    code, _, err = run("--oneshot", "--nvml", h200, "--config-file", str(config))
    assert code == 1
    assert "MPS is not supported with MIG enabled" in err


def test_without_nvml_it_fails_unless_told_not_to(tmp_path: Path) -> None:
    missing = f"sim:{tmp_path / 'absent.json'}"
    code, _, err = run("--oneshot", "--nvml", missing)
    assert code == 1
    assert "cannot open NVML" in err
    code, out, _ = run("--oneshot", "--nvml", missing, "--no-fail-on-init-error")
    assert code == 0
    assert set(labels_of(out)) == {"nvidia.com/gfd.timestamp", "nvidia.com/vgpu.present"}


def test_flags_are_checked(h200: str) -> None:
    code, _, err = run("--oneshot", "--nvml", h200, "--mig-strategy", "sideways")
    assert code == 1
    assert "use none, single or mixed" in err
    code, _, err = run("--oneshot", "--nvml", h200, "--sleep-interval", "soon")
    assert code == 1
    assert "'soon' is not a duration" in err


async def test_a_running_discovery_relabels_when_its_config_file_changes(
    h200: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    out_file = tmp_path / "gfd"
    discovery = FeatureDiscovery(
        GfdOptions(
            config_file=config,
            output_file=str(out_file),
            sleep_interval="infinite",
            no_timestamp=True,
            config_poll_s=0.05,
        ),
        lambda: SimNvml(h200[4:]),
    )
    task = asyncio.create_task(discovery.run())
    try:
        await asyncio.wait_for(discovery.labelled.wait(), 5)
        assert labels_of(out_file.read_text())["nvidia.com/gpu.replicas"] == "1"
        config.write_text(
            "version: v1\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 5}]}}\n"
        )
        for _ in range(100):
            if labels_of(out_file.read_text())["nvidia.com/gpu.replicas"] == "5":
                break
            await asyncio.sleep(0.05)
        assert labels_of(out_file.read_text())["nvidia.com/gpu.replicas"] == "5"
        assert discovery.passes == 2  # 'infinite': only the change caused a second pass
    finally:
        discovery.stop()
        await asyncio.wait_for(task, 5)


def test_mps_root_from_the_environment_completes_an_mps_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GFD reads MPS_ROOT as the device plugin does, so an MPS config without flags.mpsRoot
    is not rejected when the DaemonSet provides the variable."""
    from kubegpu.feature_discovery.discovery import overrides_for
    from kubegpu.sharing.config import SharingConfigError, parse_config

    text = "sharing:\n  mps:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 4}\n"
    with pytest.raises(SharingConfigError, match="mps-root"):
        parse_config(text, "cfg")
    monkeypatch.setenv("MPS_ROOT", "/run/nvidia/mps")
    options = GfdOptions()
    config = parse_config(text, "cfg", overrides_for(options))
    assert config.flags.mps_root == "/run/nvidia/mps"
    assert config.sharing_strategy == "mps"


async def test_gpus_that_cannot_be_read_are_reported_once_and_labelling_goes_on(
    h200: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The simulated driver loses every GPU: each pass fails with NVML's error, said once;
    the labels written before stay, and the next pass after the GPUs return relabels."""
    caplog.set_level(logging.INFO, logger="kubegpu")
    out_file = tmp_path / "gfd"
    state = Path(h200[4:])
    discovery = FeatureDiscovery(
        GfdOptions(output_file=str(out_file), sleep_interval="infinite", no_timestamp=True),
        lambda: SimNvml(state),
    )
    task = asyncio.create_task(discovery.run())
    try:
        await asyncio.wait_for(discovery.labelled.wait(), 5)
        saved = state.read_bytes()
        state.unlink()
        for _ in range(5):
            discovery.trigger(reload=False)
            await asyncio.sleep(0.1)
        assert not task.done()
        assert discovery.passes == 1
        said = [r.getMessage() for r in caplog.records]
        assert sum("cannot compute GPU labels" in m for m in said) == 1
        assert not [r for r in caplog.records if r.exc_info]
        state.write_bytes(saved)
        discovery.trigger(reload=False)
        for _ in range(100):
            if discovery.passes == 2:
                break
            await asyncio.sleep(0.05)
        assert discovery.passes == 2
        assert labels_of(out_file.read_text())["nvidia.com/gpu.count"] == "8"
    finally:
        discovery.stop()
        await asyncio.wait_for(task, 5)
