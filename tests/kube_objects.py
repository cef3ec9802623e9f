"""Typed access to fields of Kubernetes objects that lightkube types as optional but the
API server always fills in on what it returns."""

from __future__ import annotations

from typing import Any, overload

from lightkube.models.core_v1 import NodeStatus, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod


def meta(obj: Any) -> ObjectMeta:
    """The object's metadata: every object read back from the API server has one."""
    metadata = obj.metadata
    assert metadata is not None, f"{type(obj).__name__} without metadata"
    return metadata


@overload
def status_of(obj: Pod) -> PodStatus: ...
@overload
def status_of(obj: Node) -> NodeStatus: ...
def status_of(obj: Pod | Node) -> PodStatus | NodeStatus:
    """The object's status: the API server reports one for every pod and node it returns."""
    current = obj.status
    assert current is not None, f"{type(obj).__name__} without status"
    return current
