"""A pod's QoS class, by the rule the API server and the kubelet share (ComputePodQOS).

The API server sets ``status.qosClass`` when the pod is created and refuses a status that
changes it, so the simulated kubelet must derive the very same class; the kubelet names
the pod's cgroup after it (`gpuload`). Only cpu and memory count, in regular and init
containers alike; a quantity of zero counts as none; a limit without a request is also
the request (the API server's defaulting, done here for specs that did not pass it):

- BestEffort: no container requests or limits any cpu or memory;
- Guaranteed: every container has cpu and memory limits, and the requests equal them
  (compared as quantities: ``1`` is ``1000m``, ``1Gi`` is ``1024Mi``);
- Burstable: anything else.

Pod-level resources (``spec.resources``) are not read: no simulated pod sets them.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from lightkube.utils.quantity import parse_quantity

GUARANTEED: Final = "Guaranteed"
BURSTABLE: Final = "Burstable"
BEST_EFFORT: Final = "BestEffort"
QOS_RESOURCES: Final = ("cpu", "memory")

Json = dict[str, Any]


def _positive(container: Json, which: str, values: Mapping[str, Any]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name in QOS_RESOURCES:
        if name not in values:
            continue
        try:
            quantity = parse_quantity(str(values[name]))
        except ValueError:
            raise ValueError(
                f"container {container.get('name')!r}: resources.{which}.{name}: "
                f"{values[name]!r} is not a quantity"
            ) from None
        if quantity is not None and quantity > 0:
            out[name] = quantity
    return out


def qos_class(spec: Json) -> str:
    """The QoS class of a pod spec: Guaranteed, Burstable or BestEffort."""
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        lim = _positive(c, "limits", res.get("limits") or {})
        req = {**lim, **_positive(c, "requests", res.get("requests") or {})}
        for name, q in req.items():
            requests[name] = requests.get(name, Decimal(0)) + q
        for name, q in lim.items():
            limits[name] = limits.get(name, Decimal(0)) + q
        if set(lim) != set(QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and requests == limits:
        return GUARANTEED
    return BURSTABLE
