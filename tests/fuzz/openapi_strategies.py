"""Hypothesis strategies generated from a CRD's OpenAPI v3 schema: every value drawn is
valid against the schema (types, enums, formats, minimums, required keys, unanchored
patterns as the API server reads them), and sparse, so that a policy sets a few fields
deep rather than every field shallow.

Strings and map keys lean towards values that have hurt before: quantities that are not
quantities, image references with spaces, the operator's own label keys and env names.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kubegpu.kube.crds import crd_manifests

Schema = dict[str, Any]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# strings a field of any meaning may be given: empty, a word, a number, a quantity, a
# non-quantity, a path, an image reference with a space, upper case, a leading dash
TRICKY_STRINGS = (
    "",
    "a",
    "1",
    "0",
    "100m",
    "lots",
    "true",
    "/",
    "/var/lib",
    "nvcr.io/nvidia",
    "kubegpu:0.1.0 rc1",
    "UPPER",
    "-x",
    "NODE_NAME",
    "sha256:0",
)
TRICKY_KEYS = (
    "app",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "kubegpu.io/state",
    "nvidia.com/last-applied-hash",
    "team",
    "example.com/x",
    "bad key",
    "cpu",
    "memory",
    "nvidia.com/gpu",
)
_TEXT = st.text(st.characters(codec="ascii", categories=("L", "N", "P")), max_size=12)


def strings(schema: Schema) -> st.SearchStrategy[str]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "pattern" in schema:  # unanchored, as the API server matches it
        pattern: str = schema["pattern"]
        return st.from_regex(pattern).filter(lambda s: len(s) <= 40)
    return st.one_of(st.sampled_from(TRICKY_STRINGS), _TEXT)


def integers(schema: Schema) -> st.SearchStrategy[int]:
    top = INT32_MAX if schema.get("format") == "int32" else INT64_MAX
    low = schema.get("minimum", -top - 1)
    return st.one_of(st.integers(max(low, -3), max(low, -3) + 12), st.integers(low, top))


def from_schema(schema: Schema, *, depth: int = 0, max_keys: int = 3) -> st.SearchStrategy[Any]:
    """Values valid against `schema` (a structural CRD schema)."""
    if schema.get("x-kubernetes-int-or-string"):
        return st.one_of(integers({}), strings({}))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        return strings(schema)
    if kind == "integer":
        return integers(schema)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        if depth > 6:
            return st.just([])
        return st.lists(from_schema(schema.get("items", {}), depth=depth + 1), max_size=3)
    if kind == "object":
        return objects(schema, depth=depth, max_keys=max_keys)
    return st.none()


def objects(schema: Schema, *, depth: int, max_keys: int) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Schema] = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    extra = schema.get("additionalProperties")
    if not props and isinstance(extra, dict):
        return st.dictionaries(
            st.one_of(st.sampled_from(TRICKY_KEYS), _TEXT.filter(bool)),
            from_schema(extra, depth=depth + 1),
            max_size=3,
        )
    if not props:  # free form (x-kubernetes-preserve-unknown-fields)
        return st.dictionaries(
            _TEXT.filter(bool), st.one_of(strings({}), st.booleans()), max_size=2
        )
    optional = sorted(set(props) - set(required))
    children = {k: from_schema(v, depth=depth + 1) for k, v in props.items()}

    @st.composite
    def draw(data: st.DrawFn) -> dict[str, Any]:
        limit = 0 if depth > 6 else max_keys
        keys = (
            data(st.lists(st.sampled_from(optional), max_size=limit, unique=True))
            if optional
            else []
        )
        return {k: data(children[k]) for k in [*required, *keys]}

    return draw()


# -- the operator's CRDs ---------------------------------------------------------------------
# the images a chart install names, so that a drawn policy is judged on what it draws
BASE_POLICY: dict[str, Any] = {
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {"repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit", "version": "v1"},
    "dcgm": {"repository": "nvcr.io/nvidia/cloud-native", "image": "dcgm", "version": "4.4.1"},
}


def spec_schema(kind: str) -> dict[str, Any]:
    crd = next(c for c in crd_manifests() if c["spec"]["names"]["kind"] == kind)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"])


def merged(base: dict[str, Any], drawn: dict[str, Any]) -> dict[str, Any]:
    """`drawn` over `base`, map by map."""
    out = dict(base)
    for key, value in drawn.items():
        old = out.get(key)
        out[key] = (
            merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out
