"""The isolation each GPU pod has, as metrics: the device plugin's annotation, exported.

One series per container and device, from the `kubegpu.io/isolation` annotation of the
node's pods (`kubegpu.sharing.isolation` words):

- `kubegpu_pod_isolation` 1, labelled with the method (`exclusive`, `mig`, `mps`,
  `time-sliced`) and `fault_isolated` ("true": a neighbour's fault cannot reach it);
- `kubegpu_pod_guaranteed_memory_mib`: the memory the device guarantees (0 for a time slice);
- for MPS clients, `kubegpu_pod_mps_active_thread_percentage` and
  `kubegpu_pod_mps_pinned_memory_mib`: the limits the MPS daemon sets on the client.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubegpu.exporter.collector import escape_help, format_value, labels_text
from kubegpu.exporter.poddirectory import PodMeta
from kubegpu.sharing.isolation import Isolation, Method

FAMILIES = (
    (
        "kubegpu_pod_isolation",
        "The isolation a pod's container has on a GPU device (1): method and fault_isolated.",
    ),
    (
        "kubegpu_pod_guaranteed_memory_mib",
        "Memory the device guarantees the container (in MiB; 0: none, a time slice).",
    ),
    (
        "kubegpu_pod_mps_active_thread_percentage",
        "The MPS client's active thread percentage limit.",
    ),
    ("kubegpu_pod_mps_pinned_memory_mib", "The MPS client's pinned device memory limit (in MiB)."),
)


def _values(iso: Isolation) -> list[float | None]:
    mps = iso.method is Method.MPS
    return [
        1.0,
        float(iso.memory_mib),
        float(iso.thread_percentage) if mps and iso.thread_percentage is not None else None,
        float(iso.memory_mib) if mps else None,
    ]


def render(pods: Iterable[PodMeta], hostname: str | None) -> str:
    """The isolation families, for every annotated pod (nothing when none is)."""
    rows: list[tuple[str, list[float | None]]] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        for container, devices in sorted(pod.isolation.items()):
            for iso in devices:
                pairs = [("UUID", iso.uuid)]
                if hostname is not None:
                    pairs.append(("Hostname", hostname))
                pairs += [
                    ("container", container),
                    ("device", iso.device),
                    ("fault_isolated", str(iso.fault_isolated).lower()),
                    ("method", iso.method.value),
                    ("namespace", pod.namespace),
                    ("pod", pod.name),
                ]
                rows.append((labels_text(pairs), _values(iso)))
    out: list[str] = []
    for i, (name, help_text) in enumerate(FAMILIES):
        lines = [
            f"{name}{{{labels}}} {format_value(v)}\n"
            for labels, values in rows
            if (v := values[i]) is not None
        ]
        if lines:
            out.append(f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} gauge\n")
            out += lines
    return "".join(out)
