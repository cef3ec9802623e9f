"""The operator's runtime in-process against the real API server (no nodes, so no
DaemonSet is rendered): watch caches, probes, idempotent restarts and pruning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import ClusterRole
from lightkube.types import PatchType

from integration.helpers import eventually
from kube_objects import meta
from kubegpu.kube.crds import crd_manifests
from kubegpu.kube.informer import Informer
from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator.controller import FIELD_MANAGER, Operator, OperatorConfig
from kubegpu.operator.health import HealthServer
from kubegpu.sim.controlplane.plane import ControlPlane

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

POLICY: dict[str, Any] = {
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {"repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit", "version": "v1"},
    "dcgm": {"enabled": False},
}


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(
        KubeConfig.from_file(control_plane.kubeconfig_path), field_manager="kg-test"
    )
    for crd in crd_manifests():
        await client.apply(
            cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(crd)), force=True
        )

    async def served() -> bool:
        [p async for p in client.list(ClusterPolicyResource)]  # 404 until the CRD is served
        return True

    await eventually(served)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def operator_ns(api: AsyncClient) -> AsyncIterator[str]:
    name = f"op-{uuid.uuid4().hex[:8]}"
    await api.create(Namespace(metadata=ObjectMeta(name=name)))
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await api.delete(Namespace, name)


@contextlib.asynccontextmanager
async def running(
    control_plane: ControlPlane, namespace: str, **config: Any
) -> AsyncIterator[Operator]:
    client = AsyncClient(
        KubeConfig.from_file(control_plane.kubeconfig_path), field_manager=FIELD_MANAGER
    )
    op = Operator(client, OperatorConfig(namespace=namespace, **config))
    await op.start()
    try:
        await asyncio.wait_for(op.wait_synced(), 30)
        yield op
    finally:
        await op.stop()
        await client.close()


@contextlib.asynccontextmanager
async def policy(api: AsyncClient, spec: dict[str, Any]) -> AsyncIterator[str]:
    name = f"p-{uuid.uuid4().hex[:8]}"
    await api.create(ClusterPolicyResource(metadata=ObjectMeta(name=name), spec=spec))
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await api.delete(ClusterPolicyResource, name)


async def status_of(api: AsyncClient, name: str) -> dict[str, Any]:
    obj = await api.get(ClusterPolicyResource, name)
    return dict(obj.get("status") or {})


async def test_an_informer_caches_a_kind_and_stays_in_contact(
    api: AsyncClient, operator_ns: str
) -> None:
    changes: list[tuple[str, str]] = []
    informer = Informer(
        api,
        ConfigMap,
        namespace=operator_ns,
        labels={"kg": "watched"},
        renew_s=1.0,
        on_change=lambda op, old, new: changes.append((op, (new or old or {})["metadata"]["name"])),
    )
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        await api.create(  # type: ignore[call-overload]
            ConfigMap(metadata=ObjectMeta(name="a", labels={"kg": "watched"})),
            namespace=operator_ns,
        )
        await api.create(  # type: ignore[call-overload]
            ConfigMap(metadata=ObjectMeta(name="b")), namespace=operator_ns
        )  # not selected
        await eventually(lambda: _has(informer, operator_ns, "a"))
        await api.patch(
            ConfigMap, "a", {"data": {"k": "v"}}, namespace=operator_ns, patch_type=PatchType.MERGE
        )
        await eventually(lambda: _data(informer, operator_ns, "a"))
        await api.delete(ConfigMap, "a", namespace=operator_ns)
        await eventually(lambda: _gone(informer, operator_ns, "a"))
        assert changes == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
        # no events for a while: the renewed watch still counts as contact
        before = informer.last_contact
        await asyncio.sleep(2.5)
        assert informer.last_contact > before
        assert informer.healthy()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _has(informer: Informer, ns: str, name: str) -> bool:
    return informer.get(ns, name) is not None


async def _data(informer: Informer, ns: str, name: str) -> bool:
    obj = informer.get(ns, name)
    return obj is not None and obj.get("data") == {"k": "v"}


async def _gone(informer: Informer, ns: str, name: str) -> bool:
    return informer.get(ns, name) is None


async def test_probes_report_synced_watches_and_requests(
    control_plane: ControlPlane, operator_ns: str
) -> None:
    async with running(control_plane, operator_ns) as op:
        server = HealthServer(op.live, op.ready, op.metrics, "127.0.0.1", 0)
        await server.start()
        try:
            for path, code in (("/healthz", 200), ("/readyz", 200), ("/nope", 404)):
                status, _ = await _get(server.port, path)
                assert status == code, path
            _, body = await _get(server.port, "/metrics")
            assert 'kubegpu_operator_api_requests_total{verb="list"}' in body
        finally:
            await server.stop()


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = (await reader.read()).decode()
    writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_a_policy_without_gpu_nodes_is_ready_and_a_restart_writes_nothing(
    control_plane: ControlPlane, api: AsyncClient, operator_ns: str
) -> None:
    async with policy(api, POLICY) as name:
        async with running(control_plane, operator_ns) as op:

            async def settled() -> bool:
                s = await status_of(api, name)
                return s.get("state") == "ready" and s.get("namespace") == operator_ns

            await eventually(settled)
            ready = {c["type"]: c for c in (await status_of(api, name))["conditions"]}["Ready"]
            # the control plane's nodes carry no NFD label here
            assert ready["reason"] in {"NFDLabelsMissing", "NoGPUNodes"}
            accounts = [meta(s).name async for s in api.list(ServiceAccount, namespace=operator_ns)]
            assert "nvidia-device-plugin" in accounts
            assert op.api.counts["apply"] > 0
        async with running(control_plane, operator_ns) as again:
            await eventually(lambda: _reconciled(again))
            await asyncio.sleep(0.5)
            assert again.api.counts["apply"] == 0
            assert again.api.counts["delete"] == 0
            assert again.api.counts["status"] == 0


async def _reconciled(op: Operator) -> bool:
    return op.reconciles > 0 and op.last_outcome is not None


async def test_disabling_a_component_removes_its_objects(
    control_plane: ControlPlane, api: AsyncClient, operator_ns: str
) -> None:
    async with policy(api, POLICY) as name, running(control_plane, operator_ns):

        async def has_mig_manager() -> bool:
            cms = [meta(c).name async for c in api.list(ConfigMap, namespace=operator_ns)]
            return "default-mig-parted-config" in cms

        await eventually(has_mig_manager)
        await api.get(ClusterRole, "nvidia-mig-manager")
        await api.patch(
            ClusterPolicyResource,
            name,
            {"spec": {"migManager": {"enabled": False}}},
            patch_type=PatchType.MERGE,
        )

        async def removed() -> bool:
            cms = [meta(c).name async for c in api.list(ConfigMap, namespace=operator_ns)]
            try:
                await api.get(ClusterRole, "nvidia-mig-manager")
            except ApiError as exc:
                return exc.status.code == 404 and "default-mig-parted-config" not in cms
            return False

        t = time.monotonic()
        await eventually(removed, timeout=20)
        assert time.monotonic() - t < 20


async def test_a_value_no_operand_carries_is_logged_once_as_ignored(
    control_plane: ControlPlane,
    api: AsyncClient,
    operator_ns: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kubegpu.operator.controller")
    spec = {**POLICY, "driver": {**POLICY["driver"], "usePrecompiled": True}}
    async with policy(api, spec) as name, running(control_plane, operator_ns) as op:
        await eventually(lambda: _reconciled(op))
        op.trigger()  # another pass over the same policy says nothing new
        await eventually(lambda: _passes(op, 2))
    said = [r.getMessage() for r in caplog.records if "accepted and ignored" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"ClusterPolicy {name}: driver.usePrecompiled:")


async def _passes(op: Operator, n: int) -> bool:
    return op.reconciles >= n
