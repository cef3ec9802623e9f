"""What each supported Kubernetes version means for kubegpu (pure data).

kubegpu's simulated cluster runs the real control plane of one of these versions
(`scripts/build-kubernetes`, `KUBEGPU_K8S_VERSION`); 1.35 is the oldest supported. Per
version: the feature gates the simulated control plane turns on, the `resource.k8s.io`
version kubegpu speaks, and the ResourceSlice layout a partitionable (dynamic MIG) pool
must use. Facts from the feature tables and API validation of k8s.io/kubernetes v1.35.8 and
v1.37.2 (`pkg/features/kube_features.go`, `pkg/apis/resource/validation`); docs/dra.md has
the table for users.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Separate counters-only slices and devices slices: required since 1.35, which made
#: `sharedCounters` and `devices` mutually exclusive in one slice.
SPLIT_SLICES = "split"


@dataclass(frozen=True)
class KubernetesVersion:
    minor: int  # 1.<minor>
    #: gates the simulated control plane sets on every component (what kubegpu uses that
    #: is not on by default in this version)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    resource_api: str = "resource.k8s.io/v1"
    slice_layout: str = SPLIT_SLICES
    #: `DeviceClass.extendedResourceName` (KEP-5004) works with the gates above
    extended_resource: bool = True
    #: the scheduler honours `firstAvailable` (KEP-4816)
    prioritized_list: bool = True

    @property
    def name(self) -> str:
        return f"1.{self.minor}"


#: Newest first. 1.35: partitionable devices and extended resources are alpha (off by
#: default; kubegpu turns on the first, dynamic MIG needs it, and leaves extended resources
#: to 1.36+); 1.36 made both beta (on); 1.37 made DRAExtendedResource GA (locked on, so it
#: must not be set to false) while DRAPartitionableDevices stays beta (on).
SUPPORTED: tuple[KubernetesVersion, ...] = (
    KubernetesVersion(37),
    KubernetesVersion(35, {"DRAPartitionableDevices": True}, extended_resource=False),
)
OLDEST: KubernetesVersion = SUPPORTED[-1]
NEWEST: KubernetesVersion = SUPPORTED[0]

_VERSION = re.compile(r"\bv?1\.(\d+)\.\d+")


class UnsupportedVersion(ValueError):
    pass


def parse_minor(text: str) -> int:
    """`Kubernetes v1.37.2` (a binary's `--version`) or `v1.35.8` -> 37 / 35."""
    m = _VERSION.search(text)
    if m is None:
        raise UnsupportedVersion(f"not a Kubernetes version: {text.strip()!r}")
    return int(m.group(1))


def version(minor: int) -> KubernetesVersion:
    """The supported version 1.<minor>; a version between two supported ones gets the
    older one's settings only if it is one of them (nothing is guessed)."""
    for v in SUPPORTED:
        if v.minor == minor:
            return v
    names = ", ".join(v.name for v in SUPPORTED)
    raise UnsupportedVersion(f"Kubernetes 1.{minor} is not supported (supported: {names})")
