"""`kubegpu plan --api dra`: each kind of planned workload becomes the claim a careful user
would write, `check_plan(api="dra")` catches a wrong one, and what DRA cannot express is
refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate
from typer.testing import CliRunner

from kubegpu.catalog import get_model
from kubegpu.cli.app import app
from kubegpu.dra.classes import device_classes
from kubegpu.dra.config import FeatureGates, check_gates, claim_configs, parse_parameters
from kubegpu.plan import dra, emit, make_plan, parse_data
from kubegpu.plan.check import check_plan
from kubegpu.plan.check_dra import check_dra, selector_matches
from kubegpu.plan.dra import DraPlanError, dra_plan
from kubegpu.plan.inputs import PlanInput
from kubegpu.plan.result import Plan

WHOLE = {
    "fleet": [{"name": "train", "gpus": "h100-80gb:4"}],
    "workloads": [
        {"name": "ft", "replicas": 2, "gpus": 2, "kind": "training", "memory": "60GiB"},
    ],
}
MIG = {
    "fleet": [{"name": "inf", "gpus": "a100-40gb:1", "driver": "535.54.03"}],
    "workloads": [{"name": "small", "replicas": 7, "memory": "4GiB", "compute": 0.1}],
}
# three profiles on one A100: each workload's claim must select its own
MIG_MIX = {
    "fleet": [{"name": "mixed", "gpus": "a100-40gb:1", "driver": "535.54.03"}],
    "workloads": [
        {"name": "big", "memory": "18GiB", "compute": 0.3},
        {"name": "mid", "memory": "9GiB", "compute": 0.25},
        {"name": "small", "memory": "4GiB", "compute": 0.1},
    ],
}
TIME_SLICED = {
    "fleet": [{"name": "nb", "gpus": "l4:2"}],
    "workloads": [
        {
            "name": "notebooks",
            "replicas": 5,
            "memory": "4GiB",
            "compute": 0.1,
            "isolation": "none",
            "kind": "notebook",
        }
    ],
}
MPS = {
    "fleet": [{"name": "emb", "gpus": "l4:2"}],
    "workloads": [
        {"name": "embed", "replicas": 5, "memory": "4GiB", "compute": 0.1, "isolation": "memory"},
        {"name": "rank", "replicas": 2, "memory": "4GiB", "compute": 0.1, "isolation": "memory"},
    ],
}
ALL = {"whole": WHOLE, "mig": MIG, "time-slicing": TIME_SLICED, "mps": MPS}


def _plan(data: dict[str, Any]) -> tuple[PlanInput, Plan]:
    inp = parse_data(data)
    return inp, make_plan(inp, suggest=False)


def _files(data: dict[str, Any]) -> tuple[PlanInput, Plan, dict[str, str]]:
    inp, plan = _plan(data)
    return inp, plan, emit.render_dra(plan, {w.name: w for w in inp.workloads})


def _claims(files: dict[str, str]) -> dict[str, Any]:
    docs = yaml.safe_load_all(files["dra/claims.yaml"])
    return {d["metadata"]["name"]: d for d in docs}


def _groups(files: dict[str, str]) -> dict[str, Any]:
    return dict(yaml.safe_load(files["dra/pod-groups.yaml"])["workloads"])


# --- what each workload kind becomes -------------------------------------------------------


def test_a_multi_gpu_training_job_gets_a_template_of_two_gpus_of_its_model_kept_together() -> None:
    _inp, _, files = _files(WHOLE)
    spec = _claims(files)["ft"]["spec"]["spec"]["devices"]
    exactly = spec["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "gpu.nvidia.com"
    assert exactly["count"] == 2
    product = get_model("h100-80gb").product_name
    assert exactly["selectors"] == [
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{product}'"}}
    ]
    assert spec["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.nvidia.com/productName"}
    ]
    assert "config" not in spec
    [group] = _groups(files)["ft"]
    assert group["pods"] == ["ft-0", "ft-1"]
    assert group["spec"] == {
        "nodeSelector": {"kubernetes.io/hostname": "train"},
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "ft"}],
    }


def test_a_mig_workload_gets_a_template_of_its_profile_on_its_model() -> None:
    _inp, plan, files = _files(MIG)
    assert plan.workload("small").profile == "1g.5gb"
    exactly = _claims(files)["small"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert exactly["count"] == 1
    [selector] = exactly["selectors"]
    expression = selector["cel"]["expression"]
    assert "profile == '1g.5gb'" in expression
    assert get_model("a100-40gb").product_name in expression
    # the layout must exist first: the mig-parted config and the script that applies it
    assert "1g.5gb" in files["mig-parted-config.yaml"]
    assert "-c plan-1" in files["apply-mig.sh"]
    assert "dra/claims.yaml" in files and "device-plugin-configmap.yaml" not in files


def test_time_sliced_replicas_share_one_claim_per_gpu_with_the_planned_interval() -> None:
    _inp, plan, files = _files(TIME_SLICED)
    claims = _claims(files)
    [name] = claims
    claim = claims[name]
    assert claim["kind"] == "ResourceClaim"
    [config] = claim["spec"]["devices"]["config"]
    params = config["opaque"]["parameters"]
    assert params["sharing"] == {
        "strategy": "TimeSlicing",
        "timeSlicingConfig": {"interval": "Default"},
    }
    [group] = _groups(files)["notebooks"]
    assert group["sharedClaim"] == name
    assert group["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": name}]
    assert claim["metadata"]["annotations"]["kubegpu.dev/planned-pods"] == ",".join(group["pods"])
    assert len(group["pods"]) == plan.node("nb").replicas == 5


def test_mps_claims_carry_each_replicas_equal_share_and_say_which_pods_share_them() -> None:
    _inp, plan, files = _files(MPS)
    node = plan.node("emb")
    memory = get_model("l4").memory_mib
    claims = _claims(files)
    assert len(claims) == 2  # two shared GPUs, one claim each
    for claim in claims.values():
        [config] = claim["spec"]["devices"]["config"]
        assert config["opaque"]["parameters"]["sharing"] == {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 100 // node.replicas,
                "defaultPinnedDeviceMemoryLimit": f"{memory // node.replicas}Mi",
            },
        }
    users = {g["sharedClaim"]: g["pods"] for gs in _groups(files).values() for g in gs}
    assert sorted(p for pods in users.values() for p in pods) == sorted(
        [f"embed-{i}" for i in range(5)] + ["rank-0", "rank-1"]
    )


@pytest.mark.parametrize("kind", sorted(ALL))
def test_every_emitted_config_is_one_the_plugin_accepts(kind: str) -> None:
    _inp, _, files = _files(ALL[kind])
    gates = FeatureGates.parse("TimeSlicingSettings=true,MPSSupport=true")
    for name, claim in _claims(files).items():
        spec = claim["spec"] if claim["kind"] == "ResourceClaim" else claim["spec"]["spec"]
        for cfg in claim_configs(spec["devices"].get("config") or [], name):
            check_gates(cfg.config, gates, name)
            parse_parameters(cfg.config.model_dump(exclude_none=True), name)


@pytest.mark.parametrize("kind", sorted(ALL))
def test_every_emitted_object_is_a_kubernetes_object_without_unknown_fields(kind: str) -> None:
    _inp, _, files = _files(ALL[kind])
    types: dict[str, Any] = {
        "ResourceClaim": ResourceClaim,
        "ResourceClaimTemplate": ResourceClaimTemplate,
        "DeviceClass": DeviceClass,
    }
    docs = [*yaml.safe_load_all(files["dra/claims.yaml"])]
    docs += yaml.safe_load_all(files["dra/deviceclasses.yaml"])
    for doc in docs:
        assert types[doc["kind"]].from_dict(doc).to_dict() == doc


def test_the_device_classes_are_the_plugins_own_and_only_those_used() -> None:
    _inp, _, files = _files(MIG)
    [cls] = yaml.safe_load_all(files["dra/deviceclasses.yaml"])
    assert cls == next(c for c in device_classes() if c["metadata"]["name"] == "mig.nvidia.com")


def test_plan_json_and_labels_name_no_device_plugin_config() -> None:
    _inp, plan, files = _files(MPS)
    assert all(n.labels == {} and n.device_plugin_config == "" for n in plan.nodes)
    assert not any("mps.capable" in p for n in plan.nodes for p in n.prerequisites)
    assert "label-nodes.sh" not in files


# --- check_plan reads the DRA files back ---------------------------------------------------


@pytest.mark.parametrize("kind", sorted(ALL))
def test_the_emitted_files_pass_the_check(kind: str) -> None:
    inp, plan = _plan(ALL[kind])
    assert check_plan(inp, plan, api="dra") == []


@pytest.mark.parametrize("kind", ["whole", "mig", "mps"])
def test_a_claim_that_selects_the_wrong_model_is_caught(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, plan = _plan(ALL[kind])
    wrong = get_model("h200-nvl").product_name
    monkeypatch.setattr(
        dra.Claim,
        "selectors",
        lambda self: [dra.attribute_equals("productName", wrong)],
    )
    problems = check_plan(inp, plan, api="dra")
    assert any("selectors match none" in p for p in problems), problems


def test_a_mig_claim_that_would_take_other_profiles_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inp, plan = _plan(MIG_MIX)
    assert len({w.profile for w in plan.workloads}) == 3
    assert check_plan(inp, plan, api="dra") == []
    monkeypatch.setattr(
        dra.Claim,
        "selectors",
        lambda self: [dra.attribute_equals("productName", get_model(self.model).product_name)],
    )
    problems = check_plan(inp, plan, api="dra")
    assert any("also match devices the plan gives others" in p for p in problems), problems


def test_a_template_of_the_wrong_size_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inp, plan = _plan(WHOLE)
    real = dra.claim_spec

    def one_gpu(c: dra.Claim) -> dict[str, Any]:
        return real(dataclasses.replace(c, count=1))

    monkeypatch.setattr(dra, "claim_spec", one_gpu)
    problems = check_plan(inp, plan, api="dra")
    assert any("1 devices per claim, the workload needs 2" in p for p in problems), problems


def test_mps_limits_other_than_the_plans_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inp, plan = _plan(MPS)
    monkeypatch.setattr(dra, "mps_share", lambda model, replicas: (50, 1024))
    problems = check_plan(inp, plan, api="dra")
    assert any("50% threads per client" in p for p in problems), problems
    assert any("pinned memory 1024Mi" in p for p in problems), problems


def test_a_replica_left_out_of_the_pod_groups_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inp, plan = _plan(TIME_SLICED)
    real = dra.dra_plan

    def drop_one(plan: Plan, workloads: Any, mig_fallback: bool = False) -> dra.DraPlan:
        out = real(plan, workloads, mig_fallback)
        g = out.groups[0]
        out.groups[0] = dataclasses.replace(g, pods=g.pods[:-1])
        return out

    monkeypatch.setattr(emit, "dra_plan", drop_one)
    problems = check_plan(inp, plan, api="dra")
    assert any("4 pods on nb, the plan puts 5" in p for p in problems), problems


def test_a_config_the_plugin_would_refuse_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inp, plan = _plan(MPS)
    monkeypatch.setattr(dra, "mps_share", lambda model, replicas: (150, 1024))
    problems = check_plan(inp, plan, api="dra")
    assert any("the DRA plugin would refuse its config" in p for p in problems), problems


def test_the_selector_evaluator_refuses_cel_it_cannot_read() -> None:
    device = {"type": "gpu", "productName": "NVIDIA L4"}
    assert selector_matches(
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'", device
    )
    assert not selector_matches("device.attributes['gpu.nvidia.com'].type == 'mig'", device)
    with pytest.raises(ValueError, match="not one the check can evaluate"):
        selector_matches("device.attributes['gpu.nvidia.com'].productName.matches('L4')", device)


# --- what DRA cannot express is refused ---------------------------------------------------


def test_a_workload_whose_gpu_model_the_plan_leaves_open_is_refused() -> None:
    inp, plan = _plan(
        {
            "fleet": [{"name": "two", "gpus": "h100-80gb:1,l4:1"}],
            "workloads": [{"name": "svc", "replicas": 1, "memory": "8GiB", "kind": "training"}],
        }
    )
    wp = plan.workload("svc")
    assert wp.method == "whole"
    for g in plan.node("two").gpus:
        g.role = "whole"  # both models whole and both fit: which one is the plan's?
    wp.resources = {"nvidia.com/gpu": 1}
    with pytest.raises(DraPlanError, match=r"svc on two: .*any of h100-80gb, l4"):
        dra_plan(plan, {w.name: w for w in inp.workloads})
    assert any("svc on two" in p for p in check_plan(inp, plan, api="dra"))


def test_shared_replicas_that_fit_no_shared_gpu_are_refused() -> None:
    inp, plan = _plan(TIME_SLICED)
    node = plan.node("nb")
    for g in node.gpus:
        if g.role == "shared":
            g.replicas = 50  # more ways than the notebooks' 4 GiB each allows on an L4
    with pytest.raises(DraPlanError, match="notebooks on nb: 5 of its 5 shared replicas fit no"):
        dra_plan(plan, {w.name: w for w in inp.workloads})


def test_the_cli_writes_the_dra_files_and_shows_who_shares_which_claim(tmp_path: Any) -> None:
    src = tmp_path / "in.yaml"
    src.write_text(yaml.safe_dump(MPS))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["plan", "-f", str(src), "--api", "dra", "-o", str(out)], terminal_width=250
    )
    assert result.exit_code == 0, result.output
    assert "DRA claims" in result.output and "emb-shared-0" in result.output
    assert "embed-0" in result.output
    assert (out / "dra/claims.yaml").is_file() and not (out / "label-nodes.sh").exists()
    bad = CliRunner().invoke(app, ["plan", "-f", str(src), "--api", "nope"])
    assert bad.exit_code == 2
    as_json = CliRunner().invoke(app, ["plan", "-f", str(src), "--api", "dra", "--json"])
    assert as_json.exit_code == 0, as_json.output
    shared = {c["name"]: c for c in json.loads(as_json.output)["dra"]["claims"]}
    assert sorted(p for c in shared.values() for p in c["pods"]) == sorted(
        [f"embed-{i}" for i in range(5)] + ["rank-0", "rank-1"]
    )


# the hand-written scenarios; 33 and 35 take a minute of solving each (the scenario tests
# plan them already)
SCENARIOS = [
    p
    for p in sorted((Path(__file__).parents[1] / "scenarios").glob("[0-3]*.yaml"))
    if p.stem[:2] not in ("33", "35")
]
SEEDS = Path(__file__).parents[2] / "examples" / "plan" / "seeds-world.yaml"


@pytest.mark.parametrize("path", [SEEDS, *SCENARIOS], ids=lambda p: p.stem)
def test_every_corpus_plan_is_emitted_for_dra_and_passes_or_is_refused_by_name(
    path: Path,
) -> None:
    data = yaml.safe_load(path.read_text())
    data.pop("description", None)
    data.pop("expect", None)
    inp = parse_data(data, str(path))
    plan = make_plan(inp, suggest=False)
    workloads = {w.name: w for w in inp.workloads}
    try:
        dra_plan(plan, workloads)
    except DraPlanError as exc:
        assert any(
            str(exc).startswith(name) for name in [*workloads, *(n.name for n in plan.nodes)]
        )
        return
    assert check_plan(inp, plan, api="dra") == []


# --- prioritized lists ---------------------------------------------------------------------


def test_with_mig_fallback_a_mig_claim_prefers_its_profile_then_the_next_larger_one() -> None:
    inp, plan = _plan(MIG_MIX)
    workloads = {w.name: w for w in inp.workloads}
    files = emit.render_dra(plan, workloads, mig_fallback=True)
    claims = _claims(files)
    (request,) = claims["small"]["spec"]["spec"]["devices"]["requests"]
    assert "exactly" not in request
    first, then = request["firstAvailable"]
    assert (first["name"], then["name"]) == ("mig-1g5gb", "mig-2g10gb")
    assert "profile == '1g.5gb'" in first["selectors"][0]["cel"]["expression"]
    assert "profile == '2g.10gb'" in then["selectors"][0]["cel"]["expression"]
    assert then["deviceClassName"] == first["deviceClassName"] == "mig.nvidia.com"
    mid = claims["mid"]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [r["name"] for r in mid] == ["mig-2g10gb", "mig-3g20gb"]
    # the largest profile of the layout has nothing larger to fall back to
    assert "exactly" in claims["big"]["spec"]["spec"]["devices"]["requests"][0]
    # the files still say what the plan says: the preferred profile is the planned one
    assert check_dra(plan, workloads, mig_fallback=True) == []


def test_without_mig_fallback_mig_claims_are_exact_requests() -> None:
    *_, files = _files(MIG_MIX)
    for claim in _claims(files).values():
        (request,) = claim["spec"]["spec"]["devices"]["requests"]
        assert "exactly" in request and "firstAvailable" not in request
