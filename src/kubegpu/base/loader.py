"""One way to read an input file: bounded, strict YAML, validated by a pydantic model.

Every file kubegpu reads from a user (mig-parted configs, device-plugin configs, planner
inputs, cluster files, counters files) comes through here, so they share one error format
and one set of safety bounds (docs/limits.md):

- the file is at most `Limits.max_bytes` (1 MiB unless the caller says otherwise), checked
  before anything is parsed; it must be UTF-8 text;
- mappings and lists nest at most `Limits.max_depth` deep, and the document holds at most
  `Limits.max_values` values once YAML aliases are expanded (no "billion laughs");
- a key given twice in one mapping is an error, not "the last one wins";
- an error names the file, the field and the value, quoting at most `EXCERPT_CHARS`
  characters of it: `cluster.yaml: field nodes.0.name, value 'Bad_Name': message`.

Each caller raises its own error class, a subclass of `InputError`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

MIB = 1024 * 1024
MAX_BYTES = 1 * MIB
MAX_DEPTH = 32
MAX_VALUES = 100_000
EXCERPT_CHARS = 60
MAX_MESSAGE_CHARS = 1000
STDIN = "-"


class InputError(ValueError):
    """An input file that cannot be used. The message names the file, field and value."""


E = TypeVar("E", bound=InputError)
M = TypeVar("M", bound=BaseModel)
Where = Callable[[tuple[int | str, ...], Any], str]


@dataclass(frozen=True)
class Limits:
    """Upper bounds on one input file (docs/limits.md)."""

    max_bytes: int = MAX_BYTES
    max_depth: int = MAX_DEPTH
    max_values: int = MAX_VALUES


DEFAULT_LIMITS = Limits()


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)`, cut to `limit` characters with an ellipsis: never a whole huge value."""
    if isinstance(value, str) and len(value) > limit:
        value = value[: limit + 1]  # repr of a 50 MB string is never built
    text = repr(value) if not isinstance(value, dict | list | tuple) else _short_repr(value, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_repr(value: Any, limit: int) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__}>"
    return text[: limit + 1]


def clip(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A whole message, cut where it would echo too much of the input."""
    return message if len(message) <= limit else message[: limit - 1] + "…"


# --- reading ------------------------------------------------------------------------------


def read_text(path: str | Path, error: type[E], limits: Limits = DEFAULT_LIMITS) -> tuple[str, str]:
    """(text, source name) of a file, or of standard input for `-`. Bounded and UTF-8 only."""
    if str(path) == STDIN:
        return _read_stdin(error, limits), "<stdin>"
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except OSError as exc:
        raise error(f"{source}: cannot read: {exc.strerror or exc}") from None
    return decode(data, source, error, limits), source


def _read_stdin(error: type[E], limits: Limits) -> str:
    stream = sys.stdin
    if stream is None or stream.closed:
        raise error("<stdin>: standard input is closed; give a file instead of '-'")
    try:
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            data = buffer.read(limits.max_bytes + 1)
        else:
            data = stream.read(limits.max_bytes + 1).encode("utf-8", "surrogateescape")
    except (OSError, ValueError) as exc:
        raise error(f"<stdin>: cannot read standard input: {exc}") from None
    if not data.strip():
        raise error("<stdin>: standard input is empty; expected the file's contents")
    return decode(data, "<stdin>", error, limits)


def decode(data: bytes, source: str, error: type[E], limits: Limits = DEFAULT_LIMITS) -> str:
    """Bytes to text: refuses more than `limits.max_bytes` and anything that is not UTF-8."""
    if len(data) > limits.max_bytes:
        raise error(_too_big(source, limits))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{source}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def check_size(text: str, source: str, error: type[E], limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuses text of more than `limits.max_bytes` (as UTF-8) before anything parses it."""
    if (
        len(text) > limits.max_bytes
        or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes
    ):
        raise error(_too_big(source, limits))


def _too_big(source: str, limits: Limits) -> str:
    return f"{source}: file is larger than {_size(limits.max_bytes)}; refusing to read it"


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


# --- YAML ---------------------------------------------------------------------------------


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class _TooDeep(yaml.MarkedYAMLError):
    pass


def _loader(limits: Limits) -> type[yaml.SafeLoader]:
    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses duplicate keys and documents nested too deeply."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > limits.max_depth:
                    raise _TooDeep(
                        problem=f"nested more than {limits.max_depth} levels deep",
                        problem_mark=self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Hashable, Any] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node)
                    except TypeError:
                        continue  # unhashable: SafeLoader says so below
                    if first is not key_node:
                        raise _DuplicateKey(
                            problem=f"duplicate key {excerpt(key)} (first on line "
                            f"{first.start_mark.line + 1}); each key may appear once",
                            problem_mark=key_node.start_mark,
                        )
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def parse_yaml(
    text: str,
    source: str,
    error: type[E],
    limits: Limits = DEFAULT_LIMITS,
) -> Any:
    """The YAML (or JSON) document in `text`, within `limits`; None for an empty document."""
    check_size(text, source, error, limits)
    try:
        data = yaml.load(text, Loader=_loader(limits))  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["?"])[0]
        raise error(clip(f"{source}:{where} malformed YAML: {problem}")) from None
    except (ValueError, OverflowError) as exc:  # e.g. a date 2024-13-45, an int of 5000 digits
        raise error(
            f"{source}: malformed YAML: a value cannot be read: {clip(str(exc), 80)}"
        ) from None
    except RecursionError:
        raise error(f"{source}: nested too deeply") from None
    check_shape(data, source, error, limits, aliases=True)
    return data


