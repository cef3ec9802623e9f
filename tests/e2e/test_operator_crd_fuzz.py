# ruff: noqa: F811 (the imported fixtures are parameters here)
"""A property-based fuzz over the ClusterPolicy schema, judged by the API server.

Policies are drawn from the CRD's own OpenAPI schema (tests/fuzz/openapi_strategies.py)
over the images a chart install names; the API server first judges the policy itself (a
dry-run create: what it refuses is no schema-valid policy and is not drawn again), then
one reconcile pass runs against the real API server. Whatever was drawn, the pass ends in
one of two ways, never in an exception:

- it applied everything it rendered, each object live with the hash it rendered; or
- it refused with a ReconcileFailed outcome naming what blocked it, and the operator's
  objects are as they were before the pass (a state that failed to render keeps its own
  objects, the others are applied: the per-state rule of docs/operator.md).

Bounded for CI: KUBEGPU_FUZZ_CLUSTER_EXAMPLES (default 80, about a minute), derandomized.
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta

from fuzz.openapi_strategies import BASE_POLICY, from_schema, merged, spec_schema
from kubegpu.kube.policy import ClusterPolicyResource
from kubegpu.operator import status as st
from kubegpu.operator.render import HASH_ANNOTATION

from .operator_pass import changed, live_objects, reconciler, stored_policy, versions

# the fixtures api and operator_ns are the controller tests'
from .test_operator_controller import api, operator_ns  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

EXAMPLES = int(os.environ.get("KUBEGPU_FUZZ_CLUSTER_EXAMPLES", "80"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("KUBEGPU_FUZZ_SEED_RANDOM") != "1",
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.timeout(600)
async def test_any_schema_valid_policy_lands_whole_or_is_refused_whole(
    api: AsyncClient, operator_ns: str
) -> None:
    async with stored_policy(api, BASE_POLICY) as policy:
        await _fuzz(api, operator_ns, policy)


async def _fuzz(api: AsyncClient, operator_ns: str, stored: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    r = reconciler(api, operator_ns, stored)
    seen: collections.Counter[str] = collections.Counter()
    refusals: list[str] = []  # what the API server refused of what the operator rendered
    policy = stored

    async def one_pass(drawn: dict[str, Any]) -> str:
        nonlocal policy
        spec = merged(BASE_POLICY, drawn)
        try:
            await api.create(
                ClusterPolicyResource(metadata=ObjectMeta(name="p-fuzz"), spec=spec), dry_run=True
            )
        except ApiError as exc:
            return f"schema: {exc.status.message}"
        policy = changed(policy, spec)
        r.caches.policies.store(policy)
        before = await live_objects(api, operator_ns)
        plan = r.plan(policy, "ClusterPolicy")
        if isinstance(plan, st.Outcome):
            assert plan.reason == st.RECONCILE_FAILED
            assert versions(await live_objects(api, operator_ns)) == versions(before)
            return "refused: spec"
        outcome = await r.carry_out(plan)
        after = await live_objects(api, operator_ns)
        if plan.rendered.problems or (plan.writes and not r.last_applied):
            assert outcome.reason == st.RECONCILE_FAILED, outcome
            assert versions(after) == versions(before), outcome.message
            if not plan.rendered.problems:
                refusals.append(outcome.message)
            return "refused: " + ("render" if plan.rendered.problems else "API server")
        assert r.last_applied == plan.writes
        for obj in plan.writes:
            meta = obj["metadata"]
            if meta.get("namespace") != operator_ns or obj["kind"] == "ServiceMonitor":
                continue
            live = after[(obj["kind"], meta["name"])]
            assert (
                live["metadata"]["annotations"][HASH_ANNOTATION]
                == (meta["annotations"][HASH_ANNOTATION])
            )
        failed = [s.name for s in plan.rendered.states if s.error]
        assert (outcome.reason == st.RECONCILE_FAILED) == bool(failed), outcome
        return "applied" + (" (a state failed to render)" if failed else "")

    @FUZZ
    @given(from_schema(spec_schema("ClusterPolicy"), max_keys=4))
    def check(drawn: dict[str, Any]) -> None:
        verdict = asyncio.run_coroutine_threadsafe(one_pass(drawn), loop).result(timeout=120)
        seen[verdict.split(":")[0] if verdict.startswith("schema") else verdict] += 1
        if verdict.startswith("schema"):
            reject()

    await asyncio.to_thread(check)
    print(f"\n{sum(seen.values())} policies drawn: {dict(seen)}")
    for message in refusals:
        print(f"  refused by the API server: {message[:300]}")
    assert seen["applied"] > EXAMPLES // 3  # the fuzz reaches the API server, not only refusals
