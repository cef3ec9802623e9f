"""MIG profile names, computed the way NVIDIA's tooling computes them.

Names are not stored in NVML: go-nvlib derives them from the instance memory and the
device total, rounding half away from zero (Go's math.Round). Python's round() is
banker's rounding and names an H200 3g instance "3g.70gb" instead of "3g.71gb", so the
rounding here is explicit.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

MIB = 1024 * 1024
GIB = 1024 * MIB

# NVML GPU-instance profile enum suffixes -> name suffix (go-nvlib's attribute map).
SUFFIX_BY_VARIANT = {
    "": "",
    "REV1": "+me",
    "ALL_ME": "+me.all",
    "GFX": "+gfx",
    "NO_ME": "-me",
    "REV2": "",
}


def round_half_away(value: float) -> int:
    """Round like Go's math.Round: halves go away from zero."""
    return int(Decimal(repr(value)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def memory_gb(memory_mib: int, total_mib: int) -> int:
    """The `Ngb` part of a profile name for an instance of `memory_mib` on a GPU of `total_mib`."""
    total_bytes = total_mib * MIB
    frac = math.ceil(memory_mib * MIB / total_bytes * 8) / 8
    return round_half_away(frac * math.ceil(total_bytes / GIB))


def variant_of(nvml_profile: str) -> str:
    """The variant part of an NVML profile enum name: '1_SLICE_REV1' -> 'REV1', '2_SLICE' -> ''."""
    parts = nvml_profile.split("_SLICE")
    return parts[1].lstrip("_") if len(parts) > 1 else ""


def gpu_instance_name(
    compute_slices: int, memory_mib: int, total_mib: int, variant: str = ""
) -> str:
    """Name of a GPU-instance profile, e.g. `1g.18gb`, `1g.24gb+me.all`."""
    return f"{compute_slices}g.{memory_gb(memory_mib, total_mib)}gb{SUFFIX_BY_VARIANT[variant]}"


def compute_instance_name(ci_slices: int, gi_name: str) -> str:
    """Name of a compute-instance profile inside GPU instance `gi_name` (`1c.3g.20gb`)."""
    gi_slices = int(gi_name.split("g.", 1)[0])
    return gi_name if ci_slices == gi_slices else f"{ci_slices}c.{gi_name}"
