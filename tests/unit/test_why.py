"""`kubegpu why`: one verdict per kind of Pending GPU pod, judged from hand-built snapshots.
tests/integration/test_why.py makes the same pods Pending on the real scheduler."""

from __future__ import annotations

import pytest

from kubegpu.catalog import nvidia
from kubegpu.doctor import why as w
from kubegpu.doctor.snapshot import (
    ClaimRequestInfo,
    ConfigMapInfo,
    CustomObject,
    DeviceInfo,
    EventInfo,
    NodeInfo,
    PodInfo,
    ResourceClaimInfo,
    ResourceSliceInfo,
    Snapshot,
    Taint,
    Toleration,
)

MIG_1G_18 = "nvidia.com/mig-1g.18gb"


def _name(key: str) -> str:
    """nvidia__gpu or nvidia.com__mig_1g.18gb (keyword spelling) -> nvidia.com/..."""
    return key.replace("nvidia__", "nvidia.com__").replace("__", "/").replace("_", "-")


def node(name: str, labels: dict[str, str] | None = None, /, **alloc: str) -> NodeInfo:
    resources = {_name(k): v for k, v in alloc.items()}
    return NodeInfo(
        name=name,
        labels={nvidia.GPU_PRESENT: "true", **(labels or {})},
        capacity=resources,
        allocatable=resources,
    )


def gpus(name: str, n: int, labels: dict[str, str] | None = None, **more: str) -> NodeInfo:
    return node(name, labels, **{"nvidia.com__gpu": str(n)}, **more)


def pod(name: str, phase: str = "Pending", node_name: str = "", **limits: str) -> PodInfo:
    return PodInfo(
        namespace="team",
        name=name,
        phase=phase,
        node=node_name,
        limits={_name(k): v for k, v in limits.items()},
        unscheduled_reason="Unschedulable" if phase == "Pending" and not node_name else "",
        unscheduled_message="0/1 nodes are available" if phase == "Pending" else "",
    )


def snap(*objects: NodeInfo | PodInfo, **more: object) -> Snapshot:
    nodes = tuple(o for o in objects if isinstance(o, NodeInfo))
    pods = tuple(o for o in objects if isinstance(o, PodInfo))
    return Snapshot(nodes=nodes, pods=pods, **more)


def verdict(s: Snapshot, ref: str = "team/p") -> w.Verdict:
    return w.why(s, ref)


def test_a_profile_nobody_advertises_names_the_nearest_that_exists() -> None:
    s = snap(
        node("h200", **{"nvidia.com__mig_1g.18gb": "7", "nvidia.com__mig_3g.71gb": "2"}),
        pod("p", **{"nvidia.com__mig_1g.10gb": "1"}),
    )
    v = verdict(s)
    assert v.kind == w.UNKNOWN_RESOURCE
    assert "no node advertises nvidia.com/mig-1g.10gb" in v.reason
    assert "nearest resource that exists is nvidia.com/mig-1g.18gb" in v.reason
    assert any("nvidia.com/mig-3g.71gb" in e for e in v.evidence)


