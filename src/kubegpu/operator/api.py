"""The operator's writes to the API server, counted by verb (the benchmark and the probes'
/metrics read the counters), and the kinds it owns.

`apply(obj, dry_run=True)` is server-side apply with `dryRun=All`: the API server runs every
check of a real write (schema, defaulting, validation, admission) and persists nothing,
which is how a reconcile pass validates its whole set before it writes the first object.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Service, ServiceAccount
from lightkube.resources.node_v1 import RuntimeClass
from lightkube.resources.rbac_authorization_v1 import (
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
)
from lightkube.resources.resource_v1 import DeviceClass
from lightkube.types import PatchType

from kubegpu.kube.policy import ClusterPolicyResource, GPUClusterResource

FIELD_MANAGER = "kubegpu-operator"
Obj = dict[str, Any]

ServiceMonitorResource = create_namespaced_resource(
    "monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors"
)

# kinds the operator renders: resource class, namespaced
OWNED: dict[str, tuple[Any, bool]] = {
    "RuntimeClass": (RuntimeClass, False),
    "ServiceAccount": (ServiceAccount, True),
    "ClusterRole": (ClusterRole, False),
    "ClusterRoleBinding": (ClusterRoleBinding, False),
    "Role": (Role, True),
    "RoleBinding": (RoleBinding, True),
    "ConfigMap": (ConfigMap, True),
    "DaemonSet": (DaemonSet, True),
    "Service": (Service, True),
    "ServiceMonitor": (ServiceMonitorResource, True),
    "DeviceClass": (DeviceClass, False),
}
# kinds whose API may be missing (a CRD not installed, resource.k8s.io not served)
OPTIONAL_KINDS = ("ServiceMonitor", "DeviceClass")


class Api:
    """The operator's writes, counted by verb (`dry-run` apart from `apply`)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.counts: Counter[str] = Counter()
        self.label_patches_in_flight = 0
        self.peak_label_patches_in_flight = 0  # >1: labelling ran in parallel

    def count(self, verb: str) -> None:
        self.counts[verb] += 1

    async def apply(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        resource, namespaced = OWNED[obj["kind"]]
        meta = obj["metadata"]
        self.count("dry-run" if dry_run else "apply")
        result = await self.client.patch(
            resource,
            meta["name"],
            obj,
            namespace=meta.get("namespace") if namespaced else None,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
            dry_run=dry_run,
        )
        out: Obj = result.to_dict()
        return out

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        resource, namespaced = OWNED[kind]
        self.count("delete")
        try:
            await self.client.delete(resource, name, namespace=namespace if namespaced else None)
        except ApiError as exc:
            if exc.status.code != 404:
                raise

    async def label_node(self, name: str, patch: Mapping[str, str | None]) -> Obj:
        self.count("patch")
        self.label_patches_in_flight += 1
        self.peak_label_patches_in_flight = max(
            self.peak_label_patches_in_flight, self.label_patches_in_flight
        )
        try:
            result = await self.client.patch(
                Node, name, {"metadata": {"labels": dict(patch)}}, patch_type=PatchType.MERGE
            )
        finally:
            self.label_patches_in_flight -= 1
        out: Obj = result.to_dict()
        return out

    async def policy_status(self, name: str, status: Obj) -> Obj:
        self.count("status")
        result = await self.client.patch(
            ClusterPolicyResource.Status, name, {"status": status}, patch_type=PatchType.MERGE
        )
        out: Obj = dict(result)
        return out

    async def gpu_cluster_status(self, name: str, status: Obj) -> Obj:
        self.count("status")
        result = await self.client.patch(
            GPUClusterResource.Status, name, {"status": status}, patch_type=PatchType.MERGE
        )
        out: Obj = dict(result)
        return out

    async def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self.count("patch")
        await self.client.patch(
            Namespace, name, {"metadata": {"labels": dict(labels)}}, patch_type=PatchType.MERGE
        )
