"""Dynamic MIG on the GPUs: create the MIG device a claim was allocated, at its placement,
and destroy it again (NVML, under the node-wide MIG lock that the MIG manager and
`kubegpu mig apply` also take)."""

from __future__ import annotations

import logging

from kubegpu.mig.lock import MigLock
from kubegpu.nvml import Nvml, errors

log = logging.getLogger(__name__)


class MigDeviceError(Exception):
    """The MIG device cannot be created or destroyed; the message says why."""


class MigWriter:
    def __init__(self, nvml: Nvml, lock: MigLock) -> None:
        self.nvml = nvml
        self.lock = lock

    def create(self, gpu: int, profile_id: int, start: int) -> tuple[str, int, int]:
        """A GPU instance of `profile_id` at `start` with one compute instance spanning it;
        the new MIG device's UUID, GPU-instance id and compute-instance id."""
        nvml = self.nvml
        with self.lock:
            try:
                gi = nvml.create_gpu_instance(gpu, profile_id, start)
            except errors.NvmlError as exc:
                raise MigDeviceError(
                    f"GPU {gpu}: cannot create a GPU instance of profile {profile_id} at "
                    f"placement {start}: {exc}"
                ) from None
            try:
                profiles = nvml.compute_instance_profiles(gpu, gi.id)
                full = max(profiles, key=lambda p: p.slice_count)
                ci = nvml.create_compute_instance(gpu, gi.id, full.id)
                uuid = next(
                    m.uuid
                    for m in nvml.mig_devices(gpu)
                    if m.gpu_instance_id == gi.id and m.compute_instance_id == ci.id
                )
            except (errors.NvmlError, ValueError, StopIteration) as exc:
                self._destroy(gpu, gi.id)
                raise MigDeviceError(
                    f"GPU {gpu}: cannot create the compute instance in GPU instance {gi.id}: "
                    f"{str(exc) or type(exc).__name__}"
                ) from None
            log.info("GPU %d: created MIG device %s at placement %d", gpu, uuid, start)
            return uuid, gi.id, ci.id

    def destroy(self, gpu: int, profile_id: int, start: int) -> bool:
        """Destroy the GPU instance of `profile_id` at `start` (and its compute instances);
        whether there was one."""
        with self.lock:
            try:
                instances = self.nvml.gpu_instances(gpu)
            except errors.GpuIsLost:
                return False
            for gi in instances:
                if gi.profile_id == profile_id and gi.placement.start == start:
                    self._destroy(gpu, gi.id)
                    return True
        return False

    def _destroy(self, gpu: int, gi_id: int) -> None:
        try:
            for ci in self.nvml.compute_instances(gpu, gi_id):
                self.nvml.destroy_compute_instance(gpu, gi_id, ci.id)
            self.nvml.destroy_gpu_instance(gpu, gi_id)
        except errors.NvmlError as exc:
            raise MigDeviceError(f"GPU {gpu}: cannot destroy GPU instance {gi_id}: {exc}") from None
        log.info("GPU %d: destroyed GPU instance %d", gpu, gi_id)
