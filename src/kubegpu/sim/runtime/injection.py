"""Which GPUs and driver files a container gets, as the NVIDIA runtime hands them out.

Two paths only (docs/architecture.md, "The simulated runtime"):

- the `nvidia` handlers (its wrapper binary in the handler's table) with
  `NVIDIA_VISIBLE_DEVICES`: `void` anywhere in the list, empty or unset is not a GPU
  container; `none` gives the driver's files and no GPU; `all` every GPU; otherwise indices,
  GPU UUIDs, MIG UUIDs and `i:j`, each of which must name a device of the node;
- CDI devices (the CRI field or `cdi.k8s.io/` annotations) a spec on the node defines,
  resolved by `kubegpu.cdi.registry` as a CRI runtime resolves them: exactly the edits of
  the specs and devices named — the GPUs its device nodes are, its env and mounts, and
  the driver's binaries and libcuda only if it mounts them.

`inject` is pure: the pod's facts in, the decision out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubegpu.cdi.driver import mounted_binaries, mounts_libcuda
from kubegpu.cdi.registry import Registry
from kubegpu.cdi.spec import ContainerEdits

VISIBLE = "NVIDIA_VISIBLE_DEVICES"
CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
ALL_CAPABILITIES = ("compute", "compat32", "graphics", "utility", "video", "display", "ngx")
DEFAULT_CAPABILITIES = frozenset({"utility", "compute"})
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
DRIVER_BINARY = "nvidia-smi"


@dataclass(frozen=True)
class NodeGpu:
    """A GPU of the node, and the MIG devices on it (`i:j` name -> UUID)."""

    index: int
    uuid: str
    minor: int
    migs: Mapping[str, str] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.migs is None:
            object.__setattr__(self, "migs", {})


@dataclass(frozen=True)
class Injection:
    """What the runtime put into a container: device IDs (GPU or MIG UUIDs), whether the
    driver's libraries and binaries came with them, or the error that fails the create."""

    devices: tuple[str, ...] = ()
    driver: bool = False
    error: str | None = None
    # the driver's capabilities it got: `utility` brings nvidia-smi, `compute` libcuda
    capabilities: frozenset[str] = DEFAULT_CAPABILITIES
    # what CDI devices edited into the container (env, device nodes, mounts, hooks)
    edits: ContainerEdits = field(default_factory=ContainerEdits)

    def has_program(self, program: str) -> bool:
        """Whether a driver binary is in the container: nvidia-smi needs `utility`, a CUDA
        program `compute`."""
        need = "utility" if program == DRIVER_BINARY else "compute"
        return self.driver and need in self.capabilities


def parse_capabilities(value: str | None) -> frozenset[str] | str:
    """`NVIDIA_DRIVER_CAPABILITIES`: unset or empty is `utility,compute`; `all` is every
    one; an unknown value is the runtime's refusal (returned as its message)."""
    items = {i.strip() for i in (value or "").split(",") if i.strip()}
    if not items:
        return DEFAULT_CAPABILITIES
    if "all" in items:
        return frozenset(ALL_CAPABILITIES)
    unknown = items - set(ALL_CAPABILITIES)
    if unknown:
        return (
            f"unsupported capabilities found in '{value}' (allowed '{','.join(ALL_CAPABILITIES)}')"
        )
    return frozenset(items)


def parse_visible(value: str | None) -> tuple[str, list[str]]:
    """`NVIDIA_VISIBLE_DEVICES` by the toolkit's rules: ("void"|"none"|"all"|"list", ids)."""
    items = [i.strip() for i in (value or "").split(",") if i.strip()]
    if not items or "void" in items:
        return "void", []
    for item in items:
        if item in {"all", "none"}:
            return item, []
    return "list", items


