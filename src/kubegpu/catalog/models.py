"""Typed records for GPU models and their MIG profiles (the catalog's domain objects)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, cached_property

from kubegpu.catalog.naming import compute_instance_name, variant_of


@cache  # the planner's layout search asks the same few versions many thousand times
def parse_driver_version(version: str) -> tuple[int, ...]:
    """'575.51.03' -> (575, 51, 3); a bare branch '525' -> (525,). Compared as tuples."""
    try:
        return tuple(int(part) for part in version.strip().split("."))
    except ValueError as exc:
        raise ValueError(f"not a driver version: {version!r}") from exc


def driver_at_least(version: str, minimum: str) -> bool:
    return parse_driver_version(version) >= parse_driver_version(minimum)


@dataclass(frozen=True)
class MediaEngines:
    """Decoders, encoders, JPEG decoders and optical-flow accelerators: counts of each.

    A GPU has a fixed number of each and hands them out whole to its GPU instances, so a
    set of instances fits only when their sums stay within the GPU's (`MigCapability.engines`).
    """

    dec: int
    enc: int
    jpg: int
    ofa: int

    def __add__(self, other: MediaEngines) -> MediaEngines:
        return MediaEngines(
            self.dec + other.dec, self.enc + other.enc, self.jpg + other.jpg, self.ofa + other.ofa
        )

    def fits_with(self, more: MediaEngines, budget: MediaEngines) -> bool:
        """Whether this plus `more` stays within `budget` (the hot path of layout search)."""
        return (
            self.dec + more.dec <= budget.dec
            and self.enc + more.enc <= budget.enc
            and self.jpg + more.jpg <= budget.jpg
            and self.ofa + more.ofa <= budget.ofa
        )

    def over(self, budget: MediaEngines) -> list[str]:
        """The engine kinds of which this needs more than `budget` has, as 'NVDEC 5 > 4'."""
        return [
            f"{label} {mine} > {theirs}"
            for label, mine, theirs in (
                ("NVDEC", self.dec, budget.dec),
                ("NVENC", self.enc, budget.enc),
                ("NVJPG", self.jpg, budget.jpg),
                ("OFA", self.ofa, budget.ofa),
            )
            if mine > theirs
        ]


NO_MEDIA_ENGINES = MediaEngines(0, 0, 0, 0)


@dataclass(frozen=True)
class Engines:
    """Media and copy engines owned by one GPU instance."""

    ce: int
    dec: int
    enc: int
    jpg: int
    ofa: int

    @cached_property
    def media(self) -> MediaEngines:
        return MediaEngines(self.dec, self.enc, self.jpg, self.ofa)


@dataclass(frozen=True)
class GpuInstanceProfile:
    """One GPU-instance profile of one model (a row of `nvidia-smi mig -lgip`)."""

    nvml: str  # NVML_GPU_INSTANCE_PROFILE_<nvml>, e.g. "1_SLICE_REV1"
    nvml_enum: int  # the enum value passed to nvmlDeviceGetGpuInstanceProfileInfo
    id: int  # the per-device `.id` used by placement/create/list calls
    compute_slices: int
    slices: int  # size on the placement axis
    memory_mib: int
    sms: int
    engines: Engines
    max_count: int
    placements: tuple[int, ...]  # possible start positions
    name: str  # computed with the naming formula
    documented_name: str  # the name NVIDIA documents, kept to check the formula
    min_driver: str | None = None
    unconfirmed: frozenset[str] = frozenset()

    @property
    def variant(self) -> str:
        return variant_of(self.nvml)

    @property
    def all_media_engines(self) -> bool:
        return self.variant == "ALL_ME"

    @property
    def no_media_engines(self) -> bool:
        return self.variant == "NO_ME"


@dataclass(frozen=True)
class ComputeInstanceProfile:
    """A compute-instance profile inside a GPU instance with `gi_compute_slices` slices."""

    nvml_enum: int  # equals the observed `.id`
    compute_slices: int
    max_count: int
    sms: int
    default: bool
    derived: bool  # True when inferred rather than read from hardware output

    def name(self, gi: GpuInstanceProfile) -> str:
        return compute_instance_name(self.compute_slices, gi.name)


@dataclass(frozen=True)
class CombinationRule:
    """Profiles that may only share a GPU from a driver branch on."""

    profiles: frozenset[str]  # NVML enum names
    min_driver: str


@dataclass(frozen=True)
class MigCapability:
    placement_units: int
    compute_slices: int
    max_gpu_instances: int
    min_driver: str
    mode_change_needs_reset: bool
    display_mode_compute_required: bool
    min_vbios: str | None
    gpu_instance_profiles: tuple[GpuInstanceProfile, ...]
    engines: MediaEngines  # the media engines the GPU shares out among its instances
    compute_instance_tables: dict[int, tuple[ComputeInstanceProfile, ...]] = field(
        default_factory=dict, hash=False, compare=False
    )
    combination_rules: tuple[CombinationRule, ...] = ()
    unconfirmed: frozenset[str] = frozenset()

    def profile(self, name: str) -> GpuInstanceProfile:
        for p in self.gpu_instance_profiles:
            if p.name == name:
                return p
        raise KeyError(name)

    def profile_by_id(self, profile_id: int) -> GpuInstanceProfile:
        for p in self.gpu_instance_profiles:
            if p.id == profile_id:
                return p
        raise KeyError(profile_id)

    def driver_problems(self, profiles: Iterable[GpuInstanceProfile], driver: str) -> list[str]:
        """Why `driver` cannot create these profiles together on one GPU (empty when it can).

        The rules live in kubegpu.catalog.placement; this is a shortcut to them.
        """
        from kubegpu.catalog.placement import driver_problems

        return driver_problems(self, profiles, driver)

    def compute_instance_profiles(
        self, gi: GpuInstanceProfile
    ) -> tuple[ComputeInstanceProfile, ...]:
        """CI profiles a GI of this profile offers: the recorded table, or go-nvlib's rule."""
        known = self.compute_instance_tables.get(gi.compute_slices)
        if known is not None:
            return known
        return derive_compute_instance_profiles(gi)


