"""`kubegpu plan --from-snapshot` end to end, on the whole stack (chart, operator, MIG
manager, device plugin, feature discovery on simulated H100 nodes): pods are Pending for a
MIG profile the cluster lacks, a snapshot is captured, and

- `--verify` tries the runbook on the snapshot's twin (`kubegpu what-if`): the pods the plan
  places run there, the one no H100 can hold (an H200 profile) is reported still Pending;
- the runbook applied to the cluster itself (the configs to add merged into the MIG
  manager's ConfigMap as an administrator would, then the runbook's own `kubectl` lines run
  by bash with the cached kubectl) makes the placed pods Running, and the running pod on
  the other node is never touched.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod, ServiceAccount

from kubegpu.catalog import nvidia
from kubegpu.doctor.capture import capture
from kubegpu.replan.verify import merged_mig_parted
from kubegpu.sim.cluster import ClusterSpec, NodeEntry
from kubegpu.sim.controlplane.binaries import find_bin_dir
from kubegpu.sim.stack import NAMESPACE, Stack, find_chart, simulated_stack

from .stack import wait_for

RUN_TIMEOUT_S = 900
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(RUN_TIMEOUT_S + 600),
]

BUSY = "rb-busy"  # its GPU on all-1g.10gb, one slice held by a running pod
FREE = "rb-free"  # same layout, nothing running: the plan repartitions this one
MIG_LABELS = {nvidia.MIG_CONFIG: "all-1g.10gb"}
NODES = [
    NodeEntry(name="rb-cpu", labels={"node-role.kubernetes.io/control-plane": ""}),
    NodeEntry(name=BUSY, gpus="h100-80gb:1", labels=MIG_LABELS),
    NodeEntry(name=FREE, gpus="h100-80gb:1", labels=MIG_LABELS),
]
NS = "ml"
WANTED = ("want-0", "want-1")  # mig-3g.40gb: no node has it
IMPOSSIBLE = "want-h200"  # mig-1g.18gb: an H200 profile, no H100 can hold it


@dataclass
class Source:
    stack: Stack
    snapshot_file: Path
    work: Path
    busy_pod_uid: str


def kubegpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def pod_body(name: str, resource: str, node: str | None = None) -> Pod:
    spec: dict[str, object] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/infer:1",
                "resources": {"limits": {resource: "1"}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return Pod.from_dict({"metadata": {"name": name, "labels": {"app": name}}, "spec": spec})  # type: ignore[return-value]


async def phase(stack: Stack, name: str) -> str:
    pod = await stack.client.get(Pod, name, namespace=NS)
    return (pod.status.phase if pod.status else None) or ""


async def unschedulable(stack: Stack, name: str) -> bool:
    pod = await stack.client.get(Pod, name, namespace=NS)
    conds = (pod.status.conditions or []) if pod.status else []
    return any(c.type == "PodScheduled" and c.status == "False" for c in conds)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def source() -> AsyncIterator[Source]:
    work = Path(tempfile.mkdtemp(prefix="kg-rb-", dir="/tmp"))
    values = {"mig": {"strategy": "mixed"}}
    try:
        async with simulated_stack(
            ClusterSpec(nodes=NODES), work, chart=find_chart(), values=values
        ) as stack:

            async def ready() -> bool:
                if await stack.policy_state() != "ready":
                    return False
                for name in (BUSY, FREE):
                    if (await stack.allocatable(name)).get("nvidia.com/mig-1g.10gb") != "7":
                        return False
                return True

            await wait_for(ready, timeout=400, interval=1, what="both H100s on all-1g.10gb")
            await stack.client.create(Namespace(metadata=ObjectMeta(name=NS)))
            await wait_for(
                lambda: stack.client.get(ServiceAccount, "default", namespace=NS), timeout=60
            )
            await stack.client.create(  # type: ignore[call-overload]
                pod_body("serving", "nvidia.com/mig-1g.10gb", BUSY), namespace=NS
            )
            await wait_for(
                lambda: _is(stack, "serving", "Running"), timeout=180, what="serving runs"
            )
            for name in WANTED:
                await stack.client.create(pod_body(name, "nvidia.com/mig-3g.40gb"), namespace=NS)  # type: ignore[call-overload]
            await stack.client.create(pod_body(IMPOSSIBLE, "nvidia.com/mig-1g.18gb"), namespace=NS)  # type: ignore[call-overload]
            for name in (*WANTED, IMPOSSIBLE):
                await wait_for(lambda n=name: unschedulable(stack, n), timeout=120, what=name)
            snap = await capture(stack.client, namespace=NAMESPACE, source="e2e")
            snapshot_file = work / "cluster.json"
            snapshot_file.write_text(snap.to_json())
            serving = await stack.client.get(Pod, "serving", namespace=NS)
            assert serving.metadata is not None and serving.metadata.uid
            yield Source(stack, snapshot_file, work, serving.metadata.uid)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _is(stack: Stack, name: str, wanted: str) -> bool:
    return await phase(stack, name) == wanted


async def test_verify_reports_the_placed_pods_running_and_the_impossible_one_pending(
    source: Source,
) -> None:
    out = source.work / "plan-verify"
    result = await asyncio.to_thread(
        kubegpu, "plan", "--from-snapshot", str(source.snapshot_file), "--verify", "--out", str(out)
    )
    text = result.stdout + result.stderr
    # one pod stays Pending on the twin: the exit code says not all would run
    assert result.returncode == 4, text
    for name in WANTED:
        assert re.search(rf"verify: {NS}/{name} runs on the twin \(node {FREE}\)", text), text
    assert f"{NS}/{IMPOSSIBLE} would still be Pending" in text, text
    assert "2 of 3 Pending pods run on the twin" in text, text
    # the twin is built from the snapshot only: the cluster itself has not moved
    for name in (*WANTED, IMPOSSIBLE):
        assert await unschedulable(source.stack, name)


async def test_applying_the_runbook_with_kubectl_makes_the_pending_pods_running(
    source: Source,
) -> None:
    out = source.work / "plan"
    result = await asyncio.to_thread(
        kubegpu, "plan", "--from-snapshot", str(source.snapshot_file), "--out", str(out)
    )
    assert result.returncode == 3, result.stdout + result.stderr  # the H200 pod is left over
    book = (out / "runbook.md").read_text()
    assert BUSY not in book  # the node with a running pod is not in the runbook at all
    # step 1, where it is prose in the runbook: merge the configs to add into the ConfigMaps
    # it names (here the MIG managers generated their layouts, so the runbook creates one
    # with `kubectl apply` instead, and there is nothing to merge)
    add = yaml.safe_load((out / "mig-parted-configs-to-add.yaml").read_text())["mig-configs"]
    for cm_name in re.findall(rf"ConfigMap {NAMESPACE}/(\S+), key config\.yaml", book):
        cm = await source.stack.client.get(ConfigMap, cm_name, namespace=NAMESPACE)
        data = dict(cm.data or {})
        data["config.yaml"] = merged_mig_parted(data.get("config.yaml", ""), add, cm_name)
        cm.data = data
        await source.stack.client.replace(cm)
    # the runbook's commands, as written, with the kubectl the simulated cluster was built with
    blocks = re.findall(r"```bash\n(.*?)```", book, flags=re.S)
    script = "set -euo pipefail\n" + "".join(blocks)
    assert f"kubectl label node {FREE} {nvidia.MIG_CONFIG}=" in script
    env = {
        **os.environ,
        "PATH": f"{find_bin_dir()}:{os.environ['PATH']}",
        "KUBECONFIG": str(source.stack.kubeconfig),
    }
    ran = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        cwd=out,  # the runbook names its files relative to the plan directory
        check=False,
    )
    assert ran.returncode == 0, f"{script}\n{ran.stdout}\n{ran.stderr}"
    for name in WANTED:
        await wait_for(lambda n=name: _is(source.stack, n, "Running"), timeout=180, what=name)
        pod = await source.stack.client.get(Pod, name, namespace=NS)
        assert pod.spec is not None and pod.spec.nodeName == FREE
    assert await unschedulable(source.stack, IMPOSSIBLE)
    serving = await source.stack.client.get(Pod, "serving", namespace=NS)
    assert serving.metadata is not None and serving.metadata.uid == source.busy_pod_uid
    assert await phase(source.stack, "serving") == "Running"
    assert serving.metadata.labels == {"app": "serving"}
    assert serving.spec is not None and serving.spec.nodeName == BUSY
