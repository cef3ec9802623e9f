"""The counters file: DCGM exporter's CSV format, and what kubegpu does with each field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.exporter import CountersError, load_counters, parse_counters
from kubegpu.exporter.fields import LABELS, METRICS, unsupported_reason


def test_the_built_in_set_is_dcgm_exporters_default_every_field_served() -> None:
    counters = load_counters()
    assert [c.field for c in counters.metrics] == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ]
    assert [c.field for c in counters.labels] == ["DCGM_FI_DRIVER_VERSION"]
    assert counters.skipped == ()
    types = {c.field: c.type for c in counters.metrics}
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert types["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == "gauge"


def test_dcgm_exporters_own_lines_load_with_the_fields_nvml_lacks_skipped() -> None:
    text = (
        "# Format\n"
        "# If line starts with a '#' it is considered a comment\n"
        "# DCGM FIELD, Prometheus metric type, help message\n"
        "\n"
        "DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n"
        "DCGM_FI_DEV_DEC_UTIL ,      gauge, Decoder utilization (in %).\n"
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,    counter, Total number of NVLink bandwidth counters for all lanes.\n"
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status\n"
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, counter, lane 0\n"
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE, gauge, HMMA\n"
        "DCGM_FI_DRIVER_VERSION,        label, Driver Version\n"
    )
    counters = parse_counters(text, "dcgm.csv")
    assert [c.field for c in counters.metrics] == [
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    ]
    assert counters.metrics[1].help == "Decoder utilization (in %)."
    assert [(s.counter.field, s.counter.line) for s in counters.skipped] == [
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", 9),
        ("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", 10),
    ]
    assert counters.warnings()[0].startswith(
        "dcgm.csv:9: DCGM_FI_DEV_NVLINK_BANDWIDTH_L0 skipped: per-link NVLink counters"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "DCGM_FI_DEV_GPU_TEMPERATURE, gauge, typo",
            "f.csv:2: unknown DCGM field 'DCGM_FI_DEV_GPU_TEMPERATURE'",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge",
            "f.csv:2: expected 3 comma-separated fields (DCGM field, type, help), got 2",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, gauge, a, b",
            "f.csv:2: expected 3 comma-separated fields (DCGM field, type, help), got 4",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, gague, typo",
            "f.csv:2: DCGM_FI_DEV_GPU_TEMP: type 'gague' is not one of gauge, counter,",
        ),
        (
            "DCGM_FI_DEV_SM_CLOCK, gauge, twice",
            "f.csv:2: DCGM_FI_DEV_SM_CLOCK is already listed on line 1",
        ),
        (
            "DCGM_FI_DRIVER_VERSION, gauge, a string",
            "f.csv:2: DCGM_FI_DRIVER_VERSION is a text field; list it with type 'label'",
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP, label, a number",
            "f.csv:2: DCGM_FI_DEV_GPU_TEMP is a number; export it as a gauge or counter",
        ),
    ],
)
def test_a_bad_line_rejects_the_file_naming_line_and_field(line: str, message: str) -> None:
    with pytest.raises(CountersError) as err:
        parse_counters(f"DCGM_FI_DEV_SM_CLOCK, gauge, SM clock\n{line}\n", "f.csv")
    assert message in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(CountersError) as err:
        parse_counters("NOPE_1, gauge, x\n# fine\nNOPE_2, gauge, y\n", "f.csv")
    assert str(err.value).splitlines() == [
        "f.csv:1: unknown DCGM field 'NOPE_1'",
        "f.csv:3: unknown DCGM field 'NOPE_2'",
    ]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CountersError, match=r"missing\.csv: cannot read counters file"):
        load_counters(tmp_path / "missing.csv")


def test_field_families_are_recognised_by_pattern_and_typos_are_not() -> None:
    assert unsupported_reason("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L17") is not None
    assert unsupported_reason("DCGM_FI_PROF_NVLINK_L3_RX_BYTES") is not None
    assert unsupported_reason("DCGM_FI_DEV_NVSWITCH_LATENCY_LOW_P00") is not None
    assert unsupported_reason("DCGM_FI_DEV_ECC_DBE_AGG_TEX") is not None
    assert unsupported_reason("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L18") is None
    assert unsupported_reason("DCGM_FI_DEV_GPU_TEMP") is None  # supported, not "known only"
    assert not set(METRICS) & set(LABELS)


@pytest.mark.parametrize("text", ["", "# only comments\n\n", "   \n"])
def test_a_file_with_no_field_is_refused(text: str) -> None:
    with pytest.raises(
        CountersError, match=r"f\.csv: lists no DCGM field; nothing would be exported"
    ):
        parse_counters(text, "f.csv")


def test_errors_quote_an_excerpt_of_a_long_line_and_list_at_most_twenty_problems() -> None:
    long_line = "DCGM_FI_DEV_SM_CLOCK, gauge, " + "x" * 100_000 + ", extra"
    with pytest.raises(CountersError) as err:
        parse_counters(long_line, "f.csv")
    assert len(str(err.value)) < 200
    assert "…" in str(err.value)
    with pytest.raises(CountersError) as err:
        parse_counters("".join(f"NOPE_{i}, gauge, x\n" for i in range(500)), "f.csv")
    lines = str(err.value).splitlines()
    assert len(lines) == 21
    assert lines[-1] == "f.csv: (and 480 more problems)"


def test_a_nul_byte_or_an_unclosed_quote_is_a_line_error() -> None:
    with pytest.raises(CountersError, match=r"f\.csv:1: "):
        parse_counters('"DCGM_FI_DEV_SM_CLOCK, gauge, x\n', "f.csv")
    with pytest.raises(CountersError, match=r"f\.csv:1: "):
        parse_counters("DCGM_FI_DEV_SM_CLOCK\x00, gauge, x\n", "f.csv")
