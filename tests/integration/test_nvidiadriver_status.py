"""NVIDIA's sample NVIDIADriver applies against our CRD (strict validation) and the
operator's reporter marks it not supported in its status."""

from __future__ import annotations

import asyncio
import json

from lightkube import AsyncClient

from kubegpu.kube.crds import crd_manifests
from kubegpu.operator.nvidiadriver import NOT_SUPPORTED, DriverStatusReporter
from kubegpu.sim.controlplane.plane import ControlPlane

from .test_crds_strict import apply_strict, kubectl

# the shape of upstream's config/samples NVIDIADriver
SAMPLE = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "NVIDIADriver",
    "metadata": {"name": "demo-gold"},
    "spec": {
        "driverType": "gpu",
        "env": [],
        "image": "driver",
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [],
        "manager": {},
        "nodeSelector": {"driver.config": "gold"},
        "repository": "nvcr.io/nvidia",
        "resources": {},
        "usePrecompiled": False,
        "version": "595.91.07",
        "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"},
    },
}


async def test_nvidias_sample_is_accepted_and_marked_not_supported(
    control_plane: ControlPlane, akube: AsyncClient
) -> None:
    for crd in crd_manifests():
        apply_strict(control_plane, crd)
    wait = kubectl(
        control_plane, "wait", "--for=condition=Established",
        "crd/nvidiadrivers.nvidia.com", "--timeout=60s",
    )  # fmt: skip
    assert wait.returncode == 0, wait.stderr
    apply_strict(control_plane, SAMPLE)
    reporter = DriverStatusReporter(akube, renew_s=5)
    task = asyncio.create_task(reporter.run())
    try:
        for _ in range(100):
            got = kubectl(control_plane, "get", "nvd", "demo-gold", "-o", "json")
            status = json.loads(got.stdout).get("status") or {}
            if status.get("state") == "ignored":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"status never written: {status}")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["reason"] == NOT_SUPPORTED and "not supported by kubegpu" in ready["message"]
    kubectl(control_plane, "delete", "nvd", "demo-gold")
