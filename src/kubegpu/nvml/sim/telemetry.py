"""Plausible telemetry for the simulated node, computed from its state and the time.

Load comes only from the state file: processes started with `SimNvml.start_process`
(exactly their `sm_percent` and memory) and devices the simulated kubelet marks busy
because they are allocated to pods (`SimControls.set_busy`, or `set_workloads` when the
simulated kubelet names the pod process behind each allocation). A busy device runs a
synthetic workload whose size is a hash of its UUID, or the figures the pod gave.
Everything else (clocks, power, temperatures, profiling ratios, PCIe traffic) follows from
load through per-model figures.

Jitter is a hash of the device UUID and a time bucket, never a random generator: every
process reading the node at the same moment sees the same values, and a node created with
`;seed=` replays the same telemetry. Idle devices are quiet (no utilisation), but their
power and temperature still wander a little, as real ones do.

The per-model figures (board power, idle power, clocks) are approximate public
specifications, used only to make the simulator's numbers look like the card's.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

from kubegpu.catalog import get_model
from kubegpu.catalog.models import GpuModel
from kubegpu.nvml.sim.state import GpuState, NodeState, WorkloadState
from kubegpu.nvml.types import (
    Activity,
    Clocks,
    DeviceSample,
    GpuInstanceSample,
    MemoryInfo,
    NvLinkThroughput,
    RemappedRows,
    Utilization,
)

BUCKET_S = 5.0  # jitter changes every BUCKET_S seconds
AMBIENT_C = 30.0
GIB = 1024**3
KIB = 1024

# NVLink-connected boards (SXM/HGX, NVL bridges, Grace superchips): links per GPU, and the
# payload bandwidth of one link in each direction (GB/s: NVLink 3 and 4: 25, NVLink 5: 50).
# A GPU's links are active when another GPU of its model is on the node (its peers).
NVLINKS_BY_MODEL = {
    "a100-40gb": 12,
    "a100-80gb": 12,
    "h100-80gb": 18,
    "h100-nvl": 18,
    "gh200": 18,
    "gh200-144gb": 18,
    "h200": 18,
    "h200-nvl": 18,
    "b200": 18,
    "gb200": 18,
}
NVLINK_LINK_GBPS = {"b200": 50.0, "gb200": 50.0}
NVLINK_LINK_GBPS_DEFAULT = 25.0


@dataclass(frozen=True)
class Figures:
    """Approximate public figures of one model (simulator only)."""

    board_power_w: float
    idle_power_w: float
    sm_max_mhz: int
    sm_idle_mhz: int
    memory_mhz: int
    hbm: bool  # HBM parts report a memory temperature


FIGURES: dict[str, Figures] = {
    "a100-40gb": Figures(400, 55, 1410, 210, 1215, True),
    "a100-80gb": Figures(400, 60, 1410, 210, 1593, True),
    "a30": Figures(165, 30, 1440, 210, 1215, True),
    "h100-80gb": Figures(700, 70, 1980, 345, 2619, True),
    "h100-pcie": Figures(350, 50, 1755, 345, 1593, True),
    "h100-nvl": Figures(400, 60, 1785, 345, 2619, True),
    "gh200": Figures(900, 90, 1980, 345, 2619, True),
    "gh200-144gb": Figures(900, 90, 1980, 345, 2619, True),
    "h200": Figures(700, 75, 1980, 345, 3201, True),
    "h200-nvl": Figures(600, 70, 1785, 345, 3201, True),
    "b200": Figures(1000, 140, 1965, 120, 3996, True),
    "gb200": Figures(1200, 150, 2062, 120, 3996, True),
    "rtx-pro-6000-se": Figures(600, 35, 2617, 180, 14001, False),
    "rtx-pro-6000-ws": Figures(600, 30, 2617, 180, 14001, False),
    "rtx-pro-6000-maxq": Figures(300, 25, 2287, 180, 14001, False),
    "rtx-pro-5000": Figures(300, 25, 2617, 180, 14001, False),
    "rtx-pro-5000-72gb": Figures(300, 25, 2617, 180, 14001, False),
    "rtx-pro-4500": Figures(200, 20, 2617, 180, 14001, False),
    "rtx-pro-4000": Figures(140, 15, 2617, 180, 14001, False),
    "rtx-pro-4000-sff": Figures(70, 12, 2287, 180, 14001, False),
    "rtx-pro-2000": Figures(70, 12, 2287, 180, 14001, False),
    "l4": Figures(72, 16, 2040, 210, 6251, False),
    "l40s": Figures(350, 35, 2520, 210, 9001, False),
    "l40": Figures(300, 35, 2490, 210, 9001, False),
    "a10": Figures(150, 20, 1695, 210, 6251, False),
    "a2": Figures(60, 10, 1770, 210, 6251, False),
}
GENERIC = Figures(300, 30, 1800, 210, 2619, True)


def figures(model: GpuModel) -> Figures:
    return FIGURES.get(model.id, GENERIC)


# -- deterministic jitter ------------------------------------------------------------------
@functools.lru_cache(maxsize=16384)
def unit(*key: object) -> float:
    """A stable number in [0, 1) for `key` (a hash, not a random draw)."""
    digest = hashlib.blake2b(":".join(map(str, key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def jitter(now: float, *key: object) -> float:
    """A number in [-1, 1] that changes every BUCKET_S seconds, the same for every reader."""
    return 2.0 * unit(*key, math.floor(now / BUCKET_S)) - 1.0


# -- load ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    """What runs on one entity (a whole GPU or one GPU instance)."""

    key: str  # jitter key: the GPU UUID, or "<GPU UUID>/gi<id>"
    sm_percent: float  # 0-100
    used_mib: int
    total_mib: int

    @property
    def ratio(self) -> float:
        return self.sm_percent / 100.0


@dataclass(frozen=True)
class Replica:
    """One busy mark of a device: an allocation that runs a synthetic workload, and the pod
    process behind it when the simulated kubelet named one."""

    uuid: str  # the GPU or MIG device allocated
    workload: WorkloadState | None


@dataclass(frozen=True)
class PodProcess:
    """A pod's simulated CUDA process, with what it uses now (NVML's running processes)."""

    pid: int
    uuid: str
    used_memory_mib: int
    sm_percent: float


def _replicas(state: NodeState, uuids: list[str]) -> list[Replica]:
    marks = state.get("busy", {})
    named = state.get("workloads", {})
    out: list[Replica] = []
    for u in uuids:
        workloads = named.get(u, [])
        out += [
            Replica(u, workloads[i] if i < len(workloads) else None)
            for i in range(int(marks.get(u, 0)))
        ]
    return out


def _synthetic(
    key: str, total_mib: int, replicas: list[Replica], now: float | None
) -> list[tuple[float, int]]:
    """(sm %, MiB) of each replica's workload: a pod's own figures where it gave them, else
    sizes hashed from the device (the first replica holds most memory); synthetic memory
    is scaled so that the device is never more than 95% full."""
    sms: list[float] = []
    shares: list[float] = []
    for replica in range(len(replicas)):
        size = unit(key, "workload", replica)
        wobble = 0.0 if now is None else 8.0 * jitter(now, key, "sm", replica)
        sms.append(max(1.0, 40.0 + 50.0 * size + wobble))
        first = 0.3 + 0.55 * unit(key, "memory", replica)
        shares.append(first if replica == 0 else 0.1 + 0.2 * size)
    scale = min(1.0, 0.95 / sum(shares)) if shares else 1.0
    out: list[tuple[float, int]] = []
    for r, hashed_sm, share in zip(replicas, sms, shares, strict=True):
        w = r.workload
        mib = int(total_mib * share * scale)
        sm = hashed_sm
        if w is not None and w["used_memory_mib"] is not None:
            mib = w["used_memory_mib"]
        if w is not None and w["sm_percent"] is not None:
            sm = float(w["sm_percent"])
        out.append((sm, mib))
    return out


def _load(
    key: str,
    total_mib: int,
    procs: list[tuple[int, int]],
    replicas: list[Replica],
    now: float | None,
) -> Load:
    """Processes (sm %, MiB) plus the replicas' workloads; `now=None`: without jitter."""
    work = _synthetic(key, total_mib, replicas, now)
    sm = float(sum(p[0] for p in procs)) + sum(w[0] for w in work)
    used = sum(p[1] for p in procs) + sum(w[1] for w in work)
    return Load(key, min(100.0, sm), min(total_mib, used), total_mib)