def check_shape(
    data: Any, source: str, error: type[E], limits: Limits, *, aliases: bool = False
) -> None:
    """Counts the values of a parsed document (YAML: with aliases expanded) and their depth,
    stopping as soon as a bound is passed."""
    expanded = " once aliases are expanded" if aliases else ""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > limits.max_values:
            raise error(f"{source}: more than {limits.max_values} values{expanded}")
        if depth > limits.max_depth:
            raise error(f"{source}: nested more than {limits.max_depth} levels deep")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            stack.extend((k, depth + 1) for k in node)
        elif isinstance(node, list | tuple):
            stack.extend((v, depth + 1) for v in node)


def require_mapping(
    data: Any, source: str, error: type[E], expected: str = "a mapping"
) -> dict[Any, Any]:
    if not isinstance(data, dict):
        raise error(f"{source}: expected {expected}, got {_kind(data)}")
    return data


def _kind(data: Any) -> str:
    return "an empty document" if data is None else type(data).__name__


# --- validation ---------------------------------------------------------------------------


def dotted(loc: tuple[int | str, ...], data: Any = None) -> str:
    """`field nodes.0.name`: pydantic's location without its internal type tags."""
    path = ".".join(str(p) for p in clean_loc(loc))
    return f"field {path}" if path else "top level"


def named_items(loc: tuple[int | str, ...], data: Any) -> str:
    """`field workloads['chat'].memory`: list items named by their `name` where they have one."""
    parts: list[str] = []
    node: Any = data
    for item in clean_loc(loc):
        if isinstance(item, int) and isinstance(node, list) and 0 <= item < len(node) and parts:
            node = node[item]
            name = node.get("name") if isinstance(node, dict) else None
            shown = excerpt(name) if isinstance(name, str) and name else str(item)
            parts[-1] = f"{parts[-1]}[{shown}]"
            continue
        parts.append(str(item))
        node = node.get(item) if isinstance(node, dict) else None
    return f"field {'.'.join(parts)}" if parts else "top level"


def clean_loc(loc: Sequence[int | str]) -> list[int | str]:
    """Drops pydantic's union/validator tags (`literal['all']`, `function-after[...]`)."""
    return [p for p in loc if not (isinstance(p, str) and ("[" in p or "(" in p))]


def describe(exc: ValidationError, source: str, data: Any, where: Where = dotted) -> str:
    """The first problem as `source: where, value V: message (and N more)`.

    An unknown key is reported before the fields it leaves missing: `mig_enabled` (a
    misspelt `mig-enabled`) is the problem, not the missing `mig-enabled`."""
    errors = exc.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    value = first.get("input")
    shown = f", value {excerpt(value)}" if not isinstance(value, dict | list) else ""
    message = first["msg"].removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return clip(f"{source}: {where(tuple(first['loc']), data)}{shown}: {message}{more}")


def validate(
    model: type[M],
    data: Any,
    source: str,
    error: type[E],
    where: Where = dotted,
    *,
    strict: bool = False,
) -> M:
    """`model` from `data`, or `error` naming the file, field and value of the first problem.

    `strict`: no value is coerced (`"3"` is not an integer, `"yes"` not a boolean), as an
    API server's schema judges one. Only for models whose sequences are lists: pydantic's
    strict mode fills a tuple field only from a tuple."""
    try:
        return model.model_validate(data, strict=strict or None)
    except ValidationError as exc:
        raise error(describe(exc, source, data, where)) from None


def load_yaml(
    path: str | Path,
    error: type[E],
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[Any, str]:
    """(document, source name) of a YAML file (`-`: standard input), within `limits`."""
    text, source = read_text(path, error, limits)
    return parse_yaml(text, source, error, limits), source
