"""The node's GPUs and MIG devices as DRA devices and ResourceSlices (pure).

Names, attributes and capacities follow NVIDIA's DRA driver (reference/dcgm-dra.md
sections 2.3 to 2.5): a whole GPU is `gpu-<minor>`, an existing MIG device
`gpu-<parent minor>-mig-<profile without dots>-<GI profile id>-<placement start>`; a GPU with
MIG enabled is published only through its MIG devices. No `index` or `minor` attribute:
indexes are not stable, so nothing may select on them. A MIG device carries its parent's
GPU attributes (product, brand, architecture, versions, PCI addresses).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubegpu.catalog import nvidia

Json = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
DEVICE_NAME = re.compile(r"^gpu-(\d+)(?:-mig-(.+)-(\d+)-(\d+))?$")


@dataclass(frozen=True)
class MigEngines:
    copy: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg: int = 0
    ofa: int = 0


@dataclass(frozen=True)
class DraMig:
    """One existing MIG device, as far as DRA shows it."""

    uuid: str
    profile: str  # "1g.18gb", or "1c.2g.20gb" for a compute-instance profile
    gi_profile_id: int
    start: int  # the GPU instance's placement
    size: int  # memory slices the placement covers
    memory_mib: int
    multiprocessors: int
    engines: MigEngines = MigEngines()
    gpu_instance_id: int = 0  # for the MIG capability device nodes
    compute_instance_id: int = 0


@dataclass(frozen=True)
class GiProfile:
    """A GPU-instance profile and where it may be placed (for dynamic MIG)."""

    id: int
    name: str  # "1g.10gb", "1g.10gb+me"
    memory_mib: int
    multiprocessors: int
    engines: MigEngines
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices


@dataclass(frozen=True)
class DraGpu:
    """One GPU, as far as DRA shows it."""

    index: int  # NVML's index: used to find the GPU again, never published
    minor: int  # N of /dev/nvidiaN: the stable part of the device name
    uuid: str
    product_name: str
    architecture: str  # "Hopper"; empty when the model is unknown
    compute_capability: tuple[int, int]
    pci_bus_id: str
    memory_mib: int
    mig_enabled: bool = False
    migs: tuple[DraMig, ...] = ()
    gi_profiles: tuple[GiProfile, ...] = ()  # read only for dynamic MIG
    brand: str = ""  # NVML's brand as a name ("Nvidia", "GeForce"); from the name if empty


@dataclass(frozen=True)
class NodeGpus:
    """Everything the node's slice depends on."""

    driver_version: str  # "580.82.07"
    cuda_driver_version: tuple[int, int]  # (13, 0)
    gpus: tuple[DraGpu, ...]