def _entities(state: NodeState, gpu: GpuState) -> list[tuple[str, int, list[str], int | None]]:
    """(jitter key, memory, device UUIDs, GI id) of each load-carrying entity of the GPU."""
    model = get_model(gpu["model"])
    if not (gpu["mig_current"] and model.mig and gpu["gpu_instances"]):
        return [(gpu["uuid"], model.memory_mib, [gpu["uuid"]], None)]
    mig = model.mig
    return [
        (
            f"{gpu['uuid']}/gi{gi['id']}",
            mig.profile_by_id(gi["profile_id"]).memory_mib,
            [c["uuid"] for c in sorted(gi["compute_instances"], key=lambda c: c["id"])],
            gi["id"],
        )
        for gi in sorted(gpu["gpu_instances"], key=lambda g: g["id"])
    ]


def pod_processes(state: NodeState, gpu: GpuState, now: float | None) -> list[PodProcess]:
    """The pod processes the simulated kubelet named on this GPU, with their figures."""
    out: list[PodProcess] = []
    for key, total, uuids, _ in _entities(state, gpu):
        replicas = _replicas(state, uuids)
        for r, (sm, mib) in zip(replicas, _synthetic(key, total, replicas, now), strict=True):
            if r.workload is not None:
                out.append(PodProcess(r.workload["pid"], r.uuid, mib, sm))
    return out


