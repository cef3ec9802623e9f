"""Chaos for the DRA kubelet plugin: `kubegpu dra-plugin` killed with SIGKILL while a claim
is half prepared (its checkpoint says `PrepareStarted`), restarted after a random pause;
the kubelet's retries must then converge (issue 13, "the DRA plugin mid-prepare").

After each fault, within a bounded settle time: every pod Running with exactly its claim's
devices in its environment, the checkpoint holding each claim once and `PrepareCompleted`,
one CDI spec per claim with exactly its devices (nothing else in the CDI root), the
kubelet's claims prepared, no device allocated to two claims, one MIG device per MIG claim
and no GPU instance without its compute instance. Then the pods are deleted and nothing
prepared may be left: no CDI spec, no checkpoint entry, no MIG device.

Seeded like the rest of the suite (`KUBEGPU_CHAOS_SEED`), recorded in its report.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import pytest
import pytest_asyncio
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from integration.dra_stack import claim_pod, claim_template, dra_cluster
from kubegpu.sim.controlplane.plane import ControlPlane

from .dra import (
    DRA_GATES,
    DRA_GPUS,
    DRA_NODE,
    MIG_GPU,
    MIG_TEMPLATE,
    NAMESPACE,
    TEMPLATES,
    WHOLE_TEMPLATE,
    DraChaos,
    kill_mid_prepare,
    prepared_problems,
    unprepared_problems,
)
from .record import SEED_ENV, ChaosRun, FaultRecord, rounds

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.asyncio(loop_scope="package")]

KIND = "DRA plugin kill -9"
FAULTS = 3
ATTEMPTS = 4  # pod batches per fault until one prepare is caught half done
SETTLE_S = 90.0
ROUNDS = rounds()


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def dra_chaos(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[DraChaos]:
    """The DRA node (no NFD labels: a ClusterPolicy stack in the same run leaves it alone)
    with its plugin, the claim templates in a namespace of their own."""
    client = AsyncClient(
        KubeConfig.from_file(control_plane.kubeconfig_path), field_manager="kubegpu-chaos"
    )
    workdir = tmp_path_factory.mktemp("chaos-dra")
    try:
        await client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
        await _service_account(client)
        for name, (device_class, cel) in TEMPLATES.items():
            body = claim_template(name, [("gpu", device_class, cel)])
            await client.create(  # type: ignore[call-overload]
                ResourceClaimTemplate.from_dict(body),
                namespace=NAMESPACE,
            )
        async with dra_cluster(
            control_plane,
            client,
            {DRA_NODE: DRA_GPUS},
            workdir,
            feature_gates=DRA_GATES,
            mig={DRA_NODE: {MIG_GPU: ()}},
            nfd=False,
        ) as cluster:
            yield DraChaos(cluster, client)
    finally:
        with contextlib.suppress(ApiError):
            await client.delete(Namespace, NAMESPACE)
        await client.close()


async def _service_account(client: AsyncClient) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            await client.get(ServiceAccount, "default", namespace=NAMESPACE)
            return
        except ApiError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _until_empty(
    check: Callable[[], Awaitable[list[str]]], timeout_s: float
) -> tuple[float, list[str]]:
    """Poll `check` until it finds no problem; the seconds taken and the last problems."""
    started = time.monotonic()
    while True:
        try:
            problems = await check()
        except Exception as exc:  # a check that raised is a violation, with the error
            problems = [f"check raised {type(exc).__name__}: {exc}"]
        elapsed = time.monotonic() - started
        if not problems or elapsed > timeout_s:
            return elapsed, problems
        await asyncio.sleep(0.5)


async def _delete(chaos: DraChaos, pods: list[str]) -> None:
    for name in pods:
        with contextlib.suppress(ApiError):
            await chaos.client.delete(Pod, name, namespace=NAMESPACE, grace_period=0)


async def plugin_killed_mid_prepare(chaos: DraChaos, rng: random.Random) -> FaultRecord:
    """Create 1-3 claim pods (a whole GPU or a dynamic MIG device each), kill the plugin
    the moment one of their claims is half prepared, restart it after 0-1 s."""
    missed = 0
    for _ in range(ATTEMPTS):
        n = rng.randint(1, 3)
        whole = rng.random() < 0.5  # at most one pod for the node's one whole GPU
        kinds = [WHOLE_TEMPLATE if whole and i == 0 else MIG_TEMPLATE for i in range(n)]
        prefix = f"dra-{rng.randrange(16**6):06x}"
        pods = [f"{prefix}-{i}" for i in range(n)]
        for name, template in zip(pods, kinds, strict=True):
            body = claim_pod(name, {"gpu": template}, node=DRA_NODE)
            await chaos.client.create(  # type: ignore[call-overload]
                cast(Pod, Pod.from_dict(body)),
                namespace=NAMESPACE,
            )

        async def all_prepared(count: int = n) -> bool:
            records = chaos.checkpoint().values()
            done = [r for r in records if r.get("state") == "PrepareCompleted"]
            return len(done) >= count

        hit = await kill_mid_prepare(chaos, rng, all_prepared, timeout_s=60)
        if hit is None:  # every claim prepared between two looks: try a new batch
            missed += 1
            await _delete(chaos, pods)
            _, left = await _until_empty(functools.partial(unprepared_problems, chaos, pods), 60)
            if left:
                what = f"{n} pods, no kill (window missed), not unprepared"
                return FaultRecord(KIND, DRA_NODE, what, 0.0, {"unprepared": left})
            continue
        steps, half = hit
        down = rng.uniform(0.0, 1.0)
        await asyncio.sleep(down)
        chaos.plugin.start()
        settle_s, problems = await _until_empty(
            functools.partial(prepared_problems, chaos, pods), SETTLE_S
        )
        await _delete(chaos, pods)
        _, left = await _until_empty(functools.partial(unprepared_problems, chaos, pods), 60)
        violations = {}
        if problems:
            violations["prepared once, pods see their devices"] = problems
        if left:
            violations["deleting the pods unprepares"] = left
        what = (
            f"{n} pods ({', '.join(kinds)}), killed at step {steps} with "
            f"{len(half)} claim(s) PrepareStarted, down {down:.2f} s"
            + (f", {missed} batch(es) missed the window first" if missed else "")
        )
        return FaultRecord(KIND, DRA_NODE, what, round(settle_s, 2), violations)
    what = f"no prepare caught half done in {ATTEMPTS} batches"
    return FaultRecord(KIND, DRA_NODE, what, 0.0, {"fault injected": [what]})


@pytest.mark.timeout(int(FAULTS * ROUNDS * (SETTLE_S + 4 * 75) + 180))
async def test_dra_plugin_killed_mid_prepare(dra_chaos: DraChaos, chaos_run: ChaosRun) -> None:
    rng = random.Random(f"{chaos_run.seed}:{KIND}")
    failed = []
    for _ in range(FAULTS * ROUNDS):
        record = await plugin_killed_mid_prepare(dra_chaos, rng)
        chaos_run.add(record)
        chaos_run.progress(record)
        if record.violations:
            failed.append(record)
    assert not failed, f"{SEED_ENV}={chaos_run.seed}: " + "; ".join(
        f"after {r.kind} ({r.what}): {r.violations}" for r in failed
    )
