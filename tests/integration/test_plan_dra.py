"""`kubegpu plan --api dra` on the simulated cluster: a small mix is planned, the emitted
`apply-mig.sh` makes the MIG layout on each node's simulated GPUs, the emitted claims and
templates are applied unchanged to the real control plane with `kubegpu dra-plugin` nodes,
and pods are created from the emitted pod groups. The real scheduler must allocate every claim, and each pod must run on the node the
plan chose, with devices of the planned model, profile and count; the pods the plan puts on
one shared GPU must share one device."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from subprocess import PIPE, STDOUT
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate

from kube_objects import status_of
from kubegpu.catalog import get_model, nvidia
from kubegpu.nvml import ENV_NVML
from kubegpu.plan import make_plan, parse_data
from kubegpu.plan.check import check_plan
from kubegpu.plan.emit import render_dra
from kubegpu.plan.result import Plan
from kubegpu.sim.controlplane.plane import ControlPlane

from .dra_stack import IMAGE, SLEEP, DraCluster, dra_cluster, published_devices
from .helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

# a two-GPU training job (whole GPUs), a MIG workload that fills an A100, and replicas that
# spill onto an L4 shared through MPS (the example docs/dra.md shows)
PLAN_INPUT: dict[str, Any] = yaml.safe_load(
    (Path(__file__).parents[2] / "examples/plan/dra-mix.yaml").read_text()
)
GATES = "TimeSlicingSettings=true,MPSSupport=true"


@pytest.fixture
def planned() -> tuple[Plan, dict[str, str]]:
    inp = parse_data(PLAN_INPUT)
    plan = make_plan(inp, suggest=False)
    assert check_plan(inp, plan, api="dra") == []
    methods = {w.name: w.method for w in plan.workloads}
    assert methods == {"ft": "whole", "small": "mig", "embed": "mps"}, methods
    return plan, render_dra(plan, {w.name: w for w in inp.workloads})


@pytest.fixture
async def cluster(
    planned: tuple[Plan, dict[str, str]],
    control_plane: ControlPlane,
    akube: AsyncClient,
    tmp_path: Path,
) -> AsyncIterator[DraCluster]:
    _plan, _files = planned
    nodes = {n["name"]: n["gpus"] for n in PLAN_INPUT["fleet"]}
    async with dra_cluster(control_plane, akube, nodes, tmp_path, feature_gates=GATES) as c:
        yield c


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A pod with the emitted group's spec fields, unchanged, and one container using the
    claim."""
    claim = spec["resourceClaims"][0]["name"]
    container = {
        "name": "main",
        "image": IMAGE,
        "command": SLEEP,
        "resources": {"claims": [{"name": claim}]},
    }
    body = {**spec, "terminationGracePeriodSeconds": 1, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


async def _apply_mig(
    plan: Plan, files: dict[str, str], cluster: DraCluster, akube: AsyncClient, out: Path
) -> None:
    """Run the emitted apply-mig.sh as each node would, against its simulated GPUs, then wait
    until the node's plugin publishes the planned MIG devices."""
    for rel in ("apply-mig.sh", "mig-parted-config.yaml"):
        (out / rel).write_text(files[rel])
    for n in plan.nodes:
        if n.mig_config is None:
            continue
        node = cluster.nodes[n.name]
        env = {
            **os.environ,
            "NODE_NAME": n.name,
            ENV_NVML: f"sim:{node.gpu_state}",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        # not blocking the loop: the simulated kubelets run in it
        proc = await asyncio.create_subprocess_exec(
            "sh", str(out / "apply-mig.sh"), env=env, stdout=PIPE, stderr=STDOUT
        )
        output, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode == 0, output.decode()
        want = sum(len(g.layout) for g in n.gpus if g.mig_enabled)

        async def published(name: str = n.name, want: int = want) -> bool:
            devices = await published_devices(akube, name)
            return sum("-mig-" in d for d in devices) == want

        await eventually(published, timeout=60)


async def _running(akube: AsyncClient, name: str, namespace: str) -> Any:
    pod = await akube.get(Pod, name, namespace=namespace)
    return pod if status_of(pod).phase == "Running" else None


async def test_the_planned_claims_are_allocated_where_the_plan_put_them(
    planned: tuple[Plan, dict[str, str]],
    cluster: DraCluster,
    akube: AsyncClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    plan, files = planned
    await _apply_mig(plan, files, cluster, akube, tmp_path)
    # the DeviceClasses the plan names are the ones the cluster has
    for cls in yaml.safe_load_all(files["dra/deviceclasses.yaml"]):
        live = (await akube.get(DeviceClass, cls["metadata"]["name"])).to_dict()
        assert live["spec"] == cls["spec"]
    kinds = {"ResourceClaim": ResourceClaim, "ResourceClaimTemplate": ResourceClaimTemplate}
    claims = {d["metadata"]["name"]: d for d in yaml.safe_load_all(files["dra/claims.yaml"])}
    for doc in claims.values():
        await akube.create(kinds[doc["kind"]].from_dict(doc), namespace=namespace)  # type: ignore[attr-defined, call-overload]
    groups = yaml.safe_load(files["dra/pod-groups.yaml"])["workloads"]
    pods: dict[str, tuple[str, dict[str, Any]]] = {}  # pod -> (workload, its group)
    for workload, gs in groups.items():
        for g in gs:
            for name in g["pods"]:
                pods[name] = (workload, g)
                await akube.create(Pod.from_dict(_pod(name, g["spec"])), namespace=namespace)  # type: ignore[call-overload]
    assert len(pods) == sum(w.placed for w in plan.workloads) == 11

    devices = {n: await published_devices(akube, n) for n in cluster.nodes}
    shared_device: dict[str, tuple[str, str]] = {}
    taken: set[tuple[str, str]] = set()
    for name, (workload, g) in sorted(pods.items()):

        async def running(n: str = name) -> Any:
            return await _running(akube, n, namespace)

        pod = await eventually(running, timeout=120)
        node = g["node"]
        assert pod.spec.nodeName == node, (name, pod.spec.nodeName)
        if "sharedClaim" in g:
            claim_name = g["sharedClaim"]  # named by the pod: no per-pod claim status
        else:
            [status] = pod.status.resourceClaimStatuses  # the claim made from the template
            claim_name = status.resourceClaimName
        claim = (await akube.get(ResourceClaim, claim_name, namespace=namespace)).to_dict()
        results = claim["status"]["allocation"]["devices"]["results"]
        wp = plan.workload(workload)
        planned_node = plan.node(node)
        for r in results:
            assert (r["driver"], r["pool"]) == (nvidia.DRA_DRIVER, node)
            attrs = devices[node][r["device"]]["attributes"]
            models = {gp.model for gp in planned_node.gpus}
            assert attrs["productName"]["string"] in {get_model(m).product_name for m in models}
            if wp.method == "mig":
                assert attrs["profile"]["string"] == wp.profile
            else:
                assert attrs["type"]["string"] == "gpu"
        if "sharedClaim" in g:
            [r] = results
            first = shared_device.setdefault(g["sharedClaim"], (node, r["device"]))
            assert first == (node, r["device"])  # every pod of the claim: one device
            reserved = {ref["name"] for ref in claim["status"].get("reservedFor", [])}
            assert name in reserved
        else:
            assert len(results) == next(iter(wp.resources.values()))
            for r in results:
                assert (node, r["device"]) not in taken, f"{r['device']} given twice"
                taken.add((node, r["device"]))
    # the shared claim serves exactly the pods the plan put on that GPU
    for claim_name, doc in claims.items():
        if doc["kind"] == "ResourceClaim":
            live = (await akube.get(ResourceClaim, claim_name, namespace=namespace)).to_dict()
            holders = sorted(ref["name"] for ref in live["status"]["reservedFor"])
            planned_pods = doc["metadata"]["annotations"]["kubegpu.dev/planned-pods"]
            assert holders == sorted(planned_pods.split(","))
            # and the plugin set the plan's MPS share for it (the simulated daemon's record)
            mps = doc["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"]
            sim = cluster.nodes[live["status"]["allocation"]["devices"]["results"][0]["pool"]]
            plugin_dir = sim.root / "var/lib/kubelet/plugins" / nvidia.DRA_DRIVER
            record = json.loads(
                (plugin_dir / "mps" / live["metadata"]["uid"] / "limits.json").read_text()
            )
            want = mps["mpsConfig"]
            assert record["defaultActiveThreadPercentage"] == want["defaultActiveThreadPercentage"]
            [device] = record["devices"]
            limit = f"{device['pinnedDeviceMemoryLimitMiB']}Mi"
            assert limit == want["defaultPinnedDeviceMemoryLimit"]
    for name in pods:
        await akube.delete(Pod, name, namespace=namespace)

    async def unprepared() -> bool:
        return all(n.dra.claims == {} for n in cluster.nodes.values())

    await eventually(unprepared, timeout=60)