def entity_loads(
    state: NodeState, gpu: GpuState, now: float | None
) -> tuple[Load, list[tuple[int, Load]]]:
    """The GPU's load and, on a MIG GPU, each GPU instance's (id, load)."""
    model = get_model(gpu["model"])
    if not (gpu["mig_current"] and model.mig and gpu["gpu_instances"]):
        procs = [(p["sm_percent"], p["used_memory_mib"]) for p in gpu["processes"]]
        replicas = _replicas(state, [gpu["uuid"]])
        return _load(gpu["uuid"], model.memory_mib, procs, replicas, now), []
    mig = model.mig
    assert mig is not None
    instances: list[tuple[int, Load]] = []
    sm = 0.0
    used = 0
    for key, total, uuids, gi_id in _entities(state, gpu):
        assert gi_id is not None
        gi = next(g for g in gpu["gpu_instances"] if g["id"] == gi_id)
        profile = mig.profile_by_id(gi["profile_id"])
        procs = [
            (p["sm_percent"], p["used_memory_mib"]) for p in gpu["processes"] if p["gi"] == gi_id
        ]
        load = _load(key, total, procs, _replicas(state, uuids), now)
        instances.append((gi_id, load))
        sm += load.sm_percent * profile.compute_slices / mig.compute_slices
        used += load.used_mib
    used += sum(p["used_memory_mib"] for p in gpu["processes"] if p["gi"] is None)
    whole = Load(gpu["uuid"], min(100.0, sm), min(model.memory_mib, used), model.memory_mib)
    return whole, instances


# -- what follows from load ----------------------------------------------------------------
def mean_power_w(model: GpuModel, ratio: float) -> float:
    f = figures(model)
    if ratio <= 0:
        return f.idle_power_w
    return f.idle_power_w + (f.board_power_w - f.idle_power_w) * (0.1 + 0.9 * ratio)


def energy_mj(gpu: GpuState, state: NodeState, now: float, load: Load | None = None) -> float:
    """Energy since the state was created: the folded total plus the current stretch (at
    `load`, the GPU's load now, when the caller has it)."""
    since = gpu.get("energy_at")
    total = float(gpu.get("energy_mj", 0.0))
    if since is None:
        return total
    load = load or entity_loads(state, gpu, None)[0]
    return total + mean_power_w(get_model(gpu["model"]), load.ratio) * max(0.0, now - since) * 1e3


def active_nvlinks(state: NodeState, gpu: GpuState) -> int:
    """The GPU's active NVLinks: its model's links when a peer of its model is on the node."""
    links = NVLINKS_BY_MODEL.get(gpu["model"], 0)
    peers = [g for g in state["gpus"] if g["model"] == gpu["model"] and g is not gpu]
    return links if peers else 0


def nvlink_rates_kib_s(
    state: NodeState, gpu: GpuState, load: Load | None = None
) -> tuple[float, float]:
    """NVLink payload (TX, RX) in KiB/s at the GPU's current load: a share of the links'
    bandwidth that grows with load (none when idle, or with MIG on: MIG devices do not talk
    to peers over NVLink)."""
    links = active_nvlinks(state, gpu)
    if not links or gpu["mig_current"]:
        return 0.0, 0.0
    load = load or entity_loads(state, gpu, None)[0]
    key = gpu["uuid"]
    per_link = NVLINK_LINK_GBPS.get(gpu["model"], NVLINK_LINK_GBPS_DEFAULT) * 1e9 / KIB
    rate = links * per_link * load.ratio * (0.05 + 0.3 * unit(key, "nvlink"))
    tx_share = 0.45 + 0.1 * unit(key, "nvlink-tx")
    return rate * tx_share, rate * (1 - tx_share)


