"""What the plugin reads from the hardware seam: GPUs, MIG devices, topology, device nodes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from kubegpu.cdi.build import NodeDevice, gpu_devices
from kubegpu.cdi.nodes import MIG_MINORS, present_control_devices, read_mig_minors
from kubegpu.nvml import Nvml, errors
from kubegpu.nvml.types import GpuTopology
from kubegpu.sharing.devices import GpuFacts
from kubegpu.sharing.facts import read_gpus
from kubegpu.sharing.preferred import pair_scores

log = logging.getLogger(__name__)


@dataclass
class NodeFacts:
    gpus: list[GpuFacts]
    topologies: dict[int, GpuTopology] = field(default_factory=dict)
    scores: dict[tuple[int, int], int] = field(default_factory=dict)
    devices: list[NodeDevice] = field(default_factory=list)  # GPUs and MIG devices, for CDI
    control_devices: tuple[str, ...] = ()

    @property
    def nodes(self) -> dict[str, tuple[str, ...]]:
        """UUID of every GPU and MIG device -> its device nodes."""
        return {d.names[0]: d.nodes for d in self.devices}


def read_node(nvml: Nvml, driver_root: Path = Path("/"), dev_root: Path = Path("/")) -> NodeFacts:
    """GPUs with their NUMA nodes, pair scores for topology, and device nodes."""
    gpus = read_gpus(nvml)
    topologies: dict[int, GpuTopology] = {}
    for g in gpus:
        try:
            topologies[g.index] = nvml.topology(g.index)
        except errors.NvmlError as exc:
            log.info("GPU %d: no topology (%s); preferred allocation ignores it", g.index, exc)
    gpus = [
        replace(g, numa_node=topologies[g.index].numa_node) if g.index in topologies else g
        for g in gpus
    ]
    minors = {i: t.minor_number for i, t in topologies.items()}
    return NodeFacts(
        gpus=gpus,
        topologies=topologies,
        scores=pair_scores(topologies.values()),
        devices=gpu_devices(gpus, minors, read_mig_minors(driver_root / MIG_MINORS)),
        control_devices=present_control_devices(dev_root),
    )
