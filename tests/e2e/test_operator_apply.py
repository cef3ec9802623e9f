# ruff: noqa: F811 (the imported fixtures are parameters here)
"""A reconcile pass on its own against the real API server, and the all-or-nothing rule: a
pass validates every object it would write (server-side dry-run) before it writes the
first, so a policy change with one invalid object changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from integration.helpers import eventually
from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator import status as st
from kubegpu.operator.render import HASH_ANNOTATION, MANAGED_BY_LABEL
from kubegpu.sim.controlplane.plane import ControlPlane

from .operator_pass import GPU_NODE, changed, live_objects, reconciler, stored_policy, versions

# the fixtures api and operator_ns are the controller tests'
from .test_operator_controller import POLICY, api, operator_ns, policy, running  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

PLUGIN_DS = "nvidia-device-plugin-daemonset"
EXPORTER_DS = "nvidia-dcgm-exporter"
SPEC: dict[str, Any] = {**POLICY, "migManager": {"enabled": False}}


async def test_one_pass_applies_what_it_rendered_and_a_second_writes_nothing(
    api: AsyncClient, operator_ns: str
) -> None:
    async with stored_policy(api, SPEC) as policy:
        await _one_pass(api, operator_ns, policy)


async def _one_pass(api: AsyncClient, operator_ns: str, policy: dict[str, Any]) -> None:
    r = reconciler(api, operator_ns, policy)
    outcome = await r.reconcile_once()
    assert outcome is not None
    assert outcome.reason == st.OPERAND_NOT_READY  # no kubelet runs the pods here
    live = await live_objects(api, operator_ns)
    assert ("DaemonSet", PLUGIN_DS) in live
    assert r.api.counts["dry-run"] == r.api.counts["apply"] == len(r.last_applied) > 0
    for obj in r.last_applied:
        meta = obj["metadata"]
        if meta.get("namespace") == operator_ns:
            got = live[(obj["kind"], meta["name"])]["metadata"]["annotations"][HASH_ANNOTATION]
            assert got == meta["annotations"][HASH_ANNOTATION]
    before = dict(r.api.counts)
    await r.reconcile_once()
    assert r.api.counts["apply"] == before["apply"]
    assert r.api.counts["dry-run"] == before["dry-run"]


async def test_a_pass_whose_last_object_is_invalid_changes_nothing(
    api: AsyncClient, operator_ns: str
) -> None:
    async with stored_policy(api, SPEC) as policy:
        await _invalid_last(api, operator_ns, policy)


async def _invalid_last(api: AsyncClient, operator_ns: str, policy: dict[str, Any]) -> None:
    r = reconciler(api, operator_ns, policy)
    await r.reconcile_once()
    before = await live_objects(api, operator_ns)
    applies = r.api.counts["apply"]
    # two operands change: the device plugin's (valid) and the exporter's, rendered after
    # it, with a negative CPU limit (a quantity, refused only by the API server)
    new_spec = {
        **SPEC,
        "devicePlugin": {"env": [{"name": "PASS_LOG", "value": "v"}]},
        "dcgmExporter": {"resources": {"limits": {"cpu": "-1"}}},
    }
    policy = changed(policy, new_spec)
    r.caches.policies.store(policy)
    plan = r.plan(policy, "ClusterPolicy")
    assert not isinstance(plan, st.Outcome)
    written = [o["metadata"]["name"] for o in plan.writes]
    assert PLUGIN_DS in written and written[-1] == EXPORTER_DS  # the invalid one is last
    outcome = await r.reconcile_once()
    assert outcome is not None and outcome.reason == st.RECONCILE_FAILED
    assert f"DaemonSet {EXPORTER_DS}" in outcome.message
    assert "resources.limits[cpu]" in outcome.message
    assert PLUGIN_DS not in outcome.message
    assert r.last_applied == ()
    assert r.api.counts["apply"] == applies
    after = await live_objects(api, operator_ns)
    assert versions(after) == versions(before)
    assert after[("DaemonSet", PLUGIN_DS)]["spec"] == before[("DaemonSet", PLUGIN_DS)]["spec"]


@contextlib.asynccontextmanager
async def gpu_node(api: AsyncClient) -> AsyncIterator[str]:
    """A Node object (no kubelet behind it) that NFD would have labelled as a GPU node."""
    name = f"gpu-{uuid.uuid4().hex[:6]}"
    await api.create(Node(metadata=ObjectMeta(name=name, labels=GPU_NODE["metadata"]["labels"])))
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await api.delete(Node, name)


async def condition(api: AsyncClient, name: str, generation: int) -> dict[str, Any] | None:
    obj = await api.get(ClusterPolicyResource, name)
    status = obj.get("status") or {}
    ready = {c["type"]: c for c in status.get("conditions") or []}.get("Ready")
    if ready is None or ready.get("observedGeneration") != generation:
        return None
    return dict(ready)


async def test_the_running_operator_refuses_a_half_valid_patch_whole(
    control_plane: ControlPlane, api: AsyncClient, operator_ns: str
) -> None:
    async with (
        gpu_node(api),
        policy(api, SPEC) as name,
        running(control_plane, operator_ns) as op,
    ):

        async def rolled() -> bool:
            with contextlib.suppress(ApiError):
                await api.get(DaemonSet, EXPORTER_DS, namespace=operator_ns)
                return op.last_outcome is not None
            return False

        await eventually(rolled)
        await asyncio.sleep(1.0)  # the first passes settle
        before = await live_objects(api, operator_ns)
        await api.patch(
            ClusterPolicyResource,
            name,
            {
                "spec": {
                    "devicePlugin": {"env": [{"name": "PASS_LOG", "value": "v"}]},
                    "dcgmExporter": {"resources": {"limits": {"cpu": "lots"}}},
                }
            },
            patch_type=PatchType.MERGE,
        )
        ready = cast(dict[str, Any], await eventually(lambda: condition(api, name, 2)))
        assert ready["reason"] == st.RECONCILE_FAILED
        assert "field dcgmExporter.resources.limits.cpu, value 'lots'" in ready["message"]
        after = await live_objects(api, operator_ns)
        assert after[("DaemonSet", PLUGIN_DS)]["spec"] == before[("DaemonSet", PLUGIN_DS)]["spec"]
        assert versions(after) == versions(before)


async def test_a_reserved_label_is_refused_and_the_daemonsets_stay_the_operators(
    control_plane: ControlPlane, api: AsyncClient, operator_ns: str
) -> None:
    async with (
        gpu_node(api),
        policy(api, SPEC) as name,
        running(control_plane, operator_ns),
    ):
        await eventually(lambda: condition(api, name, 1))
        await api.patch(
            ClusterPolicyResource,
            name,
            {"spec": {"daemonsets": {"labels": {MANAGED_BY_LABEL: "other"}}}},
            patch_type=PatchType.MERGE,
        )
        ready = cast(dict[str, Any], await eventually(lambda: condition(api, name, 2)))
        assert ready["reason"] == st.RECONCILE_FAILED
        assert f"field daemonsets.labels, key '{MANAGED_BY_LABEL}': reserved" in ready["message"]
        plugin = await api.get(DaemonSet, PLUGIN_DS, namespace=operator_ns)
        assert plugin.metadata is not None and plugin.metadata.labels is not None
        assert plugin.metadata.labels[MANAGED_BY_LABEL] == "kubegpu-operator"
