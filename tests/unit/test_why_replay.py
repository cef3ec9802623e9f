"""`kubegpu why` replayed on the what-if twin: when the snapshot's verdict asks for a
replay and which relabels it tries (`doctor.replay.replay_plan`), and what the twin's
answer makes of the verdict (`replayed`). tests/integration/test_why.py replays real cases
on a twin of the real scheduler's cluster."""

from __future__ import annotations

import asyncio
import json

import pytest

from kubegpu.catalog import nvidia
from kubegpu.doctor import replay as r
from kubegpu.doctor import why as w
from kubegpu.doctor.snapshot import (
    ClaimRequestInfo,
    ConfigMapInfo,
    CustomObject,
    NodeInfo,
    PodInfo,
    ResourceClaimInfo,
    Snapshot,
    Taint,
)
from kubegpu.whatif.pod_replay import explain

MIG_1G = "nvidia.com/mig-1g.18gb"
MIG_3G = "nvidia.com/mig-3g.71gb"
LAYOUTS = """version: v1
mig-configs:
  all-1g.18gb:
  - devices: all
    mig-enabled: true
    mig-devices: {1g.18gb: 7}
  balanced:
  - devices: all
    mig-enabled: true
    mig-devices: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}
  all-3g.71gb:
  - devices: all
    mig-enabled: true
    mig-devices: {3g.71gb: 2}
"""
POLICY = CustomObject(
    kind="ClusterPolicy",
    name="cluster-policy",
    spec={"mig": {"strategy": "mixed"}, "migManager": {"config": {"name": "layouts"}}},
)


def h200(name: str, config: str = "all-1g.18gb", **alloc: str) -> NodeInfo:
    labels = {
        nvidia.GPU_PRESENT: "true",
        nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL",
        nvidia.GPU_COUNT: "1",
        nvidia.MIG_CONFIG: config,
        nvidia.MIG_CONFIG_STATE: "success",
    }
    resources = alloc or {MIG_1G: "7"}
    return NodeInfo(name=name, labels=labels, capacity=resources, allocatable=resources)


def pending(resource: str = MIG_3G, name: str = "p") -> PodInfo:
    return PodInfo(
        namespace="team",
        name=name,
        phase="Pending",
        limits={resource: "1"},
        unscheduled_reason="Unschedulable",
        unscheduled_message=f"0/2 nodes are available: 2 Insufficient {resource}",
    )


def running(node: str, resource: str = MIG_1G, name: str = "busy") -> PodInfo:
    return PodInfo(namespace="team", name=name, phase="Running", node=node, limits={resource: "1"})


def snap(*objects: NodeInfo | PodInfo, policy: bool = True) -> Snapshot:
    layouts = ConfigMapInfo(namespace="gpu-operator", name="layouts", data={"config.yaml": LAYOUTS})
    return Snapshot(
        nodes=tuple(o for o in objects if isinstance(o, NodeInfo)),
        pods=tuple(o for o in objects if isinstance(o, PodInfo)),
        config_maps=(layouts,),
        cluster_policies=(POLICY,) if policy else (),
    )


def with_claim(s: Snapshot) -> Snapshot:
    """The pending pod also holds a claim whose request selects nothing in particular."""
    pods = tuple(
        p.model_copy(update={"claims": ("gpu",), "claim_objects": ("gpu-claim",)})
        if p.name == "p"
        else p
        for p in s.pods
    )
    claim = ResourceClaimInfo(
        namespace="team", name="gpu-claim", requests=(ClaimRequestInfo(name="gpu"),)
    )
    return s.model_copy(update={"pods": pods, "resource_claims": (claim,)})


def plan_of(s: Snapshot) -> r.ReplayPlan | None:
    return r.replay_plan(s, w.why(s, "team/p"))


# --- when, and what to try ------------------------------------------------------------------


