"""Pod-attribution flags given without --kubernetes take no effect: the exporter says so at
start instead of serving series that look attributed by them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kubegpu.exporter import ExporterConfig
from kubegpu.exporter.program import ExporterProgram, unused_without_kubernetes
from kubegpu.node.gpus import gpu_backend


def test_attribution_flags_count_only_with_kubernetes() -> None:
    flags = ExporterConfig(virtual_gpus=True, enable_dra=True, nvidia_resource_names=("a/b",))
    assert unused_without_kubernetes(flags) == [
        "--kubernetes-virtual-gpus / KUBERNETES_VIRTUAL_GPUS",
        "--kubernetes-enable-dra / KUBERNETES_ENABLE_DRA",
        "--nvidia-resource-names / NVIDIA_RESOURCE_NAMES",
    ]
    assert unused_without_kubernetes(ExporterConfig(kubernetes=True, enable_dra=True)) == []
    assert unused_without_kubernetes(ExporterConfig()) == []


def test_the_program_warns_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    ExporterProgram(
        ExporterConfig(address="127.0.0.1:0", enable_dra=True),
        None,
        gpu_backend(f"sim:{tmp_path / 'n.json'}", "l4:1"),
    )
    assert (
        "--kubernetes-enable-dra / KUBERNETES_ENABLE_DRA is ignored without --kubernetes"
        in caplog.text
    )
