"""One reconcile pass over in-process inputs against the real API server: a policy and a
GPU node held in memory (`Snapshot`s), the owned objects as the pass leaves them, and the
live objects of the operator's namespace read back to judge what a pass changed."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta

from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator.api import OWNED, Api
from kubegpu.operator.reconciler import Caches, OperatorConfig, Reconciler, Snapshot
from kubegpu.operator.render import MANAGED_BY, MANAGED_BY_LABEL

Obj = dict[str, Any]

# a GPU node as NFD labels it; it exists only in the pass's inputs (labelling it is a 404,
# which a pass takes as a node deleted meanwhile)
GPU_NODE: Obj = {
    "metadata": {
        "name": "in-memory-gpu-0",
        "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"},
    }
}


@contextlib.asynccontextmanager
async def stored_policy(client: AsyncClient, spec: Obj) -> AsyncIterator[Obj]:
    """A ClusterPolicy that exists in the API server, as a pass reads it: the objects a
    pass renders are owned by its uid (the garbage collector deletes objects whose owner
    does not exist). Deleted on exit, with everything it owns."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    created = await client.create(ClusterPolicyResource(metadata=ObjectMeta(name=name), spec=spec))
    try:
        yield dict(created)
    finally:
        with contextlib.suppress(ApiError):
            await client.delete(ClusterPolicyResource, name)


def changed(policy: Obj, spec: Obj) -> Obj:
    """The policy as a pass would read it after a spec change (the next generation)."""
    meta = policy["metadata"]
    return {**policy, "metadata": {**meta, "generation": meta["generation"] + 1}, "spec": spec}


def reconciler(client: AsyncClient, namespace: str, policy: Obj) -> Reconciler:
    owned = {kind: Snapshot(available=kind != "ServiceMonitor") for kind in OWNED}
    caches = Caches(Snapshot([policy]), Snapshot(), Snapshot([GPU_NODE]), owned)
    return Reconciler(Api(client), caches, OperatorConfig(namespace=namespace))


async def live_objects(client: AsyncClient, namespace: str) -> dict[tuple[str, str], Obj]:
    """The operator's namespaced objects in `namespace`, by (kind, name)."""
    out: dict[tuple[str, str], Obj] = {}
    for kind, (resource, namespaced) in OWNED.items():
        if not namespaced or kind == "ServiceMonitor":
            continue
        async for obj in client.list(
            resource, namespace=namespace, labels={MANAGED_BY_LABEL: MANAGED_BY}
        ):
            d = obj.to_dict()
            out[(kind, d["metadata"]["name"])] = d
    return out


def versions(objects: dict[tuple[str, str], Obj]) -> dict[tuple[str, str], str]:
    """What changes when someone writes an object: a DaemonSet's generation (its controller
    writes its status, which leaves the generation alone), any other's resourceVersion."""
    return {
        key: str(
            o["metadata"]["generation"]
            if key[0] == "DaemonSet"
            else o["metadata"]["resourceVersion"]
        )
        for key, o in objects.items()
    }
