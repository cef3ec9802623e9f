"""`kubegpu operator demo --dra`: the same code the command runs, with its own control plane.
kubegpu installed with a GPUCluster; every example claim of examples/dra allocated by the
real kube-scheduler and seen by its pod; the MIG claim's device created at prepare and
destroyed after the pod is gone; the operator never deploys the device plugin."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kubegpu.sim.dra_demo import DRA_NODE, MIG_GPU, dra_demo
from kubegpu.sim.stack import find_chart

pytestmark = [pytest.mark.cluster]


async def test_the_dra_demo_allocates_every_example_claim_and_one_dynamic_mig_device() -> None:
    out = io.StringIO()
    summary = await dra_demo(find_chart(), Console(file=out, width=200))

    assert any(d.startswith(f"gpu-{MIG_GPU}-mig-1g18gb-") for d in summary.published)
    assert f"gpu-{MIG_GPU}" not in summary.published  # a MIG GPU only as its placements
    examples = {p.example for p in summary.pods}
    assert examples == {
        "gpu",
        "gpu-by-product-and-memory",
        "mig-1g18gb",
        "shared-by-two-containers",
        "two-matching-gpus",
    }
    given: list[str] = []
    for pod in summary.pods:
        assert pod.phase == "Running", pod  # its shell listed its GPUs and sleeps
        assert pod.devices, pod
        assert all(d.startswith(f"{DRA_NODE}/gpu-") for d in pod.devices), pod
        assert len(pod.seen) == len(pod.devices), pod  # nvidia-smi lists exactly its devices
        given += pod.devices
    assert len(given) == len(set(given))  # no device handed to two claims
    (two,) = [p for p in summary.pods if p.example == "two-matching-gpus"]
    assert len(two.devices) == 2
    (mig,) = [p for p in summary.pods if p.example == "mig-1g18gb"]
    assert mig.devices[0].startswith(f"{DRA_NODE}/gpu-{MIG_GPU}-mig-1g18gb-")
    assert summary.dynamic_mig is not None and summary.dynamic_mig.startswith("MIG-")
    assert mig.seen == [summary.dynamic_mig]
    assert summary.dynamic_mig_destroyed

    shown = out.getvalue()
    assert "GPUCluster gpu-cluster is ready" in shown
    assert "DRA on a simulated cluster" in shown
    assert "stopping the simulated cluster" in shown
