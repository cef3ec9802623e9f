"""`kubegpu doctor`'s checks, one pitfall at a time, on the demo cluster's captured snapshot
(tests/data/doctor/demo.json, clean) broken by hand the way each pitfall shows in a cluster.
The integration tests (tests/integration/test_doctor.py) break a live simulated cluster."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from kubegpu.catalog import nvidia
from kubegpu.doctor.checks import CHECKS, ISOLATION_LABEL, run_checks
from kubegpu.doctor.findings import Severity, exit_code
from kubegpu.doctor.snapshot import (
    ConfigMapInfo,
    ContainerInfo,
    CustomObject,
    DeviceInfo,
    EventInfo,
    NodeInfo,
    PodInfo,
    ResourceSliceInfo,
    Snapshot,
    load_snapshot,
)
from kubegpu.sharing.isolation import Isolation, Method, annotation, fault_isolated

DATA = Path(__file__).resolve().parents[1] / "data" / "doctor"
MIG_NODE, RTX_NODE, L4_NODE = "gpu-h200", "gpu-rtx", "gpu-l4"


@pytest.fixture(scope="module")
def demo() -> Snapshot:
    return load_snapshot(DATA / "demo.json")


def relabel_keys(snap: Snapshot, node: str, changes: dict[str, str | None]) -> Snapshot:
    """The snapshot with `node`'s labels changed (a None value removes the label)."""
    nodes = []
    for n in snap.nodes:
        if n.name == node:
            labels = dict(n.labels)
            for key, value in changes.items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
            nodes.append(n.model_copy(update={"labels": labels}))
        else:
            nodes.append(n)
    return snap.model_copy(update={"nodes": tuple(nodes)})


def found(snap: Snapshot) -> set[tuple[str, str]]:
    return {(f.check, f.object) for f in run_checks(snap)}


def test_the_demo_cluster_is_clean(demo: Snapshot) -> None:
    assert run_checks(demo) == []
    assert exit_code(run_checks(demo)) == 0


def test_single_strategy_on_mixed_layouts_is_an_error(demo: Snapshot) -> None:
    broken = relabel_keys(
        demo, MIG_NODE, {nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL-MIG-INVALID", nvidia.GPU_COUNT: "0"}
    )
    (finding,) = run_checks(broken)
    assert (finding.check, finding.object) == ("mig-single-invalid", f"node/{MIG_NODE}")
    assert finding.severity is Severity.ERROR
    assert "NVIDIA-H200-NVL-MIG-INVALID" in finding.evidence
    assert "mixed" in finding.fix


def test_mps_on_a_mig_node_is_an_error_unless_mig_instances_are_shared(demo: Snapshot) -> None:
    broken = relabel_keys(demo, MIG_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "mps"})
    assert found(broken) == {("mps-on-mig", f"node/{MIG_NODE}")}
    # kubegpu's explicit opt-in (sharing.mps.migInstances) is not a pitfall
    cms = tuple(
        c.model_copy(
            update={
                "data": {
                    **c.data,
                    "mps": c.data["mps"].replace("  mps:\n", "  mps:\n    migInstances: true\n"),
                }
            }
        )
        if c.name == "device-plugin-configs"
        else c
        for c in broken.config_maps
    )
    assert "mps-on-mig" not in {
        f.check for f in run_checks(broken.model_copy(update={"config_maps": cms}))
    }


def test_a_config_label_naming_no_config_is_an_error(demo: Snapshot) -> None:
    broken = relabel_keys(demo, L4_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "time-slised"})
    (finding,) = run_checks(broken)
    assert (finding.check, finding.object) == ("plugin-config-missing", f"node/{L4_NODE}")
    assert "default, mps, time-sliced" in finding.evidence


def test_a_config_that_does_not_load_is_an_error(demo: Snapshot) -> None:
    cms = tuple(
        c.model_copy(update={"data": {**c.data, "time-sliced": "version: v1\nsharing: 3\n"}})
        if c.name == "device-plugin-configs"
        else c
        for c in demo.config_maps
    )
    assert found(demo.model_copy(update={"config_maps": cms})) == {
        ("plugin-config-invalid", f"node/{L4_NODE}")
    }


