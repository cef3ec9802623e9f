"""Reading the node's GPUs and rendering DCGM exporter's series.

A `Snapshot` is one read of every GPU through NVML. Series are rendered by hand rather
than through prometheus-client's registry, because DCGM exporter's output has two traits
prometheus-client would change: labels in a fixed order (gpu, UUID, pci_bus_id, device,
modelName, GPU_I_PROFILE, GPU_I_ID, Hostname, then label fields and pod labels sorted by
name, then err_code/err_msg), and counters named without a `_total` suffix.

Entities follow DCGM exporter's "flex" mode: a GPU with MIG GPU instances is represented
by one series per GPU instance (gpu/UUID name the parent), and by no whole-GPU series.
A GPU that cannot be read is left out (its fields are omitted, never invented) and shown as
`kubegpu_exporter_gpu_up 0` with NVML's error; the other GPUs are still served.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

from kubegpu.exporter import fields
from kubegpu.exporter.counters import CounterSet
from kubegpu.exporter.pods import DeviceIndex, EntityKey, PodInfo
from kubegpu.exporter.processes import EntityUsage, GpuProcesses, Usage
from kubegpu.exporter.xid import XidTracker, xid_name
from kubegpu.nvml import Nvml, NvmlError
from kubegpu.nvml.types import (
    DeviceInfo,
    DeviceSample,
    GpuInstanceSample,
    ProcessUtilization,
    SystemInfo,
)

log = logging.getLogger(__name__)

HOSTNAME_LABEL = "Hostname"  # DCGM exporter's name up to 4.5.3-4.8.2 (later: "hostname")


@dataclass(frozen=True)
class GpuReading:
    index: int
    info: DeviceInfo | None  # last known identity (kept when the GPU stops answering)
    sample: DeviceSample | None
    error: str | None = None  # why the GPU could not be read
    error_code: int = 0
    processes: GpuProcesses | None = None  # read only for per-process attribution


@dataclass(frozen=True)
class Snapshot:
    taken_at: float  # time.monotonic()
    system: SystemInfo | None
    gpus: tuple[GpuReading, ...]
    error: str | None = None  # NVML itself could not be asked


@dataclass(frozen=True)
class Entity:
    """One monitored thing: a whole GPU, or one MIG GPU instance."""

    key: EntityKey
    info: DeviceInfo
    sample: DeviceSample
    instance: GpuInstanceSample | None
    base_labels: str = field(repr=False)


ATTRIBUTION = "attribution"  # on a pod's series: whose value it carries
BY_PROCESS = "process"  # the pod's own processes' value
BY_GPU = "gpu"  # the whole GPU's (or GPU instance's) value, the same on every pod


@dataclass(frozen=True)
class Variant:
    """One label set of an entity's series: plain, or naming a pod."""

    pod: PodInfo | None
    labels: str  # with attribution="gpu" on a pod's series when attributing
    by_process: str = ""  # with attribution="process"


# Fields a pod's own processes can be measured by (NVML's running processes and samples)
PROCESS_FIELDS: dict[str, Callable[[Usage], float | None]] = {
    "DCGM_FI_DEV_FB_USED": lambda u: float(u.memory_mib),
    "DCGM_FI_DEV_GPU_UTIL": lambda u: None if u.sm_percent is None else float(u.sm_percent),
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda u: (
        None if u.memory_percent is None else float(u.memory_percent)
    ),
    "DCGM_FI_DEV_ENC_UTIL": lambda u: (
        None if u.encoder_percent is None else float(u.encoder_percent)
    ),
    "DCGM_FI_DEV_DEC_UTIL": lambda u: (
        None if u.decoder_percent is None else float(u.decoder_percent)
    ),
}


def escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def format_value(value: float) -> str:
    value = float(value)
    if value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def labels_text(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{escape_label(v)}"' for k, v in pairs)


class Collector:
    def __init__(
        self,
        nvml: Nvml,
        counters: CounterSet,
        *,
        hostname: str | None = None,
        no_hostname: bool = False,
        replace_blanks_in_model_name: bool = False,
        xids: XidTracker | None = None,
        read_processes: bool = False,
    ) -> None:
        """`read_processes`: also read each GPU's processes and their utilisation samples
        (per-pod attribution)."""
        self.nvml = nvml
        self.read_processes = read_processes
        self.counters = counters
        self.hostname = None if no_hostname else (hostname or socket.gethostname())
        self.replace_blanks = replace_blanks_in_model_name
        self.xids = xids
        self._identity: dict[int, DeviceInfo] = {}
        self._reported: dict[int, str | None] = {}
        self._count_error: str | None = None  # why the GPUs could not be counted, said once

    # -- reading ------------------------------------------------------------------------------
    def read(self) -> Snapshot:
        """Read every GPU once; a GPU that fails is recorded as failed, never raised."""
        try:
            system: SystemInfo | None = self.nvml.system()
        except Exception as exc:  # only the label fields need it
            log.debug("system info: %s", exc)
            system = None
        try:
            count = self.nvml.device_count()
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            if message != self._count_error:
                log.warning("cannot count GPUs: %s", message)
            self._count_error = message
            return Snapshot(time.monotonic(), system, (), error=message)
        if self._count_error is not None:
            log.info("GPUs can be counted again")
            self._count_error = None
        return Snapshot(time.monotonic(), system, tuple(self._read_gpu(i) for i in range(count)))

    def _read_gpu(self, index: int) -> GpuReading:
        info = self._identity.get(index)
        try:
            if info is None:
                info = self._identity[index] = self.nvml.device(index)
            sample = self.nvml.sample(index)
        except Exception as exc:  # one GPU must never take the endpoint down
            code = exc.code if isinstance(exc, NvmlError) else 999
            message = str(exc) or type(exc).__name__
            if self._reported.get(index) != message:
                log.warning("GPU %d: cannot read it, its series are omitted: %s", index, message)
                if not isinstance(exc, NvmlError):
                    log.debug("GPU %d", index, exc_info=exc)
            self._reported[index] = message
            return GpuReading(index, info, None, message, code)
        if self._reported.get(index) is not None:
            log.info("GPU %d: readable again", index)
        self._reported[index] = None
        processes = self._processes(index) if self.read_processes else None
        return GpuReading(index, info, sample, processes=processes)

    def _processes(self, index: int) -> GpuProcesses | None:
        """The GPU's processes and samples; None (no attribution) when they cannot be read."""
        try:
            procs = tuple(self.nvml.processes(index))
        except Exception as exc:
            log.debug("GPU %d: no process list: %s", index, exc)
            return None
        try:
            samples: tuple[ProcessUtilization, ...] | None = tuple(
                self.nvml.process_utilization(index)
            )
        except Exception as exc:  # MIG mode, or a GPU without samples
            log.debug("GPU %d: no per-process utilisation: %s", index, exc)
            samples = None
        return GpuProcesses(index, procs, samples)

    # -- entities -----------------------------------------------------------------------------
    def _base(self, info: DeviceInfo, instance: GpuInstanceSample | None) -> str:
        model = info.name.replace(" ", "-") if self.replace_blanks else info.name
        pairs = [
            ("gpu", str(info.index)),
            ("UUID", info.uuid),
            ("pci_bus_id", info.pci_bus_id),
            ("device", f"nvidia{info.index}"),
            ("modelName", model),
        ]
        if instance is not None:
            pairs += [
                ("GPU_I_PROFILE", instance.profile),
                ("GPU_I_ID", str(instance.gpu_instance_id)),
            ]
        if self.hostname is not None:
            pairs.append((HOSTNAME_LABEL, self.hostname))
        return labels_text(pairs)

    def entities(self, snap: Snapshot) -> list[Entity]:
        out: list[Entity] = []
        for r in snap.gpus:
            if r.sample is None or r.info is None:
                continue
            if r.sample.gpu_instances:
                out += [
                    Entity(
                        ("gi", r.index, gi.gpu_instance_id),
                        r.info,
                        r.sample,
                        gi,
                        self._base(r.info, gi),
                    )
                    for gi in r.sample.gpu_instances
                ]
            else:
                out.append(
                    Entity(("gpu", r.index), r.info, r.sample, None, self._base(r.info, None))
                )
        return out

    @staticmethod
    def device_index(snap: Snapshot, entities: list[Entity]) -> DeviceIndex:
        return DeviceIndex(
            gpu_by_uuid={r.info.uuid: r.index for r in snap.gpus if r.info is not None},
            gi_by_mig_uuid={
                uuid: (e.info.index, e.instance.gpu_instance_id)
                for e in entities
                if e.instance is not None
                for uuid in e.instance.mig_device_uuids
            },
            entities=frozenset(e.key for e in entities),
        )

    # -- rendering ----------------------------------------------------------------------------
    def _variants(
        self,
        entity: Entity,
        system: SystemInfo | None,
        pods: list[PodInfo],
        keep_plain: bool,
        attributed: bool = False,
    ) -> list[Variant]:
        """Label sets of one entity: one per attributed pod (plus the plain one). With
        `attributed`, a pod's carry `attribution` ("gpu", or "process" for its own value)."""
        extra: dict[str, str] = {}
        for counter in self.counters.labels:
            value = fields.LABELS[counter.field].read(system, entity.info)
            if value is not None:
                extra[counter.field] = value

        def text(more: dict[str, str]) -> str:
            merged = {**extra, **more}
            rest = labels_text(sorted(merged.items()))
            return f"{entity.base_labels},{rest}" if rest else entity.base_labels

        variants = [Variant(None, text({}))] if keep_plain or not pods else []
        for pod in pods:
            more = {"pod": pod.pod, "namespace": pod.namespace, "container": pod.container}
            if pod.vgpu is not None:
                more["vgpu"] = pod.vgpu
            more.update(pod.labels)
            if attributed:
                variants.append(
                    Variant(
                        pod,
                        text({**more, ATTRIBUTION: BY_GPU}),
                        text({**more, ATTRIBUTION: BY_PROCESS}),
                    )
                )
            else:
                variants.append(Variant(pod, text(more)))
        return variants

    def render(
        self,
        snap: Snapshot,
        pods: dict[EntityKey, list[PodInfo]] | None = None,
        *,
        virtual_gpus: bool = False,
        usage: dict[EntityKey, EntityUsage] | None = None,
    ) -> str:
        """The DCGM series. `usage` (per-pod attribution): a pod's series of a field its
        processes can be measured by carry its own value, `attribution="process"`; every
        other pod series carries the entity's value, `attribution="gpu"`."""
        entities = self.entities(snap)
        pods = pods or {}
        variants = [
            self._variants(
                e,
                snap.system,
                pods.get(e.key, []),
                keep_plain=virtual_gpus,
                attributed=usage is not None,
            )
            for e in entities
        ]
        out: list[str] = []
        for counter in self.counters.metrics:
            metric = fields.METRICS[counter.field]
            name = counter.field
            lines: list[str] = []
            for entity, labels in zip(entities, variants, strict=True):
                if entity.instance is not None and metric.on_instance is fields.OnInstance.NONE:
                    continue
                attrs = ""
                if name == fields.XID_ERRORS:
                    xid = self.xids.last(entity.info.index) if self.xids else 0
                    value: float | None = float(xid)
                    attrs = f',err_code="{xid}",err_msg="{escape_label(xid_name(xid))}"'
                else:
                    own = entity.instance if metric.on_instance is fields.OnInstance.OWN else None
                    value = metric.read(entity.sample, own)
                if value is None:
                    continue
                text = format_value(value)
                measure = PROCESS_FIELDS.get(name)
                measured = usage.get(entity.key) if usage is not None else None
                for v in labels:
                    mine = None
                    if measure is not None and measured is not None and v.pod is not None:
                        mine = measure(measured.of((v.pod.namespace, v.pod.pod)))
                    if mine is not None:
                        lines.append(f"{name}{{{v.by_process}{attrs}}} {format_value(mine)}\n")
                    else:
                        lines.append(f"{name}{{{v.labels}{attrs}}} {text}\n")
            if lines:
                kind = counter.type if counter.type in ("gauge", "counter") else "untyped"
                out.append(f"# HELP {name} {escape_help(counter.help)}\n# TYPE {name} {kind}\n")
                out += lines
        return "".join(out)
