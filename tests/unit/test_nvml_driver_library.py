"""The real NVML backend loads libnvidia-ml.so.1 from a driver root it is pointed at
(KUBEGPU_DRIVER_LIBRARY_ROOT), where NVIDIA's DRA plugin looks, for components the runtime
injects no driver into."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.nvml import NvmlError, real


def test_the_library_is_found_where_nvidias_dra_plugin_looks(tmp_path: Path) -> None:
    assert real.driver_nvml_library(tmp_path) is None
    libdir = tmp_path / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / "libnvidia-ml.so.595.91.07").write_bytes(b"")
    (libdir / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.595.91.07")
    assert real.driver_nvml_library(tmp_path) == libdir / "libnvidia-ml.so.595.91.07"


def test_a_driver_root_without_the_library_is_an_nvml_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(real.DRIVER_LIBRARY_ROOT_ENV, str(tmp_path))
    with pytest.raises(NvmlError, match=f"{tmp_path}: no libnvidia-ml.so.1 under it"):
        real.RealNvml()


def test_an_unloadable_library_is_an_nvml_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "libnvidia-ml.so.1").write_bytes(b"not an ELF file")
    monkeypatch.setenv(real.DRIVER_LIBRARY_ROOT_ENV, str(tmp_path))
    with pytest.raises(NvmlError, match="cannot load"):
        real.RealNvml()
