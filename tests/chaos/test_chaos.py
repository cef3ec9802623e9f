"""Chaos on the simulated cluster: each component killed with SIGKILL at a random point of
its work, kubelets restarted, nodes rebooted, XID storms and GPUs lost; after every fault,
once a bounded settle time has passed, every invariant of `invariants` holds again.

The faults, their targets and their random points come from the run's seed (printed at the
start and in the summary; `KUBEGPU_CHAOS_SEED` replays it). The work is bounded by a count
of faults per kind (`KUBEGPU_CHAOS_ROUNDS` multiplies it for a longer soak) and each settle
by a timeout. The DRA kubelet plugin killed mid-prepare runs on a stack of its own
(test_chaos_dra.py): a ClusterPolicy and DRA are exclusive on a node.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

import pytest
from lightkube.resources.core_v1 import Pod

from e2e.stack import wait_for
from kube_objects import meta
from kubegpu.catalog import nvidia

from .cluster import (
    CPU_NODE,
    DEVICE_PLUGIN_APP,
    GPU_NODES,
    MIG_MANAGER_APP,
    MIG_NODE,
    OPERATOR_APP,
    PLAIN_GPUS,
    PLAIN_NODE,
    WORKLOAD_IMAGE,
    WORKLOAD_LABEL,
    WORKLOAD_NAMESPACE,
    ChaosStack,
)
from .invariants import Baseline, Check, no_device_allocated_twice, processes, replaced, settle
from .record import SEED_ENV, ChaosRun, FaultRecord, rounds

pytestmark = [pytest.mark.cluster, pytest.mark.chaos, pytest.mark.asyncio(loop_scope="package")]

SETTLE_S = 90.0  # after a fault, every invariant must hold again within this
ROUNDS = rounds()
# uniform configs only: the chart's single strategy advertises one MIG profile per node
MIG_CONFIGS = ("all-1g.10gb", "all-2g.20gb", "all-3g.40gb", "all-disabled")
COUNTED_XIDS = (48, 63, 64, 74, 92, 94, 95)
IGNORED_XIDS = (13, 31, 43, 45, 68)

Stack = tuple[ChaosStack, Baseline]
Inject = Callable[
    [ChaosStack, random.Random], Awaitable[tuple[str, str, Mapping[str, Check] | None]]
]


def budget(rounds: int) -> pytest.MarkDecorator:
    """A test's time limit: its faults' settle times and some room for the injection."""
    return pytest.mark.timeout(int(rounds * ROUNDS * (SETTLE_S + 45) + 120))


async def run_faults(
    kind: str, rounds: int, inject: Inject, stack: Stack, chaos_run: ChaosRun
) -> None:
    """Inject `rounds` faults of one kind, settling after each; every violation fails the
    test after all rounds, naming the seed that replays them."""
    cluster, baseline = stack
    rng = random.Random(f"{chaos_run.seed}:{kind}")
    failed = []
    for _ in range(rounds * ROUNDS):
        before = processes(cluster)
        try:
            node, what, extra = await inject(cluster, rng)
        except Exception as exc:  # the fault's own steps failed: a finding, never a skip
            node, what = "?", f"injection failed: {type(exc).__name__}: {str(exc)[:300]}"
            extra = {"fault ran to its end": _failed(what)}
        checks = {**(extra or {}), "killed processes replaced": replaced(before)}
        settle_s, found = await settle(cluster, baseline, SETTLE_S, checks)
        record = FaultRecord(kind, node, what, round(settle_s, 2), found)
        chaos_run.add(record)
        chaos_run.progress(record)
        if found:
            failed.append(record)
    assert not failed, f"{SEED_ENV}={chaos_run.seed}: " + "; ".join(
        f"after {r.kind} on {r.node} ({r.what}): {r.violations}" for r in failed
    )


def _failed(what: str) -> Check:
    async def check(_: ChaosStack, __: Baseline) -> list[str]:
        return [what]

    return check


def _pick_mig_config(labels: Mapping[str, str], rng: random.Random) -> str:
    current = labels.get(nvidia.MIG_CONFIG)
    return rng.choice([c for c in MIG_CONFIGS if c != current])


# -- the components, killed ------------------------------------------------------------------
async def kill_mig_manager_mid_apply(
    stack: ChaosStack, rng: random.Random
) -> tuple[str, str, None]:
    """Relabel the node for another MIG config, then kill -9 the MIG manager a random
    moment into the change (anywhere from validating to repartitioning)."""
    config = _pick_mig_config(await stack.node_labels(MIG_NODE), rng)
    delay = rng.uniform(0.0, 3.0)
    await stack.label(MIG_NODE, {nvidia.MIG_CONFIG: config})
    await asyncio.sleep(delay)
    state = (await stack.node_labels(MIG_NODE)).get(nvidia.MIG_CONFIG_STATE)
    pids = stack.kill_pod(MIG_NODE, MIG_MANAGER_APP)
    return MIG_NODE, f"-> {config}, killed after {delay:.2f} s in state {state} ({pids})", None


async def kill_device_plugin_mid_allocate(
    stack: ChaosStack, rng: random.Random
) -> tuple[str, str, Mapping[str, Check]]:
    """Create GPU pods, kill -9 the device plugin while the kubelet admits them; each pod is
    then Running with a device of its own or failed admission, and gives its device back
    when deleted."""
    n = rng.randint(2, PLAIN_GPUS)
    delay = rng.uniform(0.0, 1.5)
    prefix = f"chaos-{rng.randrange(16**6):06x}"
    names = [f"{prefix}-{i}" for i in range(n)]
    await asyncio.gather(*(stack.client.create(_gpu_pod(name, PLAIN_NODE)) for name in names))
    await asyncio.sleep(delay)
    pids = stack.kill_pod(PLAIN_NODE, DEVICE_PLUGIN_APP)

    async def admitted() -> list[str]:
        phases = []
        for name in names:
            pod = await stack.client.get(Pod, name, namespace=WORKLOAD_NAMESPACE)
            phase = pod.status.phase if pod.status else None
            if phase not in ("Running", "Failed"):
                return []
            reason = pod.status.reason if pod.status else None
            phases.append(f"{phase}{'/' + reason if reason else ''}")
        return phases

    try:
        phases = await wait_for(admitted, timeout=SETTLE_S, what="every pod admitted or refused")
        held = await no_device_allocated_twice(stack, cast(Baseline, None))
        uids = {
            meta(await stack.client.get(Pod, name, namespace=WORKLOAD_NAMESPACE)).uid: name
            for name in names
        }
        given = {
            uids[uid]: sum(len(ids) for ids in a.devices.values())
            for (uid, _), a in stack.sim(PLAIN_NODE).devices.allocations.items()
            if uid in uids
        }
    finally:
        for name in names:
            await stack.client.delete(Pod, name, namespace=WORKLOAD_NAMESPACE, grace_period=0)
    running = {name for name, p in zip(names, phases, strict=True) if p.startswith("Running")}
    wrong = [
        f"{name} Running with {given.get(name, 0)} devices"
        for name in sorted(running)
        if given.get(name, 0) != 1
    ]

    async def while_running(_: ChaosStack, __: Baseline) -> list[str]:
        return [f"while the pods ran: {p}" for p in held] + wrong

    async def pods_gone(s: ChaosStack, __: Baseline) -> list[str]:
        left = [
            meta(p).name
            async for p in s.client.list(
                Pod, namespace=WORKLOAD_NAMESPACE, labels={WORKLOAD_LABEL: "true"}
            )
        ]
        return [f"pods not deleted: {left}"] if left else []

    outcome = ", ".join(f"{phases.count(p)} {p}" for p in sorted(set(phases)))
    what = f"{n} pods, killed after {delay:.2f} s ({pids}): {outcome}"
    return PLAIN_NODE, what, {"each pod its own device": while_running, "pods gone": pods_gone}


def _gpu_pod(name: str, node: str) -> Pod:
    return cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {
                    "name": name,
                    "namespace": WORKLOAD_NAMESPACE,
                    "labels": {WORKLOAD_LABEL: "true"},
                },
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "cuda",
                            "image": WORKLOAD_IMAGE,
                            "resources": {"limits": {nvidia.GPU_RESOURCE: 1}},
                        }
                    ],
                },
            }
        ),
    )


async def kill_operator_mid_reconcile(
    stack: ChaosStack, rng: random.Random
) -> tuple[str, str, Mapping[str, Check]]:
    """Change the ClusterPolicy, kill -9 the operator a random moment later; the change
    must still reach its DaemonSet."""
    interval = f"{rng.randint(30, 600)}s"
    delay = rng.uniform(0.0, 2.0)
    env = [
        {"name": "GFD_SLEEP_INTERVAL", "value": interval},
        {"name": "GFD_FAIL_ON_INIT_ERROR", "value": "true"},
    ]
    await stack.patch_policy({"gfd": {"env": env}})
    await asyncio.sleep(delay)
    pids = stack.kill_pod(CPU_NODE, OPERATOR_APP)

    async def applied(s: ChaosStack, _: Baseline) -> list[str]:
        ds = (await s.daemonsets()).get("gpu-feature-discovery")
        if ds is None:
            return ["DaemonSet gpu-feature-discovery missing"]
        have = ds["spec"]["template"]["spec"]["containers"][0].get("env") or []
        if {"name": "GFD_SLEEP_INTERVAL", "value": interval} not in have:
            return [f"gpu-feature-discovery lacks GFD_SLEEP_INTERVAL={interval}"]
        if ds.get("status", {}).get("updatedNumberScheduled") != len(GPU_NODES):
            return ["gpu-feature-discovery not rolled out on every GPU node"]
        return []

    what = f"gfd GFD_SLEEP_INTERVAL={interval}, killed after {delay:.2f} s ({pids})"
    return CPU_NODE, what, {"ClusterPolicy change applied": applied}


# -- nodes ----------------------------------------------------------------------------------
async def restart_kubelet(stack: ChaosStack, rng: random.Random) -> tuple[str, str, None]:
    """Stop the simulated kubelet (its pods' processes die with it) and start it again."""
    node = rng.choice([*GPU_NODES, CPU_NODE])
    down = rng.uniform(0.0, 2.0)
    await stack.sim(node).stop()
    await asyncio.sleep(down)
    await stack.sim(node).start()
    return node, f"down {down:.2f} s", None


async def reboot_node(stack: ChaosStack, rng: random.Random) -> tuple[str, str, None]:
    """Reboot a GPU node: processes die, MIG instances are gone, pods start again."""
    node = rng.choice(GPU_NODES)
    await stack.sim(node).reboot()
    return node, "reboot", None


# -- GPU faults ------------------------------------------------------------------------------
async def xid_storm(stack: ChaosStack, rng: random.Random) -> tuple[str, str, Mapping[str, Check]]:
    """Many XIDs at once on one node's GPUs, counted and ignored ones mixed; the device
    plugin and the exporter ride it out (no restart) and the devices recover."""
    node = rng.choice(GPU_NODES)
    sim = stack.sim(node)
    count = rng.randint(20, 200)
    gpus = stack.gpus(node).device_count()
    restarts = await _restarts(stack, node)
    counted = 0
    for _ in range(count):
        xid = rng.choice(COUNTED_XIDS if rng.random() < 0.5 else IGNORED_XIDS)
        counted += xid in COUNTED_XIDS
        sim.inject_xid(rng.randrange(gpus), xid)

    async def survived(s: ChaosStack, _: Baseline) -> list[str]:
        now = await _restarts(s, node)
        return [
            f"{app} restarted during the storm ({restarts[app]} -> {now.get(app)})"
            for app in restarts
            if now.get(app) != restarts[app]
        ]

    return node, f"{count} XIDs ({counted} counted)", {"components survive the storm": survived}


async def _restarts(stack: ChaosStack, node: str) -> dict[str, int]:
    out = {}
    for app in (DEVICE_PLUGIN_APP, "nvidia-dcgm-exporter"):
        for p in await stack.pods(app=app):
            if p.spec and p.spec.nodeName == node and p.status:
                out[app] = sum(c.restartCount for c in p.status.containerStatuses or [])
    return out


async def lose_gpu(stack: ChaosStack, rng: random.Random) -> tuple[str, str, Mapping[str, Check]]:
    """A GPU falls off the bus; the plugin must stop offering it; the node is rebooted."""
    node = rng.choice(GPU_NODES)
    index = rng.randrange(stack.gpus(node).device_count())
    before = (await stack.allocatable(node)).get(nvidia.GPU_RESOURCE)
    stack.sim(node).lose_gpu(index)

    async def dropped() -> bool:
        return (await stack.allocatable(node)).get(nvidia.GPU_RESOURCE) != before

    started = time.monotonic()
    seen: str | None
    try:
        await wait_for(dropped, timeout=30, what="the lost GPU no longer allocatable")
        seen = f"unhealthy after {time.monotonic() - started:.1f} s"
    except AssertionError:
        seen = None
    await stack.sim(node).reboot()

    async def reported(_: ChaosStack, __: Baseline) -> list[str]:
        return [] if seen else [f"GPU {index} lost but still allocatable after 30 s"]

    what = f"GPU {index} lost ({seen or 'never reported'}), then reboot"
    return node, what, {"lost GPU reported unhealthy": reported}


# -- the tests -------------------------------------------------------------------------------
@budget(2)
async def test_mig_manager_killed_mid_apply(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults("mig-manager kill -9", 2, kill_mig_manager_mid_apply, chaos_stack, chaos_run)


@budget(2)
async def test_device_plugin_killed_mid_allocate(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults(
        "device-plugin kill -9", 2, kill_device_plugin_mid_allocate, chaos_stack, chaos_run
    )


@budget(2)
async def test_operator_killed_mid_reconcile(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults("operator kill -9", 2, kill_operator_mid_reconcile, chaos_stack, chaos_run)


@budget(1)
async def test_kubelet_restarted(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults("kubelet restart", 1, restart_kubelet, chaos_stack, chaos_run)


@budget(1)
async def test_node_rebooted(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults("node reboot", 1, reboot_node, chaos_stack, chaos_run)


@budget(2)
async def test_xid_storm(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults("XID storm", 2, xid_storm, chaos_stack, chaos_run)


@budget(1)
async def test_gpu_lost(chaos_stack: Stack, chaos_run: ChaosRun) -> None:
    await run_faults("GPU lost + reboot", 1, lose_gpu, chaos_stack, chaos_run)