@dataclass(frozen=True)
class DraDevice:
    """A published device and what prepare needs to know about it."""

    name: str
    kind: str  # "gpu" or "mig"
    uuid: str
    gpu_index: int
    gpu_minor: int
    gpu_uuid: str
    memory_mib: int = 0
    profile: str = ""
    gpu_instance_id: int = 0
    compute_instance_id: int = 0
    attributes: tuple[tuple[str, Json], ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()
    # dynamic MIG: a placement that is created at prepare, and the counters it consumes
    dynamic: bool = False
    gi_profile_id: int = 0
    start: int = 0
    counter_set: str = ""
    counters: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> Json:
        """The v1 `Device` of a ResourceSlice."""
        out: Json = {
            "name": self.name,
            "attributes": dict(self.attributes),
            "capacity": {k: {"value": v} for k, v in self.capacity},
        }
        if self.counter_set:
            out["consumesCounters"] = [
                {
                    "counterSet": self.counter_set,
                    "counters": {k: {"value": v} for k, v in self.counters},
                }
            ]
        return out


# --- names --------------------------------------------------------------------------------


def gpu_device_name(minor: int) -> str:
    return f"gpu-{minor}"


def mig_device_name(parent_minor: int, profile: str, gi_profile_id: int, start: int) -> str:
    """`(0, "1g.18gb", 19, 0)` -> `gpu-0-mig-1g18gb-19-0` (a DNS label: only [a-z0-9-])."""
    compact = re.sub(r"[^a-z0-9]", "", profile.lower())
    return f"gpu-{parent_minor}-mig-{compact}-{gi_profile_id}-{start}"


# --- values -------------------------------------------------------------------------------


def semver(version: str) -> str:
    """`580.82.07` -> `580.82.7`, `9.0` -> `9.0.0`: a DRA version attribute is semver, which
    allows neither leading zeros nor fewer than three parts."""
    parts = [p for p in version.strip().split(".") if p != ""]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a numeric version: {version!r}")
    numbers = [str(int(p)) for p in parts[:3]]
    return ".".join(numbers + ["0"] * (3 - len(numbers)))


def _string(value: str) -> Json:
    return {"string": value}


def _version(value: str) -> Json:
    return {"version": semver(value)}


def mib(value: int) -> str:
    return f"{value}Mi"


#: NVML brand names (go-nvlib's spelling) by the word a product name starts with after
#: "NVIDIA"; anything else is brand NVIDIA ("Nvidia"), as for every current datacenter GPU.
_BRAND_BY_WORD = (
    ("GeForce RTX", "GeForceRTX"),
    ("GeForce", "GeForce"),
    ("TITAN RTX", "TitanRTX"),
    ("TITAN", "Titan"),
    ("Quadro RTX", "QuadroRTX"),
    ("Quadro", "Quadro"),
    ("Tesla", "Tesla"),
    ("RTX", "NvidiaRTX"),
)


def brand_of(product_name: str) -> str:
    """The NVML brand of a product name, for a backend that reports none:
    `NVIDIA GeForce RTX 4090` -> `GeForceRTX`, `NVIDIA RTX 6000 Ada Generation` ->
    `NvidiaRTX`, `NVIDIA H200 NVL` -> `Nvidia`."""
    name = product_name.strip()
    name = name[len("NVIDIA") :].strip() if name.upper().startswith("NVIDIA") else name
    for word, brand in _BRAND_BY_WORD:
        if name.upper().startswith(word.upper()):
            return brand
    return "Nvidia"


def pci_bus_id(nvml_bus_id: str) -> str:
    """NVML's `00000000:18:00.0` as upstream publishes it: `0000:18:00.0`, lower case
    (the sysfs form, which the standard `pciBusID` attribute uses)."""
    value = nvml_bus_id.strip().lower()
    domain, sep, rest = value.partition(":")
    if sep and len(domain) == 8 and domain.startswith("0000"):
        return f"{domain[4:]}:{rest}"
    return value


def common_attributes(node: NodeGpus, gpu: DraGpu) -> list[tuple[str, Json]]:
    """The GPU's attributes that its MIG devices carry too."""
    out = [
        ("productName", _string(gpu.product_name)),
        ("brand", _string(gpu.brand or brand_of(gpu.product_name))),
        ("cudaComputeCapability", _version("{}.{}".format(*gpu.compute_capability))),
        ("driverVersion", _version(node.driver_version)),
        ("cudaDriverVersion", _version("{}.{}".format(*node.cuda_driver_version))),
        (PCI_BUS_ID, _string(pci_bus_id(gpu.pci_bus_id))),
    ]
    if gpu.architecture:
        out.insert(2, ("architecture", _string(gpu.architecture)))
    # upstream's conditional `addressingMode` (coherent-memory systems) and `pcieRoot`
    # (from sysfs) are not published: kubegpu's NVML facade reads neither (docs/dra.md)
    return out


def gpu_device(node: NodeGpus, gpu: DraGpu) -> DraDevice:
    return DraDevice(
        name=gpu_device_name(gpu.minor),
        kind="gpu",
        uuid=gpu.uuid,
        gpu_index=gpu.index,
        gpu_minor=gpu.minor,
        gpu_uuid=gpu.uuid,
        memory_mib=gpu.memory_mib,
        attributes=(
            ("type", _string("gpu")),
            ("uuid", _string(gpu.uuid)),
            *common_attributes(node, gpu),
        ),
        capacity=(("memory", mib(gpu.memory_mib)),),
    )


def mig_device(node: NodeGpus, gpu: DraGpu, mig: DraMig) -> DraDevice:
    e = mig.engines
    return DraDevice(
        name=mig_device_name(gpu.minor, mig.profile, mig.gi_profile_id, mig.start),
        kind="mig",
        uuid=mig.uuid,
        gpu_index=gpu.index,
        gpu_minor=gpu.minor,
        gpu_uuid=gpu.uuid,
        memory_mib=mig.memory_mib,
        profile=mig.profile,
        gpu_instance_id=mig.gpu_instance_id,
        compute_instance_id=mig.compute_instance_id,
        attributes=(
            ("type", _string("mig")),
            ("uuid", _string(mig.uuid)),
            ("parentUUID", _string(gpu.uuid)),
            ("profile", _string(mig.profile)),
            *common_attributes(node, gpu),
        ),
        capacity=(
            ("multiprocessors", str(mig.multiprocessors)),
            ("copyEngines", str(e.copy)),
            ("decoders", str(e.decoders)),
            ("encoders", str(e.encoders)),
            ("jpegEngines", str(e.jpeg)),
            ("ofaEngines", str(e.ofa)),
            ("memory", mib(mig.memory_mib)),
            *((f"memorySlice{i}", "1") for i in range(mig.start, mig.start + mig.size)),
        ),
    )


def devices(node: NodeGpus) -> list[DraDevice]:
    """Every device the node publishes, GPUs by minor number, each GPU's MIG devices by
    placement. Two MIG devices that would get one name (two compute instances in one GPU
    instance) publish only the first: the name scheme has no place for the second."""
    out: list[DraDevice] = []
    seen: set[str] = set()
    for gpu in sorted(node.gpus, key=lambda g: g.minor):
        if not gpu.mig_enabled:
            out.append(gpu_device(node, gpu))
            continue
        for mig in sorted(gpu.migs, key=lambda m: (m.start, m.gi_profile_id, m.uuid)):
            dev = mig_device(node, gpu, mig)
            if dev.name not in seen:
                seen.add(dev.name)
                out.append(dev)
    return out


def resource_slices(
    node_name: str,
    devs: Sequence[DraDevice],
    generation: int,
    owner: Json | None = None,
    driver: str = nvidia.DRA_DRIVER,
) -> list[Json]:
    """The pool `node_name` at `generation`: one slice, or more when there are over 128
    devices (each says how many the pool has, so a reader can tell it is complete)."""
    chunks = [
        list(devs[i : i + MAX_DEVICES_PER_SLICE])
        for i in range(0, len(devs), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    specs: list[Json] = [{"devices": [d.to_json() for d in chunk]} for chunk in chunks]
    return pool_slices(node_name, specs, generation, owner, driver)


def pool_slices(
    node_name: str,
    specs: Sequence[Json],
    generation: int,
    owner: Json | None = None,
    driver: str = nvidia.DRA_DRIVER,
) -> list[Json]:
    """One ResourceSlice per spec part (devices or shared counters) of the pool `node_name`
    at `generation`, each saying how many slices the pool has."""
    out = []
    for spec in specs:
        metadata: Json = {"generateName": f"{node_name}-{driver}-"}
        if owner is not None:
            metadata["ownerReferences"] = [owner]
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node_name,
                    "pool": {
                        "name": node_name,
                        "generation": generation,
                        "resourceSliceCount": len(specs),
                    },
                    **spec,
                },
            }
        )
    return out


def node_owner(name: str, uid: str) -> Json:
    """The ownerReference that makes a slice go away with its Node."""
    return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid, "controller": True}


def slice_devices(slices: Sequence[Json]) -> list[Json]:
    """The devices of a pool's slices, in order (to compare a published pool with ours)."""
    return [d for s in slices for d in (s.get("spec") or {}).get("devices") or []]
