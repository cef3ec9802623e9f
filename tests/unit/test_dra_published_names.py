"""The attribute and capacity names the DRA plugin publishes, per device type, are NVIDIA's:
compared against the table in `kubegpu.catalog.dra` written from the reference
(reference/dcgm-dra.md sections 2.4 and 2.5). Every `always` name is on every device of its
type, nothing outside the table is published, and no removed attribute comes back. The
devices are read from simulated GPUs through NVML, as the plugin reads them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubegpu.catalog.dra import PUBLISHED_ATTRIBUTES, PUBLISHED_CAPACITIES, REMOVED_ATTRIBUTES
from kubegpu.dra.facts import read_node_gpus
from kubegpu.dra.slices import DraDevice, devices
from kubegpu.nvml import Nvml, open_nvml

MEMORY_SLICE = re.compile(r"^memorySlice\d+$")


def _open(tmp_path: Path, spec: str) -> Nvml:
    return open_nvml(f"sim:{tmp_path / 'gpus.json'}", spec)


@pytest.mark.parametrize("spec", ["h200-nvl:2", "l4:1", "a100-80gb:1", "rtx-pro-6000-ws:1"])
def test_whole_gpus_publish_nvidias_names(tmp_path: Path, spec: str) -> None:
    nvml = _open(tmp_path, spec)
    try:
        published = devices(read_node_gpus(nvml))
    finally:
        nvml.close()
    assert published
    for dev in published:
        assert dev.kind == "gpu"
        _check(dev)


def test_mig_devices_publish_nvidias_names(tmp_path: Path) -> None:
    nvml = _open(tmp_path, "h200-nvl:1;mig=on")
    try:
        for profile in nvml.gpu_instance_profiles(0)[:2]:
            gi = nvml.create_gpu_instance(0, profile.id)
            ci_profile = nvml.compute_instance_profiles(0, gi.id)[-1]
            nvml.create_compute_instance(0, gi.id, ci_profile.id)
        published = devices(read_node_gpus(nvml))
    finally:
        nvml.close()
    migs = [d for d in published if d.kind == "mig"]
    assert len(migs) == 2
    for dev in migs:
        _check(dev)


def _check(dev: DraDevice) -> None:
    table = PUBLISHED_ATTRIBUTES[dev.kind]
    attributes = {name for name, _ in dev.attributes}
    always = {n for n, when in table.items() if when == "always"}
    assert always <= attributes, f"{dev.name}: missing {sorted(always - attributes)}"
    assert attributes <= set(table), f"{dev.name}: not NVIDIA's: {sorted(attributes - set(table))}"
    assert not attributes & set(REMOVED_ATTRIBUTES)
    capacities = {"memorySlice<i>" if MEMORY_SLICE.match(n) else n for n, _ in dev.capacity}
    assert capacities == set(PUBLISHED_CAPACITIES[dev.kind]), dev.name
