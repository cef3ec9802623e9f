"""`kubegpu plan --from-snapshot` at cluster size (issue 30): 100 H200 NVL nodes x 8 GPUs
and 200 Pending GPU pods. Target: snapshot to plan, change and runbook in < 10 s on the
2-core development machine (wall clock, median of 3).

The synthetic snapshot: 40 nodes run `all-1g.18gb` with 1g.18gb pods running (so their
layouts are pinned), 30 nodes run whole-GPU pods on 4 of their 8 GPUs, 30 are idle with
MIG off. Pending: 100 pods of `mig-3g.71gb` (a profile no node has), 60 of 1 whole GPU,
40 of `mig-1g.18gb` (which the free instances hold)."""

from __future__ import annotations

import statistics
import time

import yaml

from kubegpu.doctor.snapshot import ConfigMapInfo, NodeInfo, PodInfo, Snapshot
from kubegpu.plan import make_plan
from kubegpu.replan import from_snapshot as ps

TARGET_S = 10.0
ROUNDS = 3
NODES = 100
MIG_CONFIGS = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.18gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    },
}


def _node(i: int, mig: bool) -> NodeInfo:
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H200-NVL" + ("-MIG-1g.18gb" if mig else ""),
        "nvidia.com/gpu.count": "56" if mig else "8",
        "nvidia.com/cuda.driver-version.full": "580.95.05",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": "all-1g.18gb" if mig else "all-disabled",
        "nvidia.com/mig.config.state": "success",
    }
    labels |= {f"kubegpu.io/gpu.{g}.isolation": "mig" if mig else "exclusive" for g in range(8)}
    return NodeInfo(name=f"node-{i:03d}", labels=labels)


def _pod(name: str, resource: str, node: str = "") -> PodInfo:
    return PodInfo(
        namespace="default",
        name=name,
        node=node,
        phase="Running" if node else "Pending",
        requests={resource: "1"},
        limits={resource: "1"},
    )


def snapshot() -> Snapshot:
    nodes, pods = [], []
    for i in range(NODES):
        mig = i < 40
        nodes.append(_node(i, mig))
        if mig:
            pods += [_pod(f"run-{i}-{k}", "nvidia.com/gpu", f"node-{i:03d}") for k in range(20)]
        elif i < 70:
            pods += [_pod(f"run-{i}-{k}", "nvidia.com/gpu", f"node-{i:03d}") for k in range(4)]
    pods += [_pod(f"want-3g-{k}", "nvidia.com/mig-3g.71gb") for k in range(100)]
    pods += [_pod(f"want-gpu-{k}", "nvidia.com/gpu") for k in range(60)]
    pods += [_pod(f"want-1g-{k}", "nvidia.com/mig-1g.18gb") for k in range(40)]
    cm = ConfigMapInfo(
        namespace="gpu-operator",
        name="default-mig-parted-config",
        data={"config.yaml": yaml.safe_dump(MIG_CONFIGS)},
    )
    return Snapshot(nodes=tuple(nodes), pods=tuple(pods), config_maps=(cm,))


def run() -> int:
    snap = snapshot()
    times = []
    result = None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        st = ps.start_from(snap)
        plan = make_plan(st.input)
        change = ps.change_of(st, plan)
        ps.runbook(st, plan, change)
        times.append(time.perf_counter() - start)
        result = (plan, change)
    assert result is not None
    plan, change = result
    placed = sum(w.placed for w in plan.workloads)
    median = statistics.median(times)
    print(
        f"plan_snapshot: {NODES} nodes x 8 GPUs, 200 pending: median {median:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in times)}); {placed}/200 placed, "
        f"{len(change.nodes)} nodes relabelled, {change.repartitioned} GPUs repartitioned; "
        f"{'optimal' if plan.optimal else 'not proven optimal'} ({plan.note}); "
        f"target < {TARGET_S:.0f} s {'met' if median < TARGET_S else 'NOT met'}"
    )
    return 0 if median < TARGET_S else 1
