"""The scenario corpus (tests/scenarios/*.yaml): every plan keeps every rule, every emitted
file validates, and each scenario's expected properties hold.

Each file is a planner input plus `description` and `expect`:
complete, methods, profiles, strategy, sharing, left, no_card, suggests, suggestion (workload
-> text one suggestion contains), resources (workload -> its request), max_gpus, max_cost,
prerequisite (node -> text), reason (a rule id the reporter cites), warning. Any
other key, or no expectation at all, is an error naming the file (`_load`).
Scenarios 0x-3x run the default solver (or the one their options name); generated medium and large
fleets run the heuristic, which is what `auto` uses at that size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.plan import make_plan, parse_data
from kubegpu.plan.check import check_plan

SCENARIOS = sorted((Path(__file__).parents[1] / "scenarios").glob("*.yaml"))


EXPECT_KEYS = frozenset(
    {
        "complete",
        "methods",
        "profiles",
        "strategy",
        "sharing",
        "left",
        "no_card",
        "suggests",
        "suggestion",
        "resources",
        "max_gpus",
        "max_cost",
        "prerequisite",
        "reason",
        "warning",
    }
)


class ScenarioError(ValueError):
    """A scenario file whose `expect` cannot be checked as written."""


def _load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A scenario's planner input and its expectations. An `expect` key this test does not
    check is an error naming the file and the key (a typo would turn an expectation off),
    and so is a scenario that expects nothing."""
    data = yaml.safe_load(path.read_text())
    data.pop("description")
    expect = data.pop("expect") or {}
    if not isinstance(expect, dict):
        raise ScenarioError(f"{path}: field expect, value {expect!r}: must be a mapping")
    unknown = sorted(set(expect) - EXPECT_KEYS)
    if unknown:
        raise ScenarioError(
            f"{path}: field expect, unknown key(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(EXPECT_KEYS))})"
        )
    if not expect:
        raise ScenarioError(f"{path}: field expect is empty: a scenario must expect something")
    return data, expect


def test_an_unknown_or_missing_expectation_is_refused_naming_the_file(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "description: d\nfleet: []\nworkloads: []\nexpect: {complete: true, max_gpu: 1}\n"
    )
    with pytest.raises(ScenarioError, match=r"typo.yaml: field expect, unknown key\(s\) max_gpu"):
        _load(typo)
    empty = tmp_path / "empty.yaml"
    empty.write_text("description: d\nfleet: []\nworkloads: []\nexpect: {}\n")
    with pytest.raises(ScenarioError, match=r"empty\.yaml: field expect is empty"):
        _load(empty)


def test_corpus_is_large_enough() -> None:
    assert len(SCENARIOS) >= 30
    gpus = []
    for path in SCENARIOS:
        data, _ = _load(path)
        inp = parse_data(data, str(path))
        gpus.append(sum(sum(k for _, k in n.models()) * n.count for n in inp.fleet))
    assert min(gpus) <= 1
    assert max(gpus) >= 1000


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    data, expect = _load(path)
    inp = parse_data(data, str(path))
    medium = path.stem.startswith(("4", "5"))
    plan = make_plan(inp, solver="heuristic" if medium else None, suggest=not medium)
    assert check_plan(inp, plan) == []
    if "complete" in expect:
        assert plan.complete == expect["complete"], [(w.name, w.left) for w in plan.workloads]
    for name, method in expect.get("methods", {}).items():
        assert plan.workload(name).method == method, name
    for name, profile in expect.get("profiles", {}).items():
        assert plan.workload(name).profile == profile, name
    for node, strategy in expect.get("strategy", {}).items():
        assert plan.node(node).mig_strategy == strategy
    for node, sharing in expect.get("sharing", {}).items():
        assert plan.node(node).sharing == sharing
    for name, left in expect.get("left", {}).items():
        assert plan.workload(name).left == left
    for name in expect.get("no_card", []):
        assert plan.workload(name).left_reason.startswith("no card in the fleet can serve it")
    for name in expect.get("suggests", []):
        assert plan.workload(name).suggestions, name
    for name, resources in expect.get("resources", {}).items():
        assert plan.workload(name).resources == resources, name
    for name, text in expect.get("suggestion", {}).items():
        assert any(text in s for s in plan.workload(name).suggestions), plan.workload(name)
    if "max_gpus" in expect:
        assert plan.gpus_used <= expect["max_gpus"]
    if "max_cost" in expect:
        assert plan.cost <= expect["max_cost"]
    for node, text in expect.get("prerequisite", {}).items():
        assert any(text in p for p in plan.node(node).prerequisites), plan.node(node).prerequisites
    if "reason" in expect:
        assert any(r.rule == expect["reason"] for r in plan.reporter.reasons)
    if "warning" in expect:
        assert any(expect["warning"] in w for w in plan.warnings)
    # every replica is accounted for, and nothing is placed twice
    for w, spec in zip(plan.workloads, inp.workloads, strict=True):
        assert w.placed + w.left == spec.replicas
