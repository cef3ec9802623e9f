"""The opaque device config of DRA driver `gpu.nvidia.com` (`resource.nvidia.com/v1beta1`):
`GpuConfig` and `MigDeviceConfig` and their strict decoding (pure).

A claim (or its DeviceClass) may carry parameters that choose a sharing strategy:
`TimeSlicing` with an interval, or `MPS` with thread and pinned memory limits
(reference/dcgm-dra.md section 2.6). Parameters are decoded strictly, as upstream decodes
claims: an unknown field, a wrong kind or a setting that contradicts the strategy is an error
naming the source, the field and the value.

It lives below both the DRA plugin (`kubegpu.dra.config`, which applies it at prepare) and
the planner (`kubegpu plan --api dra`, which emits it): one decoder for what is written and
what is read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
    # strict: lax pydantic read `true` as 1 and `"5_0"` as 50 (issue 29); the driver's Go
    # decoder refuses both, and so does this one.
    return validate(model, parameters, source, DraConfigError, strict=True)
