"""What a kubelet refuses about a container before it starts it (pure).

The API server takes an image reference it cannot parse (`kubegpu:0.1.0 rc1`) and a
container whose `runAsUser: 0` contradicts `runAsNonRoot: true`; a kubelet then leaves the
container waiting, with reason `InvalidImageName` or `CreateContainerConfigError`, and the
pod never becomes ready. The simulated kubelet must refuse the same, or what-if would
approve a change a cluster never runs. docs/limits.md lists every check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

INVALID_IMAGE_NAME = "InvalidImageName"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
NAME_TOTAL_LENGTH_MAX = 255

# The docker reference grammar (github.com/distribution/reference), which the kubelet
# parses an image with before it pulls it: [domain/]path[:tag][@digest].
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
_HEX64 = re.compile(r"^[a-f0-9]{64}$")


@dataclass(frozen=True)
class Refusal:
    """Why the kubelet leaves a container waiting: its status reason and message."""

    reason: str
    message: str


def reference_problem(image: str) -> str | None:
    """Why `image` is not an image reference, as the docker reference parser words it."""
    if _HEX64.match(image):
        return f"invalid repository name ({image}), cannot specify 64-byte hexadecimal strings"
    m = _REFERENCE.match(image)
    if m is None:
        lowered = _lower_path(image)
        if lowered != image and _REFERENCE.match(lowered):
            return "invalid reference format: repository name must be lowercase"
        return "invalid reference format"
    if len(m.group("name")) > NAME_TOTAL_LENGTH_MAX:
        return f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters"
    digest = m.group("digest")
    if digest is not None:
        algorithm, _, hex_part = digest.partition(":")
        want = _DIGEST_HEX.get(algorithm)
        if want is None:
            return "unsupported digest algorithm"
        if len(hex_part) != want or not re.fullmatch(r"[a-f0-9]+", hex_part):
            return "invalid checksum digest format"
    return None


def _lower_path(image: str) -> str:
    """`image` with its repository path lowercased (the domain may keep capitals)."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return f"{first}/{rest.lower()}"
    return image.lower()


def image_refusal(image: str) -> Refusal | None:
    """The kubelet's `InvalidImageName` for an image it cannot parse, before any pull."""
    if (why := reference_problem(image)) is None:
        return None
    return Refusal(
        INVALID_IMAGE_NAME,
        f"Failed to apply default image tag {image!r}: couldn't parse image name {image!r}: {why}",
    )


def non_root_refusal(pod: Json, container: Json) -> Refusal | None:
    """`runAsNonRoot: true` with `runAsUser: 0` (the container's settings over the pod's):
    the kubelet refuses to create the container. An image's own user is not simulated, so
    a container that names no user is let run."""
    pod_ctx = _mapping(_mapping(pod.get("spec")).get("securityContext"))
    ctx = _mapping(container.get("securityContext"))
    non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
    user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
    if non_root is not True or user != 0:
        return None
    meta = _mapping(pod.get("metadata"))
    who = f"{meta.get('name', '')}_{meta.get('namespace', 'default')}({meta.get('uid', '')})"
    return Refusal(
        CREATE_CONTAINER_CONFIG_ERROR,
        f"container's runAsUser breaks non-root policy (pod: {who!r}, container: "
        f"{container.get('name', '')})",
    )


def _mapping(value: Any) -> Json:
    """The API server hands the kubelet objects of its schema; anything else reads as empty."""
    return value if isinstance(value, dict) else {}


def container_refusal(pod: Json, container: Json) -> Refusal | None:
    """The first reason the kubelet would not start `container` of `pod`, in the order it
    meets them: the image before the container's config."""
    return image_refusal(str(container.get("image", ""))) or non_root_refusal(pod, container)
