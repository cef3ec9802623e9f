"""The what-if report: two observations of the twin compared, nothing else (pure)."""

from __future__ import annotations

import json

from rich.console import Console

from kubegpu.doctor.findings import Finding, Severity
from kubegpu.whatif.report import (
    BLOCKED,
    CLEAN,
    WARNINGS,
    GpuLayout,
    NodeState,
    PendingPod,
    TwinState,
    blocking_pods,
    build_report,
    render,
    report_json,
    resource_changes,
)

WHOLE = GpuLayout(0, "h100-80gb", True, False)
SLICED = GpuLayout(0, "h100-80gb", True, True, (("1g.10gb", 7),))
FAILED = (
    "MIG config 'all-1g.10gb' failed: refusing to repartition GPUs that workload pods hold "
    "devices on: GPU 0: ml/train\nGPUs now:\nGPU 0 (h100-80gb): MIG disabled"
)


def finding(check: str, severity: Severity = Severity.WARNING) -> Finding:
    return Finding(
        check=check, severity=severity, object="node/gpu-1", summary=check, evidence="", fix=""
    )


def state(*nodes: NodeState, pending: tuple[PendingPod, ...] = (), **kw: object) -> TwinState:
    return TwinState(nodes, pending, **kw)  # type: ignore[arg-type]


def test_a_repartitioned_node_shows_both_layouts_and_its_new_resources() -> None:
    before = state(NodeState("gpu-1", (WHOLE,), {"nvidia.com/gpu": "1"}, "all-disabled"))
    after = state(
        NodeState("gpu-1", (SLICED,), {"nvidia.com/mig-1g.10gb": "7"}, "all-1g.10gb", "success")
    )
    report = build_report(before, after, change=["node gpu-1: mig.config=all-1g.10gb"])
    (node,) = report.nodes
    assert node.repartitioned
    assert node.layout_before == ("0: h100-80gb whole",)
    assert node.layout_after == ("0: h100-80gb MIG 7x 1g.10gb",)
    assert node.mig_config == ("all-disabled", "all-1g.10gb")
    assert resource_changes(node.advertised_before, node.advertised_after) == [
        "nvidia.com/gpu: 1 -> 0",
        "nvidia.com/mig-1g.10gb: 0 -> 7",
    ]
    assert report.blocked == () and report.exit_code == CLEAN


def test_a_pod_holding_a_gpu_that_must_change_is_named_as_blocking() -> None:
    node = NodeState(
        "gpu-1",
        (WHOLE, GpuLayout(1, "h100-80gb", True, False)),
        mig_config="all-1g.10gb",
        mig_state="failed",
        mig_message=FAILED,
        holders={"ml/train": (0,), "ml/other": (1,)},
        changing=(0,),
    )
    (blocked,) = blocking_pods(node)
    assert (blocked.pod, blocked.node, blocked.gpus) == ("ml/train", "gpu-1", (0,))
    assert blocked.reason.startswith("MIG config 'all-1g.10gb' failed: refusing")
    assert "GPUs now" not in blocked.reason  # the first line only
    report = build_report(state(node), state(node))
    assert report.nodes[0].not_applied == (0,)
    assert not report.nodes[0].repartitioned
    assert report.exit_code == BLOCKED


def test_pods_on_gpus_that_do_not_change_block_nothing() -> None:
    node = NodeState("gpu-1", (SLICED,), holders={"ml/train": (0,)}, changing=())
    assert blocking_pods(node) == []


def test_pending_pods_and_an_unsettled_twin_are_not_a_success() -> None:
    node = NodeState("gpu-1", (WHOLE,))
    pending = (PendingPod("ml/big", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),)
    report = build_report(state(node), state(node, pending=pending))
    assert report.pending == pending and report.exit_code == BLOCKED
    unsettled = build_report(
        state(node), state(node, settled=False, unsettled=("node gpu-1: pending",))
    )
    assert unsettled.exit_code == BLOCKED


def test_the_doctors_findings_after_the_change_are_marked_new_when_they_were_not_before() -> None:
    node = NodeState("gpu-1", (WHOLE,))
    old, new = finding("old-one"), finding("new-one")
    report = build_report(
        state(node), state(node), findings_before=[old], findings_after=[old, new]
    )
    assert report.new_findings == (new,)
    assert report.exit_code == WARNINGS
    errors = build_report(state(node), state(node), findings_after=[finding("x", Severity.ERROR)])
    assert errors.exit_code == BLOCKED


def test_json_and_rich_output_carry_the_same_facts() -> None:
    node = NodeState(
        "gpu-1",
        (WHOLE,),
        {"nvidia.com/gpu": "1"},
        "all-1g.10gb",
        "failed",
        FAILED,
        holders={"ml/train": (0,)},
        changing=(0,),
    )
    report = build_report(
        state(NodeState("gpu-1", (WHOLE,), {"nvidia.com/gpu": "1"}, "all-disabled")),
        state(node),
        change=["node gpu-1: nvidia.com/mig.config=all-1g.10gb"],
    )
    data = report_json(report)
    json.dumps(data)  # serialisable
    assert data["blocked"] == [
        {"pod": "ml/train", "node": "gpu-1", "gpus": [0], "reason": FAILED.splitlines()[0]}
    ]
    assert data["nodes"][0]["not_applied_gpus"] == [0]
    assert data["exit_code"] == BLOCKED
    console = Console(width=200, record=True)
    console.print(render(report))
    text = console.export_text()
    assert "Pods that block the change" in text and "ml/train" in text
    assert "all-disabled -> all-1g.10gb" in text
    assert "not repartitioned: GPU 0" in text


def test_each_pod_pending_in_the_snapshot_is_reported_with_whether_it_ran() -> None:
    node = NodeState("gpu-1", (SLICED,))
    after = state(
        node,
        pending=(PendingPod("ml/big", "0/2 nodes are available: Insufficient mig-7g.80gb"),),
        pods={"ml/small": ("Running", "gpu-1"), "ml/big": ("Pending", "")},
    )
    report = build_report(state(node), after, was_pending=["ml/small", "ml/big", "ml/gone"])
    outcome = {o.pod: (o.ran, o.phase, o.node) for o in report.was_pending}
    assert outcome == {
        "ml/small": (True, "Running", "gpu-1"),
        "ml/big": (False, "Pending", ""),
        "ml/gone": (False, "", ""),  # not on the twin at all: it did not run either
    }
    assert [o.pod for o in report.still_pending] == ["ml/big", "ml/gone"]
    doc = report_json(report)
    big = next(o for o in doc["was_pending"] if o["pod"] == "ml/big")
    assert big == {
        "pod": "ml/big",
        "ran": False,
        "phase": "Pending",
        "node": "",
        "reason": "0/2 nodes are available: Insufficient mig-7g.80gb",
    }
    console = Console(width=200, record=True)
    console.print(render(report))
    assert "Pods Pending in the snapshot" in console.export_text()
