"""`kubegpu doctor` on the demo cluster (examples/cluster.yaml with the demo run on it): a
clean report first, then the cluster broken on purpose, one pitfall at a time, each time
captured from the API server (kubegpu.doctor.capture) and checked: the doctor must find
exactly the new problem, on the right object, with its evidence.

One cluster serves the module (its own control plane, as `kubegpu operator demo` runs);
the steps run in file order and each starts from the state the one before left. A step
compares the findings after the breakage with those before it, so a warning a step leaves
behind on purpose does not hide the next step's finding.

With KUBEGPU_DOCTOR_SNAPSHOTS=DIR the captured snapshots are written there (that is how
tests/data/doctor/ was made).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import ConfigMap, Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor.capture import capture
from kubegpu.doctor.checks import ISOLATION_LABEL, run_checks
from kubegpu.doctor.findings import Finding
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.kube.policy import ClusterPolicyResource, GPUClusterResource
from kubegpu.sim.cluster import load_cluster
from kubegpu.sim.stack import (
    DEMO_NAMESPACE,
    DEMO_VALUES,
    NAMESPACE,
    POLICY,
    Stack,
    demo_pod,
    find_chart,
    run_demo,
    simulated_stack,
)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="module")]

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
MIG_NODE, RTX_NODE, L4_NODE = "gpu-h200", "gpu-rtx", "gpu-l4"
PLUGIN_CONFIGS = "device-plugin-configs"  # DEMO_VALUES' ConfigMap
SAVE = os.environ.get("KUBEGPU_DOCTOR_SNAPSHOTS")

Key = tuple[str, str]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[Stack]:
    spec = load_cluster(CLUSTER)
    workdir = Path(tempfile.mkdtemp(prefix="kg-doctor-", dir="/tmp"))  # short socket paths
    try:
        async with simulated_stack(
            spec, workdir, chart=find_chart(), values=DEMO_VALUES
        ) as running:
            await run_demo(running, spec, lambda _: None)
            yield running
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def snapshot(stack: Stack, name: str | None = None) -> Snapshot:
    snap = await capture(stack.client, namespace=NAMESPACE, source="sim")
    if SAVE and name:
        Path(SAVE).mkdir(parents=True, exist_ok=True)
        (Path(SAVE) / f"{name}.json").write_text(snap.to_json())
    return snap


def keys(findings: list[Finding]) -> set[Key]:
    return {(f.check, f.object) for f in findings}


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await check()
            if last:
                return last
        except (ApiError, KeyError, StopIteration) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r})")
        await asyncio.sleep(1.0)


async def labels(stack: Stack, node: str) -> dict[str, str]:
    got = await stack.client.get(Node, node)
    return dict((got.metadata.labels if got.metadata else None) or {})


async def new_findings(
    stack: Stack, before: set[Key], expected: set[Key], name: str, timeout: float = 120
) -> list[Finding]:
    """Capture until the findings beyond `before` are `expected` (the cluster settles after a
    change); the new findings."""

    async def settled() -> list[Finding] | None:
        findings = run_checks(await snapshot(stack))
        fresh = [f for f in findings if (f.check, f.object) not in before]
        return fresh if keys(fresh) == expected else None

    try:
        fresh: list[Finding] = await until(f"findings {sorted(expected)}", settled, timeout)
    except AssertionError:
        snap = await snapshot(stack, name)
        got = keys(run_checks(snap)) - before
        raise AssertionError(f"new findings {sorted(got)}, expected {sorted(expected)}") from None
    await snapshot(stack, name)
    return fresh


async def baseline(stack: Stack) -> set[Key]:
    return keys(run_checks(await snapshot(stack)))


async def delete_gfd_pod(stack: Stack, node: str) -> None:
    """GFD relabels at start: its pod on `node` is deleted and the DaemonSet makes a new one."""
    for pod in await stack.pods(app=nvidia.GFD_DAEMONSET):
        if pod.spec and pod.spec.nodeName == node and pod.metadata and pod.metadata.name:
            await stack.client.delete(Pod, pod.metadata.name, namespace=NAMESPACE)


# --- the demo cluster is clean -----------------------------------------------------------------


async def test_the_demo_cluster_gets_a_clean_report(stack: Stack, tmp_path: Path) -> None:
    snap = await snapshot(stack, "demo")
    assert run_checks(snap) == []
    assert {n.name for n in snap.nodes} == {MIG_NODE, RTX_NODE, L4_NODE}
    assert len(snap.workload_pods) == 8 and snap.cluster_policy is not None
    # the command, as a person runs it: exit code 0
    saved = tmp_path / "snap.json"
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        [
            "doctor",
            "--kubeconfig",
            str(stack.control_plane.kubeconfig_path),
            "--save-snapshot",
            str(saved),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "no problems found: 19 checks on 3 node(s)" in result.output
    assert Snapshot.from_json(saved.read_text()).nodes


async def test_a_config_label_naming_no_config(stack: Stack) -> None:
    # the demo's pods on the MIG node would hold its MIG devices through later steps
    for i in range(3):
        await stack.client.delete(Pod, f"demo-{MIG_NODE}-{i}", namespace=DEMO_NAMESPACE)
    before = await baseline(stack)
    await stack.label(L4_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "time-slised"})
    (finding,) = await new_findings(
        stack, before, {("plugin-config-missing", f"node/{L4_NODE}")}, "plugin-config-missing"
    )
    assert "time-sliced" in finding.evidence  # what the ConfigMap does have
    await stack.label(L4_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "time-sliced"})
    await until("the label repaired", lambda: _no_new(stack, before))


async def _no_new(stack: Stack, before: set[Key]) -> bool:
    return await baseline(stack) <= before


async def test_a_workload_asking_for_isolation_on_a_time_sliced_gpu(stack: Stack) -> None:
    before = await baseline(stack)
    pod = demo_pod("wants-exclusive", L4_NODE)
    pod["metadata"]["labels"] = {ISOLATION_LABEL: "exclusive"}
    await stack.client.create(Pod.from_dict(pod))  # type: ignore[call-overload]
    (finding,) = await new_findings(
        stack,
        before,
        {("isolation-not-met", f"pod/{DEMO_NAMESPACE}/wants-exclusive")},
        "isolation",
    )
    assert "time-sliced" in finding.summary
    await stack.client.delete(Pod, "wants-exclusive", namespace=DEMO_NAMESPACE)


async def test_mps_on_the_mig_node(stack: Stack) -> None:
    before = await baseline(stack)
    await stack.label(MIG_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "mps"})
    (finding,) = await new_findings(stack, before, {("mps-on-mig", f"node/{MIG_NODE}")}, "mps")
    assert "sets sharing.mps" in finding.evidence
    await stack.label(MIG_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: None})
    await until("MPS label removed", lambda: _no_new(stack, before))


async def test_a_mig_layout_the_gpus_cannot_place_fails_with_the_mig_managers_event(
    stack: Stack,
) -> None:
    before = await baseline(stack)
    # defined in the default mig-parted config, but for A100/H100 PCI ids only
    await stack.label(MIG_NODE, {nvidia.MIG_CONFIG: "all-1g.10gb"})
    await until(
        "mig.config.state failed",
        lambda: _label_is(stack, MIG_NODE, nvidia.MIG_CONFIG_STATE, nvidia.MIG_STATE_FAILED),
    )
    found = await new_findings(
        stack,
        before,
        {
            ("mig-layout-unplaceable", f"node/{MIG_NODE}"),
            ("mig-config-state", f"node/{MIG_NODE}"),
        },
        "mig-failed",
    )
    state = next(f for f in found if f.check == "mig-config-state")
    assert "last MIG manager event" in state.evidence
    assert "all-1g.10gb" in state.evidence


async def _label_is(stack: Stack, node: str, key: str, value: str) -> bool:
    return (await labels(stack, node)).get(key) == value


async def test_single_strategy_on_a_mixed_layout(stack: Stack) -> None:
    await stack.label(MIG_NODE, {nvidia.MIG_CONFIG: "all-1g.18gb"})
    await until(
        "back to all-1g.18gb",
        lambda: _label_is(stack, MIG_NODE, nvidia.MIG_CONFIG_STATE, nvidia.MIG_STATE_SUCCESS),
    )
    before = await baseline(stack)
    assert not {k for k in before if k[1] == f"node/{MIG_NODE}"}
    await stack.label(MIG_NODE, {nvidia.MIG_CONFIG: "all-balanced"})

    async def invalid() -> bool:
        got = await labels(stack, MIG_NODE)
        return got.get(nvidia.GPU_PRODUCT, "").endswith(nvidia.MIG_INVALID_SUFFIX)

    await until("GFD labels the product -MIG-INVALID", invalid)
    found = await new_findings(
        stack, before, {("mig-single-invalid", f"node/{MIG_NODE}")}, "mig-invalid"
    )
    assert "-MIG-INVALID" in found[0].evidence


async def test_workstation_cards_still_in_graphics_mode(stack: Stack) -> None:
    before = await baseline(stack)
    node = stack.nodes[RTX_NODE]
    assert node.lab is not None
    for gpu in range(2):
        node.lab.set_display_mode(gpu, "graphics")  # as DisplayModeSelector, then a reboot
    await node.reboot()
    await until(
        "gpu.mode=graphics", lambda: _label_is(stack, RTX_NODE, nvidia.GPU_MODE, "graphics")
    )
    (finding,) = await new_findings(
        stack, before, {("display-mode-graphics", f"node/{RTX_NODE}")}, "display-mode"
    )
    assert finding.severity.name == "WARNING"


async def test_a_gpucluster_next_to_the_clusterpolicy_and_dra_next_to_the_device_plugin(
    stack: Stack,
) -> None:
    before = await baseline(stack)
    await stack.client.create(
        GPUClusterResource.from_dict({"metadata": {"name": "gpu-cluster"}, "spec": {}})
    )
    # a driver below the DRA minimum on the RTX node, seen by GFD when it starts again
    node = stack.nodes[RTX_NODE]
    assert node.lab is not None
    node.lab.set_driver_version("550.54.15")
    await delete_gfd_pod(stack, RTX_NODE)
    await until(
        "the old driver labelled",
        lambda: _label_is(stack, RTX_NODE, nvidia.CUDA_DRIVER_VERSION_FULL, "550.54.15"),
    )
    # the DRA driver's slice for the node, as its kubelet plugin publishes it
    await stack.client.create(  # type: ignore[call-overload]
        ResourceSlice.from_dict(
            {
                "metadata": {"name": f"{RTX_NODE}-{nvidia.DRA_DRIVER}"},
                "spec": {
                    "driver": nvidia.DRA_DRIVER,
                    "nodeName": RTX_NODE,
                    "pool": {"name": RTX_NODE, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                },
            }
        )
    )
    found = await new_findings(
        stack,
        before,
        {
            ("clusterpolicy-and-gpucluster", "gpucluster/gpu-cluster"),
            ("dra-and-device-plugin", f"node/{RTX_NODE}"),
            ("driver-minimum", f"node/{RTX_NODE}"),
        },
        "dra",
    )
    dra = next(f for f in found if f.check == "dra-and-device-plugin")
    assert "publish 2 device(s)" in dra.evidence and "nvidia.com/gpu=" in dra.evidence


async def test_a_gpu_node_without_nfd_labels(stack: Stack) -> None:
    before = await baseline(stack)
    await stack.label(L4_NODE, dict.fromkeys(nvidia.NFD_GPU_LABELS))
    (finding,) = await new_findings(
        stack, before, {("nfd-labels-missing", f"node/{L4_NODE}")}, "nfd"
    )
    assert finding.severity.name == "ERROR"


async def test_device_plugin_configs_without_a_default(stack: Stack) -> None:
    before = await baseline(stack)
    await stack.client.patch(
        ConfigMap,
        PLUGIN_CONFIGS,
        {"data": {"default": None}},
        namespace=NAMESPACE,
        patch_type=PatchType.MERGE,
    )
    await stack.client.patch(
        ClusterPolicyResource,
        POLICY,
        {"spec": {"devicePlugin": {"config": {"default": None}}}},
        patch_type=PatchType.MERGE,
    )
    (finding,) = await new_findings(
        stack,
        before,
        {("plugin-config-no-default", f"configmap/{NAMESPACE}/{PLUGIN_CONFIGS}")},
        "no-default",
    )
    assert MIG_NODE in finding.evidence  # the one GPU node without a config label
    # the policy change restarts the device plugins: wait until they serve again
    await until("the device plugins back", lambda: _all_of(stack, before))


async def _all_of(stack: Stack, before: set[Key]) -> bool:
    return await baseline(stack) >= before


async def test_a_crash_looping_operand_with_its_last_message(stack: Stack) -> None:
    before = await baseline(stack)
    policy = await stack.policy()
    env = list(policy["spec"]["dcgmExporter"].get("env") or [])
    env.append({"name": "DCGM_EXPORTER_INTERVAL", "value": "often"})
    await stack.client.patch(
        ClusterPolicyResource,
        POLICY,
        {"spec": {"dcgmExporter": {"env": env}}},
        patch_type=PatchType.MERGE,
    )

    exporters = "nvidia-dcgm-exporter"

    async def looping() -> tuple[Snapshot, list[Finding]] | None:
        snap = await snapshot(stack)
        findings = run_checks(snap)
        found = [f for f in findings if f.check == "operand-crash-loop"]
        # the container's own last words: the exporter refuses the variable's value
        told = any("DCGM_EXPORTER_INTERVAL" in f.evidence for f in found)
        # and nothing else new once the operator's rollout has settled (a snapshot taken
        # mid-rollout may catch another operand restarting)
        others = keys(findings) - before - keys(found)
        return (snap, found) if told and not others else None

    snap, found = await until("exporters crash-looping", looping)
    if SAVE:
        (Path(SAVE) / "crash-loop.json").write_text(snap.to_json())
    owners = {f"pod/{p.key}": p.owner_name for p in snap.operand_pods}
    assert {owners[f.object] for f in found} == {exporters}
    assert not {(f.check, f.object) for f in run_checks(snap)} - before - keys(found)
