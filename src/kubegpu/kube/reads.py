"""Reading one object whose absence is an answer, not an error."""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

Json = dict[str, Any]


async def get_json(
    client: AsyncClient, resource: Any, name: str, namespace: str | None = None
) -> Json | None:
    """The object as JSON, None when it does not exist (any other refusal raises)."""
    try:
        obj = await client.get(resource, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    data: Json = obj.to_dict()
    return data