def resolve_ids(ids: Sequence[str], gpus: Sequence[NodeGpu]) -> tuple[list[str], list[str]]:
    """Device UUIDs for `ids` (index, UUID, MIG UUID, `i:j`), and the ids that name nothing."""
    found: list[str] = []
    unknown: list[str] = []
    for item in ids:
        hit = None
        for g in gpus:
            if item in {str(g.index), g.uuid}:
                hit = g.uuid
            elif item in g.migs:
                hit = g.migs[item]
            elif item in g.migs.values():
                hit = item
            if hit:
                break
        if hit is None:
            unknown.append(item)
        elif hit not in found:
            found.append(hit)
    return found, unknown


def cdi_requests(cri_devices: Sequence[str], annotations: Mapping[str, str]) -> list[str]:
    """CDI names a container asks for: the CRI field first, then the annotations (keys
    sorted, values split on commas), without duplicates."""
    names = list(cri_devices)
    for key in sorted(annotations):
        if key.startswith(CDI_ANNOTATION_PREFIX):
            names += [v.strip() for v in annotations[key].split(",") if v.strip()]
    return list(dict.fromkeys(names))


_NODE = re.compile(r"^/dev/nvidia(\d+)$")


def resolve_cdi(names: Sequence[str], registry: Registry, gpus: Sequence[NodeGpu]) -> Injection:
    """The devices and driver files CDI names give, from the node's specs: the GPUs of the
    device nodes (and, for MIG devices, whose nodes the simulated node lacks, the UUIDs the
    device's own env names), the driver only as far as the edits mount it."""
    resolved = registry.resolve(names)
    error = resolved.error(registry.failure_notes())
    if error is not None:
        return Injection(error=error)
    devices: list[str] = []
    by_minor = {g.minor: g.uuid for g in gpus}
    for node in resolved.edits.device_nodes:
        m = _NODE.match(node.path)
        if m and int(m.group(1)) in by_minor and by_minor[int(m.group(1))] not in devices:
            devices.append(by_minor[int(m.group(1))])
    for found in resolved.devices:
        value = found.device.edits.env_map().get(VISIBLE, "")
        if value not in {"", "void"}:
            ids, _ = resolve_ids(value.split(","), gpus)
            devices += [i for i in ids if i not in devices]
    edits = resolved.edits
    caps = {"utility"} if DRIVER_BINARY in mounted_binaries(edits) else set()
    if mounts_libcuda(edits):
        caps.add("compute")
    return Injection(tuple(devices), bool(caps), capabilities=frozenset(caps), edits=edits)


def inject(
    *,
    nvidia_handler: bool,
    env: Mapping[str, str],
    cdi_names: Sequence[str],
    cdi_specs: Registry,
    gpus: Sequence[NodeGpu],
) -> Injection:
    """What a container gets: CDI devices (the CRI runtime applies them first; NVIDIA's
    specs then set NVIDIA_VISIBLE_DEVICES=void, so the nvidia handler adds nothing more),
    else the nvidia handler's reading of NVIDIA_VISIBLE_DEVICES, else nothing."""
    if cdi_names:
        return resolve_cdi(cdi_names, cdi_specs, gpus)
    if not nvidia_handler:
        return Injection()
    mode, ids = parse_visible(env.get(VISIBLE))
    if mode == "void":
        return Injection()
    caps = parse_capabilities(env.get(CAPABILITIES))
    if isinstance(caps, str):
        return Injection(error=caps)
    if mode == "none":
        return Injection((), True, capabilities=caps)
    if mode == "all":
        return Injection(tuple(g.uuid for g in gpus), True, capabilities=caps)
    found, unknown = resolve_ids(ids, gpus)
    if unknown:
        return Injection(
            error=(
                "could not apply required modification to OCI specification: error modifying "
                "OCI spec: failed to inject CDI devices: unresolvable CDI devices "
                + ", ".join(f"runtime.nvidia.com/gpu={u}" for u in unknown)
            )
        )
    return Injection(tuple(found), True, capabilities=caps)


def is_nvidia_binary(binary: str) -> bool:
    """Whether a handler's binary is the NVIDIA runtime wrapper (any of its modes)."""
    return binary.rsplit("/", 1)[-1].startswith("nvidia-container-runtime")
