"""`kubegpu plan --from-snapshot`: a doctor snapshot as the starting point, its Pending GPU
pods as the demand, the smallest relabel as the change (docs/planner.md, "From a snapshot").

The fixture is tests/data/doctor/demo.json: gpu-h200 (8 H200 NVL, `all-1g.18gb` applied,
single strategy, three running pods holding one 1g.18gb instance each), gpu-l4
(time-sliced) and gpu-rtx (MPS)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from kubegpu.cli.app import app
from kubegpu.doctor.snapshot import NodeInfo, PodInfo, Snapshot
from kubegpu.plan import make_plan
from kubegpu.replan import from_snapshot as ps

DEMO = Path(__file__).parents[1] / "data" / "doctor" / "demo.json"
runner = CliRunner()


def _snapshot(pending: dict[str, int], *, free_h200: bool) -> Snapshot:
    snap = Snapshot.from_json(DEMO.read_text(), str(DEMO))
    pods = [p for p in snap.pods if not (free_h200 and p.node == "gpu-h200" and p.gpu_resources)]
    for resource, n in pending.items():
        for i in range(n):
            pods.append(
                PodInfo(
                    namespace="default",
                    name=f"want-{resource.rsplit('-', 1)[-1].replace('.', '')}-{i}",
                    phase="Pending",
                    requests={resource: "1"},
                    limits={resource: "1"},
                )
            )
    return snap.model_copy(update={"pods": tuple(pods)})


def _plan(snap: Snapshot) -> tuple[ps.Start, ps.Change, str]:
    start = ps.start_from(snap, solver="exact")
    plan = make_plan(start.input)
    change = ps.change_of(start, plan)
    return start, change, ps.runbook(start, plan, change)


def test_the_starting_point_is_the_node_as_it_runs() -> None:
    start = ps.start_from(_snapshot({}, free_h200=False))
    h200 = next(n for n in start.input.fleet if n.name == "gpu-h200")
    assert h200.gpus == "h200-nvl:8"  # 8 GPUs, not the 56 MIG devices gpu.count says
    assert h200.current is not None
    gpus = h200.current.gpus
    assert sorted(gpus) == list(range(8))
    assert all(g.mig == {"1g.18gb": 7} and g.keep for g in gpus.values())
    # under `single`, the three running `nvidia.com/gpu` pods hold 1g.18gb instances
    assert sum((g.busy or {}).get("1g.18gb", 0) for g in gpus.values()) == 3  # type: ignore[union-attr, misc]
    l4 = next(n for n in start.input.fleet if n.name == "gpu-l4")
    assert l4.current is not None and l4.current.sharing == "time-slicing"


def test_pending_pods_for_a_missing_profile_repartition_the_fewest_gpus() -> None:
    start, change, book = _plan(_snapshot({"nvidia.com/mig-3g.71gb": 3}, free_h200=True))
    assert start.pending == {
        "pending-mig-3g-71gb-x1": (
            "default/want-3g71gb-0",
            "default/want-3g71gb-1",
            "default/want-3g71gb-2",
        )
    }
    # two 3g.71gb fit one H200 NVL: three pods need two GPUs repartitioned, no more
    assert change.repartitioned == 2
    (node,) = change.nodes
    assert node.node == "gpu-h200"
    assert node.waits_for == {"nvidia.com/mig-1g.18gb": 42, "nvidia.com/mig-3g.71gb": 4}
    assert node.mig_config is not None
    entries = change.mig_configs[node.mig_config]
    layouts = sorted((len(e["devices"]), e["mig-devices"]) for e in entries)
    assert layouts == [(2, {"3g.71gb": 2}), (6, {"1g.18gb": 7})]
    assert f"kubectl label node gpu-h200 nvidia.com/mig.config={node.mig_config}" in book
    assert "mig\\.config\\.state}'=success" in book
    assert "allocatable.nvidia\\.com/mig-3g\\.71gb}'=4" in book
    assert "3 of 3 Pending pods placed" in book


def test_a_node_running_mig_pods_of_unknown_devices_is_never_repartitioned() -> None:
    # the three running pods hold instances on GPUs the snapshot does not name: every
    # MIG GPU of gpu-h200 keeps its layout, so the 3g pods cannot be placed
    _, change, book = _plan(_snapshot({"nvidia.com/mig-3g.71gb": 2}, free_h200=False))
    assert change.nodes == ()
    assert change.repartitioned == 0
    assert "0 of 2 Pending pods placed" in book


def test_pending_pods_that_fit_free_instances_change_nothing() -> None:
    _, change, book = _plan(_snapshot({"nvidia.com/mig-1g.18gb": 5}, free_h200=False))
    assert change.nodes == ()
    assert "5 of 5 Pending pods placed" in book


def test_a_profile_no_model_has_is_left_over_and_changes_nothing() -> None:
    _, change, book = _plan(_snapshot({"nvidia.com/mig-1g.10gb": 1}, free_h200=True))
    assert change.nodes == ()
    assert "0 of 1 Pending pods placed" in book


def test_requests_it_cannot_plan_are_listed_not_dropped() -> None:
    start = ps.start_from(_snapshot({"nvidia.com/gpu.shared": 1}, free_h200=True))
    assert start.input.workloads == ()
    assert any("nvidia.com/gpu.shared is not planned" in x for x in start.not_planned)


def test_cli_writes_the_plan_files_and_the_runbook(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(_snapshot({"nvidia.com/mig-3g.71gb": 2}, free_h200=True).to_json())
    out = tmp_path / "out"
    result = runner.invoke(app, ["plan", "--from-snapshot", str(snap), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 nodes relabelled, 1 GPUs repartitioned, 0 running pods disrupted" in result.output
    for name in ("runbook.md", "mig-parted-configs-to-add.yaml", "plan.json", "label-nodes.sh"):
        assert (out / name).is_file(), name
    assert json.loads((out / "plan.json").read_text())["workloads"][0]["nodes"] == {"gpu-h200": 2}


def test_cli_refuses_two_inputs_and_a_bad_snapshot(tmp_path: Path) -> None:
    both = runner.invoke(app, ["plan", "--from-snapshot", str(DEMO), "-f", str(DEMO)])
    assert both.exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "nodes": [{"name": "n", "bogus": 1}]}')
    result = runner.invoke(app, ["plan", "--from-snapshot", str(bad)])
    assert result.exit_code == 1
    assert "bad.json" in result.output and "bogus" in result.output


def test_a_pending_pod_with_a_node_selector_is_listed_not_planned() -> None:
    snap = _snapshot({}, free_h200=True)
    pod = PodInfo(
        namespace="default",
        name="pinned",
        phase="Pending",
        node_selector={"zone": "a"},
        limits={"nvidia.com/mig-3g.71gb": "1"},
    )
    start = ps.start_from(snap.model_copy(update={"pods": (*snap.pods, pod)}))
    assert start.input.workloads == ()
    assert any("default/pinned: a node selector (zone)" in x for x in start.not_planned)


def test_a_new_layout_never_takes_the_name_of_a_config_the_cluster_has() -> None:
    snap = _snapshot({"nvidia.com/mig-3g.71gb": 2}, free_h200=True)
    cms = []
    for cm in snap.config_maps:
        if cm.name == "gpu-h200-mig-config":
            doc = yaml.safe_load(cm.data["config.yaml"])
            doc["mig-configs"]["plan-1"] = [{"devices": "all", "mig-enabled": False}]
            cms.append(cm.model_copy(update={"data": {"config.yaml": yaml.safe_dump(doc)}}))
        else:
            cms.append(cm)
    _, change, book = _plan(snap.model_copy(update={"config_maps": tuple(cms)}))
    (node,) = change.nodes
    assert node.mig_config == "plan-1-2"
    assert list(change.mig_configs) == ["plan-1-2"]
    assert "nvidia.com/mig.config=plan-1-2" in book


def _owned(snap: Snapshot, owner: bool) -> Snapshot:
    pods = tuple(
        p.model_copy(update={"owner_kind": "ReplicaSet", "owner_name": "demo"})
        if owner and p.node == "gpu-h200" and p.gpu_resources
        else p
        for p in snap.pods
    )
    return snap.model_copy(update={"pods": pods})


def test_allow_evictions_releases_a_node_and_places_its_pods_again() -> None:
    snap = _owned(_snapshot({"nvidia.com/mig-3g.71gb": 2}, free_h200=False), owner=True)
    start, plan = ps.plan_from(snap, solver="exact", allow_evictions=True)
    assert start.evicted == {
        "gpu-h200": (
            "default/demo-gpu-h200-0",
            "default/demo-gpu-h200-1",
            "default/demo-gpu-h200-2",
        )
    }
    placed = {w.name: (w.placed, w.replicas) for w in plan.workloads}
    assert placed["pending-mig-3g-71gb-x1"] == (2, 2)
    assert placed["moved-mig-1g-18gb-x1"] == (3, 3)  # every evicted pod is placed again
    change = ps.change_of(start, plan)
    assert change.repartitioned == 1
    book = ps.runbook(start, plan, change)
    assert "running pods disrupted: 3" in book
    cordon, delete, label = (
        book.index("kubectl cordon gpu-h200"),
        book.index("kubectl delete pod -n default demo-gpu-h200-0"),
        book.index("kubectl label node gpu-h200 nvidia.com/mig.config="),
    )
    assert cordon < delete < label < book.index("kubectl uncordon gpu-h200")


def test_without_allow_evictions_or_a_controller_no_running_pod_is_touched() -> None:
    owned = _owned(_snapshot({"nvidia.com/mig-3g.71gb": 2}, free_h200=False), owner=True)
    start, _ = ps.plan_from(owned, solver="exact", allow_evictions=False)
    assert start.evicted == {}
    bare = _owned(_snapshot({"nvidia.com/mig-3g.71gb": 2}, free_h200=False), owner=False)
    start, plan = ps.plan_from(bare, solver="exact", allow_evictions=True)
    assert start.evicted == {}  # a bare pod deleted would be gone
    assert ps.change_of(start, plan).nodes == ()


def test_a_shared_single_strategy_product_label_names_its_profile_without_the_tag() -> None:
    """`-SHARED` follows the MIG tag when the instances are shared: the profile is read as
    doctor reads the label (`doctor.facts.split_product`), not with the tag glued on."""
    node = NodeInfo(
        name="n",
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"},
    )
    assert ps._single_profile(node) == "1g.10gb"