# NVML_COMPUTE_INSTANCE_PROFILE_* values by compute-slice count.
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_ENUM_1_SLICE_REV1 = 7


def derive_compute_instance_profiles(gi: GpuInstanceProfile) -> tuple[ComputeInstanceProfile, ...]:
    """go-nvlib's validity rule: `c` fits in `g` iff c == g or (c < g and 2c <= g + 1)."""
    g = gi.compute_slices
    out = []
    for c in sorted(CI_ENUM_BY_SLICES):
        if c == g or (c < g and 2 * c <= g + 1):
            enum = CI_ENUM_BY_SLICES[c]
            if c == g == 1 and gi.variant == "REV2":
                enum = CI_ENUM_1_SLICE_REV1  # observed on GH200: the REV2 GI's CI is 1_SLICE_REV1
            out.append(
                ComputeInstanceProfile(
                    nvml_enum=enum,
                    compute_slices=c,
                    max_count=g // c,
                    sms=gi.sms * c // g,
                    default=c == g,
                    derived=True,
                )
            )
    return tuple(out)


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: identity, size and (when MIG-capable) its MIG geometry."""

    id: str  # lowercase slug, e.g. "h200-nvl"
    product_name: str  # what NVML's nvmlDeviceGetName reports
    description: str
    aliases: tuple[str, ...]
    pci_device_ids: tuple[int, ...]  # 0xDDDD10DE as NVML's pciDeviceId
    architecture: str
    compute_capability: str
    memory_mib: int
    sms: int
    mig: MigCapability | None
    unconfirmed: frozenset[str] = frozenset()
    sources: tuple[str, ...] = ()

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def pci_device_id(self) -> int:
        return self.pci_device_ids[0]

    def unconfirmed_facts(self) -> list[str]:
        """Every field of this model not backed by a source, as dotted paths."""
        facts = sorted(self.unconfirmed)
        if self.mig:
            facts += [f"mig.{u}" for u in sorted(self.mig.unconfirmed)]
            for p in self.mig.gpu_instance_profiles:
                facts += [f"mig.{p.name}.{u}" for u in sorted(p.unconfirmed)]
        return facts
