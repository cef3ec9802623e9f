"""Typed access to fields of Kubernetes objects that lightkube types as optional but the
API server always fills in on what it returns."""

from __future__ import annotations

from typing import Any

from lightkube.models.meta_v1 import ObjectMeta


def meta(obj: Any) -> ObjectMeta:
    """The object's metadata: every object read back from the API server has one."""
    metadata = obj.metadata
    assert metadata is not None, f"{type(obj).__name__} without metadata"
    return metadata
