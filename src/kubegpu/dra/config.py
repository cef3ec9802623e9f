"""Opaque device config of driver `gpu.nvidia.com` (`resource.nvidia.com/v1beta1`), and the
plugin's feature gates (pure).

A claim (or its DeviceClass) may carry `GpuConfig` or `MigDeviceConfig` parameters that
choose a sharing strategy: `TimeSlicing` with an interval, or `MPS` with thread and pinned
memory limits (reference/dcgm-dra.md section 2.6). Parameters are decoded strictly, as
upstream decodes claims: an unknown field, a wrong kind or a setting that contradicts the
strategy is an error naming the claim, the field and the value, and the claim is not
prepared at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.sharing.dra_config import (
    INTERVALS,
    KIND_OF_DEVICE,
    KINDS,
    MPS,
    TIME_SLICING,
    DeviceConfig,
    DraConfigError,
    GpuConfig,
    GpuSharing,
    Interval,
    MigDeviceConfig,
    MigDeviceSharing,
    MpsConfig,
    TimeSlicingConfig,
    parse_parameters,
    quantity_bytes,
    quantity_mib,
)

__all__ = [
    "INTERVALS",
    "KINDS",
    "KIND_OF_DEVICE",
    "MPS",
    "TIME_SLICING",
    "DeviceConfig",
    "DraConfigError",
    "GpuConfig",
    "GpuSharing",
    "Interval",
    "MigDeviceConfig",
    "MigDeviceSharing",
    "MpsConfig",
    "TimeSlicingConfig",
    "parse_parameters",
    "quantity_bytes",
    "quantity_mib",
]

Json = dict[str, Any]

# --- which config applies to which device -------------------------------------------------


@dataclass(frozen=True)
class ClaimConfig:
    """One entry of the claim's `status.allocation.devices.config` for this driver."""

    requests: tuple[str, ...]
    config: DeviceConfig


DEFAULTS: tuple[ClaimConfig, ...] = (
    ClaimConfig((), GpuConfig(apiVersion=nvidia.DRA_CONFIG_API_VERSION, kind="GpuConfig")),
    ClaimConfig(
        (), MigDeviceConfig(apiVersion=nvidia.DRA_CONFIG_API_VERSION, kind="MigDeviceConfig")
    ),
)


def claim_configs(allocation_config: Sequence[Json], claim: str) -> list[ClaimConfig]:
    """The driver's configs of an allocation, in the allocator's order (class configs, then
    the claim's), each parsed strictly. Configs of other drivers are skipped."""
    out = []
    for i, entry in enumerate(allocation_config):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != nvidia.DRA_DRIVER:
            continue
        requests = tuple(entry.get("requests") or ())
        where = f"requests {', '.join(requests)}" if requests else "all requests"
        source = f"claim {claim}: config {i} ({entry.get('source', 'FromClaim')}, {where})"
        out.append(ClaimConfig(requests, parse_parameters(opaque.get("parameters"), source)))
    return out


def _names(request: str) -> set[str]:
    """A result for `req/sub` is configured by a config naming `req/sub` or `req`."""
    return {request, request.split("/", 1)[0]}


def config_for(
    configs: Sequence[ClaimConfig], request: str, device_type: str, claim: str
) -> DeviceConfig:
    """The config that applies to one allocated device: the last one that names its request,
    or else the last one naming no request whose kind fits the device (defaults first).
    A config that names the request but is of the wrong kind is an error."""
    want = KIND_OF_DEVICE[device_type]
    for c in reversed([*DEFAULTS, *configs]):
        if c.requests and not (_names(request) & set(c.requests)):
            continue
        if c.config.kind == want:
            return c.config
        if c.requests:
            raise DraConfigError(
                f"claim {claim}: request {request!r} got a {device_type} device, "
                f"but its config is a {c.config.kind}, which applies to "
                f"{'MIG devices' if c.config.kind == 'MigDeviceConfig' else 'whole GPUs'} only"
            )
    raise AssertionError("the defaults cover every device type")  # pragma: no cover


# --- feature gates ------------------------------------------------------------------------