def test_several_configs_without_a_default_is_a_warning(demo: Snapshot) -> None:
    policy = demo.cluster_policies[0]
    spec = {
        **policy.spec,
        "devicePlugin": {
            **policy.spec["devicePlugin"],
            "config": {"name": "device-plugin-configs"},
        },
    }
    cms = tuple(
        c.model_copy(update={"data": {k: v for k, v in c.data.items() if k != "default"}})
        if c.name == "device-plugin-configs"
        else c
        for c in demo.config_maps
    )
    broken = demo.model_copy(
        update={"cluster_policies": (policy.model_copy(update={"spec": spec}),), "config_maps": cms}
    )
    (finding,) = run_checks(broken)
    assert finding.check == "plugin-config-no-default"
    assert finding.severity is Severity.WARNING
    assert MIG_NODE in finding.evidence  # the unlabelled node silently gets built-in defaults
    assert exit_code([finding]) == 1


def test_a_gpucluster_next_to_a_clusterpolicy_is_an_error(demo: Snapshot) -> None:
    broken = demo.model_copy(
        update={"gpu_clusters": (CustomObject(kind="GPUCluster", name="gpu-cluster"),)}
    )
    assert found(broken) == {("clusterpolicy-and-gpucluster", "gpucluster/gpu-cluster")}


def test_dra_and_the_device_plugin_on_one_node_is_an_error(demo: Snapshot) -> None:
    slice_ = ResourceSliceInfo(
        name=f"{L4_NODE}-gpu",
        driver=nvidia.DRA_DRIVER,
        node=L4_NODE,
        pool=L4_NODE,
        devices=(DeviceInfo(name="gpu-0"),),
    )
    broken = demo.model_copy(update={"resource_slices": (slice_,)})
    (finding,) = run_checks(broken)
    assert (finding.check, finding.object) == ("dra-and-device-plugin", f"node/{L4_NODE}")
    assert "nvidia.com/gpu=16" in finding.evidence


def without_gpus(node: NodeInfo) -> NodeInfo:
    """The node as a cluster without NVIDIA's stack shows it: no NVIDIA or NFD PCI labels and
    no NVIDIA resources."""

    def kept(key: str) -> bool:
        return not key.startswith(nvidia.PREFIX) and key not in nvidia.NFD_GPU_LABELS

    return node.model_copy(
        update={
            "labels": {k: v for k, v in node.labels.items() if kept(k)},
            "capacity": {k: v for k, v in node.capacity.items() if kept(k)},
            "allocatable": {k: v for k, v in node.allocatable.items() if kept(k)},
        }
    )


def test_a_cluster_without_a_gpu_node_is_a_warning_not_a_clean_report(demo: Snapshot) -> None:
    # the demo cluster read through the wrong context, or before NFD and the operator labelled it
    bare = demo.model_copy(update={"nodes": tuple(without_gpus(n) for n in demo.nodes)})
    (finding,) = run_checks(bare)
    assert (finding.check, finding.object) == ("no-gpu-nodes", "cluster")
    assert finding.severity is Severity.WARNING
    assert exit_code([finding]) == 1
    assert "3 node(s) from sim" in finding.evidence
    assert nvidia.GPU_PRESENT in finding.evidence and nvidia.NFD_PCI_NVIDIA in finding.evidence
    assert "ClusterPolicy cluster-policy" in finding.evidence
    assert "kubeconfig context" in finding.fix


def test_a_cluster_of_cpu_nodes_only_says_it_has_no_stack_either() -> None:
    snap = Snapshot(
        source="kubeconfig kind-dev",
        nodes=(NodeInfo(name="worker-1", labels={"kubernetes.io/os": "linux"}),),
    )
    (finding,) = run_checks(snap)
    assert finding.check == "no-gpu-nodes"
    assert "1 node(s) from kubeconfig kind-dev" in finding.evidence
    assert "no ClusterPolicy or GPUCluster either" in finding.evidence


def test_a_cluster_without_any_node_has_no_gpu_node() -> None:
    (finding,) = run_checks(Snapshot())
    assert finding.check == "no-gpu-nodes"
    assert finding.summary.startswith("no GPU node among the 0 node(s)")


