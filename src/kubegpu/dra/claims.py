"""From an allocated ResourceClaim to what preparing it means on this node (pure).

The kubelet sends only the claim's namespace, name and UID; the plugin reads the claim
and finds here: which of its allocated devices are this node's (driver `gpu.nvidia.com`,
pool = node name), which opaque config applies to each, the MPS limits of a claim that
shares its GPUs through MPS, and the claim-wide environment. Anything wrong — no
allocation, a device the node does not publish, an invalid config, a strategy whose
feature gate is off — is a `ClaimError` before anything is changed on the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.dra.config import (
    MPS,
    TIME_SLICING,
    DeviceConfig,
    DraConfigError,
    FeatureGates,
    GpuConfig,
    MpsConfig,
    check_gates,
    claim_configs,
    config_for,
    quantity_mib,
)
from kubegpu.dra.slices import DraDevice
from kubegpu.sharing.mps import MpsLimit, MpsResource

Json = dict[str, Any]

#: Env var kubegpu sets in every claim's spec: which claim the devices came from.
ENV_CLAIM = "KUBEGPU_DRA_CLAIM"
#: Env var kubegpu sets for a TimeSlicing config: NVML has no compute-policy call in
#: kubegpu's facade, so the interval is handed to the container instead (docs/dra.md).
ENV_TIMESLICE_INTERVAL = "KUBEGPU_DRA_TIMESLICE_INTERVAL"


class ClaimError(Exception):
    """The claim cannot be prepared; the message is the kubelet's error for it (the pod's
    event), so it names the claim and what is wrong."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class AllocatedDevice:
    request: str
    device: DraDevice
    config: DeviceConfig
    #: what this device's config puts into its own CDI entry (the time-slice interval)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def mps(self) -> bool:
        """Its config shares it through MPS (it joins the claim's MPS daemon)."""
        return self.config.sharing is not None and self.config.sharing.strategy == MPS


@dataclass(frozen=True)
class ClaimPlan:
    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    env: Mapping[str, str]  # claim-wide: every container of the claim sees it
    mps: MpsResource | None = None  # one daemon for the devices whose config is MPS


def check_claim(claim: Json, ref: ClaimRef) -> Json:
    """The claim's `status.allocation`, after checking it is the claim the kubelet means."""
    uid = (claim.get("metadata") or {}).get("uid")
    if uid != ref.uid:
        raise ClaimError(
            f"claim {ref}: the API server has UID {uid!r}, the kubelet asked for {ref.uid!r} "
            "(the claim was deleted and created again)"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"claim {ref}: not allocated (status.allocation is empty)")
    return dict(allocation)


def node_results(allocation: Json, node: str, driver: str = nvidia.DRA_DRIVER) -> list[Json]:
    """The allocation results this node's plugin prepares."""
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if r.get("driver") == driver and r.get("pool") == node]


def _mps_limit(dev: AllocatedDevice, config: MpsConfig | None) -> MpsLimit:
    d = dev.device
    pinned = d.memory_mib
    percentage = 100
    if config is not None:
        if config.defaultActiveThreadPercentage is not None:
            percentage = config.defaultActiveThreadPercentage
        if config.defaultPinnedDeviceMemoryLimit is not None:
            pinned = quantity_mib(config.defaultPinnedDeviceMemoryLimit)
        per_device = config.defaultPerDevicePinnedMemoryLimit or {}
        for key in (d.uuid, str(d.gpu_index)):
            if key in per_device:
                pinned = quantity_mib(per_device[key])
                break
    return MpsLimit(
        gpu=d.gpu_index,
        uuid=d.uuid,
        replicas=1,
        pinned_memory_mib=pinned,
        active_thread_percentage=percentage,
    )


def _check_per_device_keys(devices: Sequence[AllocatedDevice], ref: ClaimRef) -> None:
    """A per-device limit must name a device of its request (by UUID or GPU index)."""
    by_request: dict[str, list[AllocatedDevice]] = {}
    for d in devices:
        by_request.setdefault(d.request, []).append(d)
    for request, devs in by_request.items():
        sharing = devs[0].config.sharing
        mps = sharing.mpsConfig if sharing is not None else None
        keys = set((mps.defaultPerDevicePinnedMemoryLimit or {}) if mps else ())
        known = {k for d in devs for k in (d.device.uuid, str(d.device.gpu_index))}
        unknown = sorted(keys - known)
        if unknown:
            raise ClaimError(
                f"claim {ref}: request {request!r}: field "
                f"sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit, value {unknown[0]!r}: "
                f"not a device of this request (use one of {', '.join(sorted(known))})"
            )


def plan_claim(
    claim: Json,
    ref: ClaimRef,
    node: str,
    published: Mapping[str, DraDevice],
    gates: FeatureGates,
) -> ClaimPlan:
    """What preparing `claim` on `node` means, or ClaimError."""
    allocation = check_claim(claim, ref)
    results = node_results(allocation, node)
    if not results:
        raise ClaimError(
            f"claim {ref}: no device of driver {nvidia.DRA_DRIVER} in pool {node} "
            "is allocated to it"
        )
    try:
        configs = claim_configs((allocation.get("devices") or {}).get("config") or [], str(ref))
    except DraConfigError as exc:
        raise ClaimError(str(exc)) from None
    devices = []
    for r in results:
        name, request = str(r.get("device")), str(r.get("request"))
        device = published.get(name)
        if device is None:
            raise ClaimError(
                f"claim {ref}: device {name!r} is not (or no longer) published by node {node}"
            )
        try:
            config = config_for(configs, request, device.kind, str(ref))
            check_gates(config, gates, f"claim {ref}: request {request!r}")
        except DraConfigError as exc:
            raise ClaimError(str(exc)) from None
        devices.append(AllocatedDevice(request, device, config))
    _check_per_device_keys(devices, ref)

    # each config's effect stays on the devices it applies to: the MPS daemon serves only
    # the MPS devices, the interval goes into the time-sliced devices' own CDI entries
    limits = []
    scoped = []
    for d in devices:
        sharing = d.config.sharing
        if sharing is not None and sharing.strategy == MPS:
            limits.append(_mps_limit(d, sharing.mpsConfig))
        # TimeSlicing is a no-op on MIG devices, as upstream
        gpu_sharing = d.config.sharing if isinstance(d.config, GpuConfig) else None
        if gpu_sharing is not None and gpu_sharing.strategy == TIME_SLICING:
            ts = gpu_sharing.timeSlicingConfig
            interval = ts.interval if ts else "Default"
            scoped.append(replace(d, env={ENV_TIMESLICE_INTERVAL: interval}))
        else:
            scoped.append(d)
    mps = MpsResource(f"claim {ref}", tuple(limits)) if limits else None
    return ClaimPlan(ref, tuple(scoped), {ENV_CLAIM: str(ref)}, mps)
