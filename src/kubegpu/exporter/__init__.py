"""The metrics exporter: DCGM exporter's metrics and labels, read through NVML.

`Exporter(ExporterConfig(...), nvml)` serves `/metrics` and `/health` in-process
(`await exporter.run()`, or `async with`); `kubegpu exporter` runs it as a node agent.
"""

from __future__ import annotations

from kubegpu.exporter.collector import Collector, Snapshot
from kubegpu.exporter.counters import (
    Counter,
    CountersError,
    CounterSet,
    load_counters,
    parse_counters,
)
from kubegpu.exporter.server import (
    DEFAULT_ADDRESS,
    AddressError,
    Exporter,
    ExporterConfig,
    node_hostname,
    parse_address,
)

__all__ = [
    "DEFAULT_ADDRESS",
    "AddressError",
    "Collector",
    "Counter",
    "CounterSet",
    "CountersError",
    "Exporter",
    "ExporterConfig",
    "Snapshot",
    "load_counters",
    "node_hostname",
    "parse_address",
    "parse_counters",
]