@pytest.mark.parametrize(
    "gpu_node",
    [
        NodeInfo(name="gpu-1", labels={nvidia.GPU_PRESENT: "true"}),
        NodeInfo(name="gpu-1", labels={nvidia.GPU_PRODUCT: "NVIDIA-L4"}),
        NodeInfo(name="gpu-1", labels={nvidia.NFD_PCI_NVIDIA: "true"}),
        NodeInfo(name="gpu-1", capacity={nvidia.GPU_RESOURCE: "1"}),
    ],
)
def test_one_node_seen_as_a_gpu_node_by_any_account_is_enough(gpu_node: NodeInfo) -> None:
    snap = Snapshot(nodes=(NodeInfo(name="cpu-1"), gpu_node))
    assert "no-gpu-nodes" not in {f.check for f in run_checks(snap)}


@pytest.mark.parametrize(
    ("state", "severity"), [("failed", Severity.ERROR), ("pending", Severity.WARNING)]
)
def test_a_mig_config_state_stuck_is_reported_with_the_mig_managers_last_event(
    demo: Snapshot, state: str, severity: Severity
) -> None:
    event = EventInfo(
        namespace="default",
        kind="Node",
        name=MIG_NODE,
        type="Warning",
        reason="MigConfigFailed",
        message="GPU 0 is busy",
        component="kubegpu-mig-manager",
        time="2026-12-01T23:59:59Z",  # after everything in the capture,
    )
    broken = relabel_keys(demo, MIG_NODE, {nvidia.MIG_CONFIG_STATE: state})
    broken = broken.model_copy(update={"events": (*broken.events, event)})
    (finding,) = run_checks(broken)
    assert (finding.check, finding.severity) == ("mig-config-state", severity)
    assert "MigConfigFailed: GPU 0 is busy" in finding.evidence


def test_a_mig_layout_the_gpus_cannot_place_is_an_error(demo: Snapshot) -> None:
    # the chart's layouts named in the policy: all-1g.10gb is defined, but only for A100/H100
    # PCI ids, so no entry selects an H200 NVL
    policy = demo.cluster_policies[0]
    spec = {
        **policy.spec,
        "migManager": {
            **policy.spec["migManager"],
            "config": {"name": nvidia.MIG_PARTED_DEFAULT_CONFIGMAP},
        },
    }
    named = demo.model_copy(
        update={"cluster_policies": (policy.model_copy(update={"spec": spec}),)}
    )
    assert run_checks(named) == []
    broken = relabel_keys(named, MIG_NODE, {nvidia.MIG_CONFIG: "all-1g.10gb"})
    (finding,) = run_checks(broken)
    assert (finding.check, finding.object) == ("mig-layout-unplaceable", f"node/{MIG_NODE}")
    assert "h200-nvl" in finding.summary and "kubegpu mig validate" in finding.fix
    assert "does not match its PCI id 0x233B10DE" in finding.evidence


def test_a_mig_layout_that_is_not_defined_is_an_error(demo: Snapshot) -> None:
    # without a ConfigMap in the policy the MIG manager offers the layouts it generated for
    # the node's GPUs (gpu-h200-mig-config): all-1g.10gb is not one of them
    broken = relabel_keys(demo, MIG_NODE, {nvidia.MIG_CONFIG: "all-1g.10gb"})
    (finding,) = run_checks(broken)
    assert finding.check == "mig-layout-unplaceable"
    assert f"{MIG_NODE}-mig-config has no config 'all-1g.10gb'" in finding.evidence


def test_a_layout_needing_a_newer_driver_is_unplaceable(demo: Snapshot) -> None:
    # the whole-node count is known when no single-strategy MIG labels hide it
    broken = relabel_keys(
        demo,
        RTX_NODE,
        {nvidia.MIG_CONFIG: "all-1g.24gb", nvidia.CUDA_DRIVER_VERSION_FULL: "570.86.10"},
    )
    checks = found(broken)
    assert ("mig-layout-unplaceable", f"node/{RTX_NODE}") in checks
    assert ("driver-minimum", f"node/{RTX_NODE}") in checks


