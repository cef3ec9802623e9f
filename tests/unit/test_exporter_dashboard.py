"""deploy/grafana/kubegpu-dashboard.json asks only for what the exporter serves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kubegpu.exporter import isolation, load_counters

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "kubegpu-dashboard.json"
LABELS = {
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "pod",
    "namespace",
    "container",
    "vgpu",
    "err_code",
    "err_msg",
    "attribution",
    "method",
    "fault_isolated",
}


def queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_the_dashboard_queries_only_metrics_and_labels_the_exporter_serves() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    served = {c.field for c in load_counters().metrics} | {"kubegpu_exporter_gpu_up"}
    served |= {name for name, _ in isolation.FAMILIES}
    exprs = queries(dashboard)
    assert exprs
    for e in exprs:  # a cheap syntax check: brackets balance
        assert e.count("(") == e.count(")") and e.count("{") == e.count("}"), e
    used = {
        m for e in exprs for m in re.findall(r"\b(?:DCGM_FI_\w+|kubegpu_(?:exporter|pod)_\w+)", e)
    }
    assert used <= served, used - served
    grouped = {
        label.strip()
        for e in exprs
        for group in re.findall(r"(?:by|without) \(([^)]*)\)", e)
        for label in group.split(",")
    }
    matched = {m for e in exprs for m in re.findall(r"(\w+)\s*(?:=~|!=|=)\s*\"", e)}
    label_values = {m for e in exprs for m in re.findall(r", (\w+)\)$", e)}
    assert grouped | matched | label_values <= LABELS, (grouped | matched | label_values) - LABELS


def test_the_dashboard_has_gpu_mig_and_pod_views_and_unique_panels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert [r.split(" ")[0] for r in rows] == ["GPUs", "MIG", "Pods"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables == ["datasource", "node", "gpu", "namespace", "pod"]
    assert all(
        p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"] if p["type"] != "row"
    )