def test_a_profile_nobody_advertises_while_an_idle_gpu_could_make_it_is_replayed() -> None:
    s = snap(h200("busy"), h200("idle"), running("busy"), pending(MIG_3G))
    assert w.why(s, "team/p").kind == w.UNKNOWN_RESOURCE  # "ask for the nearest name"
    plan = plan_of(s)
    assert plan is not None
    # the busy node is never relabelled; the idle one gets the layout named for the profile
    assert [(t.node, t.labels) for t in plan.tries] == [
        ("idle", {nvidia.MIG_CONFIG: "all-3g.71gb"})
    ]
    assert any("node busy: running GPU pods team/busy" in why for why in plan.left)


def test_an_insufficient_profile_with_idle_gpus_in_another_layout_is_replayed() -> None:
    full = h200("full", "all-3g.71gb", **{MIG_3G: "2"})
    s = snap(
        full,
        h200("idle"),
        running("full", MIG_3G, "a"),
        running("full", MIG_3G, "b"),
        pending(MIG_3G),
    )
    assert w.why(s, "team/p").kind == w.INSUFFICIENT
    plan = plan_of(s)
    assert plan is not None and [t.node for t in plan.tries] == ["idle"]


def test_the_layout_of_that_profile_alone_comes_before_a_mixed_one() -> None:
    s = snap(h200("idle"), pending(MIG_3G))
    layouts = LAYOUTS.replace("all-3g.71gb:", "only-threes:")
    s = s.model_copy(
        update={
            "config_maps": (
                ConfigMapInfo(
                    namespace="gpu-operator", name="layouts", data={"config.yaml": layouts}
                ),
            )
        }
    )
    plan = plan_of(s)
    assert plan is not None and plan.tries[0].labels == {nvidia.MIG_CONFIG: "only-threes"}


def test_a_node_already_asked_for_the_layout_is_tried_with_another_that_makes_it() -> None:
    on_it = h200("n", "all-3g.71gb", **{MIG_1G: "0"})
    plan = plan_of(snap(on_it, pending(MIG_3G)))
    assert plan is not None and plan.tries[0].labels == {nvidia.MIG_CONFIG: "balanced"}
    # where that layout failed, the MIG manager's failure is the verdict: no replay
    failed = on_it.model_copy(
        update={"labels": {**on_it.labels, nvidia.MIG_CONFIG_STATE: "failed"}}
    )
    s = snap(failed, pending(MIG_3G))
    assert w.why(s, "team/p").kind == w.MIG_FAILED
    assert plan_of(s) is None


def test_nodes_out_of_the_pods_reach_are_left_with_why() -> None:
    tainted = h200("tainted").model_copy(
        update={"taints": (Taint(key="dedicated", value="x", effect="NoSchedule"),)}
    )
    s = snap(tainted, h200("idle"), pending(MIG_3G))
    plan = plan_of(s)
    assert plan is not None and [t.node for t in plan.tries] == ["idle"]
    assert any("taint dedicated=x:NoSchedule" in why for why in plan.left)


def test_at_most_max_tries_nodes_are_relabelled() -> None:
    nodes = [h200(f"n{i}") for i in range(r.MAX_TRIES + 2)]
    plan = plan_of(snap(*nodes, pending(MIG_3G)))
    assert plan is not None and len(plan.tries) == r.MAX_TRIES


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("no policy", id="without a ClusterPolicy the twin runs no GPU stack"),
        pytest.param("no idle gpu", id="every MIG GPU holds a pod"),
        pytest.param("not mig", id="a whole-GPU request is not a layout question"),
        pytest.param("model lacks it", id="no GPU model of the cluster has the profile"),
        pytest.param("claims", id="the twin does not recreate resource claims"),
    ],
)
def test_no_replay_where_the_twin_has_nothing_to_try(case: str) -> None:
    s = {
        "no policy": snap(h200("idle"), pending(MIG_3G), policy=False),
        "no idle gpu": snap(h200("busy"), running("busy"), pending(MIG_3G)),
        "not mig": snap(
            h200("busy", **{nvidia.GPU_RESOURCE: "1"}),
            running("busy", nvidia.GPU_RESOURCE),
            pending(nvidia.GPU_RESOURCE),
        ),
        "model lacks it": snap(h200("idle"), pending("nvidia.com/mig-1g.10gb")),
        "claims": with_claim(snap(h200("idle"), pending(MIG_1G))),
    }[case]
    assert plan_of(s) is None


