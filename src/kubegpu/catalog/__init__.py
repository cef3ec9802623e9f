"""The GPU catalog: every model kubegpu knows, with MIG profiles, placements and prerequisites.

Data lives in gpus.yaml (generated from the project's reference); this package reads it,
and kubegpu.catalog.placement states, as pure functions over it, the rules a set of MIG
instances must keep on one GPU. Values no source confirms are listed per record in
`unconfirmed`.
"""

from __future__ import annotations

from kubegpu.catalog.loader import CatalogError, load_models
from kubegpu.catalog.models import (
    ComputeInstanceProfile,
    Engines,
    GpuInstanceProfile,
    GpuModel,
    MediaEngines,
    MigCapability,
    driver_at_least,
    parse_driver_version,
)
from kubegpu.catalog.naming import gpu_instance_name, memory_gb, round_half_away

__all__ = [
    "CatalogError",
    "ComputeInstanceProfile",
    "Engines",
    "GpuInstanceProfile",
    "GpuModel",
    "MediaEngines",
    "MigCapability",
    "UnknownModelError",
    "all_models",
    "driver_at_least",
    "find_by_pci_id",
    "find_by_product_name",
    "get_model",
    "gpu_instance_name",
    "memory_gb",
    "parse_driver_version",
    "round_half_away",
]


class UnknownModelError(KeyError):
    def __str__(self) -> str:
        known = ", ".join(m.id for m in all_models())
        return f"unknown GPU model {self.args[0]!r}; known models: {known}"


def all_models() -> tuple[GpuModel, ...]:
    return load_models()


def get_model(model_id: str) -> GpuModel:
    """Look a model up by slug or alias (case-insensitive)."""
    key = model_id.strip().lower()
    for m in load_models():
        if key == m.id or key in m.aliases:
            return m
    raise UnknownModelError(model_id)


def find_by_pci_id(pci_device_id: int) -> GpuModel | None:
    """The model for an NVML pciDeviceId (0xDDDD10DE); the first listed wins on shared ids."""
    for m in load_models():
        if pci_device_id in m.pci_device_ids:
            return m
    return None


def find_by_product_name(name: str) -> GpuModel | None:
    for m in load_models():
        if m.product_name == name:
            return m
    return None
