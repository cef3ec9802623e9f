"""What the operator reads from the GPU nodes themselves to render: the container runtime
the toolkit must configure, and the OS suffix of the driver image.

Pure functions of Node objects (plain dicts). NVIDIA's operator detects the runtime
cluster-wide from `status.nodeInfo.containerRuntimeVersion` of the GPU nodes (its prefix:
`containerd://`, `cri-o://`, `docker://`), and when any one of them runs containerd every
node is treated as containerd; nothing recognised means containerd (node-runtime.md §1.8).
The OS suffix comes from NFD's (or kubegpu's node labeller's) os-release labels, else from
`status.nodeInfo.osImage` (gpu-operator.md §2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kubegpu.catalog import nvidia

Node = Mapping[str, Any]

CONTAINERD = "containerd"
CRIO = "crio"
DOCKER = "docker"
RUNTIMES = (CONTAINERD, CRIO, DOCKER)
# the prefix of containerRuntimeVersion -> the toolkit installer's RUNTIME value
_RUNTIME_PREFIXES = {"containerd": CONTAINERD, "cri-o": CRIO, "docker": DOCKER}
# os-release IDs whose driver images carry the major version only
_MAJOR_ONLY = {"ol", "rocky", "rhel"}
# osImage wording (`Ubuntu 22.04.4 LTS`) -> os-release ID
_OS_IMAGE_IDS = (
    ("ubuntu", "ubuntu"),
    ("red hat enterprise linux coreos", "rhcos"),
    ("red hat enterprise linux", "rhel"),
    ("rocky linux", "rocky"),
    ("oracle linux", "ol"),
    ("debian", "debian"),
    ("sles", "sles"),
    ("suse linux enterprise server", "sles"),
)


def node_runtime(node: Node) -> str | None:
    """The runtime one node reports (`containerd`, `crio`, `docker`), or None."""
    version = str(
        ((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion") or ""
    )
    prefix = version.split("://", 1)[0].strip().lower()
    return _RUNTIME_PREFIXES.get(prefix)


def cluster_runtime(gpu_nodes: Iterable[Node]) -> str:
    """The runtime the toolkit configures on every node, as NVIDIA's operator decides it:
    containerd if any GPU node runs it, else the first recognised one, else containerd."""
    found = [r for r in (node_runtime(n) for n in gpu_nodes) if r is not None]
    if not found or CONTAINERD in found:
        return CONTAINERD
    return found[0]


def _tag(os_id: str, version: str) -> str:
    if os_id in _MAJOR_ONLY:
        version = version.split(".", 1)[0]
    return f"{os_id}{version}"


def os_tag_from_labels(labels: Mapping[str, str]) -> str | None:
    """`ubuntu24.04` from the os-release labels (major version only for ol/rocky/rhel)."""
    os_id = labels.get(nvidia.NFD_OS_ID)
    version = labels.get(nvidia.NFD_OS_VERSION_ID)
    if not os_id or not version:
        return None
    return _tag(os_id.lower(), version)


def os_tag_from_image(os_image: str) -> str | None:
    """`ubuntu22.04` from an osImage such as `Ubuntu 22.04.4 LTS` (None if unknown)."""
    text = os_image.strip().lower()
    for words, os_id in _OS_IMAGE_IDS:
        if text.startswith(words):
            match = re.search(r"(\d+)(?:\.(\d+))?", text[len(words) :])
            if not match:
                return None
            major, minor = match.group(1), match.group(2)
            if os_id == "ubuntu" and minor is not None:
                return f"ubuntu{major}.{minor}"
            return _tag(os_id, major if minor is None else f"{major}.{minor}")
    return None


def os_tag(node: Node) -> str | None:
    """The driver image's OS suffix for this node: its labels first, then its osImage."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    from_labels = os_tag_from_labels(labels)
    if from_labels:
        return from_labels
    image = ((node.get("status") or {}).get("nodeInfo") or {}).get("osImage")
    return os_tag_from_image(str(image)) if image else None
