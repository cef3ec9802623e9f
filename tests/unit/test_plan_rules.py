"""Each rule of the planner's rule book, on the smallest input that shows it.

Every rule id in kubegpu.plan.rules.RULES has a test here named after it
(test_rule_<id with dashes as underscores>); the last test checks that none is missing.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.catalog import GpuModel, all_models, placement
from kubegpu.plan import Plan, make_plan, parse_data, rules
from kubegpu.plan.check import check_plan
from kubegpu.plan.rules import RULES


def plan(fleet: list[dict[str, Any]], workloads: list[dict[str, Any]], **options: Any) -> Plan:
    data: dict[str, Any] = {"fleet": fleet, "workloads": workloads}
    if options:
        data["options"] = options
    inp = parse_data(data)
    result = make_plan(inp)
    assert check_plan(inp, result) == []
    return result


def cited(p: Plan, rule: str) -> list[str]:
    return [r.text for r in p.reporter.reasons if r.rule == rule]


H100 = {"name": "n1", "gpus": "h100-80gb:2", "driver": "550.90.07"}


def test_rule_training_whole() -> None:
    p = plan([H100], [{"name": "t", "memory": "8GiB", "kind": "training"}])
    assert p.workload("t").method == "whole"
    assert cited(p, "training-whole")


def test_rule_busy_whole() -> None:
    p = plan([H100], [{"name": "hot", "memory": "8GiB", "compute": 1.0}])
    assert p.workload("hot").method == "whole"
    assert cited(p, "busy-whole")


def test_rule_multi_gpu_whole() -> None:
    p = plan([H100], [{"name": "two", "memory": "8GiB", "gpus": 2, "nccl": False}])
    assert p.workload("two").method == "whole"
    assert p.workload("two").resources == {"nvidia.com/gpu": 2}
    assert cited(p, "multi-gpu-whole")


def test_rule_nccl_whole() -> None:
    p = plan([H100], [{"name": "ddp", "memory": "8GiB", "nccl": True}])
    assert p.workload("ddp").method == "whole"
    assert cited(p, "nccl-whole")


def test_rule_isolation() -> None:
    fleet = [{"name": "l4", "gpus": "l4:1"}]
    hard = plan(fleet, [{"name": "s", "replicas": 3, "memory": "4GiB", "isolation": "hardware"}])
    assert hard.workload("s").method == "whole"  # L4 has no MIG: one replica per card
    assert hard.workload("s").left == 2
    mem = plan(fleet, [{"name": "s", "replicas": 3, "memory": "4GiB", "isolation": "memory"}])
    assert mem.workload("s").method == "mps"
    none = plan(
        fleet,
        [{"name": "s", "replicas": 3, "memory": "4GiB", "isolation": "none", "kind": "notebook"}],
    )
    assert none.workload("s").method == "time-slicing"
    assert cited(hard, "isolation")


def test_rule_mps_inference() -> None:
    p = plan(
        [{"name": "l4", "gpus": "l4:1"}],
        [
            {
                "name": "nb",
                "replicas": 2,
                "memory": "4GiB",
                "isolation": "memory",
                "kind": "notebook",
            }
        ],
    )
    assert p.workload("nb").method != "mps"
    assert cited(p, "mps-inference")


def test_rule_mps_no_mig() -> None:
    # MIG and MPS demand on one node of two GPUs: they cannot share it
    p = plan(
        [{"name": "n1", "gpus": "h100-80gb:2", "driver": "550.90.07"}],
        [
            {"name": "iso", "replicas": 7, "memory": "8GiB", "compute": 0.1},
            {
                "name": "pool",
                "replicas": 12,
                "memory": "5GiB",
                "compute": 0.05,
                "isolation": "memory",
            },
        ],
    )
    n = p.node("n1")
    assert not (n.sharing == "mps" and any(g.mig_enabled for g in n.gpus))
    assert p.workload("pool").method != "mps" or p.workload("iso").method != "mig"


def test_rule_mps_clients() -> None:
    p = plan(
        [{"name": "h", "gpus": "h200:1", "driver": "550.90.07"}],
        [
            {
                "name": "tiny",
                "replicas": 60,
                "memory": "1GiB",
                "compute": 0.01,
                "isolation": "memory",
            }
        ],
    )
    assert p.workload("tiny").method == "mps"
    assert p.node("h").replicas <= 48
    assert p.workload("tiny").left == 12


def test_rule_sharing_node_wide() -> None:
    p = plan(
        [{"name": "a", "gpus": "l40s:2", "count": 2}],
        [
            {"name": "train", "memory": "30GiB", "kind": "training"},
            {
                "name": "nb",
                "replicas": 4,
                "memory": "8GiB",
                "compute": 0.2,
                "isolation": "none",
                "kind": "notebook",
            },
        ],
    )
    # an exclusive GPU and time-sliced ones cannot share a node: they take one node each
    assert p.complete
    assert p.workload("train").method == "whole"
    assert p.workload("nb").method == "time-slicing"
    assert set(p.workload("train").nodes).isdisjoint(p.workload("nb").nodes)
    for n in p.nodes:
        assert not (n.sharing != "none" and any(g.role == "whole" for g in n.gpus))


def test_rule_shared_size() -> None:
    p = plan(
        [{"name": "l4", "gpus": "l4:4"}],
        [
            {
                "name": "big",
                "replicas": 2,
                "memory": "10GiB",
                "isolation": "none",
                "kind": "notebook",
            },
            {
                "name": "small",
                "replicas": 6,
                "memory": "2GiB",
                "isolation": "none",
                "kind": "notebook",
            },
        ],
    )
    n = p.node("l4")
    assert p.complete
    assert n.sharing == "time-slicing"
    # the largest tenant sets the replica count: 22.5 GiB / 10 GiB -> at most 2 per card
    assert n.replicas == 2


def test_rule_mig_capable() -> None:
    p = plan([{"name": "l4", "gpus": "l4:1"}], [{"name": "s", "memory": "4GiB"}])
    assert p.workload("s").method == "whole"
    assert cited(p, "mig-capable")


def test_rule_mig_unconfirmed() -> None:
    fleet = [{"name": "n", "gpus": "rtx-pro-4500:1", "driver": "580.95.05"}]
    p = plan(fleet, [{"name": "s", "replicas": 2, "memory": "12GiB"}])
    assert p.workload("s").method == "whole"
    assert any("unconfirmed" in t for t in cited(p, "mig-unconfirmed"))
    allowed = plan(
        fleet, [{"name": "s", "replicas": 2, "memory": "12GiB"}], allow_unconfirmed_mig=True
    )
    assert allowed.workload("s").method == "mig"
    assert any("unconfirmed" in x for x in allowed.node("n").prerequisites)


def test_rule_mig_driver() -> None:
    old = plan(
        [{"name": "n", "gpus": "h100-80gb:1", "driver": "515.65.01"}],
        [{"name": "s", "memory": "8GiB"}],
    )
    assert old.workload("s").method == "whole"
    assert cited(old, "mig-driver")
    unknown = plan(
        [{"name": "n", "gpus": "h100-80gb:1"}], [{"name": "s", "replicas": 3, "memory": "8GiB"}]
    )
    assert unknown.workload("s").method == "mig"
    assert any("525.85.12" in x for x in unknown.node("n").prerequisites)


def test_rule_mig_display() -> None:
    p = plan(
        [
            {
                "name": "ws",
                "gpus": "rtx-pro-6000-maxq:1",
                "driver": "575.51.03",
                "display": "graphics",
            }
        ],
        [{"name": "s", "replicas": 4, "memory": "20GiB"}],
    )
    assert p.workload("s").method == "mig"
    assert any("DisplayModeSelector --gpumode=compute" in x for x in p.node("ws").prerequisites)
    switched = plan(
        [
            {
                "name": "ws",
                "gpus": "rtx-pro-6000-maxq:1",
                "driver": "575.51.03",
                "display": "compute",
            }
        ],
        [{"name": "s", "replicas": 4, "memory": "20GiB"}],
    )
    assert not any("DisplayModeSelector" in x for x in switched.node("ws").prerequisites)


def test_rule_mig_reset() -> None:
    p = plan(
        [{"name": "a", "gpus": "a100-40gb:1", "driver": "535.54.03"}],
        [{"name": "s", "replicas": 7, "memory": "4GiB"}],
    )
    assert any("GPU reset" in x for x in p.node("a").prerequisites)


def test_rule_mig_placeable() -> None:
    # four 2g.10gb take 8 of the A100's 8 memory slices, but 2g starts only at 0, 2 and 4
    p = plan(
        [{"name": "a", "gpus": "a100-40gb:1", "driver": "535.54.03"}],
        [{"name": "svc", "replicas": 4, "memory": "9GiB", "compute": 0.2}],
    )
    assert p.workload("svc").placed == 3
    layout = p.node("a").gpus[0].layout
    assert [x for x in layout if x.startswith("2g.10gb")] == [
        "2g.10gb@0:2",
        "2g.10gb@2:2",
        "2g.10gb@4:2",
    ]


def test_rule_mig_single() -> None:
    uniform = plan([H100], [{"name": "s", "replicas": 14, "memory": "8GiB", "compute": 0.1}])
    assert uniform.node("n1").mig_strategy == "single"
    assert uniform.workload("s").resources == {"nvidia.com/gpu": 1}
    mixed = plan(
        [H100],
        [
            {"name": "s", "replicas": 7, "memory": "8GiB", "compute": 0.1},
            {"name": "b", "replicas": 2, "memory": "30GiB", "compute": 0.4},
        ],
    )
    assert mixed.node("n1").mig_strategy == "mixed"
    assert mixed.workload("b").resources == {"nvidia.com/mig-3g.40gb": 1}
    assert cited(mixed, "mig-single")


def test_rule_mig_in_use() -> None:
    p = plan(
        [
            {
                "name": "h",
                "gpus": "h200:1",
                "driver": "550.90.07",
                "current": {"gpus": {0: {"mig": {"3g.71gb": 2}, "busy": {"3g.71gb": 1}}}},
            }
        ],
        [{"name": "s", "replicas": 3, "memory": "8GiB", "compute": 0.1}],
    )
    g = p.node("h").gpus[0]
    assert g.mig == {"3g.71gb": 2}  # kept: an instance is in use
    assert cited(p, "mig-in-use")


def test_rule_fits() -> None:
    p = plan([H100], [{"name": "s", "memory": "30GiB", "compute": 0.3}])
    assert p.workload("s").profile in ("3g.40gb", "4g.40gb", "7g.80gb", None)
    assert p.workload("s").method in ("mig", "whole")
    if p.workload("s").method == "mig":
        assert p.workload("s").profile != "1g.10gb"


def test_rule_nvlink() -> None:
    pcie = plan(
        [{"name": "p", "gpus": "l40s:4"}],
        [{"name": "ddp", "memory": "30GiB", "gpus": 2, "nvlink": True, "kind": "training"}],
    )
    assert pcie.workload("ddp").left == 1
    bridged = plan(
        [{"name": "p", "gpus": "l40s:4", "nvlink": True}],
        [{"name": "ddp", "memory": "30GiB", "gpus": 2, "nvlink": True, "kind": "training"}],
    )
    assert bridged.workload("ddp").placed == 1


def test_every_rule_has_a_test() -> None:
    names = set(globals())
    missing = [r for r in RULES if f"test_rule_{r.replace('-', '_')}" not in names]
    assert missing == []
    for rule in RULES.values():
        assert rule.source and rule.text


@pytest.mark.parametrize("model", [m for m in all_models() if m.mig is not None], ids=str)
def test_the_planner_gates_mig_on_the_driver_by_the_catalogs_rule(model: GpuModel) -> None:
    assert model.mig is not None
    below = "450.80.02"
    catalog = placement.mig_driver_problem(model.mig, below)
    planner = rules.mig_driver_problem(model, below)
    assert (planner is None) == (catalog is None)
    assert planner is None or (catalog is not None and catalog in planner and model.id in planner)
    assert rules.mig_driver_problem(model, model.mig.min_driver) is None
    offered = placement.offered_profiles(model.mig, below)
    assert set(rules.usable_profiles(model, below)) <= set(offered)