#: Upstream's gates and defaults (reference/dcgm-dra.md section 2.9).
GATE_DEFAULTS: Mapping[str, bool] = {
    "TimeSlicingSettings": False,
    "MPSSupport": False,
    "IMEXDaemonsWithDNSNames": True,
    "PassthroughSupport": False,
    "DynamicMIG": False,
    "NVMLDeviceHealthCheck": False,
    "ComputeDomainCliques": True,
    "CrashOnNVLinkFabricErrors": True,
    "DeviceMetadata": False,
}
#: Gates kubegpu knows but does not implement: turning one on is refused, not ignored.
UNSUPPORTED_GATES = ("PassthroughSupport", "NVMLDeviceHealthCheck", "DeviceMetadata")
#: Gates of ComputeDomains / IMEX, which kubegpu does not do: accepted and ignored, with a
#: warning when a value is given (docs/dra.md, "Not supported").
COMPUTE_DOMAIN_GATES = (
    "IMEXDaemonsWithDNSNames",
    "ComputeDomainCliques",
    "CrashOnNVLinkFabricErrors",
)
#: Gates upstream refuses to combine (checked at start, as upstream's ValidateFeatureGates).
EXCLUSIVE_GATES: tuple[tuple[str, str], ...] = (
    ("DynamicMIG", "PassthroughSupport"),
    ("DynamicMIG", "NVMLDeviceHealthCheck"),
    ("DynamicMIG", "MPSSupport"),
    ("PassthroughSupport", "NVMLDeviceHealthCheck"),
)
STRATEGY_GATES: Mapping[str, str] = {TIME_SLICING: "TimeSlicingSettings", MPS: "MPSSupport"}


@dataclass(frozen=True)
class FeatureGates:
    enabled: frozenset[str] = frozenset(k for k, v in GATE_DEFAULTS.items() if v)
    ignored: tuple[str, ...] = ()  # gates given a value that changes nothing here

    def ignored_warning(self) -> str | None:
        """What to say at start about the gates given that kubegpu does not act on."""
        if not self.ignored:
            return None
        return (
            f"FEATURE_GATES: {', '.join(self.ignored)} accepted and ignored: kubegpu's DRA "
            "plugin does not do ComputeDomains / IMEX (docs/dra.md)"
        )

    def __contains__(self, gate: object) -> bool:
        return gate in self.enabled

    @classmethod
    def parse(cls, text: str | None, source: str = "FEATURE_GATES") -> FeatureGates:
        """`TimeSlicingSettings=true,MPSSupport=true` over upstream's defaults."""
        gates = dict(GATE_DEFAULTS)
        ignored: list[str] = []
        for raw in (text or "").split(","):
            item = raw.strip()
            if not item:
                continue
            name, sep, value = item.partition("=")
            name, value = name.strip(), value.strip().lower()
            if name not in GATE_DEFAULTS:
                raise DraConfigError(
                    f"{source}: unknown feature gate {name!r}; known: {', '.join(GATE_DEFAULTS)}"
                )
            if not sep or value not in ("true", "false"):
                raise DraConfigError(f"{source}: gate {name!r}, value {value!r}: use true or false")
            gates[name] = value == "true"
            if name in COMPUTE_DOMAIN_GATES and name not in ignored:
                ignored.append(name)
        for a, b in EXCLUSIVE_GATES:
            if gates[a] and gates[b]:
                raise DraConfigError(f"{source}: {a} and {b} cannot be enabled together")
        on = [g for g in UNSUPPORTED_GATES if gates[g]]
        if on:
            raise DraConfigError(
                f"{source}: {', '.join(on)} {'is' if len(on) == 1 else 'are'} not supported by "
                "kubegpu's DRA plugin (docs/dra.md)"
            )
        return cls(frozenset(k for k, v in gates.items() if v), tuple(ignored))


def check_gates(config: DeviceConfig, gates: FeatureGates, source: str) -> None:
    """A sharing strategy needs its feature gate, as upstream requires."""
    if config.sharing is None:
        return
    gate = STRATEGY_GATES[config.sharing.strategy]
    if gate not in gates:
        raise DraConfigError(
            f"{source}: {config.sharing.strategy!r} is selected as the GPU sharing strategy, "
            f"but the {gate!r} feature gate is not enabled"
        )
