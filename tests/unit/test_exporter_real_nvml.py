"""The real backend's telemetry reads, against a stand-in for libnvidia-ml (no GPU here).

They check the wiring: which NVML call feeds which field, units (mW -> W, MiB/s -> B/s,
percent -> ratio), NotSupported becoming "no value", and GPM sample bookkeeping.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from kubegpu.nvml import errors
from kubegpu.nvml.real import RealNvml
from kubegpu.nvml.types import Activity, Clocks, MemoryInfo, RemappedRows

MIB = 1024 * 1024


class FakeLib:
    """Answers like an H100 with no MIG; `unsupported` names calls that fail."""

    def __init__(self) -> None:
        self.unsupported: set[str] = set()
        self.samples_alive = 0
        self.gpm_reads = 0

    def check(self, name: str) -> None:
        if name in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetHandleByIndex": lambda i: f"gpu{i}",
            "nvmlDeviceGetClockInfo": lambda h, t: {
                pynvml.NVML_CLOCK_SM: 1980,
                pynvml.NVML_CLOCK_MEM: 2619,
            }[t],
            "nvmlDeviceGetTemperature": lambda h, s: 41,
            "nvmlDeviceGetFieldValues": self.field_values,
            "nvmlDeviceGetPowerUsage": lambda h: 312_456,
            "nvmlDeviceGetTotalEnergyConsumption": lambda h: 987_654_321,
            "nvmlDeviceGetPcieReplayCounter": lambda h: 2,
            "nvmlDeviceGetEncoderUtilization": self.encoder,
            "nvmlDeviceGetDecoderUtilization": lambda h: [7, 167000],
            "nvmlDeviceGetRemappedRows": lambda h: (3, 1, 0, 1),
            "nvmlDeviceGetMemoryInfo": self.memory,
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=55, memory=30),
            "nvmlDeviceGetMigMode": self.mig_mode,
            "nvmlGpmQueryDeviceSupport": lambda h: SimpleNamespace(isSupportedDevice=1),
            "nvmlGpmSampleAlloc": self.alloc,
            "nvmlGpmSampleGet": lambda h, s: s,
            "nvmlGpmMigSampleGet": lambda h, gi, s: s,
            "nvmlGpmSampleFree": self.free,
            "nvmlGpmMetricsGet": self.metrics,
        }
        for name, fn in calls.items():
            monkeypatch.setattr(pynvml, name, fn)

    def field_values(self, h: Any, ids: list[int]) -> list[Any]:
        assert ids == [pynvml.NVML_FI_DEV_MEMORY_TEMP]
        value = pynvml.c_nvmlFieldValue_t()
        value.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        value.value.uiVal = 48
        value.nvmlReturn = 3 if "memory_temp" in self.unsupported else 0
        return [value]

    def encoder(self, h: Any) -> list[int]:
        self.check("encoder")
        return [0, 167000]

    def memory(self, h: Any, version: int | None = None) -> Any:
        if version is not None:
            self.check("memory_v2")
            return SimpleNamespace(total=81559 * MIB, used=1000 * MIB, reserved=512 * MIB)
        return SimpleNamespace(total=81559 * MIB, used=1512 * MIB)

    def mig_mode(self, h: Any) -> list[int]:
        self.check("mig")
        return [0, 0]

    def alloc(self) -> Any:
        self.samples_alive += 1
        return pynvml.c_nvmlGpmSample_t()

    def free(self, sample: Any) -> None:
        self.samples_alive -= 1

    def metrics(self, request: Any) -> Any:
        self.gpm_reads += 1
        values = {
            1: 62.5,
            2: 55.0,
            3: 20.0,
            5: 31.0,
            10: 44.0,
            11: 0.5,
            12: 12.0,
            13: 6.0,
            20: 100.0,
            21: 250.0,
        }
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.value = values[metric.metricId]
            metric.nvmlReturn = 3 if metric.metricId == 13 else 0  # FP16 not measured here
        return request


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    fake = FakeLib()
    fake.install(monkeypatch)  # monkeypatch puts pynvml back after the test
    return fake


def test_each_telemetry_read_uses_its_nvml_call_and_unit(lib: FakeLib) -> None:
    nvml = RealNvml()
    assert nvml.clocks(0) == Clocks(1980, 2619)
    assert nvml.temperature(0) == 41
    assert nvml.memory_temperature(0) == 48
    assert nvml.power_usage(0) == pytest.approx(312.456)  # mW -> W
    assert nvml.total_energy(0) == 987_654_321  # mJ
    assert nvml.pcie_replay_count(0) == 2
    assert nvml.encoder_utilization(0) == 0
    assert nvml.decoder_utilization(0) == 7
    assert nvml.remapped_rows(0) == RemappedRows(3, 1, False, True)
    # nvmlMemory_v2: used excludes the reserved part, and free is what is left
    assert nvml.memory(0) == MemoryInfo(81559, 1000, 512)
    assert nvml.memory(0).free_mib == 81559 - 1000 - 512
    lib.unsupported.add("memory_v2")  # an older driver: v1, reserved counted as used
    assert nvml.memory(0) == MemoryInfo(81559, 1512, 0)
    nvml.close()


def test_gpm_ratios_come_from_two_samples_and_samples_are_freed(lib: FakeLib) -> None:
    nvml = RealNvml()
    with pytest.raises(errors.NotSupported, match="first GPM sample"):
        nvml.activity(0)
    activity = nvml.activity(0)
    assert activity == Activity(
        graphics_active=0.625,
        sm_active=0.55,
        sm_occupancy=0.2,
        tensor_active=0.31,
        dram_active=0.44,
        fp64_active=0.005,
        fp32_active=0.12,
        fp16_active=None,
        pcie_tx_bytes_per_s=100.0 * MIB,
        pcie_rx_bytes_per_s=250.0 * MIB,
    )
    with pytest.raises(errors.NotSupported):
        nvml.activity(0, 3)  # each GPU instance keeps its own previous sample
    assert nvml.activity(0, 3).graphics_active == 0.625
    assert lib.samples_alive == 2  # the latest sample of GPU 0 and of its instance 3
    nvml.close()
    assert lib.samples_alive == 0


def test_sample_leaves_out_what_the_gpu_cannot_report(lib: FakeLib) -> None:
    lib.unsupported |= {"memory_temp", "encoder", "mig"}
    nvml = RealNvml()
    s = nvml.sample(0)
    assert s.memory_temp_c is None
    assert s.encoder_percent is None
    assert s.gpu_temp_c == 41
    assert s.utilization is not None and s.utilization.gpu_percent == 55
    assert not s.mig_enabled and s.gpu_instances == ()
    assert s.activity == Activity()  # GPM's first read only primes it
    assert nvml.sample(0).activity.graphics_active == 0.625
    nvml.close()


def test_a_lost_gpu_fails_the_whole_sample(lib: FakeLib, monkeypatch: pytest.MonkeyPatch) -> None:
    def lost(h: Any) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", lost)
    nvml = RealNvml()
    with pytest.raises(errors.GpuIsLost):
        nvml.sample(0)
    nvml.close()
