"""Which GPUs hold a pod's devices, and which of them a MIG change would repartition.

The one judgement of "is this change busy?" that the MIG manager makes before it pauses
anything and that what-if shows in its report: a device ID a device plugin hands out (a
GPU or MIG UUID, a GPU index, `<gpu>:<mig>`) belongs to one GPU, and a holder of a device
on a GPU that must change makes that GPU busy. Only NVIDIA resources count. Callers hand
in physical device IDs: a replica's (`<id>::<n>`) is `kubegpu.sharing.replicas.physical_id`
of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from kubegpu.catalog import nvidia
from kubegpu.nvml import Nvml, NvmlError


def gpu_of_device(nvml: Nvml) -> dict[str, int]:
    """Device IDs a plugin may advertise (GPU and MIG UUIDs, indexes) -> GPU index."""
    out: dict[str, int] = {}
    for dev in nvml.devices():
        out[dev.uuid] = dev.index
        out[str(dev.index)] = dev.index
        with contextlib.suppress(NvmlError):
            for m in nvml.mig_devices(dev.index):
                out[m.uuid] = dev.index
                out[f"{dev.index}:{m.index}"] = dev.index
    return out


def held_gpus(
    held: Iterable[tuple[str, str, str]], gpu_of: Mapping[str, int]
) -> dict[str, set[int]]:
    """(holder, resource, physical device ID) triples -> each holder's GPU indexes. Devices
    of other vendors' resources and IDs of no GPU of this node are left out."""
    out: dict[str, set[int]] = {}
    for holder, resource, device_id in held:
        if not resource.startswith(nvidia.PREFIX):
            continue
        index = gpu_of.get(device_id)
        if index is not None:
            out.setdefault(holder, set()).add(index)
    return out


def busy_gpus(holders: Mapping[str, Iterable[int]], changing: Iterable[int]) -> dict[int, set[str]]:
    """The GPUs that must change and that someone holds -> who holds them."""
    wanted = set(changing)
    busy: dict[int, set[str]] = {}
    for holder, gpus in holders.items():
        for index in wanted.intersection(gpus):
            busy.setdefault(index, set()).add(holder)
    return busy