def test_workstation_cards_in_graphics_mode(demo: Snapshot) -> None:
    graphics = relabel_keys(demo, RTX_NODE, {nvidia.GPU_MODE: "graphics"})
    (finding,) = run_checks(graphics)
    assert (finding.check, finding.severity) == ("display-mode-graphics", Severity.WARNING)
    assert "DisplayModeSelector --gpumode=compute" in finding.fix
    # an L4 in graphics mode is not a MIG card: nothing to say
    assert run_checks(relabel_keys(demo, L4_NODE, {nvidia.GPU_MODE: "graphics"})) == []


def test_workstation_cards_in_graphics_mode_with_mig_wanted_is_an_error(demo: Snapshot) -> None:
    broken = relabel_keys(
        demo, RTX_NODE, {nvidia.GPU_MODE: "graphics", nvidia.MIG_CONFIG: "all-1g.24gb"}
    )
    findings = {f.check: f for f in run_checks(broken)}
    assert findings["display-mode-graphics"].severity is Severity.ERROR


def test_a_driver_below_the_mig_minimum(demo: Snapshot) -> None:
    broken = relabel_keys(demo, MIG_NODE, {nvidia.CUDA_DRIVER_VERSION_FULL: "535.104.05"})
    findings = [f for f in run_checks(broken) if f.check == "driver-minimum"]
    assert [f.object for f in findings] == [f"node/{MIG_NODE}"]
    assert "MIG minimum" in findings[0].summary


def test_a_driver_below_the_dra_minimum_where_dra_serves(demo: Snapshot) -> None:
    broken = relabel_keys(demo, L4_NODE, {nvidia.CUDA_DRIVER_VERSION_FULL: "550.54.15"})
    assert run_checks(broken) == []  # no DRA: the L4's driver is fine for the device plugin
    dra = broken.model_copy(
        update={"gpu_clusters": (CustomObject(kind="GPUCluster", name="gpu-cluster"),)}
    )
    assert ("driver-minimum", f"node/{L4_NODE}") in found(dra)


def test_gpu_nodes_without_nfd_labels(demo: Snapshot) -> None:
    broken = relabel_keys(demo, L4_NODE, dict.fromkeys(nvidia.NFD_GPU_LABELS))
    (finding,) = run_checks(broken)
    assert (finding.check, finding.severity) == ("nfd-labels-missing", Severity.ERROR)
    no_kernel = relabel_keys(demo, L4_NODE, {nvidia.NFD_KERNEL_VERSION: None})
    (finding,) = run_checks(no_kernel)
    assert (finding.check, finding.severity) == ("nfd-labels-missing", Severity.WARNING)


def test_crash_looping_operands_are_reported_with_their_last_message(demo: Snapshot) -> None:
    victim = next(p for p in demo.operand_pods if p.owner_name == "nvidia-dcgm-exporter")
    crashed = victim.model_copy(
        update={
            "containers": (
                ContainerInfo(
                    name="nvidia-dcgm-exporter",
                    restart_count=4,
                    state="waiting",
                    reason="CrashLoopBackOff",
                    last_exit_code=1,
                    last_reason="Error",
                    last_message="error: /etc/counters.csv: cannot read",
                ),
            )
        }
    )
    pods = tuple(crashed if p.key == victim.key else p for p in demo.pods)
    (finding,) = run_checks(demo.model_copy(update={"pods": pods}))
    assert (finding.check, finding.object) == ("operand-crash-loop", f"pod/{victim.key}")
    assert "cannot read" in finding.evidence and "exit code 1" in finding.evidence


