"""What the node components read from the hardware seam: each GPU and its MIG devices.

Shared by the device plugin and feature discovery so both see a node the same way.
"""

from __future__ import annotations

import logging

from kubegpu.catalog.profile import ProfileName, ProfileNameError
from kubegpu.nvml import GpuInstanceProfileInfo, Nvml, errors
from kubegpu.sharing.devices import GpuFacts, MigFacts

log = logging.getLogger(__name__)


def _mig_facts(nvml: Nvml, index: int) -> tuple[MigFacts, ...]:
    profiles: dict[int, GpuInstanceProfileInfo] = {
        p.id: p for p in nvml.gpu_instance_profiles(index)
    }
    out = []
    for m in nvml.mig_devices(index):
        gip = profiles.get(m.gi_profile_id)
        try:
            name = ProfileName.parse(m.profile)
        except ProfileNameError:
            log.warning("GPU %d: MIG device %s has an unknown profile %r", index, m.uuid, m.profile)
            continue
        gi_slices = gip.slice_count if gip else name.gpu_slices
        ci_slices = name.compute_slices or gi_slices
        out.append(
            MigFacts(
                index=m.index,
                uuid=m.uuid,
                profile=m.profile,
                gi=m.gpu_instance_id,
                ci=m.compute_instance_id,
                full=ci_slices == gi_slices,
                memory_mib=m.memory_mib,
                multiprocessors=m.multiprocessor_count,
                gi_slices=gi_slices,
                ci_slices=ci_slices,
                engines=(
                    gip.copy_engine_count,
                    gip.decoder_count,
                    gip.encoder_count,
                    gip.jpeg_count,
                    gip.ofa_count,
                )
                if gip
                else (0, 0, 0, 0, 0),
            )
        )
    return tuple(out)


def read_gpus(nvml: Nvml) -> list[GpuFacts]:
    """Every GPU NVML can talk to; one that fell off the bus is left out (and logged)."""
    gpus = []
    for index in range(nvml.device_count()):
        try:
            dev = nvml.device(index)
            try:
                mode = nvml.mig_mode(index)
                capable, enabled = True, mode.current
            except errors.NotSupported:
                capable, enabled = False, False
            gpus.append(
                GpuFacts(
                    index=index,
                    uuid=dev.uuid,
                    product=dev.name,
                    memory_mib=dev.memory_total_mib,
                    compute_capability=dev.compute_capability,
                    mig_capable=capable,
                    mig_enabled=enabled,
                    mig_devices=_mig_facts(nvml, index) if enabled else (),
                )
            )
        except errors.GpuIsLost as exc:
            log.warning("GPU %d is left out: %s", index, exc)
    return gpus
