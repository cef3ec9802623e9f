"""The DRA plugin's chaos stack and its invariants.

A ClusterPolicy stack and DRA are exclusive on a node, so the DRA fault runs on a small
stack of its own on the same control plane: one simulated node (GPU 0 in MIG mode,
published as partitionable devices under the DynamicMIG gate; GPU 1 whole) with no device
plugin and `kubegpu dra-plugin` as its own process (tests/integration/dra_stack.py).

"Mid-prepare" is hit on purpose, not by luck: the plugin runs in short random slices
(SIGCONT, a random sleep, SIGSTOP) and its checkpoint is read between slices; the first
time a claim reads `PrepareStarted` the stopped plugin is killed with SIGKILL. Which
instruction it stopped at is random (the slice lengths come from the run's seed); where
it really died is read back from its checkpoint after the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from integration.dra_stack import DraCluster, DraPlugin, environ
from kube_objects import meta
from kubegpu.catalog import nvidia
from kubegpu.cdi.build import claim_file_name
from kubegpu.mig.parted import read_node
from kubegpu.nvml.interface import Nvml
from kubegpu.nvml.sim import SimNvml
from kubegpu.sim.kubelet.node import SimNode

DRA_NODE = "chaos-dra"
DRA_GPUS = "h100-80gb:2"
MIG_GPU = 0  # partitionable: every claim for a MIG device creates one at prepare
WHOLE_GPU_DEVICE = "gpu-1"
DRA_GATES = "DynamicMIG=true"
NAMESPACE = "chaos-dra"
MIG_PROFILE = "1g.10gb"
WHOLE_TEMPLATE = "whole-gpu"
MIG_TEMPLATE = "mig-1g"
TEMPLATES: dict[str, tuple[str, list[str]]] = {
    WHOLE_TEMPLATE: (nvidia.DRA_DRIVER, []),
    MIG_TEMPLATE: (
        nvidia.DRA_MIG_CLASS,
        [f"device.attributes['{nvidia.DRA_DRIVER}'].profile == '{MIG_PROFILE}'"],
    ),
}
PLACEMENT = re.compile(r"^gpu-(\d+)-mig-[0-9a-z]+-(\d+)-(\d+)$")  # gpu, GI profile, start


@dataclass
class DraChaos:
    """The DRA node, its plugin process, and an API client."""

    cluster: DraCluster
    client: AsyncClient

    @property
    def node(self) -> SimNode:
        return self.cluster.nodes[DRA_NODE]

    @property
    def plugin(self) -> DraPlugin:
        return self.cluster.plugins[DRA_NODE]

    def checkpoint(self) -> dict[str, Any]:
        """uid -> the checkpoint's record; {} when there is no checkpoint yet."""
        try:
            claims = json.loads(self.plugin.checkpoint.read_text()).get("claims") or {}
        except FileNotFoundError:
            return {}
        return dict(claims)

    def spec_files(self) -> list[Path]:
        root = self.plugin.cdi_root
        return sorted(p for p in root.iterdir() if p.is_file()) if root.exists() else []


# -- killing mid-prepare ----------------------------------------------------------------------
def started_claims(checkpoint: Mapping[str, Any]) -> list[str]:
    return sorted(uid for uid, c in checkpoint.items() if c.get("state") == "PrepareStarted")


async def kill_mid_prepare(
    chaos: DraChaos, rng: random.Random, done: Callable[[], Awaitable[bool]], timeout_s: float
) -> tuple[int, list[str]] | None:
    """Step the plugin until a claim is half prepared, then SIGKILL it there. Returns the
    steps taken and the claims its checkpoint left `PrepareStarted`, or None when `done`
    came true (every claim prepared) or the time ran out without a kill in the window."""
    proc = chaos.plugin.proc
    assert proc is not None
    pid = proc.pid
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    steps = 0
    try:
        while loop.time() < deadline:
            os.kill(pid, signal.SIGCONT)
            await asyncio.sleep(rng.uniform(0.0002, 0.004))
            os.kill(pid, signal.SIGSTOP)
            steps += 1
            if started_claims(chaos.checkpoint()):
                chaos.plugin.kill()
                return steps, started_claims(chaos.checkpoint())
            if steps % 20 == 0 and await done():
                return None
        return None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a plugin left running keeps running


# -- what must hold after the restart --------------------------------------------------------
@dataclass(frozen=True)
class ClaimView:
    """One pod's claim as the API server has it."""

    pod: str
    uid: str
    name: str
    devices: tuple[str, ...]  # allocated device names on this node


async def claim_views(chaos: DraChaos, pods: Sequence[str]) -> list[ClaimView]:
    out = []
    for name in pods:
        pod = (await chaos.client.get(Pod, name, namespace=NAMESPACE)).to_dict()
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            claim = await chaos.client.get(
                ResourceClaim, status["resourceClaimName"], namespace=NAMESPACE
            )
            c = claim.to_dict()
            results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            ) or []
            out.append(
                ClaimView(
                    name,
                    c["metadata"]["uid"],
                    c["metadata"]["name"],
                    tuple(r["device"] for r in results if r.get("pool") == DRA_NODE),
                )
            )
    return out