def test_a_mig_resource_under_the_single_strategy_is_a_naming_problem() -> None:
    single = {nvidia.MIG_STRATEGY: "single", nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL-MIG-1g.18gb"}
    s = snap(gpus("h200", 56, single), pod("p", **{"nvidia.com__mig_1g.18gb": "1"}))
    v = verdict(s)
    assert v.kind == w.STRATEGY_NAMING
    assert "advertised as nvidia.com/gpu" in v.reason
    assert "mixed" in v.fix


def test_whole_gpus_asked_where_mixed_advertises_profiles_is_a_naming_problem() -> None:
    s = snap(node("h200", **{"nvidia.com__mig_1g.18gb": "7"}), pod("p", nvidia__gpu="1"))
    v = verdict(s)
    assert v.kind == w.STRATEGY_NAMING and MIG_1G_18 in v.fix


def test_free_gpus_spread_over_nodes_are_fragmented() -> None:
    s = snap(
        gpus("a", 2),
        gpus("b", 2),
        pod("busy-a", "Running", "a", nvidia__gpu="1"),
        pod("busy-b", "Running", "b", nvidia__gpu="1"),
        pod("p", nvidia__gpu="2"),
    )
    v = verdict(s)
    assert v.kind == w.FRAGMENTED
    assert "2 nvidia.com/gpu are free" in v.reason
    assert any("a: 1 free of 2" in e and "b: 1 free of 2" in e for e in v.evidence)


def test_every_gpu_in_use_is_insufficient_with_the_holders() -> None:
    s = snap(gpus("a", 1), pod("busy", "Running", "a", nvidia__gpu="1"), pod("p", nvidia__gpu="1"))
    v = verdict(s)
    assert v.kind == w.INSUFFICIENT
    assert any("team/busy" in e for e in v.evidence)


def test_a_finished_pod_holds_nothing() -> None:
    s = snap(
        gpus("a", 1), pod("done", "Succeeded", "a", nvidia__gpu="1"), pod("p", nvidia__gpu="1")
    )
    assert verdict(s).kind == w.SCHEDULER


def test_a_node_selector_matching_no_gpu_node() -> None:
    p = pod("p", nvidia__gpu="1").model_copy(update={"node_selector": {"pool": "train"}})
    v = verdict(snap(gpus("a", 2, {"pool": "infer"}), p))
    assert v.kind == w.NODE_SELECTOR
    assert any("pool=train (node: infer)" in e for e in v.evidence)


def test_an_untolerated_taint_and_a_tolerated_one() -> None:
    tainted = gpus("a", 2).model_copy(
        update={"taints": (Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),)}
    )
    v = verdict(snap(tainted, pod("p", nvidia__gpu="1")))
    assert v.kind == w.TAINT and any("nvidia.com/gpu=present:NoSchedule" in e for e in v.evidence)
    tolerant = pod("p", nvidia__gpu="1").model_copy(
        update={"tolerations": (Toleration(key="nvidia.com/gpu", operator="Exists"),)}
    )
    assert verdict(snap(tainted, tolerant)).kind == w.SCHEDULER


def test_a_cordoned_gpu_node() -> None:
    cordoned = gpus("a", 2).model_copy(update={"unschedulable": True})
    assert verdict(snap(cordoned, pod("p", nvidia__gpu="1"))).kind == w.CORDONED


