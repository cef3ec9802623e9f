"""`kubegpu validator check --component driver` with a pre-installed driver
(`driver.enabled=false`, NVIDIA_DRIVER_ROOT=/): the driver is checked through the host's
root, as NVIDIA's validator does, never through NVML of the validator's own image (the
runtime gives the driver-validation container no driver: it sets no NVIDIA_VISIBLE_DEVICES).

The host root here is a directory with a stub driver layout: an `nvidia-smi` that answers
NVIDIA's query as the real one does."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from kubegpu.node.gpus import real_backend
from kubegpu.nvml import Nvml, NvmlError
from kubegpu.validator import CheckFailed, ReadyFiles, Validator, ValidatorSettings
from kubegpu.validator.checks import check_host_driver, host_nvidia_smi

SMI_ANSWER = "595.91.07, GPU-1111\n595.91.07, GPU-2222\n"


def no_nvml_in_the_image() -> Nvml:
    raise NvmlError("libnvidia-ml.so.1: cannot open shared object file")


def stub_driver(
    host: Path, where: str = "usr/bin", answer: str = SMI_ANSWER, code: int = 0
) -> Path:
    smi = host / where / "nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    said = smi.with_name("nvidia-smi.answer")
    said.write_text(answer)
    smi.write_text(f"#!/bin/sh\ncat {said}\nexit {code}\n")
    smi.chmod(0o755)
    return smi


def from_host_root(host: Path, path: str, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Runs the host binary found under `host` (a test cannot chroot)."""
    return subprocess.run(
        [str(host / path.lstrip("/")), *args], capture_output=True, text=True, check=False
    )


def validator(host: Path, out: Path) -> Validator:
    settings = ValidatorSettings(component="driver", output_dir=out, host_root=host)
    return Validator(settings, replace(real_backend(), opener=no_nvml_in_the_image))


def test_the_host_drivers_nvidia_smi_is_found_where_nvidias_validator_looks(tmp_path: Path) -> None:
    host = tmp_path / "host"
    assert host_nvidia_smi(host) is None
    (host / "usr/bin").mkdir(parents=True)
    (host / "usr/bin/nvidia-smi").write_text("")  # empty: a leftover, not a driver
    stub_driver(host, "usr/sbin")
    assert host_nvidia_smi(host) == "/usr/sbin/nvidia-smi"
    stub_driver(host, "usr/bin")
    assert host_nvidia_smi(host) == "/usr/bin/nvidia-smi"


def test_a_host_driver_passes_through_the_host_root_without_nvml_in_the_image(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    stub_driver(host)
    result = check_host_driver(host, from_host_root)
    assert result.env["IS_HOST_DRIVER"] == "true"
    assert result.env["DRIVER_ROOT_CTR_PATH"] == "/host"
    assert result.env["DRIVER_VERSION"] == "595.91.07"
    assert "2 GPU(s)" in result.message


def test_a_failing_host_nvidia_smi_fails_the_check_with_its_message(tmp_path: Path) -> None:
    host = tmp_path / "host"
    stub_driver(host, answer="NVIDIA-SMI has failed because it couldn't communicate", code=9)
    with pytest.raises(CheckFailed, match=r"exit 9.*couldn't communicate"):
        check_host_driver(host, from_host_root)


async def test_no_driver_on_the_host_root_fails_naming_where_it_looked(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    out = tmp_path / "validations"
    with pytest.raises(CheckFailed, match=f"no executable nvidia-smi under the host root {host}"):
        await validator(host, out).run()
    assert not ReadyFiles(out).present()


def test_the_check_command_reads_the_host_root_from_host_root_mount(tmp_path: Path) -> None:
    """The manifest's HOST_ROOT_MOUNT reaches the check (here: an empty host root)."""
    from typer.testing import CliRunner

    from kubegpu.cli import app

    host = tmp_path / "host"
    host.mkdir()
    result = CliRunner().invoke(
        app,
        ["validator", "check", "--component", "driver", "--output-dir", str(tmp_path / "v")],
        env={"HOST_ROOT_MOUNT": str(host), "NVIDIA_DRIVER_ROOT": "/", "KUBEGPU_NVML": "real"},
    )
    assert result.exit_code != 0
    assert f"under the host root {host}" in result.output
