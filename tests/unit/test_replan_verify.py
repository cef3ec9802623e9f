"""`plan --from-snapshot --verify`: the runbook's steps as the change what-if tries, made
as the runbook says (configs added to the ConfigMaps the cluster has, only the nodes it
names relabelled), never the planner directory's replace-everything files.

The fixture is tests/data/doctor/demo.json (see tests/unit/test_plan_from_snapshot.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubegpu.catalog import get_model, nvidia
from kubegpu.doctor.snapshot import PodInfo, Snapshot
from kubegpu.plan import make_plan
from kubegpu.replan import from_snapshot as ps
from kubegpu.replan.verify import merged_mig_parted, merged_plugin_data, runbook_steps
from kubegpu.whatif.change import from_steps

DEMO = Path(__file__).parents[1] / "data" / "doctor" / "demo.json"


def _snapshot(pending: dict[str, int], *, free_h200: bool) -> Snapshot:
    """The demo cluster, its H200's running pods gone if `free_h200`, and Pending pods."""
    snap = Snapshot.from_json(DEMO.read_text(), str(DEMO))
    pods = [p for p in snap.pods if not (free_h200 and p.node == "gpu-h200" and p.gpu_resources)]
    for resource, n in pending.items():
        pods += [
            PodInfo(
                namespace="default",
                name=f"want-{resource.rsplit('-', 1)[-1].replace('.', '')}-{i}",
                phase="Pending",
                requests={resource: "1"},
                limits={resource: "1"},
            )
            for i in range(n)
        ]
    return snap.model_copy(update={"pods": tuple(pods)})


def test_generated_layouts_go_into_a_created_configmap_the_policy_is_pointed_at() -> None:
    # gpu-h200's MIG manager generated its layouts (`gpu-h200-mig-config`, never read back):
    # the runbook creates a ConfigMap with them and the new layout, and names it in the policy
    snap = _snapshot({"nvidia.com/mig-3g.71gb": 3}, free_h200=True)
    start = ps.start_from(snap, solver="exact")
    change = ps.change_of(start, make_plan(start.input))
    steps = runbook_steps(snap, start, change)
    (node,) = change.nodes
    assert node.mig_configmap == ps.CREATED_MIG_CONFIGMAP
    generated = snap.config_map("gpu-h200-mig-config")
    assert generated is not None
    merged = yaml.safe_load(steps.config_maps[ps.CREATED_MIG_CONFIGMAP]["config.yaml"])
    kept = yaml.safe_load(generated.data["config.yaml"])["mig-configs"]
    # every layout the node has now is there under its name, for its GPU model only (the
    # RTX node generated another `all-balanced`: both are kept, each filtered to its model)
    h200 = f"0x{get_model('h200-nvl').pci_device_id:08X}"
    for name, entries in kept.items():
        mine = [
            {k: v for k, v in e.items() if k != "device-filter"}
            for e in merged["mig-configs"][name]
            if e.get("device-filter") == [h200]
        ]
        assert mine == entries, name
    assert len({str(e["device-filter"]) for e in merged["mig-configs"]["all-balanced"]}) == 2
    assert node.mig_config is not None and node.mig_config not in kept
    assert merged["mig-configs"][node.mig_config] == change.mig_configs[node.mig_config]
    assert "gpu-h200-mig-config" not in steps.config_maps  # adding there does nothing
    # only the node the runbook names is relabelled, with the labels it sets
    assert set(steps.labels) == {"gpu-h200"}
    assert steps.labels["gpu-h200"][nvidia.MIG_CONFIG] == node.mig_config
    # the demo cluster runs `single`: the mixed strategy, and the created ConfigMap
    assert steps.policy_patch is not None
    assert steps.policy_patch["mig"] == {"strategy": "mixed"}
    assert steps.policy_patch["migManager"] == {"config": {"name": ps.CREATED_MIG_CONFIGMAP}}
    files = ps.files(start, make_plan(start.input), change)
    manifest = yaml.safe_load(files[ps.CREATED_MIG_FILE])
    assert manifest["data"] == steps.config_maps[ps.CREATED_MIG_CONFIGMAP]
    book = files["runbook.md"]
    assert f"kubectl apply -n gpu-operator -f {ps.CREATED_MIG_FILE}" in book
    assert "kubectl patch clusterpolicy" in book
    wchange = from_steps(
        steps.config_maps, steps.policy_patch, steps.labels, steps.notes, source="runbook"
    )
    assert {c.name for c in wchange.config_maps} == set(steps.config_maps)
    assert wchange.labels == steps.labels