def expected_uuids(chaos: DraChaos, claim: ClaimView) -> set[str] | None:
    """The UUIDs the claim's pod must see: the whole GPU's, or the MIG device that prepare
    created at the allocated placement; None if such a MIG device does not exist."""
    with SimNvml(chaos.node.gpu_state) as nvml:
        return _uuids(nvml, claim)


def _uuids(nvml: Nvml, claim: ClaimView) -> set[str] | None:
    out = set()
    for device in claim.devices:
        m = PLACEMENT.match(device)
        if m is None:
            out.add(_gpu_uuid(nvml, int(device.removeprefix("gpu-"))))
            continue
        gpu, start = int(m.group(1)), int(m.group(3))
        found = [d.uuid for d in nvml.mig_devices(gpu) if d.placement.start == start]
        if len(found) != 1:
            return None
        out.add(found[0])
    return out


def _gpu_uuid(nvml: Nvml, index: int) -> str:
    return nvml.device(index).uuid


async def prepared_problems(chaos: DraChaos, pods: Sequence[str]) -> list[str]:
    """Every pod Running with exactly its claim's devices; the checkpoint, the CDI specs,
    the kubelet and the GPUs agree with the claims, and nothing is left of anything else."""
    problems: list[str] = []
    for name in pods:
        pod = await chaos.client.get(Pod, name, namespace=NAMESPACE)
        phase = pod.status.phase if pod.status else None
        if phase != "Running":
            problems.append(f"pod {name} {phase}")
    if problems:
        return problems
    claims = await claim_views(chaos, pods)
    holders = Counter(d for c in claims for d in c.devices)
    problems += [f"device {d} allocated to {n} claims" for d, n in holders.items() if n > 1]
    runners = {r.name: r for r in chaos.node.runners.values()}
    for c in claims:
        if not c.devices:
            problems.append(f"claim {c.name} has no device of {DRA_NODE}")
            continue
        want = expected_uuids(chaos, c)
        if want is None:
            problems.append(f"claim {c.name}: no single MIG device at {c.devices}")
            continue
        runner = runners.get(c.pod)
        pids = runner.pids() if runner is not None else []
        if not pids:
            problems.append(f"pod {c.pod}: no process")
            continue
        seen = environ(pids[0]).get(nvidia.NVIDIA_VISIBLE_DEVICES, "")
        if set(seen.split(",")) != want:
            problems.append(f"pod {c.pod} sees {seen!r}, its claim holds {sorted(want)}")
    problems += _checkpoint_and_specs(chaos, {c.uid: c for c in claims})
    problems += _gpus_problems(chaos, sum(1 for c in claims for d in c.devices if "-mig-" in d))
    return problems


def _checkpoint_and_specs(chaos: DraChaos, claims: Mapping[str, ClaimView]) -> list[str]:
    problems = []
    checkpoint = chaos.checkpoint()
    for uid, record in checkpoint.items():
        if uid not in claims:
            problems.append(f"checkpoint keeps claim {record.get('name')} ({uid[:8]}): no pod")
        elif record.get("state") != "PrepareCompleted":
            problems.append(f"checkpoint: claim {record.get('name')} {record.get('state')}")
    problems += [
        f"checkpoint lacks claim {c.name}" for uid, c in claims.items() if uid not in checkpoint
    ]
    want = {claim_file_name(uid): c for uid, c in claims.items()}
    files = chaos.spec_files()
    problems += [f"stray file in the CDI root: {p.name}" for p in files if p.name not in want]
    for name, c in want.items():
        path = chaos.plugin.cdi_root / name
        if not path.exists():
            problems.append(f"no CDI spec for claim {c.name}")
            continue
        devices = [d["name"] for d in json.loads(path.read_text())["devices"]]
        expected = sorted(f"{c.uid}-{d}" for d in c.devices)
        if sorted(devices) != expected:
            problems.append(f"CDI spec of {c.name} has devices {devices}, want {expected}")
    kubelet = dict(chaos.node.dra.claims.items())
    problems += [
        f"kubelet has claim {c.name} unprepared"
        for uid, c in claims.items()
        if uid not in kubelet or not kubelet[uid].prepared
    ]
    return problems


def _gpus_problems(chaos: DraChaos, mig_claims: int) -> list[str]:
    with SimNvml(chaos.node.gpu_state) as nvml:
        problems = [s.describe() for s in read_node(nvml) if s.empty_instances]
        made = len(nvml.mig_devices(MIG_GPU))
    if made != mig_claims:
        problems.append(f"GPU {MIG_GPU} has {made} MIG devices for {mig_claims} MIG claims")
    return problems


async def unprepared_problems(chaos: DraChaos, pods: Sequence[str]) -> list[str]:
    """After the pods are deleted: nothing prepared is left anywhere."""
    problems = []
    left = [meta(p).name async for p in chaos.client.list(Pod, namespace=NAMESPACE)]
    problems += [f"pod {name} not gone" for name in left if name in pods]
    problems += [f"CDI spec left: {p.name}" for p in chaos.spec_files()]
    problems += [f"checkpoint keeps {r.get('name')}" for r in chaos.checkpoint().values()]
    problems += [f"kubelet keeps claim {c.name}" for c in chaos.node.dra.claims.values()]
    with SimNvml(chaos.node.gpu_state) as nvml:
        gis = nvml.gpu_instances(MIG_GPU)
    if gis:
        problems.append(f"GPU {MIG_GPU} keeps {len(gis)} GPU instances")
    return problems
