"""The node labels the operator owns: GPU detection and the nvidia.com/gpu.deploy.* labels."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.labels import label_changes, mig_capable, os_tag, relevant_labels

NFD_GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}
POLICY = parse_policy_spec({})
SANDBOX = parse_policy_spec({"sandboxWorkloads": {"enabled": True}})
CONTAINER_DEPLOY = {
    f"nvidia.com/gpu.deploy.{o}": "true"
    for o in (
        "driver",
        "gpu-feature-discovery",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "node-status-exporter",
        "operator-validator",
        "client",
    )
}


def apply(labels: dict[str, str], patch: dict[str, Any]) -> dict[str, str]:
    out = dict(labels)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def test_a_new_gpu_node_gets_gpu_present_and_every_container_operand() -> None:
    patch = label_changes(NFD_GPU, POLICY)
    assert patch == {"nvidia.com/gpu.present": "true", **CONTAINER_DEPLOY}
    # level-based: once applied there is nothing left to do
    assert label_changes(apply(NFD_GPU, patch), POLICY) == {}


@pytest.mark.parametrize(
    "nfd",
    [
        "feature.node.kubernetes.io/pci-10de.present",
        "feature.node.kubernetes.io/pci-0302_10de.present",
        "feature.node.kubernetes.io/pci-0300_10de.present",
    ],
)
def test_any_nfd_nvidia_pci_label_makes_a_gpu_node(nfd: str) -> None:
    assert label_changes({nfd: "true"}, POLICY)["nvidia.com/gpu.present"] == "true"


def test_a_cpu_node_is_left_alone() -> None:
    assert label_changes({"feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"}, POLICY) == {}
    assert label_changes({}, POLICY) == {}


def test_a_node_that_lost_its_gpus_is_marked_and_loses_its_deploy_labels() -> None:
    labels = {"nvidia.com/gpu.present": "true", **CONTAINER_DEPLOY}
    patch = label_changes(labels, POLICY)
    assert patch["nvidia.com/gpu.present"] == "false"
    assert {k for k, v in patch.items() if v is None} == set(CONTAINER_DEPLOY)


@pytest.mark.parametrize("value", ["false", "paused-for-mig-change", "paused-for-driver-upgrade"])
def test_a_set_deploy_label_is_never_overwritten(value: str) -> None:
    labels = {**NFD_GPU, "nvidia.com/gpu.present": "true", **CONTAINER_DEPLOY}
    labels["nvidia.com/gpu.deploy.device-plugin"] = value
    assert label_changes(labels, POLICY) == {}


def test_an_empty_deploy_label_is_filled_in() -> None:
    labels = {**NFD_GPU, "nvidia.com/gpu.present": "true", **CONTAINER_DEPLOY}
    labels["nvidia.com/gpu.deploy.dcgm"] = ""
    assert label_changes(labels, POLICY) == {"nvidia.com/gpu.deploy.dcgm": "true"}


def test_deploy_operands_false_removes_every_deploy_label() -> None:
    labels = {
        **NFD_GPU,
        "nvidia.com/gpu.present": "true",
        **CONTAINER_DEPLOY,
        "nvidia.com/gpu.deploy.mig-manager": "true",
        "nvidia.com/gpu.deploy.operands": "false",
    }
    patch = label_changes(labels, POLICY)
    assert patch == dict.fromkeys([*CONTAINER_DEPLOY, "nvidia.com/gpu.deploy.mig-manager"])
    after = apply(labels, patch)
    assert after["nvidia.com/gpu.deploy.operands"] == "false"
    assert label_changes(after, POLICY) == {}


def test_mig_capable_nodes_get_the_mig_manager_and_all_disabled() -> None:
    labels = {**NFD_GPU, "nvidia.com/mig.capable": "true"}
    patch = label_changes(labels, POLICY)
    assert patch["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert patch["nvidia.com/mig.config"] == "all-disabled"
    # an existing choice is kept
    chosen = label_changes({**labels, "nvidia.com/mig.config": "all-balanced"}, POLICY)
    assert "nvidia.com/mig.config" not in chosen
    # no default asked for, or MIG manager disabled: no mig.config label
    no_default = parse_policy_spec({"migManager": {"config": {"default": ""}}})
    assert "nvidia.com/mig.config" not in label_changes(labels, no_default)
    disabled = parse_policy_spec({"migManager": {"enabled": False}})
    assert "nvidia.com/mig.config" not in label_changes(labels, disabled)


@pytest.mark.parametrize(
    ("labels", "capable"),
    [
        ({"nvidia.com/mig.capable": "true"}, True),
        (
            {"nvidia.com/mig.capable": "false", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
            False,
        ),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, True),
        ({"nvidia.com/gpu.product": "NVIDIA-L4"}, False),
        ({"nvidia.com/mig.capable": "true", "nvidia.com/vgpu.host-driver-version": "580"}, False),
    ],
)
def test_mig_capability_comes_from_gfd_or_the_product_name(
    labels: dict[str, str], capable: bool
) -> None:
    assert mig_capable(labels) is capable


def test_the_workload_config_is_honoured_only_with_sandbox_workloads() -> None:
    vm = {**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-passthrough"}
    assert label_changes(vm, POLICY) == label_changes(NFD_GPU, POLICY)  # container stack
    patch = label_changes(vm, SANDBOX)
    assert {k for k, v in patch.items() if v == "true"} == {
        "nvidia.com/gpu.present",
        "nvidia.com/gpu.deploy.sandbox-device-plugin",
        "nvidia.com/gpu.deploy.sandbox-validator",
        "nvidia.com/gpu.deploy.vfio-manager",
        "nvidia.com/gpu.deploy.kata-manager",
        "nvidia.com/gpu.deploy.cc-manager",
        "nvidia.com/gpu.deploy.client",
    }
    vgpu = label_changes({**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-vgpu"}, SANDBOX)
    assert vgpu["nvidia.com/gpu.deploy.vgpu-manager"] == "true"
    assert vgpu["nvidia.com/gpu.deploy.vgpu-device-manager"] == "true"
    kata = parse_policy_spec({"sandboxWorkloads": {"enabled": True, "mode": "kata"}})
    assert "nvidia.com/gpu.deploy.kata-sandbox-device-plugin" in label_changes(vm, kata)


def test_changing_the_workload_config_removes_the_other_stacks_labels() -> None:
    container = apply(NFD_GPU, label_changes(NFD_GPU, SANDBOX))
    vm = {**container, "nvidia.com/gpu.workload.config": "vm-passthrough"}
    patch = label_changes(vm, SANDBOX)
    removed = {k for k, v in patch.items() if v is None}
    assert removed == set(CONTAINER_DEPLOY) - {"nvidia.com/gpu.deploy.client"}


def test_an_invalid_workload_config_falls_back_to_the_default() -> None:
    policy = parse_policy_spec(
        {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-vgpu"}}
    )
    patch = label_changes({**NFD_GPU, "nvidia.com/gpu.workload.config": "bogus"}, policy)
    assert patch["nvidia.com/gpu.deploy.vgpu-manager"] == "true"


def test_only_relevant_labels_trigger_a_reconcile() -> None:
    labels = {
        "kubernetes.io/hostname": "n1",
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/mig.config": "all-balanced",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gfd.timestamp": "1724632719",
    }
    assert relevant_labels(labels) == {
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/mig.config": "all-balanced",
        "feature.node.kubernetes.io/pci-10de.present": "true",
    }


@pytest.mark.parametrize(
    ("os_id", "version", "tag"),
    [("ubuntu", "24.04", "ubuntu24.04"), ("rhel", "9.4", "rhel9"), ("rocky", "8.10", "rocky8")],
)
def test_the_driver_os_tag_comes_from_nfd(os_id: str, version: str, tag: str) -> None:
    labels = {
        "feature.node.kubernetes.io/system-os_release.ID": os_id,
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": version,
    }
    assert os_tag(labels) == tag
    assert os_tag({}) is None
