"""The one input loader: size, depth and alias bounds, UTF-8, duplicate keys, standard input,
and errors that name the file, field and value but quote only a short excerpt."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from kubegpu.base.loader import (
    EXCERPT_CHARS,
    MAX_BYTES,
    MAX_DEPTH,
    InputError,
    Limits,
    excerpt,
    load_yaml,
    parse_yaml,
    read_text,
    validate,
)
from kubegpu.exporter.counters import CountersError, load_counters
from kubegpu.mig.config import ConfigError
from kubegpu.mig.config import load_config as load_mig
from kubegpu.nvml.sim.state import StateFile
from kubegpu.plan.inputs import LIMITS as PLAN_LIMITS
from kubegpu.plan.inputs import PlanInputError, load_input
from kubegpu.sharing.config import SharingConfigError
from kubegpu.sharing.config import load_config as load_sharing
from kubegpu.sim.cluster import ClusterFileError, load_cluster


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int = 0


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodes: list[Node]


# --- bounds -------------------------------------------------------------------------------


def test_a_file_over_the_size_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a: [" + "1, " * (MAX_BYTES // 3) + "]\n")  # would parse, were it read
    with pytest.raises(InputError, match=r"big\.yaml: file is larger than 1 MiB"):
        load_yaml(path, InputError)


def test_a_caller_can_set_its_own_bounds(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text("a: 123456789\n")
    with pytest.raises(InputError, match="larger than 10 bytes"):
        load_yaml(path, InputError, Limits(max_bytes=10))
    assert load_yaml(path, InputError, Limits(max_bytes=100)) == ({"a": 123456789}, str(path))
    assert PLAN_LIMITS.max_bytes > MAX_BYTES  # a whole fleet, one node at a time, fits


def test_nesting_deeper_than_the_bound_is_refused() -> None:
    assert parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "ok.yaml", InputError) is not None
    deeper = MAX_DEPTH + 1
    with pytest.raises(InputError, match=f"deep.yaml: line 1, column {MAX_DEPTH + 1} .*nested"):
        parse_yaml("[" * deeper + "]" * deeper, "deep.yaml", InputError)
    with pytest.raises(InputError, match="nested more than"):
        parse_yaml("[" * 100_000, "deep.yaml", InputError)  # not a RecursionError


def test_aliases_cannot_expand_a_small_file_into_a_huge_document() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(InputError, match="more than 100000 values once aliases are expanded"):
        parse_yaml("\n".join(lines), "bomb.yaml", InputError)
    assert parse_yaml("a: &a [1, 2]\nb: *a\n", "ok.yaml", InputError) == {"a": [1, 2], "b": [1, 2]}


# --- text ---------------------------------------------------------------------------------


def test_a_file_that_is_not_utf8_is_named_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.yaml: not UTF-8 text \(byte 0xe9 at offset 9\)"):
        read_text(path, InputError)


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert load_yaml(path, InputError)[0] == {"a": 1}


def test_an_unreadable_file_says_why(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.yaml: cannot read: No such file"):
        read_text(tmp_path / "missing.yaml", InputError)
    with pytest.raises(InputError, match="cannot read: Is a directory"):
        read_text(tmp_path, InputError)


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes, closed: bool = False) -> None:
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    if closed:
        stream.close()
    monkeypatch.setattr(sys, "stdin", stream)


def test_dash_reads_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    _stdin(monkeypatch, b"a: 1\n")
    assert read_text("-", InputError) == ("a: 1\n", "<stdin>")


@pytest.mark.parametrize(
    ("data", "closed", "message"),
    [
        (b"", False, "<stdin>: standard input is empty"),
        (b"  \n", False, "<stdin>: standard input is empty"),
        (b"a: 1", True, "<stdin>: standard input is closed"),
        (b"\xff\xfe", False, "<stdin>: not UTF-8 text"),
    ],
)
def test_standard_input_that_is_closed_empty_or_binary_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, data: bytes, closed: bool, message: str
) -> None:
    _stdin(monkeypatch, data, closed)
    with pytest.raises(InputError) as err:
        read_text("-", InputError)
    assert str(err.value).startswith(message)


def test_no_standard_input_at_all_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(InputError, match="standard input is closed"):
        read_text("-", InputError)


# --- YAML strictness ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", "line 3, column 1 malformed YAML: duplicate key 'a' (first on line 1)"),
        ("x:\n  - {n: 1, n: 2}\n", "line 2, column 12 malformed YAML: duplicate key 'n'"),
        ("1: a\n1: b\n", "duplicate key 1"),
    ],
)  # fmt: skip
def test_a_key_given_twice_is_an_error_not_last_wins(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_yaml(text, "dup.yaml", InputError)
    assert str(err.value).startswith("dup.yaml:")
    assert message in str(err.value)


def test_a_merge_key_may_still_override_what_it_merges() -> None:
    text = "base: &b {a: 1, b: 2}\nmine: {<<: *b, a: 3}\n"
    assert parse_yaml(text, "m.yaml", InputError)["mine"] == {"a": 3, "b": 2}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("when: 2024-13-45\n", "a value cannot be read: month must be in 1..12"),
        ("n: " + "9" * 5000 + "\n", "a value cannot be read: Exceeds the limit"),
        ("a: \x00\n", "malformed YAML: unacceptable character"),
        ("{[1]: 2}\n", "found unhashable key"),
    ],
)
def test_values_yaml_cannot_build_are_the_callers_error(text: str, message: str) -> None:
    with pytest.raises(InputError, match=r"odd\.yaml: ") as err:
        parse_yaml(text, "odd.yaml", InputError)
    assert message in str(err.value)


# --- error format -------------------------------------------------------------------------


def test_errors_name_file_field_and_value() -> None:
    with pytest.raises(InputError) as err:
        validate(Doc, {"nodes": [{"name": "a", "size": "big"}]}, "c.yaml", InputError)
    assert str(err.value).startswith(
        "c.yaml: field nodes.0.size, value 'big': Input should be a valid integer"
    )


def test_errors_quote_only_an_excerpt_of_a_huge_value() -> None:
    huge = "x" * 50_000_000
    with pytest.raises(InputError) as err:
        validate(Doc, {"nodes": [{"name": "a", "size": huge}]}, "c.yaml", InputError)
    message = str(err.value)
    assert len(message) < 200
    assert "'xxxxxxxx" in message
    assert "…" in message
    assert len(excerpt(huge)) == EXCERPT_CHARS
    assert excerpt("short") == "'short'"


def test_the_error_counts_the_other_problems() -> None:
    with pytest.raises(InputError, match=r"field nodes.0.name: Field required \(and 1 more\)$"):
        validate(Doc, {"nodes": [{"size": "a"}]}, "c.yaml", InputError)


# --- every file parser uses the loader, each with its own error class ---------------------

LOADERS: dict[str, tuple[Callable[[Path], object], type[InputError]]] = {
    "mig": (load_mig, ConfigError),
    "sharing": (load_sharing, SharingConfigError),
    "plan": (lambda p: load_input([p]), PlanInputError),
    "cluster": (load_cluster, ClusterFileError),
}


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"version: v1\nversion: v1\n", "duplicate key 'version'"),
        (b"version: v1\n\xff\n", "not UTF-8 text"),
        (b"[" * 200, "nested more than 32 levels deep"),
        (b"- a\n", "expected"),
    ],
)
def test_every_file_parser_applies_the_loaders_rules(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    load, error = LOADERS[name]
    path = tmp_path / "input.yaml"
    path.write_bytes(content)
    with pytest.raises(error) as err:
        load(path)
    assert str(err.value).startswith(str(path))
    assert message in str(err.value)
    assert issubclass(error, InputError)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_file_parser_bounds_the_file_size(tmp_path: Path, name: str) -> None:
    load, error = LOADERS[name]
    path = tmp_path / "input.yaml"
    limit = PLAN_LIMITS.max_bytes if name == "plan" else MAX_BYTES
    path.write_bytes(b"#" * (limit + 1))
    with pytest.raises(error, match="file is larger than"):
        load(path)


def test_the_counters_file_is_bounded_and_utf8_too(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes(b"DCGM_FI_DEV_SM_CLOCK, gauge, caf\xe9\n")
    with pytest.raises(CountersError, match=r"c\.csv: not UTF-8 text"):
        load_counters(path)
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(CountersError, match="file is larger than 1 MiB"):
        load_counters(path)
    assert issubclass(CountersError, InputError)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[]", "expected a JSON object, got []"),
        (b"null", "expected a JSON object, got None"),
        (b'{"version": "' + b"9" * 10_000 + b'"}', "unsupported format (version '999"),
        (b"\xff\xfe{}", "is not valid JSON"),
    ],
)
def test_a_sim_gpu_state_file_that_is_not_a_state_is_a_clear_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "gpus.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"sim GPU state .*gpus\.json") as err:
        StateFile(path).read()
    assert message in str(err.value)
    assert len(str(err.value)) < 300
