"""Load gpus.yaml into typed records, checking it as it goes."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

from kubegpu.catalog.models import (
    CombinationRule,
    ComputeInstanceProfile,
    Engines,
    GpuInstanceProfile,
    GpuModel,
    MediaEngines,
    MigCapability,
)
from kubegpu.catalog.naming import gpu_instance_name, variant_of

# NVML_GPU_INSTANCE_PROFILE_* enum values (nvml.h).
GI_PROFILE_ENUM = {
    "1_SLICE": 0, "2_SLICE": 1, "3_SLICE": 2, "4_SLICE": 3, "7_SLICE": 4, "8_SLICE": 5,
    "6_SLICE": 6, "1_SLICE_REV1": 7, "2_SLICE_REV1": 8, "1_SLICE_REV2": 9,
    "1_SLICE_GFX": 10, "2_SLICE_GFX": 11, "4_SLICE_GFX": 12, "1_SLICE_NO_ME": 13,
    "2_SLICE_NO_ME": 14, "1_SLICE_ALL_ME": 15, "2_SLICE_ALL_ME": 16, "3_SLICE_GFX": 17,
}  # fmt: skip


class CatalogError(ValueError):
    """The catalog data file is inconsistent."""


def _profile(model_id: str, total_mib: int, raw: dict[str, Any]) -> GpuInstanceProfile:
    where = f"gpus.yaml: model {model_id}, profile {raw.get('name')!r}"
    nvml = raw["nvml"]
    if nvml not in GI_PROFILE_ENUM:
        raise CatalogError(f"{where}: unknown NVML profile {nvml!r}")
    name = gpu_instance_name(raw["compute_slices"], raw["memory_mib"], total_mib, variant_of(nvml))
    return GpuInstanceProfile(
        nvml=nvml,
        nvml_enum=GI_PROFILE_ENUM[nvml],
        id=raw["id"],
        compute_slices=raw["compute_slices"],
        slices=raw["slices"],
        memory_mib=raw["memory_mib"],
        sms=raw["sms"],
        engines=Engines(raw["ce"], raw["dec"], raw["enc"], raw["jpg"], raw["ofa"]),
        max_count=raw["max_count"],
        placements=tuple(raw["placements"]),
        name=name,
        documented_name=raw["name"],
        min_driver=raw.get("min_driver"),
        unconfirmed=frozenset(raw.get("unconfirmed", [])),
    )


def _engines(model_id: str, raw: Any) -> MediaEngines:
    where = f"gpus.yaml: model {model_id}, field mig.engines"
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping of dec, enc, jpg, ofa, got {raw!r}")
    counts = {}
    for key in ("dec", "enc", "jpg", "ofa"):
        value = raw.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CatalogError(f"{where}.{key}: expected a count, got {value!r}")
        counts[key] = value
    return MediaEngines(**counts)


def _mig(model_id: str, total_mib: int, raw: dict[str, Any]) -> MigCapability:
    profiles = tuple(_profile(model_id, total_mib, p) for p in raw["gpu_instance_profiles"])
    for p in profiles:
        for start in p.placements:
            if start + p.slices > raw["placement_units"]:
                raise CatalogError(
                    f"gpus.yaml: model {model_id}, profile {p.name}: placement {start}:{p.slices} "
                    f"beyond {raw['placement_units']} units"
                )
    seen: set[int] = set()
    for p in profiles:
        if p.id in seen:
            raise CatalogError(f"gpus.yaml: model {model_id}: duplicate profile id {p.id}")
        seen.add(p.id)
    engines = _engines(model_id, raw.get("engines"))
    for p in profiles:
        over = p.engines.media.over(engines)
        if over:
            raise CatalogError(
                f"gpus.yaml: model {model_id}, profile {p.name}: more media engines than the "
                f"GPU has ({', '.join(over)})"
            )
    tables: dict[int, tuple[ComputeInstanceProfile, ...]] = {}
    for gi_slices, rows in (raw.get("compute_instance_profiles") or {}).items():
        tables[int(gi_slices)] = tuple(
            ComputeInstanceProfile(
                nvml_enum=r["id"],
                compute_slices=r["compute_slices"],
                max_count=r["count"],
                sms=r["sms"],
                default=r["default"],
                derived=False,
            )
            for r in rows
        )
    rules = tuple(
        CombinationRule(frozenset(r["profiles"]), str(r["min_driver"]))
        for r in raw.get("combination_rules", [])
    )
    return MigCapability(
        placement_units=raw["placement_units"],
        compute_slices=raw["compute_slices"],
        max_gpu_instances=raw["max_gpu_instances"],
        min_driver=str(raw["min_driver"]),
        mode_change_needs_reset=raw["mode_change_needs_reset"],
        display_mode_compute_required=raw["display_mode_compute_required"],
        min_vbios=raw.get("min_vbios"),
        gpu_instance_profiles=profiles,
        engines=engines,
        compute_instance_tables=tables,
        combination_rules=rules,
        unconfirmed=frozenset(raw.get("unconfirmed", [])),
    )


def _model(raw: dict[str, Any]) -> GpuModel:
    mig = _mig(raw["id"], raw["memory_mib"], raw["mig"]) if raw.get("mig") else None
    return GpuModel(
        id=raw["id"],
        product_name=raw["product_name"],
        description=raw["description"],
        aliases=tuple(raw.get("aliases", [])),
        pci_device_ids=tuple(int(x, 16) for x in raw["pci_device_ids"]),
        architecture=raw["architecture"],
        compute_capability=str(raw["compute_capability"]),
        memory_mib=raw["memory_mib"],
        sms=raw["sms"],
        mig=mig,
        unconfirmed=frozenset(raw.get("unconfirmed", [])),
        sources=tuple(raw.get("sources", [])),
    )


@cache
def load_models() -> tuple[GpuModel, ...]:
    text = resources.files("kubegpu.catalog").joinpath("gpus.yaml").read_text()
    data = yaml.safe_load(text)
    return tuple(_model(m) for m in data["models"])
