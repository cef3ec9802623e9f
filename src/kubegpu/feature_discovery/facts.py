"""What feature discovery reads besides the GPUs (`sharing.facts.read_gpus`): versions,
machine type and PCI classes."""

from __future__ import annotations

import logging
from pathlib import Path

from kubegpu.nvml import Nvml, errors
from kubegpu.sharing.labels import SystemFacts

log = logging.getLogger(__name__)

# The machine type and PCI class files are one short line; read no more than this, so a
# flag pointing at a huge file (or /dev/zero) costs nothing.
MAX_FACT_BYTES = 4096


def _read_short(path: Path) -> str:
    with path.open("rb") as f:
        return f.read(MAX_FACT_BYTES).decode("utf-8", "replace")


def pci_classes(nvml: Nvml, sysfs: Path) -> dict[int, int]:
    """PCI class of each GPU from `<sysfs>/bus/pci/devices/<bus id>/class` (missing: left out)."""
    out = {}
    for index in range(nvml.device_count()):
        try:
            bus_id = nvml.device(index).pci_bus_id.lower()
        except errors.NvmlError:
            continue
        # NVML reports an 8-digit domain ("00000000:18:00.0"); sysfs uses 4 ("0000:18:00.0")
        domain, _, rest = bus_id.partition(":")
        path = sysfs / "bus/pci/devices" / f"{domain[-4:]}:{rest}" / "class"
        try:
            out[index] = int(_read_short(path).strip(), 16) >> 8
        except (OSError, ValueError):
            continue
    return out


def read_machine(path: Path) -> str:
    try:
        return _read_short(path).strip() or "unknown"
    except OSError:
        return "unknown"


def read_system(nvml: Nvml, machine_type_file: Path, sysfs: Path) -> SystemFacts:
    info = nvml.system()
    return SystemFacts(
        driver_version=info.driver_version,
        cuda_version=info.cuda_version,
        machine=read_machine(machine_type_file),
        pci_classes=pci_classes(nvml, sysfs),
    )
