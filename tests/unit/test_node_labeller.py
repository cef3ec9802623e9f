"""GPU detection from the PCI bus for clusters without NFD: the labels NFD would set."""

from __future__ import annotations

from pathlib import Path

from kubegpu.feature_discovery.pci import PciDevice, gpu_labels, label_patch, read_pci
from kubegpu.nvml.sim import SimNvml
from kubegpu.operator.labels import is_gpu_node
from kubegpu.sim.kubelet.node import write_pci_devices

NFD = "feature.node.kubernetes.io/"


def device(vendor: int, class_code: int) -> PciDevice:
    return PciDevice("0000:18:00.0", vendor, class_code)


def test_nvidia_display_controllers_get_nfds_labels() -> None:
    assert gpu_labels([device(0x10DE, 0x0302)]) == {
        f"{NFD}pci-10de.present": "true",
        f"{NFD}pci-0302_10de.present": "true",
    }
    assert gpu_labels([device(0x10DE, 0x0300)])[f"{NFD}pci-0300_10de.present"] == "true"
    # an NVIDIA bridge or NIC is not a GPU; a display controller of another vendor neither
    assert gpu_labels([device(0x10DE, 0x0604), device(0x1A03, 0x0300)]) == {}


def test_only_the_labellers_own_labels_are_removed_when_the_gpu_is_gone() -> None:
    current = {f"{NFD}pci-10de.present": "true", f"{NFD}cpu-model.vendor_id": "Intel"}
    assert label_patch(current, {}) == {f"{NFD}pci-10de.present": None}
    assert label_patch(current, {f"{NFD}pci-10de.present": "true"}) == {}


def test_a_simulated_nodes_pci_bus_makes_it_a_gpu_node(tmp_path: Path) -> None:
    nvml = SimNvml.create(tmp_path / "gpus.json", "l4:2")
    write_pci_devices(tmp_path / "sys", nvml)
    devices = read_pci(tmp_path / "sys")
    assert len(devices) == 2 and {d.vendor for d in devices} == {0x10DE}
    assert is_gpu_node(gpu_labels(devices))
    assert read_pci(tmp_path / "missing") == []


OS_RELEASE = """NAME="Ubuntu"
VERSION_ID="22.04"
ID=ubuntu
PRETTY_NAME="Ubuntu 22.04.4 LTS"
"""


def test_without_nfd_the_labeller_sets_the_os_labels_the_driver_image_suffix_comes_from() -> None:
    from kubegpu.feature_discovery.pci import os_labels
    from kubegpu.operator.labels import os_tag

    labels = os_labels(OS_RELEASE, "6.8.0-45-generic")
    assert labels == {
        f"{NFD}system-os_release.ID": "ubuntu",
        f"{NFD}system-os_release.VERSION_ID": "22.04",
        f"{NFD}kernel-version.full": "6.8.0-45-generic",
    }
    assert os_tag(labels) == "ubuntu22.04"


def test_os_values_that_are_no_label_values_are_left_out() -> None:
    from kubegpu.feature_discovery.pci import os_labels

    assert os_labels('ID="my distro"\nVERSION_ID=\n', "6.8.0+") == {}


def test_os_labels_are_removed_only_by_a_labeller_given_an_os_release_file() -> None:
    from kubegpu.feature_discovery.pci import MANAGED, OS_MANAGED, label_patch

    current = {f"{NFD}system-os_release.ID": "ubuntu", f"{NFD}pci-10de.present": "true"}
    assert label_patch(current, {f"{NFD}pci-10de.present": "true"}) == {}
    assert label_patch(current, {f"{NFD}pci-10de.present": "true"}, MANAGED + OS_MANAGED) == {
        f"{NFD}system-os_release.ID": None
    }
