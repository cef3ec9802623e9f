"""The DeviceClasses of DRA driver `gpu.nvidia.com` (pure data), as upstream's chart installs
them (reference/dcgm-dra.md section 2.2): `gpu.nvidia.com` selects whole GPUs,
`mig.nvidia.com` MIG devices, each by the driver and the device's `type` attribute.

Below both the DRA plugin's deployment (`kubegpu.dra.classes`, the operator) and the planner
(`kubegpu plan --api dra`), so the classes a plan names are the classes the cluster gets.
`deploy/dra/deviceclasses.yaml` is `device_classes()`; a unit test keeps the two equal.
"""

from __future__ import annotations

from typing import Any

from kubegpu.catalog import nvidia

Json = dict[str, Any]

API_VERSION = "resource.k8s.io/v1"
#: The `type` attribute each class selects on.
CLASS_DEVICE_TYPE = {nvidia.DRA_DRIVER: "gpu", nvidia.DRA_MIG_CLASS: "mig"}


# --- what NVIDIA's driver publishes per device type -----------------------------------------

#: The attributes and capacities NVIDIA's DRA driver publishes (reference/dcgm-dra.md
#: sections 2.4 and 2.5), per device type: `always`, or `optional` (published only when the
#: node knows it: `addressingMode` on coherent-memory systems, `pcieRoot` when sysfs shows
#: the root). Names without a domain are in the driver's domain. Written from the reference,
#: not from kubegpu's slices: tests compare what the plugin publishes against it.
PUBLISHED_ATTRIBUTES: dict[str, dict[str, str]] = {
    "gpu": {
        "type": "always",
        "uuid": "always",
        "productName": "always",
        "brand": "always",
        "architecture": "always",
        "cudaComputeCapability": "always",
        "driverVersion": "always",
        "cudaDriverVersion": "always",
        "addressingMode": "optional",
        "resource.kubernetes.io/pciBusID": "always",
        "resource.kubernetes.io/pcieRoot": "optional",
    },
    "mig": {
        "type": "always",
        "uuid": "always",
        "parentUUID": "always",
        "profile": "always",
        "productName": "always",
        "brand": "always",
        "architecture": "always",
        "cudaComputeCapability": "always",
        "driverVersion": "always",
        "cudaDriverVersion": "always",
        "addressingMode": "optional",
        "resource.kubernetes.io/pciBusID": "always",
        "resource.kubernetes.io/pcieRoot": "optional",
    },
}
#: Capacities per device type; `memorySlice<i>` stands for one per memory slice of the
#: MIG device's placement.
PUBLISHED_CAPACITIES: dict[str, tuple[str, ...]] = {
    "gpu": ("memory",),
    "mig": (
        "multiprocessors",
        "copyEngines",
        "decoders",
        "encoders",
        "jpegEngines",
        "ofaEngines",
        "memory",
        "memorySlice<i>",
    ),
}
#: Attributes NVIDIA's driver removed; selecting on them matches nothing (section 2.4).
REMOVED_ATTRIBUTES = ("index", "minor", "parentIndex", "pcieBusID")


def selector(device_type: str, driver: str = nvidia.DRA_DRIVER) -> str:
    """The CEL expression matching the driver's devices of one type."""
    return f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{device_type}'"


def device_classes(extended_resource: bool = False) -> list[Json]:
    """`extended_resource`: let a pod's `nvidia.com/gpu` limit be served from the GPU class
    (`DRAExtendedResource`, Kubernetes 1.35+; only where no device plugin serves the node)."""
    gpu: Json = {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": nvidia.DRA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": selector("gpu")}}]},
    }
    if extended_resource:
        gpu["spec"]["extendedResourceName"] = nvidia.GPU_RESOURCE
    mig: Json = {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": nvidia.DRA_MIG_CLASS},
        "spec": {"selectors": [{"cel": {"expression": selector("mig")}}]},
    }
    return [gpu, mig]
