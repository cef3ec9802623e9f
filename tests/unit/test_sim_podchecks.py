"""The simulated kubelet refuses a container a kubelet refuses: an image reference the
docker grammar does not take (InvalidImageName), runAsNonRoot with runAsUser 0."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.sim.kubelet.podchecks import (
    CREATE_CONTAINER_CONFIG_ERROR,
    INVALID_IMAGE_NAME,
    container_refusal,
    image_refusal,
    reference_problem,
)


@pytest.mark.parametrize(
    "image",
    [
        "kubegpu",
        "ghcr.io/kubegpu/kubegpu:0.1.0",
        "ghcr.io/kubegpu/kubegpu:0.1.0-rc1",
        "nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04",
        "localhost:5000/kubegpu:dev",
        "Registry.Example.com/team/app",  # a domain may have capitals
        "[::1]:5000/app:v1",
        "docker.io/library/busybox@sha256:" + "a" * 64,
        "busybox:1.36@sha256:" + "0123456789abcdef" * 4,
        "a__b/c-d---e/f.g",
    ],
)
def test_references_a_kubelet_pulls(image: str) -> None:
    assert reference_problem(image) is None
    assert image_refusal(image) is None


@pytest.mark.parametrize(
    ("image", "why"),
    [
        # issue 29: this ran in the simulator and the policy reported ready
        ("ghcr.io/kubegpu/kubegpu:0.1.0 rc1", "invalid reference format"),
        ("", "invalid reference format"),
        (" kubegpu", "invalid reference format"),
        (
            "ghcr.io/KubeGPU/kubegpu:1",
            "invalid reference format: repository name must be lowercase",
        ),
        ("kubegpu:", "invalid reference format"),
        ("kubegpu:-1", "invalid reference format"),  # a tag starts with a word character
        ("kubegpu:" + "t" * 129, "invalid reference format"),
        ("ghcr.io//kubegpu", "invalid reference format"),
        ("kubegpu/", "invalid reference format"),
        ("kube--gpu_", "invalid reference format"),
        (
            "a" * 64,
            f"invalid repository name ({'a' * 64}), cannot specify 64-byte hexadecimal strings",
        ),
        ("busybox@sha256:abc", "invalid reference format"),
        ("busybox@sha256:" + "a" * 63 + "ab", "invalid checksum digest format"),
        ("busybox@md5:" + "a" * 32, "unsupported digest algorithm"),
        ("x/" * 127 + "abc", "repository name must not be more than 255 characters"),
    ],
)
def test_references_a_kubelet_refuses(image: str, why: str) -> None:
    assert reference_problem(image) == why
    refusal = image_refusal(image)
    assert refusal is not None
    assert refusal.reason == INVALID_IMAGE_NAME
    assert refusal.message == (
        f"Failed to apply default image tag {image!r}: couldn't parse image name {image!r}: {why}"
    )


def pod(pod_ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"securityContext": pod_ctx} if pod_ctx is not None else {}
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec}


@pytest.mark.parametrize(
    ("pod_ctx", "ctx", "refused"),
    [
        ({"runAsNonRoot": True, "runAsUser": 0}, None, True),
        ({"runAsNonRoot": True}, {"runAsUser": 0}, True),
        (None, {"runAsNonRoot": True, "runAsUser": 0}, True),
        ({"runAsNonRoot": True, "runAsUser": 0}, {"runAsUser": 1000}, False),  # container wins
        ({"runAsNonRoot": True, "runAsUser": 0}, {"runAsNonRoot": False}, False),
        ({"runAsNonRoot": True}, None, False),  # the image's user is not simulated
        ({"runAsUser": 0}, None, False),
    ],
)
def test_run_as_non_root_with_user_0_is_a_config_error(
    pod_ctx: dict[str, Any] | None, ctx: dict[str, Any] | None, refused: bool
) -> None:
    container: dict[str, Any] = {"name": "c", "image": "kubegpu"}
    if ctx is not None:
        container["securityContext"] = ctx
    refusal = container_refusal(pod(pod_ctx), container)
    if not refused:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.reason == CREATE_CONTAINER_CONFIG_ERROR
    assert refusal.message == (
        "container's runAsUser breaks non-root policy (pod: 'p_ns(u1)', container: c)"
    )


def test_the_image_is_judged_before_the_config() -> None:
    container = {
        "name": "c",
        "image": "bad image",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 0},
    }
    refusal = container_refusal(pod(), container)
    assert refusal is not None
    assert refusal.reason == INVALID_IMAGE_NAME
