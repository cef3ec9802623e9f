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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kubegpu.base.loader import InputError, validate
from kubegpu.catalog import nvidia

Json = dict[str, Any]

Interval = Literal["Default", "Short", "Medium", "Long"]
#: The value nvidia-smi compute-policy --set-timeslice takes for each interval.
INTERVALS: Mapping[str, int] = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
TIME_SLICING = "TimeSlicing"
MPS = "MPS"


class DraConfigError(InputError):
    """An opaque config (or a feature-gate list) the plugin cannot use."""


# --- quantities ---------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i|[kMGTPE]|)$")
_FACTORS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    **{f"{p}i": 1024**n for n, p in enumerate("KMGTPE", start=1)},
}


def quantity_bytes(text: str) -> int:
    """`10Gi` -> 10737418240: a Kubernetes quantity in bytes (the forms memory limits use)."""
    m = _QUANTITY.match(text.strip())
    if not m:
        raise ValueError(f"not a quantity such as 10Gi or 512M: {text!r}")
    number, suffix = m.groups()
    scaled = float(number) * _FACTORS[suffix] if "." in number else int(number) * _FACTORS[suffix]
    return int(scaled)


def quantity_mib(text: str) -> int:
    """A memory limit in whole MiB, rounded down, which upstream requires to be above 0."""
    mib = quantity_bytes(text) // 2**20
    if mib <= 0:
        raise ValueError(f"must be at least 1Mi, got {text!r}")
    return mib


# --- the API ------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeSlicingConfig(_Strict):
    interval: Interval = "Default"


class MpsConfig(_Strict):
    defaultActiveThreadPercentage: int | None = Field(default=None, ge=0, le=100)
    defaultPinnedDeviceMemoryLimit: str | None = None
    # keyed by device UUID or by GPU index
    defaultPerDevicePinnedMemoryLimit: dict[str, str] | None = None

    @field_validator("defaultPinnedDeviceMemoryLimit")
    @classmethod
    def _limit(cls, value: str | None) -> str | None:
        if value is not None:
            quantity_mib(value)
        return value

    @field_validator("defaultPerDevicePinnedMemoryLimit")
    @classmethod
    def _limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, limit in (value or {}).items():
            try:
                quantity_mib(limit)
            except ValueError as exc:
                raise ValueError(f"device {key!r}: {exc}") from None
        return value


class _Sharing(_Strict):
    strategy: Literal["TimeSlicing", "MPS"]
    mpsConfig: MpsConfig | None = None

    @model_validator(mode="after")
    def _mps_only_with_mps(self) -> _Sharing:
        if self.mpsConfig is not None and self.strategy != MPS:
            raise ValueError(f"mpsConfig is set but the strategy is {self.strategy}, not MPS")
        return self


class GpuSharing(_Sharing):
    timeSlicingConfig: TimeSlicingConfig | None = None

    @model_validator(mode="after")
    def _time_slicing_only_with_time_slicing(self) -> GpuSharing:
        if self.timeSlicingConfig is not None and self.strategy != TIME_SLICING:
            raise ValueError(
                f"timeSlicingConfig is set but the strategy is {self.strategy}, not TimeSlicing"
            )
        return self


class MigDeviceSharing(_Sharing):
    """MIG devices take no time-slicing settings; the TimeSlicing strategy is a no-op."""


class _Config(_Strict):
    apiVersion: str

    @field_validator("apiVersion")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value != nvidia.DRA_CONFIG_API_VERSION:
            raise ValueError(f"expected {nvidia.DRA_CONFIG_API_VERSION!r}")
        return value


class GpuConfig(_Config):
    kind: Literal["GpuConfig"]
    sharing: GpuSharing | None = None


class MigDeviceConfig(_Config):
    kind: Literal["MigDeviceConfig"]
    sharing: MigDeviceSharing | None = None


DeviceConfig = GpuConfig | MigDeviceConfig
KINDS: Mapping[str, type[GpuConfig] | type[MigDeviceConfig]] = {
    "GpuConfig": GpuConfig,
    "MigDeviceConfig": MigDeviceConfig,
}
#: Which config kind fits which device type.
KIND_OF_DEVICE: Mapping[str, str] = {"gpu": "GpuConfig", "mig": "MigDeviceConfig"}


def parse_parameters(parameters: Any, source: str) -> DeviceConfig:
    """One opaque `parameters` object, strictly; DraConfigError naming `source` otherwise."""
    if not isinstance(parameters, dict):
        raise DraConfigError(f"{source}: parameters must be an object, got {parameters!r:.60}")
    api = parameters.get("apiVersion")
    if api != nvidia.DRA_CONFIG_API_VERSION:
        raise DraConfigError(
            f"{source}: field apiVersion, value {api!r:.60}: "
            f"expected {nvidia.DRA_CONFIG_API_VERSION!r}"
        )
    kind = parameters.get("kind")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise DraConfigError(
            f"{source}: field kind, value {kind!r:.60}: expected one of {', '.join(KINDS)}"
        )
    return validate(model, parameters, source, DraConfigError)


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

    def __contains__(self, gate: object) -> bool:
        return gate in self.enabled

    @classmethod
    def parse(cls, text: str | None, source: str = "FEATURE_GATES") -> FeatureGates:
        """`TimeSlicingSettings=true,MPSSupport=true` over upstream's defaults."""
        gates = dict(GATE_DEFAULTS)
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
        for a, b in EXCLUSIVE_GATES:
            if gates[a] and gates[b]:
                raise DraConfigError(f"{source}: {a} and {b} cannot be enabled together")
        on = [g for g in UNSUPPORTED_GATES if gates[g]]
        if on:
            raise DraConfigError(
                f"{source}: {', '.join(on)} {'is' if len(on) == 1 else 'are'} not supported by "
                "kubegpu's DRA plugin (docs/dra.md)"
            )
        return cls(frozenset(k for k, v in gates.items() if v))


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
