"""The rule book: which way of handing out a GPU a workload may use, and where.

Every rule has an id, the sentence the reporter prints, and its source. The provider asks
these functions; each returns None when the rule allows a choice, or the reason it does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kubegpu.catalog import GpuInstanceProfile, GpuModel, placement
from kubegpu.plan.inputs import Workload
from kubegpu.sharing.config import MPS_MAX_CLIENTS_OLDER, MPS_MAX_CLIENTS_VOLTA_PLUS

Method = Literal["whole", "mig", "mps", "time-slicing"]
METHODS: tuple[Method, ...] = ("whole", "mig", "mps", "time-slicing")


@dataclass(frozen=True)
class Rule:
    id: str
    text: str
    source: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "training-whole",
            "training gets whole GPUs",
            "issue #8 rules (seeds): whole GPUs for training",
        ),
        Rule(
            "busy-whole",
            "a workload that keeps a card busy (compute 1.0) gets whole GPUs",
            "issue #8 rules (seeds): whole GPUs for anything that keeps a card busy",
        ),
        Rule(
            "multi-gpu-whole",
            "a pod cannot span MIG instances or shared replicas, so a multi-GPU replica gets whole GPUs",
            "device-plugin.md §8 #10 (one MIG device per container survives), §1.3 MPS "
            "failRequestsGreaterThanOne; peers-ecosystem.md §1.2 nos: one MIG device per container",
        ),
        Rule(
            "nccl-whole",
            "NCCL does not run on MIG instances, so NCCL workloads get whole GPUs",
            "issue #8 rules (seeds): NCCL does not run on MIG",
        ),
        Rule(
            "isolation",
            "hardware isolation allows whole GPUs or MIG; memory isolation adds MPS; "
            "time-slicing only where a neighbour's crash is acceptable (isolation: none)",
            "peers-ecosystem.md §1.9 (MIG hardware > MPS caps > time-slice none); "
            "device-plugin.md §8 #1 (time-slicing gives no isolation)",
        ),
        Rule(
            "mps-inference",
            "MPS is for many small inference processes on a full GPU",
            "issue #8 rules (seeds); device-plugin.md §3.5 (limits are per client process)",
        ),
        Rule(
            "mps-no-mig",
            "MPS never on a MIG-enabled card, and not with the mixed MIG strategy",
            "device-plugin.md §1.5 (MPS + mixed rejected; MPS not supported for MIG devices), §6.1",
        ),
        Rule(
            "mps-clients",
            "MPS replicas per GPU: at least 2, at most 48 (compute capability >= 7.5) or 16",
            "device-plugin.md §1.3 (replicas >= 2), §1.5 (maximum MPS clients)",
        ),
        Rule(
            "sharing-node-wide",
            "time-slicing and MPS apply to every full GPU of a node, so a sharing node "
            "has no exclusive whole GPUs",
            "peers-ecosystem.md §1.0; device-plugin.md §1.4, §1.6 (devices forced to all)",
        ),
        Rule(
            "shared-size",
            "a shared replica gets 1/replicas of the GPU's memory and compute (MPS enforces it; "
            "time-slicing does not, so the plan sizes replicas for the largest tenant)",
            "device-plugin.md §3.5 (pinned memory limit total/replicas, thread percentage 100/replicas)",
        ),
        Rule(
            "mig-capable",
            "MIG only on MIG-capable models",
            "mig-hardware.md §1.10",
        ),
        Rule(
            "mig-unconfirmed",
            "MIG on a model whose MIG geometry no source confirms is flagged, not silently used",
            "mig-hardware.md §1.8, §1.9, §5 (RTX PRO 4500 and 5000: guide fractions only)",
        ),
        Rule(
            "mig-driver",
            "MIG needs the model's minimum driver (and some profiles a newer one)",
            "mig-hardware.md §3 (MIG guide v620 driver table)",
        ),
        Rule(
            "mig-display",
            "RTX PRO 6000 Workstation / Max-Q and RTX PRO 5000 must be switched to compute "
            "display mode before MIG can be enabled",
            "mig-hardware.md §3 (DisplayModeSelector --gpumode=compute)",
        ),
        Rule(
            "mig-reset",
            "on Ampere a MIG mode change takes effect after a GPU reset",
            "mig-hardware.md §3",
        ),
        Rule(
            "mig-placeable",
            "MIG layouts are concrete placements from the model's geometry, not slice counts",
            "mig-hardware.md §2; kubegpu.mig.geometry",
        ),
        Rule(
            "mig-single",
            "the single MIG strategy only where every GPU of a node has the same one profile; "
            "otherwise mixed",
            "device-plugin.md §1.5 (single: same migEnabled, one MIG device type), §2.2",
        ),
        Rule(
            "mig-in-use",
            "MIG instances in use are never destroyed; free ones may be re-planned",
            "peers-ecosystem.md §1.2 (nos never deletes a MIG device in use)",
        ),
        Rule(
            "fits",
            "a replica's memory and compute must fit what it is given",
            "device-plugin.md §2.1 (MIG profile memory), §3.5",
        ),
        Rule(
            "nvlink",
            "a replica that needs NVLink lands on a node whose GPUs are joined by NVLink",
            "issue #8 inputs (multi-GPU: needs NCCL/NVLink)",
        ),
    )
}


def mps_max_clients(model: GpuModel) -> int:
    major, _, minor = model.compute_capability.partition(".")
    cc = (int(major), int(minor or 0))
    return MPS_MAX_CLIENTS_VOLTA_PLUS if cc >= (7, 5) else MPS_MAX_CLIENTS_OLDER


# Time-slicing has no client limit upstream; the planner keeps it to MPS's, so that a
# node's replica count stays meaningful when memory is the only limit.
def max_replicas(model: GpuModel) -> int:
    return mps_max_clients(model)


def method_rejection(w: Workload, method: Method) -> tuple[str, str] | None:
    """Workload-level rules, independent of hardware: (rule id, reason) or None."""
    if method == "whole":
        return None
    if w.kind == "training":
        return "training-whole", f"{w.name} is training: whole GPUs only"
    if w.compute_fraction >= 1.0:
        return "busy-whole", f"{w.name} keeps a card busy (compute 1.0): whole GPUs only"
    if w.gpus > 1:
        return "multi-gpu-whole", f"{w.name} needs {w.gpus} GPUs per replica: whole GPUs only"
    if w.uses_nccl:
        return "nccl-whole", f"{w.name} uses NCCL, which does not run on MIG: whole GPUs only"
    if method == "mps":
        if w.isolation == "hardware":
            return "isolation", f"{w.name} needs hardware isolation; MPS isolates memory only"
        if w.kind != "inference":
            return "mps-inference", f"{w.name} is a {w.kind}; MPS is kept for inference processes"
    if method == "time-slicing" and w.isolation != "none":
        return (
            "isolation",
            f"{w.name} needs {w.isolation} isolation; time-slicing isolates nothing "
            "(a neighbour's crash or memory use reaches it)",
        )
    return None


def whole_rejection(w: Workload, model: GpuModel) -> str | None:
    if w.memory_mib > model.memory_mib:
        return f"needs {_gib(w.memory_mib)} per GPU; a {model.id} has {_gib(model.memory_mib)}"
    if w.compute_sms > model.sms:
        return f"needs {w.compute_sms} SMs; a {model.id} has {model.sms}"
    return None


def profile_rejection(w: Workload, model: GpuModel, p: GpuInstanceProfile) -> str | None:
    if p.memory_mib < w.memory_mib:
        return f"{p.name} has {_gib(p.memory_mib)} < {_gib(w.memory_mib)}"
    if w.compute_sms and p.sms < w.compute_sms:
        return f"{p.name} has {p.sms} SMs < {w.compute_sms}"
    frac = p.sms / model.sms if model.sms else 0.0
    if w.compute_fraction and frac + 1e-9 < w.compute_fraction:
        return f"{p.name} has {frac:.0%} of the SMs < {w.compute_fraction:.0%}"
    return None


def replicas_for(w: Workload, model: GpuModel) -> int:
    """The most replicas per GPU that still give this workload its memory and compute."""
    r = model.memory_mib // max(1, w.memory_mib)
    if w.compute_fraction > 0:
        r = min(r, int(1 / w.compute_fraction + 1e-9))
    if w.compute_sms:
        r = min(r, model.sms // w.compute_sms)
    return min(r, max_replicas(model))


def mig_unconfirmed(model: GpuModel) -> list[str]:
    """Why this model's MIG geometry is unconfirmed (empty when a source backs it)."""
    if model.mig is None or "placement_units" not in model.mig.unconfirmed:
        return []
    return sorted(model.mig.unconfirmed)


def mig_driver_problem(model: GpuModel, driver: str | None) -> str | None:
    """Why the node's driver cannot run MIG on this model: the catalog's rule
    (`catalog.placement`), named for the model."""
    if model.mig is None or driver is None:
        return None
    problem = placement.mig_driver_problem(model.mig, driver)
    return f"{model.id}: {problem}" if problem else None


def usable_profiles(model: GpuModel, driver: str | None) -> list[GpuInstanceProfile]:
    """The profiles the planner hands out: no media/graphics variants, and only those the
    driver offers (the catalog's rule)."""
    if model.mig is None:
        return []
    return [p for p in placement.offered_profiles(model.mig, driver) if p.variant in ("", "REV2")]


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f} GiB"
