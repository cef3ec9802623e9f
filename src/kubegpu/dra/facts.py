"""What the slices are built from, read from NVML (the I/O edge of `slices`)."""

from __future__ import annotations

import logging

from kubegpu.catalog import find_by_pci_id, find_by_product_name, get_model
from kubegpu.dra.slices import DraGpu, DraMig, GiProfile, MigEngines, NodeGpus
from kubegpu.nvml import Nvml, errors
from kubegpu.nvml.types import DeviceInfo, GpuInstanceProfileInfo

log = logging.getLogger(__name__)


def _architecture(dev: DeviceInfo) -> str:
    model = None
    if dev.model_id:
        try:
            model = get_model(dev.model_id)
        except KeyError:
            model = None
    model = model or find_by_pci_id(dev.pci_device_id) or find_by_product_name(dev.name)
    return model.architecture.capitalize() if model else ""


def _minor(nvml: Nvml, index: int) -> int:
    try:
        return nvml.topology(index).minor_number
    except errors.NvmlError:
        return index  # a backend that reports no topology: /dev/nvidia<index>


def _migs(nvml: Nvml, index: int) -> tuple[DraMig, ...]:
    profiles: dict[int, GpuInstanceProfileInfo] = {
        p.id: p for p in nvml.gpu_instance_profiles(index)
    }
    out = []
    for m in nvml.mig_devices(index):
        gip = profiles.get(m.gi_profile_id)
        out.append(
            DraMig(
                uuid=m.uuid,
                profile=m.profile,
                gi_profile_id=m.gi_profile_id,
                start=m.placement.start,
                size=m.placement.size,
                memory_mib=m.memory_mib,
                multiprocessors=m.multiprocessor_count,
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
                engines=_engines(gip) if gip else MigEngines(),
            )
        )
    return tuple(out)


def _engines(p: GpuInstanceProfileInfo) -> MigEngines:
    return MigEngines(
        p.copy_engine_count, p.decoder_count, p.encoder_count, p.jpeg_count, p.ofa_count
    )


def _gi_profiles(nvml: Nvml, index: int) -> tuple[GiProfile, ...]:
    return tuple(
        GiProfile(
            id=p.id,
            name=p.name,
            memory_mib=p.memory_size_mib,
            multiprocessors=p.multiprocessor_count,
            engines=_engines(p),
            placements=tuple(
                (x.start, x.size) for x in nvml.gpu_instance_possible_placements(index, p.id)
            ),
        )
        for p in nvml.gpu_instance_profiles(index)
    )


def read_node_gpus(nvml: Nvml, partitionable: bool = False) -> NodeGpus:
    """The node's GPUs with their MIG devices; a GPU that fell off the bus is left out.
    `partitionable`: also each MIG-enabled GPU's profiles and placements (dynamic MIG)."""
    system = nvml.system()
    gpus = []
    for index in range(nvml.device_count()):
        try:
            dev = nvml.device(index)
            try:
                mig = nvml.mig_mode(index).current
            except errors.NotSupported:
                mig = False
            gpus.append(
                DraGpu(
                    index=index,
                    minor=_minor(nvml, index),
                    uuid=dev.uuid,
                    product_name=dev.name,
                    architecture=_architecture(dev),
                    compute_capability=dev.compute_capability,
                    pci_bus_id=dev.pci_bus_id,
                    memory_mib=dev.memory_total_mib,
                    mig_enabled=mig,
                    migs=_migs(nvml, index) if mig else (),
                    gi_profiles=_gi_profiles(nvml, index) if mig and partitionable else (),
                )
            )
        except errors.GpuIsLost as exc:
            log.warning("GPU %d is left out of the slice: %s", index, exc)
    return NodeGpus(
        driver_version=system.driver_version,
        cuda_driver_version=system.cuda_version,
        gpus=tuple(gpus),
    )