def test_a_workload_asking_for_isolation_on_time_sliced_gpus(demo: Snapshot) -> None:
    def pod(node: str, isolation: str, name: str) -> PodInfo:
        return PodInfo(
            namespace="team",
            name=name,
            node=node,
            phase="Running",
            labels={ISOLATION_LABEL: isolation},
            limits={nvidia.GPU_RESOURCE: "1"},
        )

    pods = (
        pod(L4_NODE, "exclusive", "strict"),  # time-sliced: not met
        pod(L4_NODE, "time-sliced", "relaxed"),  # met
        pod(RTX_NODE, "mps", "mps-ok"),  # MPS gives MPS: met
        pod(RTX_NODE, "mig", "wants-mig"),  # MPS is weaker than MIG: not met
        pod(MIG_NODE, "mig", "on-mig"),  # met
    )
    broken = demo.model_copy(update={"pods": (*demo.pods, *pods)})
    assert found(broken) == {
        ("isolation-not-met", "pod/team/strict"),
        ("isolation-not-met", "pod/team/wants-mig"),
    }


def test_the_device_plugins_annotation_outweighs_the_nodes_config(demo: Snapshot) -> None:
    """The annotation records what the pod really got: an MPS replica on a node whose config
    looks unshared still fails an `exclusive` label, and a whole GPU passes it."""

    def pod(name: str, method: Method) -> PodInfo:
        got = Isolation("GPU-x::0", "GPU-x", method, 0, fault_isolated(method))
        return PodInfo(
            namespace="team",
            name=name,
            node=MIG_NODE,
            phase="Running",
            labels={ISOLATION_LABEL: "exclusive"},
            annotations={nvidia.ISOLATION_ANNOTATION: annotation({"main": [got]})},
            limits={nvidia.GPU_RESOURCE: "1"},
        )

    pods = (pod("shared", Method.MPS), pod("whole", Method.EXCLUSIVE))
    broken = demo.model_copy(update={"pods": (*demo.pods, *pods)})
    (finding,) = run_checks(broken)
    assert (finding.check, finding.object) == ("isolation-not-met", "pod/team/shared")
    assert nvidia.ISOLATION_ANNOTATION in finding.evidence


def test_every_check_has_a_unit_test_here() -> None:
    tested = Path(__file__).read_text()
    for name, _ in CHECKS:
        assert f'"{name}"' in tested, name


def test_findings_sort_errors_first_and_set_the_exit_code(demo: Snapshot) -> None:
    broken = relabel_keys(demo, L4_NODE, {nvidia.NFD_KERNEL_VERSION: None})
    broken = broken.model_copy(
        update={"gpu_clusters": (CustomObject(kind="GPUCluster", name="gpu-cluster"),)}
    )
    findings = run_checks(broken)
    assert [f.severity for f in findings] == [Severity.ERROR, Severity.WARNING]
    assert exit_code(findings) == 2
    assert exit_code([]) == 0


def test_config_maps_outside_the_operator_namespace_are_not_the_operators(demo: Snapshot) -> None:
    elsewhere = ConfigMapInfo(namespace="other", name="device-plugin-configs", data={})
    snap = demo.model_copy(update={"config_maps": (elsewhere, *demo.config_maps)})
    assert run_checks(snap) == []


