"""DCGM field names the exporter knows: which it can read through NVML, and why not the rest.

A counters file may name any DCGM field. Fields in `METRICS` and `LABELS` become series or
labels; fields in `KNOWN` are real DCGM fields kubegpu cannot supply without DCGM, and are
skipped with a warning (as DCGM exporter skips profiling fields when DCP is missing). Any
other name is an error. Field ids are DCGM's (dcgm_fields.h); docs/exporter.md lists all
of this for users.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from kubegpu.nvml.types import (
    Activity,
    DeviceInfo,
    DeviceSample,
    GpuInstanceSample,
    MemoryInfo,
    SystemInfo,
)


class OnInstance(Enum):
    """What a field reports on the series of a MIG GPU instance."""

    OWN = "own"  # the instance's own value (framebuffer, profiling ratios)
    PARENT = "parent"  # the physical GPU's value (clocks, power, temperature...)
    NONE = "none"  # not reported on instances (DCGM: *_UTIL is not supported for MIG)


Reader = Callable[[DeviceSample, GpuInstanceSample | None], float | None]


@dataclass(frozen=True)
class MetricField:
    name: str
    id: int
    read: Reader
    on_instance: OnInstance


@dataclass(frozen=True)
class LabelField:
    name: str
    id: int
    read: Callable[[SystemInfo | None, DeviceInfo], str | None]


def _mem(sample: DeviceSample, gi: GpuInstanceSample | None) -> MemoryInfo | None:
    return gi.memory if gi is not None else sample.memory


def _act(sample: DeviceSample, gi: GpuInstanceSample | None) -> Activity:
    return gi.activity if gi is not None else sample.activity


def _used_ratio(m: MemoryInfo | None) -> float | None:
    if m is None or m.total_mib - m.reserved_mib <= 0:
        return None
    return m.used_mib / (m.total_mib - m.reserved_mib)


def _opt(value: float | bool | None) -> float | None:
    return None if value is None else float(value)


def _num(record: object | None, attr: str) -> float | None:
    """`record.attr` as a float; None when the record itself is missing."""
    return None if record is None else float(getattr(record, attr))


def _text(record: object | None, attr: str) -> str | None:
    return None if record is None else str(getattr(record, attr))


def _nvlink_total(sample: DeviceSample, gi: GpuInstanceSample | None) -> float | None:
    """NVLink payload moved since the driver loaded, TX and RX of every active link (KiB);
    0 on a GPU without NVLink, as DCGM reports it."""
    return None if sample.nvlink is None else float(sample.nvlink.total_kib)


# vGPU licence state (NVML's nvmlGridLicenseState): only a vGPU guest holds a licence. The
# GPUs kubegpu runs on are bare metal or passed through whole, where DCGM reports 0.
BARE_METAL_VGPU_LICENSE_STATUS = 0.0


P, OWN, N = OnInstance.PARENT, OnInstance.OWN, OnInstance.NONE

# DCGM_FI_DEV_XID_ERRORS is read from NVML's event stream, not from a device sample: the
# collector fills it in (with its err_code / err_msg labels).
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"

_METRICS = [
    MetricField("DCGM_FI_DEV_MIG_MODE", 67, lambda s, g: float(s.mig_enabled), P),
    MetricField("DCGM_FI_DEV_SM_CLOCK", 100, lambda s, g: _num(s.clocks, "sm_mhz"), P),
    MetricField("DCGM_FI_DEV_MEM_CLOCK", 101, lambda s, g: _num(s.clocks, "memory_mhz"), P),
    MetricField("DCGM_FI_DEV_MEMORY_TEMP", 140, lambda s, g: _opt(s.memory_temp_c), P),
    MetricField("DCGM_FI_DEV_GPU_TEMP", 150, lambda s, g: _opt(s.gpu_temp_c), P),
    MetricField("DCGM_FI_DEV_POWER_USAGE", 155, lambda s, g: s.power_w, P),
    MetricField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, lambda s, g: _opt(s.energy_mj), P),
    MetricField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202, lambda s, g: _opt(s.pcie_replays), P),
    MetricField(
        "DCGM_FI_DEV_GPU_UTIL",
        203,
        lambda s, g: _num(s.utilization, "gpu_percent"),
        N,
    ),
    MetricField(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        204,
        lambda s, g: _num(s.utilization, "memory_percent"),
        N,
    ),
    MetricField("DCGM_FI_DEV_ENC_UTIL", 206, lambda s, g: _opt(s.encoder_percent), N),
    MetricField("DCGM_FI_DEV_DEC_UTIL", 207, lambda s, g: _opt(s.decoder_percent), N),
    MetricField(XID_ERRORS, 230, lambda s, g: None, P),
    MetricField("DCGM_FI_DEV_FB_TOTAL", 250, lambda s, g: _num(_mem(s, g), "total_mib"), OWN),
    MetricField("DCGM_FI_DEV_FB_FREE", 251, lambda s, g: _num(_mem(s, g), "free_mib"), OWN),
    MetricField("DCGM_FI_DEV_FB_USED", 252, lambda s, g: _num(_mem(s, g), "used_mib"), OWN),
    MetricField(
        "DCGM_FI_DEV_FB_RESERVED",
        253,
        lambda s, g: _num(_mem(s, g), "reserved_mib"),
        OWN,
    ),
    MetricField("DCGM_FI_DEV_FB_USED_PERCENT", 254, lambda s, g: _used_ratio(_mem(s, g)), OWN),
    MetricField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        393,
        lambda s, g: _num(s.remapped_rows, "uncorrectable"),
        P,
    ),
    MetricField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        394,
        lambda s, g: _num(s.remapped_rows, "correctable"),
        P,
    ),
    MetricField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        395,
        lambda s, g: _num(s.remapped_rows, "failed"),
        P,
    ),
    MetricField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        396,
        lambda s, g: _num(s.remapped_rows, "pending"),
        P,
    ),
    MetricField("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, _nvlink_total, P),
    MetricField(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526, lambda s, g: BARE_METAL_VGPU_LICENSE_STATUS, P
    ),
    MetricField(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001, lambda s, g: _act(s, g).graphics_active, OWN
    ),
    MetricField("DCGM_FI_PROF_SM_ACTIVE", 1002, lambda s, g: _act(s, g).sm_active, OWN),
    MetricField("DCGM_FI_PROF_SM_OCCUPANCY", 1003, lambda s, g: _act(s, g).sm_occupancy, OWN),
    MetricField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, lambda s, g: _act(s, g).tensor_active, OWN
    ),
    MetricField("DCGM_FI_PROF_DRAM_ACTIVE", 1005, lambda s, g: _act(s, g).dram_active, OWN),
    MetricField("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1006, lambda s, g: _act(s, g).fp64_active, OWN),
    MetricField("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1007, lambda s, g: _act(s, g).fp32_active, OWN),
    MetricField("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1008, lambda s, g: _act(s, g).fp16_active, OWN),
    MetricField(
        "DCGM_FI_PROF_PCIE_TX_BYTES", 1009, lambda s, g: _act(s, g).pcie_tx_bytes_per_s, OWN
    ),
    MetricField(
        "DCGM_FI_PROF_PCIE_RX_BYTES", 1010, lambda s, g: _act(s, g).pcie_rx_bytes_per_s, OWN
    ),
]
METRICS: dict[str, MetricField] = {f.name: f for f in _METRICS}

_LABELS = [
    LabelField("DCGM_FI_DRIVER_VERSION", 1, lambda s, d: _text(s, "driver_version")),
    LabelField("DCGM_FI_NVML_VERSION", 2, lambda s, d: _text(s, "nvml_version")),
    LabelField("DCGM_FI_CUDA_DRIVER_VERSION", 5, lambda s, d: _text(s, "cuda_driver_version")),
    LabelField("DCGM_FI_DEV_NAME", 50, lambda s, d: d.name),
    LabelField("DCGM_FI_DEV_NVML_INDEX", 52, lambda s, d: str(d.index)),
    LabelField("DCGM_FI_DEV_UUID", 54, lambda s, d: d.uuid),
    LabelField("DCGM_FI_DEV_PCI_BUSID", 57, lambda s, d: d.pci_bus_id),
    LabelField(
        "DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY",
        63,
        lambda s, d: "{}.{}".format(*d.compute_capability),
    ),
]
LABELS: dict[str, LabelField] = {f.name: f for f in _LABELS}

# -- known DCGM fields kubegpu does not supply, grouped by the reason --------------------------
NO_GPM = "a DCGM profiling field with no NVML GPU Performance Monitoring equivalent; needs DCGM"
NO_NVLINK = "per-link NVLink counters are not read by kubegpu's exporter yet (the total is)"
NO_NVSWITCH = "NVSwitch entities are not monitored by kubegpu's exporter"
NO_VGPU = "a vGPU field: only meaningful on virtualised GPUs, which kubegpu does not manage"
NOT_A_METRIC = "a static or structured DCGM field, not a number or label for Prometheus"
NOT_YET = "not read by kubegpu's exporter yet"
EXPORTER_ONLY = "a metric DCGM exporter synthesises itself; kubegpu does not implement it yet"

_KNOWN_BY_REASON: dict[str, list[tuple[str, int]]] = {
    NOT_A_METRIC: [
        ("DCGM_FI_PROCESS_NAME", 3),
        ("DCGM_FI_DEV_COUNT", 4),
        ("DCGM_FI_DEV_MINOR_NUMBER", 55),
        ("DCGM_FI_DEV_PCI_COMBINED_ID", 58),
        ("DCGM_FI_DEV_PCI_SUBSYS_ID", 59),
        ("DCGM_FI_GPU_TOPOLOGY_PCI", 60),
        ("DCGM_FI_GPU_TOPOLOGY_NVLINK", 61),
        ("DCGM_FI_GPU_TOPOLOGY_AFFINITY", 62),
        ("DCGM_FI_DEV_CUDA_VISIBLE_DEVICES_STR", 68),
        ("DCGM_FI_DEV_CPU_AFFINITY_0", 70),
        ("DCGM_FI_DEV_CPU_AFFINITY_1", 71),
        ("DCGM_FI_DEV_CPU_AFFINITY_2", 72),
        ("DCGM_FI_DEV_CPU_AFFINITY_3", 73),
        ("DCGM_FI_DEV_MIG_ATTRIBUTES", 75),
        ("DCGM_FI_DEV_MIG_GI_INFO", 76),
        ("DCGM_FI_DEV_MIG_CI_INFO", 77),
        ("DCGM_FI_DEV_SUPPORTED_CLOCKS", 130),
        ("DCGM_FI_DEV_ACCOUNTING_DATA", 205),
        ("DCGM_FI_DEV_GPU_NVLINK_ERRORS", 450),
    ],
    NOT_YET: [
        ("DCGM_FI_DEV_BRAND", 51),
        ("DCGM_FI_DEV_SERIAL", 53),
        ("DCGM_FI_DEV_OEM_INFOROM_VER", 56),
        ("DCGM_FI_DEV_COMPUTE_MODE", 65),
        ("DCGM_FI_DEV_PERSISTENCE_MODE", 66),
        ("DCGM_FI_DEV_MIG_MAX_SLICES", 69),
        ("DCGM_FI_DEV_CC_MODE", 74),
        ("DCGM_FI_DEV_ECC_INFOROM_VER", 80),
        ("DCGM_FI_DEV_POWER_INFOROM_VER", 81),
        ("DCGM_FI_DEV_INFOROM_IMAGE_VER", 82),
        ("DCGM_FI_DEV_INFOROM_CONFIG_CHECK", 83),
        ("DCGM_FI_DEV_INFOROM_CONFIG_VALID", 84),
        ("DCGM_FI_DEV_VBIOS_VERSION", 85),
        ("DCGM_FI_DEV_BAR1_TOTAL", 90),
        ("DCGM_FI_SYNC_BOOST", 91),
        ("DCGM_FI_DEV_BAR1_USED", 92),
        ("DCGM_FI_DEV_BAR1_FREE", 93),
        ("DCGM_FI_DEV_VIDEO_CLOCK", 102),
        ("DCGM_FI_DEV_APP_SM_CLOCK", 110),
        ("DCGM_FI_DEV_APP_MEM_CLOCK", 111),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 112),
        ("DCGM_FI_DEV_MAX_SM_CLOCK", 113),
        ("DCGM_FI_DEV_MAX_MEM_CLOCK", 114),
        ("DCGM_FI_DEV_MAX_VIDEO_CLOCK", 115),
        ("DCGM_FI_DEV_AUTOBOOST", 120),
        ("DCGM_FI_DEV_MEM_MAX_OP_TEMP", 151),
        ("DCGM_FI_DEV_GPU_MAX_OP_TEMP", 152),
        ("DCGM_FI_DEV_SLOWDOWN_TEMP", 158),
        ("DCGM_FI_DEV_SHUTDOWN_TEMP", 159),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 160),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", 161),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", 162),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", 163),
        ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 164),
        ("DCGM_FI_DEV_PSTATE", 190),
        ("DCGM_FI_DEV_FAN_SPEED", 191),
        ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 200),
        ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 201),
        ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 235),
        ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 236),
        ("DCGM_FI_DEV_PCIE_LINK_GEN", 237),
        ("DCGM_FI_DEV_PCIE_LINK_WIDTH", 238),
        ("DCGM_FI_DEV_POWER_VIOLATION", 240),
        ("DCGM_FI_DEV_THERMAL_VIOLATION", 241),
        ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", 242),
        ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", 243),
        ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", 244),
        ("DCGM_FI_DEV_RELIABILITY_VIOLATION", 245),
        ("DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION", 246),
        ("DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION", 247),
        ("DCGM_FI_DEV_ECC_CURRENT", 300),
        ("DCGM_FI_DEV_ECC_PENDING", 301),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313),
        ("DCGM_FI_DEV_RETIRED_SBE", 390),
        ("DCGM_FI_DEV_RETIRED_DBE", 391),
        ("DCGM_FI_DEV_RETIRED_PENDING", 392),
    ],
    NO_GPM: [
        ("DCGM_FI_PROF_NVLINK_TX_BYTES", 1011),
        ("DCGM_FI_PROF_NVLINK_RX_BYTES", 1012),
        ("DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", 1013),
        ("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", 1014),
        ("DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", 1015),
        ("DCGM_FI_PROF_PIPE_INT_ACTIVE", 1016),
        ("DCGM_FI_PROF_NVOFA0_ACTIVE", 1033),
    ],
    NO_VGPU: [("DCGM_FI_DEV_VIRTUAL_MODE", 500)],
    EXPORTER_ONLY: [
        ("DCGM_EXP_XID_ERRORS_COUNT", 9001),
        ("DCGM_EXP_CLOCK_EVENTS_COUNT", 9002),
        ("DCGM_EXP_GPU_HEALTH_STATUS", 9003),
        ("DCGM_EXP_P2P_STATUS", 9004),
    ],
}
# ECC counters per memory location: SBE/DBE x VOL/AGG x L1/L2/DEV/REG/TEX (ids 314-333)
_ECC_LOCATIONS = [
    (f"DCGM_FI_DEV_ECC_{bits}_{kind}_{where}", 314 + 2 * i + j + (10 if kind == "AGG" else 0))
    for kind in ("VOL", "AGG")
    for i, where in enumerate(("L1", "L2", "DEV", "REG", "TEX"))
    for j, bits in enumerate(("SBE", "DBE"))
]
_KNOWN_BY_REASON[NOT_YET] += _ECC_LOCATIONS

# Families named by pattern: per-lane NVLink, NVSwitch, vGPU and per-engine profiling fields
_KNOWN_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_(L([0-9]|1[0-7])|TOTAL)"
        ),
        NO_NVLINK,
    ),
    (re.compile(r"DCGM_FI_DEV_NVLINK_BANDWIDTH_L([0-9]|1[0-7])"), NO_NVLINK),
    (re.compile(r"DCGM_FI_PROF_NVLINK_L([0-9]|1[0-7])_(TX|RX)_BYTES"), NO_GPM),
    (re.compile(r"DCGM_FI_PROF_(NVDEC|NVJPG)[0-7]_ACTIVE"), NO_GPM),
    (re.compile(r"DCGM_FI_DEV_NVSWITCH_[A-Z0-9_]+"), NO_NVSWITCH),
    (
        re.compile(
            r"DCGM_FI_DEV_(VGPU_[A-Z_]+|SUPPORTED_TYPE_INFO|CREATABLE_VGPU_TYPE_IDS|"
            r"SUPPORTED_VGPU_TYPE_IDS|ENC_STATS|FBC_STATS|FBC_SESSIONS_INFO)"
        ),
        NO_VGPU,
    ),
]

KNOWN: dict[str, str] = {
    name: reason for reason, fields in _KNOWN_BY_REASON.items() for name, _ in fields
}


def unsupported_reason(name: str) -> str | None:
    """Why a known DCGM field is not supplied; None when the name is not a DCGM field."""
    if name in KNOWN:
        return KNOWN[name]
    for pattern, reason in _KNOWN_PATTERNS:
        if pattern.fullmatch(name):
            return reason
    return None
