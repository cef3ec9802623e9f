"""The node status exporter: the node's validation state as Prometheus metrics.

`kubegpu_node_validation_ready{component="driver"}` is 1 while the component's ready file
exists, 0 otherwise; `kubegpu_node_validation_last_change_seconds` is the file's mtime.
Read on every scrape, so it is never stale.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubegpu.validator.files import READY_FILES, ReadyFiles


class ValidationCollector(Collector):
    def __init__(self, files: ReadyFiles, node: str | None = None) -> None:
        self.files = files
        self.node = node or ""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ready = GaugeMetricFamily(
            "kubegpu_node_validation_ready",
            "1 when the component passed validation on this node (its ready file exists).",
            labels=["component", "node"],
        )
        changed = GaugeMetricFamily(
            "kubegpu_node_validation_last_change_seconds",
            "When the component's ready file was written (Unix time).",
            labels=["component", "node"],
        )
        for component in ("driver", "toolkit", "cuda", "plugin"):
            path = self.files.path(READY_FILES[component])
            try:
                mtime = path.stat().st_mtime
            except OSError:
                ready.add_metric([component, self.node], 0.0)
                continue
            ready.add_metric([component, self.node], 1.0)
            changed.add_metric([component, self.node], mtime)
        yield ready
        yield changed
