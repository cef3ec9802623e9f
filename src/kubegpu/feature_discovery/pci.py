"""GPU detection from the PCI bus, for clusters without Node Feature Discovery.

The operator finds GPU nodes by NFD's `feature.node.kubernetes.io/pci-10de.present` label
(gpu-operator.md §3.1), and kubegpu never deploys NFD. With the chart's `nfd.enabled=false`
a DaemonSet on every node runs `kubegpu node-labeller`: it reads the node's
`/sys/bus/pci/devices/*/{vendor,class}` and sets the same labels NFD's PCI source would
(`pci-10de.present`, and `pci-0302_10de.present` / `pci-0300_10de.present` by display
class), so the operator's detection is the same with or without NFD. It removes only the
labels it would write, when the GPU is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from kubegpu.kube.labels import API_ERRORS, labels_of, patch_node_metadata

log = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
NFD_PREFIX = "feature.node.kubernetes.io/"
OS_ID = f"{NFD_PREFIX}system-os_release.ID"
OS_VERSION_ID = f"{NFD_PREFIX}system-os_release.VERSION_ID"
KERNEL_VERSION = f"{NFD_PREFIX}kernel-version.full"
MANAGED = (
    f"{NFD_PREFIX}pci-10de.present",
    f"{NFD_PREFIX}pci-0300_10de.present",
    f"{NFD_PREFIX}pci-0302_10de.present",
)
OS_MANAGED = (OS_ID, OS_VERSION_ID, KERNEL_VERSION)  # only when given an os-release file


@dataclass(frozen=True)
class PciDevice:
    address: str  # 0000:18:00.0
    vendor: int
    class_code: int  # base class and subclass: 0x0302 (3D controller), 0x0300 (VGA)


def _hex(path: Path) -> int:
    return int(path.read_text().strip(), 16)


def read_pci(sysfs: Path) -> list[PciDevice]:
    """The PCI functions under `sysfs`/bus/pci/devices (unreadable entries are skipped)."""
    root = sysfs / "bus/pci/devices"
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(root.iterdir()):
        try:
            vendor = _hex(entry / "vendor")
            class_code = _hex(entry / "class") >> 8  # 0x030200: class, subclass, prog-if
        except (OSError, ValueError):
            continue
        out.append(PciDevice(entry.name, vendor, class_code))
    return out


def gpu_labels(devices: list[PciDevice]) -> dict[str, str]:
    """NFD's PCI labels for NVIDIA display controllers (class 0x03xx), as NFD writes them."""
    labels: dict[str, str] = {}
    for d in devices:
        if d.vendor != NVIDIA_VENDOR or d.class_code >> 8 != 0x03:
            continue
        labels[f"{NFD_PREFIX}pci-10de.present"] = "true"
        if d.class_code in (0x0300, 0x0302):
            labels[f"{NFD_PREFIX}pci-{d.class_code:04x}_10de.present"] = "true"
    return labels


def os_labels(os_release: str, kernel: str) -> dict[str, str]:
    """NFD's system and kernel labels from an os-release file's text and the kernel
    release (values that are not valid label values are left out)."""
    fields: dict[str, str] = {}
    for line in os_release.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            try:
                parts = shlex.split(value)
            except ValueError:
                continue
            fields[key] = parts[0] if parts else ""
    labels = {OS_ID: fields.get("ID", ""), OS_VERSION_ID: fields.get("VERSION_ID", "")}
    labels[KERNEL_VERSION] = kernel
    return {k: v for k, v in labels.items() if _label_value(v)}


def _label_value(value: str) -> bool:
    return (
        0 < len(value) <= 63
        and value[0].isalnum()
        and value[-1].isalnum()
        and all(c.isalnum() or c in "-_." for c in value)
    )


def read_os_labels(os_release: Path | None) -> dict[str, str]:
    """os_labels of the host's os-release file (none when there is no such file)."""
    if os_release is None:
        return {}
    try:
        text = os_release.read_text()
    except OSError:
        return {}
    return os_labels(text, platform.release())


def label_patch(
    current: Mapping[str, str], wanted: Mapping[str, str], managed: tuple[str, ...] = MANAGED
) -> dict[str, str | None]:
    """The merge patch from the node's labels to `wanted`, touching only `managed` labels."""
    patch: dict[str, str | None] = {k: v for k, v in wanted.items() if current.get(k) != v}
    patch |= {k: None for k in managed if k in current and k not in wanted}
    return patch


class NodeLabeller:
    """Keeps this node's PCI labels current: once at start, then every `interval_s`."""

    def __init__(
        self,
        client: AsyncClient,
        node_name: str,
        sysfs: Path,
        interval_s: float = 60.0,
        os_release: Path | None = None,
    ) -> None:
        self.client = client
        self.os_release = os_release
        self.node_name = node_name
        self.sysfs = sysfs
        self.interval_s = interval_s
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def once(self) -> dict[str, str | None]:
        wanted = gpu_labels(await asyncio.to_thread(read_pci, self.sysfs))
        if wanted:  # the OS labels matter only on a GPU node (the driver image's suffix)
            wanted |= await asyncio.to_thread(read_os_labels, self.os_release)
        node = await self.client.get(Node, self.node_name)
        managed = MANAGED + (OS_MANAGED if self.os_release is not None else ())
        patch = label_patch(labels_of(node), wanted, managed)
        if patch:
            await patch_node_metadata(self.client, self.node_name, labels=patch)
            log.info("node %s: PCI labels %s", self.node_name, patch)
        return patch

    async def run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    await self.once()
                except API_ERRORS as exc:
                    log.warning("node %s: cannot update PCI labels: %s", self.node_name, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval_s)
        finally:
            await self.client.close()