def nvlink_kib(
    gpu: GpuState, state: NodeState, now: float, load: Load | None = None
) -> tuple[float, float]:
    """NVLink payload (TX, RX) since the state was created: booked plus the current stretch."""
    tx = float(gpu.get("nvlink_tx_kib", 0.0))
    rx = float(gpu.get("nvlink_rx_kib", 0.0))
    since = gpu.get("energy_at")
    if since is None:
        return tx, rx
    tx_rate, rx_rate = nvlink_rates_kib_s(state, gpu, load)
    elapsed = max(0.0, now - since)
    return tx + tx_rate * elapsed, rx + rx_rate * elapsed


def fold_energy(state: NodeState, now: float) -> None:
    """Book the energy and NVLink traffic so far at the current load; call before the load
    changes."""
    for gpu in state["gpus"]:
        if "energy_at" in gpu:
            load, _ = entity_loads(state, gpu, None)  # once: both read it
            gpu["energy_mj"] = energy_mj(gpu, state, now, load)
            gpu["nvlink_tx_kib"], gpu["nvlink_rx_kib"] = nvlink_kib(gpu, state, now, load)
        gpu["energy_at"] = now


def activity(load: Load, now: float) -> Activity:
    u = load.ratio
    k = load.key
    pcie = u * GIB * (0.2 + 1.8 * unit(k, "pcie"))
    return Activity(
        graphics_active=u,
        sm_active=u * (0.85 + 0.1 * unit(k, "sm_active")),
        sm_occupancy=u * (0.25 + 0.35 * unit(k, "occupancy")),
        tensor_active=u * (0.2 + 0.6 * unit(k, "tensor")),
        dram_active=u * (0.3 + 0.4 * unit(k, "dram")),
        fp64_active=u * 0.02 * unit(k, "fp64"),
        fp32_active=u * (0.1 + 0.3 * unit(k, "fp32")),
        fp16_active=u * (0.05 + 0.2 * unit(k, "fp16")),
        pcie_tx_bytes_per_s=float(round(pcie * (0.4 + 0.05 * jitter(now, k, "tx")))),
        pcie_rx_bytes_per_s=float(round(pcie * (0.6 + 0.05 * jitter(now, k, "rx")))),
    )


def device_sample(state: NodeState, gpu: GpuState, now: float) -> DeviceSample:
    """Everything a monitoring agent reads from one simulated GPU at time `now`."""
    model = get_model(gpu["model"])
    f = figures(model)
    whole, instances = entity_loads(state, gpu, now)
    u = whole.ratio
    key = gpu["uuid"]
    power = mean_power_w(model, u) + 0.01 * f.board_power_w * jitter(now, key, "power")
    sm_clock = f.sm_idle_mhz
    if u > 0:  # boost, easing off a little near full load as power limits bite
        sm_clock = int(f.sm_max_mhz * (1 - 0.06 * max(0.0, u - 0.85) / 0.15)) // 15 * 15
    temp = round(AMBIENT_C + 2.0 + 42.0 * u + jitter(now, key, "temp"))
    mig = bool(gpu["mig_current"])
    gi_samples: list[GpuInstanceSample] = []
    if mig and model.mig:
        by_id = {gi["id"]: gi for gi in gpu["gpu_instances"]}
        for gi_id, load in instances:
            gi = by_id[gi_id]
            profile = model.mig.profile_by_id(gi["profile_id"])
            gi_samples.append(
                GpuInstanceSample(
                    gpu_instance_id=gi_id,
                    profile_id=profile.id,
                    profile=profile.name,
                    memory=MemoryInfo(load.total_mib, load.used_mib),
                    activity=activity(load, now),
                    mig_device_uuids=tuple(
                        c["uuid"] for c in sorted(gi["compute_instances"], key=lambda c: c["id"])
                    ),
                )
            )
    whole_activity = activity(whole, now)
    dram = whole_activity.dram_active or 0.0
    tx_kib, rx_kib = nvlink_kib(gpu, state, now)
    return DeviceSample(
        index=gpu["index"],
        clocks=Clocks(sm_clock, f.memory_mhz),
        gpu_temp_c=temp,
        memory_temp_c=temp + 4 + round(3 * u) if f.hbm else None,
        power_w=round(power, 3),
        energy_mj=int(energy_mj(gpu, state, now)),
        pcie_replays=0,
        # NVML does not report device utilisation rates while MIG mode is on
        utilization=None if mig else Utilization(round(whole.sm_percent), round(100 * dram)),
        encoder_percent=0,
        decoder_percent=0,
        memory=MemoryInfo(whole.total_mib, whole.used_mib),
        remapped_rows=RemappedRows(0, 0, False, False),
        nvlink=NvLinkThroughput(active_nvlinks(state, gpu), int(tx_kib), int(rx_kib)),
        activity=whole_activity,
        mig_enabled=mig,
        gpu_instances=tuple(gi_samples),
    )