def test_a_named_configmap_gets_the_new_layout_added_beside_its_own() -> None:
    snap = _snapshot({"nvidia.com/mig-3g.71gb": 3}, free_h200=True)
    generated = snap.config_map("gpu-h200-mig-config")
    assert generated is not None and snap.cluster_policy is not None
    own = generated.model_copy(update={"name": "site-layouts"})
    spec = {**snap.cluster_policy.spec, "migManager": {"config": {"name": "site-layouts"}}}
    snap = snap.model_copy(
        update={
            "config_maps": (*snap.config_maps, own),
            "cluster_policies": (snap.cluster_policy.model_copy(update={"spec": spec}),),
        }
    )
    start = ps.start_from(snap, solver="exact")
    change = ps.change_of(start, make_plan(start.input))
    steps = runbook_steps(snap, start, change)
    (node,) = change.nodes
    assert node.mig_configmap == "site-layouts"
    merged = yaml.safe_load(steps.config_maps["site-layouts"]["config.yaml"])["mig-configs"]
    kept = yaml.safe_load(own.data["config.yaml"])["mig-configs"]
    assert {k: merged[k] for k in kept} == kept
    assert node.mig_config in merged
    assert steps.policy_patch == {"mig": {"strategy": "mixed"}}


def test_a_merge_never_overwrites_a_config_the_cluster_has() -> None:
    text = "version: v1\nmig-configs:\n  mine:\n  - devices: all\n    mig-enabled: false\n"
    with pytest.raises(ps.SnapshotPlanError, match="already has mig-configs mine"):
        merged_mig_parted(text, {"mine": [{"devices": "all", "mig-enabled": True}]}, "cm x")
    out = yaml.safe_load(merged_mig_parted(text, {"new": [{"devices": [0]}]}, "cm x"))
    assert list(out["mig-configs"]) == ["mine", "new"]
    with pytest.raises(ps.SnapshotPlanError, match=r"cm x: key config\.yaml"):
        merged_mig_parted("- a list", {}, "cm x")


def test_plugin_configs_are_added_as_keys_beside_the_existing_ones() -> None:
    data = merged_plugin_data({"any": "version: v1\n"}, {"plan-mixed": {"version": "v1"}})
    assert data["any"] == "version: v1\n"
    assert yaml.safe_load(data["plan-mixed"]) == {"version": "v1"}


def test_nothing_to_change_is_an_empty_change() -> None:
    snap = _snapshot({}, free_h200=True)
    start = ps.start_from(snap, solver="exact")
    change = ps.change_of(start, make_plan(start.input))
    steps = runbook_steps(snap, start, change)
    assert (steps.config_maps, steps.policy_patch, steps.labels) == ({}, None, {})


def test_verify_is_refused_without_a_snapshot(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kubegpu.cli.app import app

    f = tmp_path / "in.yaml"
    f.write_text("fleet: []\nworkloads: []\n")
    result = CliRunner().invoke(app, ["plan", "-f", str(f), "--verify"])
    assert result.exit_code == 2
    assert "--verify is for --from-snapshot or --kubeconfig" in result.output


def test_the_runbook_never_waits_on_a_pod_the_plan_leaves_pending() -> None:
    # one H200 NVL has no 7g.80gb (an H100 profile): that pod is left over, the 3g ones placed
    snap = _snapshot({"nvidia.com/mig-3g.71gb": 2, "nvidia.com/mig-7g.80gb": 1}, free_h200=True)
    start = ps.start_from(snap, solver="exact")
    plan = make_plan(start.input)
    book = ps.runbook(start, plan, ps.change_of(start, plan))
    assert "kubectl wait pod -n default want-3g71gb-0 --for=condition=PodScheduled" in book
    (left,) = start.pending["pending-mig-7g-80gb-x1"]
    assert f"{left.split('/')[1]} --for=condition=PodScheduled" not in book