@pytest.mark.parametrize(("up_s", "flagged"), [(60, True), (7200, False)])
def test_an_operand_that_keeps_restarting_is_crash_looping_until_it_stays_up(
    demo: Snapshot, up_s: int, flagged: bool
) -> None:
    taken = dt.datetime.fromisoformat(demo.taken_at.replace("Z", "+00:00"))
    started = (taken - dt.timedelta(seconds=up_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    victim = next(p for p in demo.operand_pods if p.owner_name == nvidia.GFD_DAEMONSET)
    flapping = victim.model_copy(
        update={
            "containers": (
                ContainerInfo(
                    name="gpu-feature-discovery",
                    ready=True,
                    restart_count=5,
                    state="running",
                    started_at=started,
                    last_exit_code=2,
                    last_reason="Error",
                ),
            )
        }
    )
    pods = tuple(flapping if p.key == victim.key else p for p in demo.pods)
    findings = run_checks(demo.model_copy(update={"pods": pods}))
    assert [f.object for f in findings] == ([f"pod/{victim.key}"] if flagged else [])


# --- what the components really run (issue 30) ----------------------------------------------

# NVIDIA's MPS example: no flags.mpsRoot in the file; the operator's DaemonSet supplies it
NVIDIA_MPS_EXAMPLE = """version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


def with_plugin(snap: Snapshot, configs: dict[str, str], env: dict[str, str]) -> Snapshot:
    cms = tuple(
        c.model_copy(update={"data": {**c.data, **configs}})
        if c.name == "device-plugin-configs"
        else c
        for c in snap.config_maps
    )
    dss = tuple(
        d.model_copy(update={"env": env}) if d.name == nvidia.DEVICE_PLUGIN_DAEMONSET else d
        for d in snap.daemon_sets
    )
    return snap.model_copy(update={"config_maps": cms, "daemon_sets": dss})


def test_nvidias_mps_example_loads_with_the_daemonsets_mps_root(demo: Snapshot) -> None:
    snap = with_plugin(demo, {"mps": NVIDIA_MPS_EXAMPLE}, {"MPS_ROOT": "/run/nvidia/mps"})
    on_l4 = relabel_keys(snap, L4_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "mps"})
    assert run_checks(on_l4) == []
    # ...and on the MIG node the real problem shows, not a load error hiding it
    on_mig = relabel_keys(snap, MIG_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "mps"})
    assert found(on_mig) == {("mps-on-mig", f"node/{MIG_NODE}")}
    # without the override the plugin would refuse it too: the doctor says so
    bare = with_plugin(demo, {"mps": NVIDIA_MPS_EXAMPLE}, {})
    refused = run_checks(relabel_keys(bare, L4_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "mps"}))
    assert {(f.check, f.object) for f in refused} == {
        ("plugin-config-invalid", f"node/{L4_NODE}"),
        ("plugin-config-invalid", f"node/{RTX_NODE}"),  # the demo's MPS node
    }
    assert all("mps-root" in f.evidence for f in refused)


def test_an_override_the_plugin_cannot_take_is_reported(demo: Snapshot) -> None:
    snap = with_plugin(demo, {}, {"MIG_STRATEGY": "sideways"})
    checks = {f.check for f in run_checks(snap)}
    assert checks == {"plugin-config-invalid"}
    (finding, *_) = run_checks(snap)
    assert "MIG_STRATEGY" in finding.evidence and "sideways" in finding.evidence


MIXED_LAYOUT = """version: v1
mig-configs:
  half-and-half:
  - devices: [0, 1, 2, 3]
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
  - devices: [4, 5, 6, 7]
    mig-enabled: false
"""


def test_single_on_mixed_layouts_is_not_also_an_unplaceable_layout(demo: Snapshot) -> None:
    """`-MIG-INVALID` with gpu.count=0 says nothing of how many GPUs there are: the layout is
    checked on as many as it names, not on one ("this node has 1 GPUs")."""
    cms = tuple(
        c.model_copy(update={"data": {"config.yaml": MIXED_LAYOUT}})
        if c.name == f"{MIG_NODE}-mig-config"
        else c
        for c in demo.config_maps
    )
    snap = demo.model_copy(update={"config_maps": cms})
    broken = relabel_keys(
        snap,
        MIG_NODE,
        {
            nvidia.GPU_PRODUCT: "NVIDIA-H200-NVL-MIG-INVALID",
            nvidia.GPU_COUNT: "0",
            nvidia.MIG_CONFIG: "half-and-half",
        },
    )
    assert found(broken) == {("mig-single-invalid", f"node/{MIG_NODE}")}


def test_an_isolation_label_the_doctor_cannot_read_is_a_finding(demo: Snapshot) -> None:
    pods = (
        PodInfo(
            namespace="team",
            name="typo",
            node=L4_NODE,
            phase="Running",
            labels={ISOLATION_LABEL: "exclusiv"},
            limits={nvidia.GPU_RESOURCE: "1"},
        ),
        PodInfo(
            namespace="team",
            name="garbled",
            node=L4_NODE,
            phase="Running",
            annotations={nvidia.ISOLATION_ANNOTATION: "{not json"},
            limits={nvidia.GPU_RESOURCE: "1"},
        ),
    )
    findings = run_checks(demo.model_copy(update={"pods": (*demo.pods, *pods)}))
    assert {(f.check, f.object) for f in findings} == {
        ("isolation-label-invalid", "pod/team/typo"),
        ("isolation-label-invalid", "pod/team/garbled"),
    }
    typo = next(f for f in findings if f.object == "pod/team/typo")
    assert "'exclusiv'" in typo.evidence and "time-sliced" in typo.evidence


def test_a_pod_the_kubelet_refused_is_a_finding(demo: Snapshot) -> None:
    refused = PodInfo(
        namespace="team",
        name="two-replicas",
        node=L4_NODE,
        phase="Failed",
        reason="UnexpectedAdmissionError",
        message="Allocate failed due to request for more than one shared device",
        limits={nvidia.GPU_RESOURCE: "2"},
    )
    (finding,) = run_checks(demo.model_copy(update={"pods": (*demo.pods, refused)}))
    assert (finding.check, finding.object) == ("pod-admission-failed", "pod/team/two-replicas")
    assert "more than one shared device" in finding.evidence


def test_an_operand_that_cannot_start_for_its_config_is_a_finding(demo: Snapshot) -> None:
    victim = next(p for p in demo.operand_pods if p.owner_name == nvidia.DEVICE_PLUGIN_DAEMONSET)
    stuck = victim.model_copy(
        update={
            "containers": (
                ContainerInfo(
                    name="nvidia-device-plugin",
                    state="waiting",
                    reason="CreateContainerConfigError",
                    message='configmap "time-slicing-config" not found',
                ),
            )
        }
    )
    pods = tuple(stuck if p.key == victim.key else p for p in demo.pods)
    (finding,) = run_checks(demo.model_copy(update={"pods": pods}))
    assert (finding.check, finding.object) == ("operand-not-starting", f"pod/{victim.key}")
    assert "time-slicing-config" in finding.evidence


def test_a_missing_configmap_is_one_finding_naming_the_policy_field(demo: Snapshot) -> None:
    policy = demo.cluster_policies[0]
    spec = {
        **policy.spec,
        "devicePlugin": {**policy.spec["devicePlugin"], "config": {"name": "time-slicing-config"}},
    }
    broken = demo.model_copy(
        update={"cluster_policies": (policy.model_copy(update={"spec": spec}),)}
    )
    (finding,) = run_checks(relabel_keys(broken, L4_NODE, {nvidia.DEVICE_PLUGIN_CONFIG: "x"}))
    assert (finding.check, finding.object) == (
        "policy-configmap-missing",
        f"clusterpolicy/{policy.name}",
    )
    assert "spec.devicePlugin.config.name" in finding.summary
    assert L4_NODE in finding.evidence and MIG_NODE in finding.evidence


def test_a_pending_profile_that_fits_only_after_a_repacking_is_a_warning(demo: Snapshot) -> None:
    """One 3g at 0 (where the MIG manager puts it) leaves no start for a 4g, which needs
    0; the GPU holds both once the 3g moves to 4."""
    one_3g = (
        "version: v1\nmig-configs:\n  one-3g:\n  - devices: all\n    mig-enabled: true\n"
        "    mig-devices:\n      3g.71gb: 1\n"
    )
    cms = tuple(
        c.model_copy(update={"data": {"config.yaml": one_3g}})
        if c.name == f"{MIG_NODE}-mig-config"
        else c
        for c in demo.config_maps
    )
    snap = relabel_keys(
        demo.model_copy(update={"config_maps": cms}), MIG_NODE, {nvidia.MIG_CONFIG: "one-3g"}
    )
    waiting = PodInfo(
        namespace="team", name="big", phase="Pending", limits={"nvidia.com/mig-4g.71gb": "1"}
    )
    (finding,) = run_checks(snap.model_copy(update={"pods": (*snap.pods, waiting)}))
    assert (finding.check, finding.severity) == ("mig-fragmented", Severity.WARNING)
    assert "4g.71gb" in finding.summary and "team/big" in finding.evidence
    assert f"{MIG_NODE} GPU 0 (4 slices free; instances 3g.71gb@0:4)" in finding.evidence
    # a profile there is room for now is no fragmentation
    small = waiting.model_copy(update={"limits": {"nvidia.com/mig-1g.18gb": "1"}})
    assert run_checks(snap.model_copy(update={"pods": (*snap.pods, small)})) == []
