"""Seeded random fleets and workload mixes, as planner input documents.

The optimality tests and the planner benchmark draw scenarios from here: the same seed
gives the same document, so a case found by a search can be pinned as a seed (or written
out as a scenario file with `scenario`).
"""

from __future__ import annotations

import random
from typing import Any

# (model, GPUs per node, driver)
NODE_SHAPES: tuple[tuple[str, int, str | None], ...] = (
    ("h100-80gb", 8, "550.90.07"),
    ("h200-nvl", 8, "575.57.08"),
    ("a100-40gb", 8, "535.54.03"),
    ("a100-80gb", 4, "535.54.03"),
    ("a30", 4, "535.54.03"),
    ("rtx-pro-6000-se", 4, "580.95.05"),
    ("l40s", 4, None),
    ("l4", 4, None),
)
MEMORIES_GIB = (3, 4, 6, 8, 9, 12, 16, 20, 30, 40)
COMPUTES = (0.05, 0.1, 0.2, 0.25, 0.4)


def fleet(rng: random.Random, gpus: int, shapes: int = 4) -> list[dict[str, Any]]:
    """About `gpus` GPUs in nodes of a few shapes (mixed models across nodes)."""
    chosen = rng.sample(NODE_SHAPES, min(shapes, len(NODE_SHAPES)))
    out: list[dict[str, Any]] = []
    total = 0
    i = 0
    while total < gpus:
        model, per, driver = rng.choice(chosen)
        node: dict[str, Any] = {"name": f"node-{i:03d}", "gpus": f"{model}:{per}"}
        if driver:
            node["driver"] = driver
        out.append(node)
        total += per
        i += 1
    return out


def workloads(rng: random.Random, count: int, replicas: int) -> list[dict[str, Any]]:
    """`count` workloads, mostly services and notebooks, some training; about `replicas`
    replicas in all."""
    out: list[dict[str, Any]] = []
    mean = max(1, replicas // max(1, count))
    for i in range(count):
        w: dict[str, Any] = {"name": f"w{i:03d}"}
        if rng.random() < 0.15:
            w |= {
                "replicas": rng.randint(1, 2),
                "memory": f"{rng.choice((20, 40, 60, 70))}GiB",
                "gpus": rng.choice((1, 1, 2, 4, 8)),
                "kind": "training",
            }
        else:
            w |= {
                "replicas": rng.randint(1, 2 * mean),
                "memory": f"{rng.choice(MEMORIES_GIB)}GiB",
                "compute": rng.choice(COMPUTES),
                "isolation": rng.choice(("hardware", "memory", "none")),
                "kind": rng.choice(("inference", "inference", "notebook")),
            }
        out.append(w)
    return out


def scenario(
    seed: int, gpus: int = 64, count: int = 12, replicas: int = 120, shapes: int = 4
) -> dict[str, Any]:
    """A whole planner input document."""
    rng = random.Random(seed)
    return {"fleet": fleet(rng, gpus, shapes), "workloads": workloads(rng, count, replicas)}
