"""The planner's input file: sizes, models and fields are checked, and errors say where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubegpu.plan import PlanInputError, load_input, parse_data, parse_input
from kubegpu.plan.inputs import MAX_NODES, parse_compute, parse_memory
from kubegpu.plan.provider import GpuProvider
from kubegpu.plan.reporter import PlanReporter

FLEET = [{"name": "n1", "gpus": "h100-80gb:2"}]


def data(**workload: Any) -> dict[str, Any]:
    return {"fleet": FLEET, "workloads": [{"name": "w", "memory": "8GiB", **workload}]}


@pytest.mark.parametrize(
    ("text", "mib"),
    [("12GiB", 12288), ("12Gi", 12288), ("12", 12288), (1.5, 1536), ("12288MiB", 12288),
     ("12GB", 11445), ("512Mi", 512)],
)  # fmt: skip
def test_memory_units(text: Any, mib: int) -> None:
    assert parse_memory(text) == mib


@pytest.mark.parametrize(
    ("text", "out"), [(0.25, (0.25, 0)), ("25%", (0.25, 0)), ("16sm", (0.0, 16))]
)
def test_compute_forms(text: Any, out: tuple[float, int]) -> None:
    assert parse_compute(text) == out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"memory": "-4GiB"}, "is not a memory size"),
        ({"memory": "0GiB"}, "must be more than 0"),
        ({"memory": "4 parsecs"}, "is not a memory size"),
        ({"compute": 1.5}, "between 0 and 1"),
        ({"compute": "-3sm"}, "compute"),
        ({"replicas": -1}, "replicas -1 is negative"),
        ({"gpus": 0}, "gpus 0 must be 1..16"),
        ({"gpus": 17}, "one pod is on one node"),
        ({"isolation": "some"}, "isolation"),
        ({"kind": "batch"}, "kind"),
        ({"name": "Bad_Name"}, "not a workload name"),
        ({"colour": "blue"}, "colour"),
        ({"replicas": "4"}, "replicas"),
    ],
)
def test_bad_workload_fields_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanInputError) as err:
        parse_data(data(**change), "in.yaml")
    text = str(err.value)
    name = change.get("name", "w")
    assert text.startswith(f"in.yaml: field workloads[{name!r}]"), text
    assert message in text


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(
        PlanInputError,
        match=r"fleet\['n1'\].gpus.*unknown GPU model 'h300'.*known models: a100-40gb",
    ):
        parse_data({"fleet": [{"name": "n1", "gpus": "h300:8"}], "workloads": []})


@pytest.mark.parametrize(
    ("fleet", "message"),
    [
        ([{"name": "n1", "gpus": "h100-80gb:0"}], "count 0 for h100-80gb must be 1..16"),
        ([{"name": "n1", "gpus": "h100-80gb:20"}], "count 20 for h100-80gb must be 1..16"),
        ([{"name": "n1", "gpus": "h100-80gb:x"}], "count 'x' for h100-80gb is not a number"),
        ([{"name": "n1", "gpus": "h100-80gb:2;colour=red"}], "unknown option"),
        ([{"name": "n1", "gpus": "l4:1", "driver": "new"}], "not a driver version"),
        ([{"name": "n1", "gpus": "l4:1"}, {"name": "n1", "gpus": "l4:1"}], "node names used twice"),
        (
            [{"name": "n1", "gpus": "l4:2", "current": {"gpus": {5: {"busy": "whole"}}}}],
            "out of range",
        ),
        (
            [
                {
                    "name": "n1",
                    "gpus": "h100-80gb:1",
                    "current": {"gpus": {0: {"busy": {"1g.10gb": 2}}}},
                }
            ],
            "need the GPU's current mig layout",
        ),
        ([{"name": "n1", "gpus": "l4:1", "current": {"sharing": "mps"}}], "needs replicas >= 2"),
    ],
)
def test_bad_fleet(fleet: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(PlanInputError, match=message):
        parse_data({"fleet": fleet, "workloads": []})


def test_needs_a_fleet_or_something_to_buy() -> None:
    with pytest.raises(PlanInputError, match="no fleet and nothing to buy"):
        parse_data({"workloads": []})


def test_buy_mode_fields() -> None:
    with pytest.raises(PlanInputError, match="card_price"):
        parse_data(
            {
                "buy": [{"name": "b", "model": "l4", "card_price": 0, "max_cards": 4}],
                "workloads": [],
            }
        )
    inp = parse_data(
        {"buy": [{"name": "b", "model": "L4", "card_price": 10, "max_cards": 4}], "workloads": []}
    )
    assert inp.buy[0].model == "l4"


def test_malformed_yaml_says_where() -> None:
    with pytest.raises(PlanInputError, match=r"in.yaml: line \d+, column \d+ malformed YAML"):
        parse_input("fleet:\n  - name: [x\n", "in.yaml")


def test_count_expands_node_names() -> None:
    inp = parse_data({"fleet": [{"name": "l4", "gpus": "l4:4", "count": 3}], "workloads": []})
    assert inp.node_names() == ["l4-1", "l4-2", "l4-3"]


def test_files_merge(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(
        "fleet:\n  - {name: n1, gpus: 'l4:1'}\noptions: {solver: exact}\n"
    )
    (tmp_path / "work.yaml").write_text(
        "workloads:\n  - {name: w, memory: 4GiB}\noptions: {time_limit: 5}\n"
    )
    inp = load_input([tmp_path / "fleet.yaml", tmp_path / "work.yaml"])
    assert inp.options.solver == "exact"
    assert inp.options.time_limit == 5
    assert [w.name for w in inp.workloads] == ["w"]
    with pytest.raises(PlanInputError, match="cannot read"):
        load_input([tmp_path / "missing.yaml"])


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_infinite_or_nan_priorities_are_refused(value: float) -> None:
    with pytest.raises(PlanInputError) as err:
        parse_data(data(priority=value), "in.yaml")
    assert "priority" in str(err.value)


def test_an_infinite_card_price_is_refused() -> None:
    inp = {
        "buy": [{"name": "box", "model": "l4", "card_price": float("inf"), "max_cards": 8}],
        "workloads": [{"name": "w", "memory": "8GiB"}],
    }
    with pytest.raises(PlanInputError) as err:
        parse_data(inp, "in.yaml")
    assert "card_price" in str(err.value)


def test_a_fleet_of_more_than_max_nodes_in_all_is_refused_before_names_are_expanded() -> None:
    # 100 entries of 10 000 nodes each used to hang on the duplicate-name check
    fleet = [{"name": f"n{i}", "gpus": "l4:1", "count": MAX_NODES} for i in range(100)]
    with pytest.raises(PlanInputError) as err:
        parse_data({"fleet": fleet, "workloads": []}, "in.yaml")
    assert str(err.value) == (
        f"in.yaml: field fleet: {100 * MAX_NODES} nodes in all (counts expanded); "
        f"at most {MAX_NODES}"
    )
    half = MAX_NODES // 2
    two = [
        {"name": "a", "gpus": "l4:1", "count": half},
        {"name": "b", "gpus": "l4:1", "count": half},
    ]
    assert len(parse_data({"fleet": two, "workloads": []}).node_names()) == MAX_NODES


@pytest.mark.parametrize(
    ("where", "field", "value"),
    [
        ("workload", "priority", "5"),
        ("workload", "priority", True),
        ("options", "time_limit", "30"),
        ("buy", "card_price", "1000"),
        ("buy", "server_price", False),
    ],
)
def test_numbers_are_not_coerced_from_text_or_booleans(where: str, field: str, value: Any) -> None:
    inp: dict[str, Any] = {
        "buy": [{"name": "box", "model": "l4", "card_price": 1000, "max_cards": 8}],
        "workloads": [{"name": "w", "memory": "8GiB"}],
    }
    target = {"workload": inp["workloads"][0], "buy": inp["buy"][0]}.get(where)
    if target is None:
        inp["options"] = target = {}
    target[field] = value
    with pytest.raises(PlanInputError) as err:
        parse_data(inp, "in.yaml")
    assert f"{field}, value {value!r}: Input should be a valid number" in str(err.value)
    target[field] = 2  # a whole number is still a number
    parse_data(inp, "in.yaml")


def test_buying_for_unbounded_replicas_stops_at_max_nodes_candidates() -> None:
    inp = parse_data(
        {
            "buy": [{"name": "box", "model": "l4", "card_price": 1000, "max_cards": 8}],
            # a few more whole L4s than MAX_NODES servers of 8 hold (10**12 used to OOM)
            "workloads": [{"name": "w", "memory": "8GiB", "replicas": 8 * MAX_NODES + 40}],
        }
    )
    assert len(GpuProvider(inp, PlanReporter()).nodes) == MAX_NODES


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ("workloads: {name: w}\n", "field workloads, value {'name': 'w'}: expected a list"),
        ("fleet: 'l4:1'\n", "field fleet, value 'l4:1': expected a list"),
        ("options: 5\n", "field options, value 5: expected a mapping"),
    ],
)
def test_a_file_that_cannot_be_merged_is_named_whichever_comes_first(
    tmp_path: Path, second: str, message: str
) -> None:
    # these used to end in a Python traceback (dict.extend) or a message naming both files
    first = tmp_path / "first.yaml"
    first.write_text("fleet: [{name: n1, gpus: 'l4:1'}]\nworkloads: [{name: a, memory: 1}]\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(second)
    for order in ([first, bad], [bad, first]):
        with pytest.raises(PlanInputError) as err:
            load_input(list(order))
        assert str(err.value) == f"{bad}: {message}"
