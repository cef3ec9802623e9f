"""What must hold once the cluster has settled after any fault (each check returns the
problems it sees, empty when it holds).

- no node left with `nvidia.com/mig.config.state` other than `success`, and the GPUs of a
  MIG node match the config its label names (no node left `pending`);
- the `nvidia.com/gpu.deploy.*` labels exactly as before the faults (none left paused);
- no device allocated twice, and no allocation held for a pod the kubelet no longer runs;
- no GPU half-partitioned: no GPU instance without its compute instance, no MIG mode left
  pending a reset;
- every GPU advertised and healthy again (an XID's mark expires, a lost GPU is back after
  the reboot);
- every pod of the release Running and ready, and every process a fault killed replaced
  (without that, a check right after a kill would see the old status and pass);
- the ClusterPolicy `ready`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.mig.parted import assert_config, read_node
from kubegpu.mig_manager.settings import PAUSED, PAUSED_ANNOTATION
from kubegpu.nvml import NvmlError

from .cluster import CPU_NODE, GPU_NODES, MIG_NODE, ChaosStack

Check = Callable[[ChaosStack, "Baseline"], Awaitable[list[str]]]


@dataclass(frozen=True)
class Baseline:
    """The settled cluster before any fault: what the invariants compare against."""

    deploy_labels: Mapping[str, Mapping[str, str]]  # node -> its nvidia.com/gpu.deploy.*


async def mig_config_applied(stack: ChaosStack, _: Baseline) -> list[str]:
    problems = []
    for node in GPU_NODES:
        labels = await stack.node_labels(node)
        config = labels.get(nvidia.MIG_CONFIG)
        state = labels.get(nvidia.MIG_CONFIG_STATE)
        if node != MIG_NODE and config is None:
            continue
        if state != "success":
            problems.append(f"{node}: {nvidia.MIG_CONFIG_STATE}={state} (config {config!r})")
            continue
        if config is not None:
            nvml = stack.gpus(node)
            left = await asyncio.to_thread(
                assert_config, nvml, config, stack.mig_entries(node, config)
            )
            problems += [f"{node}: state success but {p}" for p in left]
    return problems


async def deploy_labels_restored(stack: ChaosStack, baseline: Baseline) -> list[str]:
    problems = []
    for node, before in baseline.deploy_labels.items():
        now = await stack.deploy_labels(node)
        paused = sorted(k for k, v in now.items() if v == PAUSED)
        if paused:
            problems.append(f"{node}: still {PAUSED}: {', '.join(paused)}")
        elif now != before:
            changed = sorted(set(now.items()) ^ set(before.items()))
            problems.append(f"{node}: deploy labels differ from before the faults: {changed}")
        annotations = meta(await stack.node(node)).annotations or {}
        if PAUSED_ANNOTATION in annotations:
            problems.append(f"{node}: the pause record {PAUSED_ANNOTATION} is left")
    return problems


async def no_device_allocated_twice(stack: ChaosStack, _: Baseline) -> list[str]:
    problems = []
    for node in GPU_NODES:
        sim = stack.sim(node)
        holders: dict[str, list[str]] = {}
        for (uid, container), allocation in sim.devices.allocations.items():
            for ids in allocation.devices.values():
                for device in ids:
                    holders.setdefault(device, []).append(f"{uid[:8]}/{container}")
        problems += [
            f"{node}: device {d} allocated to {', '.join(h)}"
            for d, h in sorted(holders.items())
            if len(h) > 1
        ]
        running = set(sim.runners)
        leaked = sorted({uid for uid, _ in sim.devices.allocations} - running)
        problems += [f"{node}: devices still allocated to gone pod {uid}" for uid in leaked]
    return problems


async def no_gpu_half_partitioned(stack: ChaosStack, _: Baseline) -> list[str]:
    problems = []
    for node in GPU_NODES:
        try:
            states = await asyncio.to_thread(read_node, stack.gpus(node))
        except NvmlError as exc:
            problems.append(f"{node}: GPUs unreadable: {exc}")
            continue
        for s in states:
            if s.empty_instances or (s.mig_capable and s.pending != s.enabled):
                problems.append(f"{node}: {s.describe()}")
    return problems


async def gpus_advertised_healthy(stack: ChaosStack, _: Baseline) -> list[str]:
    """Every GPU (or, under MIG, every MIG device) allocatable again as nvidia.com/gpu
    (the chart's single strategy); nothing of the GPU resources on the CPU node."""
    problems = []
    for node in GPU_NODES:
        states = await asyncio.to_thread(read_node, stack.gpus(node))
        want = sum(sum(s.devices.values()) if s.enabled else 1 for s in states)
        have = (await stack.allocatable(node)).get(nvidia.GPU_RESOURCE)
        if have != str(want):
            problems.append(f"{node}: {nvidia.GPU_RESOURCE} allocatable {have}, want {want}")
    if nvidia.GPU_RESOURCE in await stack.allocatable(CPU_NODE):
        problems.append(f"{CPU_NODE}: advertises {nvidia.GPU_RESOURCE}")
    return problems


async def operand_pods_ready(stack: ChaosStack, _: Baseline) -> list[str]:
    """Every pod of the installation Running with every container ready, none going."""
    problems = []
    for pod in await stack.pods():
        name = pod.metadata.name if pod.metadata else "?"
        if pod.metadata and pod.metadata.deletionTimestamp:
            problems.append(f"{name} terminating")
            continue
        statuses = (pod.status.containerStatuses if pod.status else None) or []
        phase = pod.status.phase if pod.status else None
        if phase != "Running" or not statuses or not all(c.ready for c in statuses):
            problems.append(f"{name} {phase}, not ready")
    return problems


async def cluster_policy_ready(stack: ChaosStack, _: Baseline) -> list[str]:
    state = await stack.policy_state()
    if state == "ready":
        return []
    reason = await stack.condition("Ready")
    return [f"ClusterPolicy {state}: {reason.get('reason')}: {reason.get('message', '')[:200]}"]


INVARIANTS: dict[str, Check] = {
    "mig config applied, not pending": mig_config_applied,
    "deploy labels restored": deploy_labels_restored,
    "no device allocated twice": no_device_allocated_twice,
    "no GPU half-partitioned": no_gpu_half_partitioned,
    "GPUs advertised and healthy": gpus_advertised_healthy,
    "operand pods running and ready": operand_pods_ready,
    "ClusterPolicy ready": cluster_policy_ready,
}


def processes(stack: ChaosStack) -> dict[str, dict[str, set[int]]]:
    """node -> pod uid -> the pids of its running container processes."""
    return {
        name: {uid: set(r.pids()) for uid, r in node.runners.items() if r.pids()}
        for name, node in stack.nodes.items()
    }


def replaced(before: Mapping[str, Mapping[str, set[int]]]) -> Check:
    """A check that every pod whose processes a fault killed runs new ones (the kubelet
    restarted them): without it a check right after a kill sees the old, stale status."""

    def alive(pid: int) -> bool:  # a killed process not yet reaped is a zombie: dead
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] != "Z"

    killed = {
        (node, uid): pids
        for node, pods in before.items()
        for uid, pids in pods.items()
        if not all(alive(p) for p in pids)
    }

    async def check(stack: ChaosStack, _: Baseline) -> list[str]:
        problems = []
        for (node, uid), old in killed.items():
            runner = stack.nodes[node].runners.get(uid)
            if runner is None:
                continue  # the pod itself went (e.g. paused for a MIG change)
            now = set(runner.pids())
            if not now or now & old:
                problems.append(f"{node}: pod {runner.name} not restarted (pids {sorted(now)})")
        return problems

    return check


async def violations(
    stack: ChaosStack, baseline: Baseline, extra: Mapping[str, Check] | None = None
) -> dict[str, list[str]]:
    """Every invariant that does not hold now, with its problems (an invariant whose
    check raised is violated, with the error)."""
    found: dict[str, list[str]] = {}
    for name, check in {**INVARIANTS, **(extra or {})}.items():
        try:
            problems = await check(stack, baseline)
        except Exception as exc:
            problems = [f"check raised {type(exc).__name__}: {exc}"]
        if problems:
            found[name] = problems
    return found


async def settle(
    stack: ChaosStack,
    baseline: Baseline,
    timeout_s: float,
    extra: Mapping[str, Check] | None = None,
    interval_s: float = 0.5,
) -> tuple[float, dict[str, list[str]]]:
    """Poll the invariants until all hold at once; returns the seconds that took and, if
    they did not within `timeout_s`, the violations seen last."""
    started = time.monotonic()
    while True:
        found = await violations(stack, baseline, extra)
        elapsed = time.monotonic() - started
        if not found or elapsed > timeout_s:
            return elapsed, found
        await asyncio.sleep(interval_s)


def tally(found: Mapping[str, list[str]]) -> Counter[str]:
    return Counter({k: len(v) for k, v in found.items()})
