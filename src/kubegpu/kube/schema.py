"""OpenAPI v3 schemas from pydantic models, for CustomResourceDefinitions.

The models are the schema: `model_schema(model)` walks their fields and emits a structural
schema (every node typed, no refs, no nulls). Where a Python type says too little
(int-or-string, free-form maps, formats, patterns) a `K8s` hint is attached with
`Annotated[...]`. `unknown_fields` walks data the same way to find what the API server would
prune.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class K8s:
    """Hints for the generated OpenAPI schema, attached with `Annotated[...]`."""

    int_or_string: bool = False
    preserve_unknown: bool = False
    pattern: str | None = None
    minimum: int | None = None
    int_format: str | None = None
    default: Any = None


IntOrString = Annotated[int | str, K8s(int_or_string=True)]
FreeForm = Annotated[dict[str, Any], K8s(preserve_unknown=True)]
Int32 = Annotated[int, K8s(int_format="int32")]
Int64 = Annotated[int, K8s(int_format="int64")]
ImageName = Annotated[str, K8s(pattern=r"[a-zA-Z0-9\-]+")]
ProbeCount = Annotated[int, K8s(int_format="int32", minimum=1)]


def unknown_fields(data: Any, model: type[BaseModel], at: str = "") -> list[str]:
    """Paths in `data` that the schema does not define (the API server would prune them)."""
    problems: list[str] = []
    if not isinstance(data, dict):
        return problems
    fields = model.model_fields
    for key, value in data.items():
        path = f"{at}.{key}" if at else str(key)
        if key not in fields:
            problems.append(path)
            continue
        problems.extend(_unknown_in(value, fields[key].annotation, fields[key].metadata, path))
    return problems


def _unknown_in(value: Any, annotation: Any, metadata: list[Any], path: str) -> list[str]:
    hint = _hint(metadata)
    if hint.preserve_unknown or value is None:
        return []
    annotation, extra = _unwrap(annotation)
    if _hint(extra).preserve_unknown:
        return []
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return unknown_fields(value, annotation, path)
    if origin is list and isinstance(value, list):
        (item,) = get_args(annotation)
        out: list[str] = []
        for i, v in enumerate(value):
            out += _unknown_in(v, item, [], f"{path}[{i}]")
        return out
    return []


def _hint(metadata: list[Any] | tuple[Any, ...]) -> K8s:
    for m in metadata:
        if isinstance(m, K8s):
            return m
    return K8s()


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """Strip Optional and Annotated; return the bare type and any Annotated metadata."""
    metadata: list[Any] = []
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            base, *meta = get_args(annotation)
            metadata.extend(meta)
            annotation = base
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
            else:
                return annotation, metadata
        else:
            return annotation, metadata


def _schema(annotation: Any, metadata: list[Any] | tuple[Any, ...] = ()) -> dict[str, Any]:
    annotation, extra = _unwrap(annotation)
    hint = _hint([*metadata, *extra])
    if hint.int_or_string:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        }
    if hint.preserve_unknown:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    origin = get_origin(annotation)
    schema: dict[str, Any]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        schema = model_schema(annotation)
    elif origin is Literal:
        values = list(get_args(annotation))
        schema = {"type": "string", "enum": values}
    elif origin is list:
        (item,) = get_args(annotation)
        schema = {"type": "array", "items": _schema(item)}
    elif origin is dict:
        _, value = get_args(annotation)
        schema = {"type": "object", "additionalProperties": _schema(value)}
    elif annotation is str:
        schema = {"type": "string"}
    elif annotation is bool:
        schema = {"type": "boolean"}
    elif annotation is int:
        schema = {"type": "integer"}
    else:
        raise TypeError(f"no OpenAPI schema for {annotation!r}")
    if hint.pattern:
        schema["pattern"] = hint.pattern
    if hint.int_format:
        schema["format"] = hint.int_format
    if hint.minimum is not None:
        schema["minimum"] = hint.minimum
    return schema


def _field_schema(info: FieldInfo) -> dict[str, Any]:
    schema = _schema(info.annotation, info.metadata)
    if info.description:
        schema = {"description": info.description, **schema}
    return schema


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema for a model: every node typed, no refs, no nulls."""
    properties = {name: _field_schema(info) for name, info in model.model_fields.items()}
    required = [
        name
        for name, info in model.model_fields.items()
        if info.is_required() and not _is_optional(info.annotation)
    ]
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    doc = (model.__doc__ or "").strip()
    if doc:
        schema = {"description": " ".join(doc.split()), **schema}
    return schema


def _is_optional(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)