def test_a_verdict_the_snapshot_explains_is_not_replayed() -> None:
    s = snap(h200("idle"), pending(MIG_1G).model_copy(update={"node_selector": {"pool": "x"}}))
    assert w.why(s, "team/p").kind == w.NODE_SELECTOR
    assert plan_of(s) is None


def test_no_gpu_reason_in_the_snapshot_replays_the_twin_as_it_is() -> None:
    s = snap(h200("idle"), pending(MIG_1G))  # 7 free: the snapshot sees no GPU reason
    assert w.why(s, "team/p").kind == w.SCHEDULER
    plan = plan_of(s)
    assert plan is not None and plan.tries == ()


# --- what the twin's answer makes of the verdict -------------------------------------------


def _replayed(result: r.ReplayResult) -> tuple[w.Verdict, w.Verdict]:
    s = snap(h200("busy"), h200("idle"), running("busy"), pending(MIG_3G))
    before = w.why(s, "team/p")
    plan = r.replay_plan(s, before)
    assert plan is not None
    return before, r.replayed(before, plan, result)


def test_a_relabel_that_placed_the_pod_is_the_cause_and_the_fix() -> None:
    _, v = _replayed(
        r.ReplayResult(
            before=r.PodSeen("Pending", reason="0/2 nodes are available: 2 Insufficient x"),
            after=r.PodSeen("Running", "idle"),
            nodes=(r.NodeSeen("idle", "success"),),
        )
    )
    assert v.kind == r.RESHAPE
    assert "node idle took the pod once labelled nvidia.com/mig.config=all-3g.71gb" in v.reason
    assert v.fix.startswith("kubectl label node idle nvidia.com/mig.config=all-3g.71gb")
    assert any("not tried: node busy" in e for e in v.evidence)
    doc = json.loads(json.dumps(v.to_json()))
    assert doc["replay"]["after"] == {"phase": "Running", "node": "idle", "reason": ""}
    assert doc["replay"]["tries"][0]["node"] == "idle"


def test_a_relabel_that_did_not_place_it_keeps_the_verdict_with_what_the_twin_said() -> None:
    before, v = _replayed(
        r.ReplayResult(
            before=r.PodSeen("Pending", reason="Insufficient nvidia.com/mig-3g.71gb"),
            after=r.PodSeen("Pending", reason="Insufficient nvidia.com/mig-3g.71gb"),
            nodes=(r.NodeSeen("idle", "failed", "GPU 0: the driver refused"),),
        )
    )
    assert (v.kind, v.reason) == (before.kind, before.reason)
    assert any("node idle after: nvidia.com/mig.config.state=failed" in e for e in v.evidence)
    assert any("the driver refused" in e for e in v.evidence)


def test_a_pod_the_twin_runs_as_the_snapshot_is_not_kept_pending_by_gpus() -> None:
    s = snap(h200("idle"), pending(MIG_1G))
    before = w.why(s, "team/p")
    plan = r.replay_plan(s, before)
    assert plan is not None
    v = r.replayed(before, plan, r.ReplayResult(before=r.PodSeen("Running", "idle")))
    assert v.kind == r.NOT_GPU and "runs the pod on idle" in v.reason


def test_without_replay_the_verdict_says_what_would_have_been_tried() -> None:
    s = snap(h200("busy"), h200("idle"), running("busy"), pending(MIG_3G))
    v = asyncio.run(explain(s, "team/p", replay=False))
    assert v.kind == w.UNKNOWN_RESOURCE
    assert any(
        "not replayed on the what-if twin (--no-replay)" in e
        and "node idle: nvidia.com/mig.config=all-3g.71gb" in e
        for e in v.evidence
    )
    assert v.replay is not None and v.replay["skipped"] == "--no-replay"


def test_a_verdict_without_a_replay_has_none_in_its_json() -> None:
    s = snap(h200("idle"), pending(MIG_1G).model_copy(update={"node_selector": {"pool": "x"}}))
    assert asyncio.run(explain(s, "team/p")).to_json()["replay"] is None