def test_a_pod_the_kubelet_refused_names_fail_requests_greater_than_one() -> None:
    policy = CustomObject(
        kind="ClusterPolicy",
        name="cluster-policy",
        spec={"devicePlugin": {"config": {"name": "plugin", "default": "ts"}}},
    )
    ts = (
        "version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n"
        "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    cm = ConfigMapInfo(namespace="gpu-operator", name="plugin", data={"ts": ts})
    failed = pod("p", "Failed", "a", nvidia__gpu="2").model_copy(
        update={"reason": "UnexpectedAdmissionError", "message": "Allocate failed"}
    )
    v = verdict(snap(gpus("a", 8), failed, cluster_policies=(policy,), config_maps=(cm,)))
    assert v.kind == w.ADMISSION_FAILED
    assert any("failRequestsGreaterThanOne" in e for e in v.evidence)
    assert any("UnexpectedAdmissionError" in e for e in v.evidence)


MIG_LAYOUTS = """version: v1
mig-configs:
  all-1g.18gb:
  - devices: all
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
"""


@pytest.mark.parametrize(("state", "kind"), [("pending", w.MIG_PENDING), ("failed", w.MIG_FAILED)])
def test_a_mig_manager_stuck_on_the_only_node_that_would_fit(state: str, kind: str) -> None:
    labels = {nvidia.MIG_CONFIG: "all-1g.18gb", nvidia.MIG_CONFIG_STATE: state}
    cm = ConfigMapInfo(
        namespace="gpu-operator",
        name=nvidia.MIG_PARTED_DEFAULT_CONFIGMAP,
        data={"config.yaml": MIG_LAYOUTS},
    )
    event = EventInfo(
        namespace="default",
        kind="Node",
        name="h200",
        reason="MigConfigFailed",
        message="GPU 0 is in use",
        component="nvidia-mig-manager",
    )
    s = snap(
        node("h200", labels, **{"nvidia.com__mig_3g.71gb": "0"}),
        pod("p", **{"nvidia.com__mig_1g.18gb": "1"}),
        config_maps=(cm,),
        events=(event,),
    )
    v = verdict(s)
    assert v.kind == kind
    assert "h200" in v.reason
    assert any("GPU 0 is in use" in e for e in v.evidence)


def test_a_mig_manager_elsewhere_is_not_the_reason_when_a_node_serves_it() -> None:
    labels = {nvidia.MIG_CONFIG: "all-1g.18gb", nvidia.MIG_CONFIG_STATE: "pending"}
    cm = ConfigMapInfo(
        namespace="gpu-operator",
        name=nvidia.MIG_PARTED_DEFAULT_CONFIGMAP,
        data={"config.yaml": MIG_LAYOUTS},
    )
    s = snap(
        node("h200", labels),
        node("other", **{"nvidia.com__mig_1g.18gb": "7"}),
        pod("p", **{"nvidia.com__mig_1g.18gb": "1"}),
        config_maps=(cm,),
    )
    assert verdict(s).kind == w.SCHEDULER


def dra_snapshot(selector: str) -> Snapshot:
    devices = tuple(
        DeviceInfo(name=f"gpu-{i}", attributes={"type": "gpu", "productName": "NVIDIA H100"})
        for i in range(2)
    )
    slices = (ResourceSliceInfo(name="s", driver=nvidia.DRA_DRIVER, node="a", devices=devices),)
    claim = ResourceClaimInfo(
        namespace="team",
        name="p-gpu",
        requests=(
            ClaimRequestInfo(name="gpu", device_class=nvidia.DRA_DRIVER, selectors=(selector,)),
        ),
    )
    p = pod("p").model_copy(update={"claims": ("gpu",), "claim_objects": ("p-gpu",)})
    return snap(node("a"), p, resource_slices=slices, resource_claims=(claim,))


def test_a_cel_selector_matching_no_device_names_the_attribute_and_its_values() -> None:
    sel = f"device.attributes['{nvidia.DRA_DRIVER}'].productName == 'NVIDIA H200'"
    v = verdict(dra_snapshot(sel))
    assert v.kind == w.DRA_NO_DEVICE
    assert any("the values published are NVIDIA H100" in e for e in v.evidence)
    assert "NVIDIA H100" in v.fix


def test_a_cel_selector_on_an_attribute_no_device_has() -> None:
    sel = f"device.attributes['{nvidia.DRA_DRIVER}'].architecture == 'Hopper'"
    v = verdict(dra_snapshot(sel))
    assert v.kind == w.DRA_NO_DEVICE
    assert any("no device publishes it" in e for e in v.evidence)


def test_a_cel_selector_that_matches_is_not_the_reason() -> None:
    sel = f"device.attributes['{nvidia.DRA_DRIVER}'].productName == 'NVIDIA H100'"
    assert verdict(dra_snapshot(sel)).kind == w.SCHEDULER


def test_a_claim_that_does_not_exist() -> None:
    s = dra_snapshot("x").model_copy(update={"resource_claims": ()})
    assert verdict(s).kind == w.CLAIM_MISSING


def test_running_pods_and_unknown_pods() -> None:
    s = snap(gpus("a", 1), pod("p", "Running", "a", nvidia__gpu="1"))
    assert verdict(s).kind == w.NOT_PENDING
    with pytest.raises(w.WhyError, match="team/nope is not in the snapshot"):
        w.why(s, "team/nope")
    with pytest.raises(w.WhyError, match="NAMESPACE/NAME"):
        w.why(s, "a/b/c")


def test_every_kind_has_a_test_here() -> None:
    from pathlib import Path

    text = Path(__file__).read_text()
    for kind in w.KINDS:
        name = next(k for k, v in vars(w).items() if v == kind and k.isupper() and k != "KINDS")
        if kind not in (w.NO_GPU_REQUEST,):
            assert f"w.{name}" in text, kind


def test_json_has_the_verdicts_fields() -> None:
    v = verdict(snap(gpus("a", 1), pod("p", nvidia__gpu="2")))
    assert set(v.to_json()) == {"pod", "kind", "reason", "evidence", "fix", "replay"}
    assert v.to_json()["replay"] is None  # judged from the snapshot alone
