"""The isolation a GPU device really gives, in one vocabulary (pure).

Four ways to hand out a GPU, from strongest to weakest isolation:

- `exclusive`: a whole GPU for one container. All its memory; no neighbour.
- `mig`: a MIG device. Its instance's memory and SMs, fenced in hardware; a fault in another
  instance does not reach it.
- `mps`: a replica served through an MPS daemon. A pinned-memory limit and an active-thread
  percentage per client, enforced by the daemon; a fatal fault in one client can take down
  every client of that daemon.
- `time-sliced`: a replica of a time-sliced device. Turns on the GPU, nothing guaranteed:
  no memory limit, and a neighbour's fault reaches it.

The node label feature discovery writes per GPU, the annotation the device plugin writes on
each GPU pod, the exporter's metric and `kubegpu plan --explain` all take their words from
here, so they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kubegpu.catalog import nvidia
from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.devices import Advertised, Device, GpuFacts, StrategyError, advertise
from kubegpu.sharing.mps import client_limit


class Method(Enum):
    EXCLUSIVE = "exclusive"
    MIG = "mig"
    MPS = "mps"
    TIME_SLICED = "time-sliced"


# strongest first: a GPU whose devices mix methods is labelled with its weakest
STRENGTH = (Method.EXCLUSIVE, Method.MIG, Method.MPS, Method.TIME_SLICED)

SAYS: dict[Method, str] = {
    Method.EXCLUSIVE: "a whole GPU: all its memory, no neighbour",
    Method.MIG: "a MIG instance: its own memory and SMs in hardware; "
    "a neighbour's fault cannot reach it",
    Method.MPS: "an MPS client: a pinned-memory limit and a share of the SMs; "
    "a neighbour's fatal fault can reach it",
    Method.TIME_SLICED: "a time slice: no memory or compute guaranteed; "
    "a neighbour's fault can reach it",
}


def describe(method: Method) -> str:
    """One plain sentence for a method (the planner's --explain, the docs)."""
    return f"{method.value} ({SAYS[method]})"


def fault_isolated(method: Method) -> bool:
    """Whether a neighbour's fault is kept away from the device."""
    return method in (Method.EXCLUSIVE, Method.MIG)


def method_of(device: Device, strategy: str) -> Method:
    """The method behind one advertised device under the config's sharing strategy."""
    if device.is_replica:
        return Method.MPS if strategy == "mps" else Method.TIME_SLICED
    return Method.MIG if device.mig is not None else Method.EXCLUSIVE


def plan_method(role: str, sharing: str) -> Method | None:
    """The method a planned GPU gives its workloads (`kubegpu plan`'s roles: whole, mig,
    shared under the node's time-slicing or MPS); None for a GPU that serves none."""
    if role == "whole":
        return Method.EXCLUSIVE
    if role == "mig":
        return Method.MIG
    if role == "shared":
        return Method.MPS if sharing == "mps" else Method.TIME_SLICED
    return None


@dataclass(frozen=True)
class Isolation:
    """What a container got with one device."""

    device: str  # the device ID the kubelet allocated
    uuid: str  # the GPU or MIG device behind it
    method: Method
    memory_mib: int  # memory it is guaranteed (0: none)
    fault_isolated: bool  # True: a neighbour's fault cannot reach it
    thread_percentage: int | None = None  # MPS: the client's active-thread limit

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "device": self.device,
            "uuid": self.uuid,
            "method": self.method.value,
            "memoryMiB": self.memory_mib,
            "faultIsolated": self.fault_isolated,
        }
        if self.thread_percentage is not None:
            out["threadPercentage"] = self.thread_percentage
        return out


def device_isolation(device: Device, gpu: GpuFacts, strategy: str) -> Isolation:
    """The isolation of one device: an MPS client is guaranteed the limits its daemon sets
    (`sharing.mps.client_limit`: shares of the MIG instance or of the GPU); a time slice is
    guaranteed no memory."""
    method = method_of(device, strategy)
    memory = device.mig.memory_mib if device.mig is not None else gpu.memory_mib
    threads = None
    if method is Method.MPS:
        limit = client_limit(device, gpu)
        memory, threads = limit.pinned_memory_mib, limit.active_thread_percentage
    elif method is Method.TIME_SLICED:
        memory = 0
    return Isolation(device.id, device.uuid, method, memory, fault_isolated(method), threads)


def allocation_isolation(
    device_ids: Iterable[str], advertised: Advertised, gpus: Sequence[GpuFacts], strategy: str
) -> list[Isolation]:
    """The isolation of every allocated device ID this node advertises (others skipped)."""
    by_id = {d.id: d for devices in advertised.resources.values() for d in devices}
    by_index = {g.index: g for g in gpus}
    out = []
    for device_id in device_ids:
        d = by_id.get(device_id)
        if d is not None and d.gpu in by_index:
            out.append(device_isolation(d, by_index[d.gpu], strategy))
    return out


def gpu_methods(advertised: Advertised, strategy: str) -> dict[int, Method]:
    """Each advertised GPU's method: the weakest of its devices'."""
    seen: dict[int, set[Method]] = {}
    for devices in advertised.resources.values():
        for d in devices:
            seen.setdefault(d.gpu, set()).add(method_of(d, strategy))
    return {gpu: max(methods, key=STRENGTH.index) for gpu, methods in sorted(seen.items())}


def node_labels(
    gpus: Sequence[GpuFacts],
    config: PluginConfig,
    label: Callable[[int], str] = nvidia.isolation_label,
) -> dict[str, str]:
    """Feature discovery's label per advertised GPU: `kubegpu.io/gpu.<i>.isolation=<method>`
    (none when the config cannot be advertised on these GPUs: the plugin refuses it too)."""
    try:
        advertised = advertise(gpus, config)
    except StrategyError:
        return {}
    methods = gpu_methods(advertised, config.sharing_strategy)
    return {label(i): m.value for i, m in sorted(methods.items())}


# -- the pod annotation --------------------------------------------------------------------


class AnnotationError(ValueError):
    """An isolation annotation that cannot be read."""


def annotation(containers: Mapping[str, Sequence[Isolation]]) -> str:
    """The annotation's value: container name -> the devices it got (compact JSON)."""
    body = {name: [i.to_json() for i in isos] for name, isos in sorted(containers.items())}
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def parse_annotation(text: str) -> dict[str, list[Isolation]]:
    """Read an annotation back (the exporter); AnnotationError says what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise AnnotationError("expected an object of container name -> devices")
    out: dict[str, list[Isolation]] = {}
    for container, items in data.items():
        if not isinstance(items, list):
            raise AnnotationError(f"container {container!r}: expected a list of devices")
        out[str(container)] = [_isolation(container, item) for item in items]
    return out


def _isolation(container: str, item: Any) -> Isolation:
    try:
        threads = item.get("threadPercentage")
        return Isolation(
            device=str(item["device"]),
            uuid=str(item["uuid"]),
            method=Method(item["method"]),
            memory_mib=int(item["memoryMiB"]),
            fault_isolated=bool(item["faultIsolated"]),
            thread_percentage=None if threads is None else int(threads),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnnotationError(f"container {container!r}: bad device entry: {exc}") from None
