"""The planner on a mid-size fleet with its current state (issue 30): 20 nodes of five
models, MIG layouts with instances in use, whole and shared GPUs busy, and a workload mix
to place next to them. Target: the default mode (`--solver auto`) plans it in < 20 s on
the 2-core development machine (wall clock, median of 3)."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from kubegpu.plan import make_plan, parse_data

TARGET_S = 20.0
ROUNDS = 3
SHAPES = [  # (gpus, driver, MIG layout of GPU 0 and how many of its instances are busy)
    ("h200-nvl:8", "575.51.03", {"1g.18gb": 7}, 3),
    ("h100-80gb:8", "550.90.07", {"3g.40gb": 2}, 1),
    ("a100-80gb:8", "550.90.07", {"2g.20gb": 3}, 2),
    ("l4:4", "550.90.07", None, 0),
    ("rtx-pro-6000-se:4", "580.95.05", None, 0),
]


def fleet(rng: random.Random, nodes: int = 20) -> list[dict[str, Any]]:
    out = []
    for i in range(nodes):
        gpus, driver, layout, busy = SHAPES[i % len(SHAPES)]
        current: dict[str, Any] = {"gpus": {}}
        if layout is not None and rng.random() < 0.7:
            profile = next(iter(layout))
            current["gpus"][0] = {"mig": layout, "busy": {profile: busy}}
            current["gpus"][1] = {"busy": "whole"}
        elif gpus.startswith("l4"):
            current = {"sharing": "time-slicing", "replicas": 4, "gpus": {0: {"busy": 3}}}
        else:
            current["gpus"][0] = {"busy": "whole"}
        out.append({"name": f"node-{i:02d}", "gpus": gpus, "driver": driver, "current": current})
    return out


def workloads(rng: random.Random, count: int = 30) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        kind = rng.choice(["inference"] * 4 + ["training", "notebook"])
        w: dict[str, Any] = {"name": f"w{i:02d}", "kind": kind}
        if kind == "training":
            w |= {"replicas": rng.randint(1, 3), "memory": "60GiB", "gpus": rng.choice([1, 2, 4])}
        else:
            w |= {
                "replicas": rng.randint(2, 16),
                "memory": f"{rng.choice([4, 8, 12, 20, 30, 40])}GiB",
                "compute": rng.choice([0.05, 0.1, 0.2, 0.4]),
                "isolation": rng.choice(["hardware", "hardware", "memory", "none"]),
            }
        out.append(w)
    return out


def document(seed: int = 30) -> dict[str, Any]:
    rng = random.Random(seed)
    return {"fleet": fleet(rng), "workloads": workloads(rng)}


def run() -> int:
    doc = document()
    times = []
    cpu = []
    plan = None
    for _ in range(ROUNDS):
        inp = parse_data(doc)
        start, cpu0 = time.perf_counter(), time.process_time()
        plan = make_plan(inp)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu0)
    assert plan is not None
    gpus = sum(int(n["gpus"].split(":")[1]) for n in doc["fleet"])
    replicas = sum(w["replicas"] for w in doc["workloads"])
    placed = replicas - sum(w.left for w in plan.workloads)
    median = statistics.median(times)
    print(
        f"plan_midsize: {len(doc['fleet'])} nodes, {gpus} GPUs, {len(doc['workloads'])} "
        f"workloads, {replicas} replicas; median {median:.2f} s "
        f"({', '.join(f'{t:.2f}' for t in times)}); {placed} placed on {plan.gpus_used} GPUs; "
        f"solver {plan.solver}, {'optimal' if plan.optimal else f'bound {plan.bound}'}; "
        f"CPU median {statistics.median(cpu):.2f} s"
    )
    ok = median < TARGET_S
    print(f"  target < {TARGET_S:.0f} s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(run())
