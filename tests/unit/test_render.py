"""`render(policy, facts)`: the desired objects of every state, as the operator applies them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kubegpu.kube.policy import ClusterPolicySpec, parse_policy_spec
from kubegpu.operator.render import (
    HASH_ANNOTATION,
    KUBEGPU_COMMANDS,
    ClusterFacts,
    Owner,
    Rendered,
    default_mig_config,
    object_hash,
    render,
)
from kubegpu.operator.states import STATE_NAMES

IMAGE = "ghcr.io/kubegpu/kubegpu:0.1.0"
FACTS = ClusterFacts(
    namespace="gpu-operator",
    kubegpu_image=IMAGE,
    owner=Owner("cluster-policy", "0b6c1c4e-uid"),
    gpu_nodes=3,
    os_tag="ubuntu24.04",
)

# what the chart's values give (upstream images for the driver and toolkit)
BASE: dict[str, Any] = {
    "mig": {"strategy": "single"},
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {
        "repository": "nvcr.io/nvidia/k8s",
        "image": "container-toolkit",
        "version": "v1.18.1",
    },
    "dcgm": {"enabled": False},
}


def spec(**changes: Any) -> ClusterPolicySpec:
    data: dict[str, Any] = {k: dict(v) for k, v in BASE.items()}
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value}
    return parse_policy_spec(data)


def rendered(**changes: Any) -> Rendered:
    return render(spec(**changes), FACTS)


def pod(r: Rendered, ds: str) -> dict[str, Any]:
    spec: dict[str, Any] = r.daemonset(ds)["spec"]["template"]["spec"]
    return spec


def main(r: Rendered, ds: str) -> dict[str, Any]:
    container: dict[str, Any] = pod(r, ds)["containers"][0]
    return container


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_states_come_in_upstream_order() -> None:
    assert STATE_NAMES == (
        "pre-requisites",
        "state-operator-metrics",
        "state-driver",
        "state-container-toolkit",
        "state-operator-validation",
        "state-device-plugin",
        "state-mps-control-daemon",
        "state-dcgm",
        "state-dcgm-exporter",
        "gpu-feature-discovery",
        "state-mig-manager",
        "state-node-status-exporter",
        "state-vgpu-manager",
        "state-vgpu-device-manager",
        "state-sandbox-validation",
        "state-vfio-manager",
        "state-sandbox-device-plugin",
        "state-kata-device-plugin",
        "state-kata-manager",
        "state-cc-manager",
    )
    assert [s.name for s in rendered().states] == list(STATE_NAMES)


def test_the_default_policy_deploys_the_container_stack() -> None:
    r = rendered()
    daemonsets = [d for s in r.states for d in s.daemonsets]
    assert daemonsets == [
        "nvidia-driver-daemonset",
        "nvidia-container-toolkit-daemonset",
        "nvidia-operator-validator",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-mps-control-daemon",
        "nvidia-dcgm-exporter",
        "gpu-feature-discovery",
        "nvidia-mig-manager",
    ]
    assert not any(s.error for s in r.states) and not r.problems
    kinds = {o["kind"] for o in r.objects()}
    assert kinds == {
        "RuntimeClass",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "ConfigMap",
        "Service",
    }
    assert {o["metadata"]["name"] for o in r.objects() if o["kind"] == "RuntimeClass"} == {
        "nvidia",
        "nvidia-cdi",
        "nvidia-legacy",
    }


@pytest.mark.parametrize(
    ("ds", "subcommand"),
    [
        ("nvidia-device-plugin-daemonset", "device-plugin"),
        ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon"),
        ("gpu-feature-discovery", "feature-discovery"),
        ("nvidia-mig-manager", "mig-manager"),
        ("nvidia-dcgm-exporter", "exporter"),
        ("nvidia-operator-validator", "validator-hold"),
    ],
)
def test_kubegpu_operands_run_the_kubegpu_image_and_subcommand(ds: str, subcommand: str) -> None:
    c = main(rendered(), ds)
    assert c["image"] == IMAGE
    assert c["command"] == ["kubegpu", *KUBEGPU_COMMANDS[subcommand]]
    assert env(c)["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_a_policy_naming_upstream_images_still_runs_kubegpu_operands() -> None:
    r = rendered(
        devicePlugin={
            "repository": "nvcr.io/nvidia",
            "image": "k8s-device-plugin",
            "version": "v0.20.0",
        }
    )
    assert main(r, "nvidia-device-plugin-daemonset")["image"] == IMAGE
    pinned = rendered(
        devicePlugin={
            "repository": "registry.local/kubegpu",
            "image": "kubegpu",
            "version": "0.2.0",
        }
    )
    assert (
        main(pinned, "nvidia-device-plugin-daemonset")["image"]
        == "registry.local/kubegpu/kubegpu:0.2.0"
    )


def test_driver_and_toolkit_run_the_upstream_images_the_policy_names() -> None:
    r = rendered()
    driver = r.daemonset("nvidia-driver-daemonset")
    assert (
        main(r, "nvidia-driver-daemonset")["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04"
    )
    assert driver["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert (
        main(r, "nvidia-container-toolkit-daemonset")["image"]
        == "nvcr.io/nvidia/k8s/container-toolkit:v1.18.1"
    )
    digest = rendered(driver={"version": "sha256:abc123"})
    assert main(digest, "nvidia-driver-daemonset")["image"] == "nvcr.io/nvidia/driver@sha256:abc123"


def test_a_missing_upstream_image_is_an_error_naming_the_field_or_the_env_fallback() -> None:
    r = render(parse_policy_spec({"dcgm": {"enabled": False}}), FACTS)
    assert r.state("state-driver").error == (
        "driver: no image: set driver.repository, driver.image, driver.version "
        "(or set DRIVER_IMAGE on the operator)"
    )
    assert r.state("state-driver").objects == ()
    facts = ClusterFacts(
        gpu_nodes=1,
        image_env={
            "DRIVER_IMAGE": "nvcr.io/nvidia/driver:595.91.07",
            "CONTAINER_TOOLKIT_IMAGE": "tk:1",
        },
    )
    ok = render(parse_policy_spec({"dcgm": {"enabled": False}}), facts)
    assert main(ok, "nvidia-driver-daemonset")["image"] == "nvcr.io/nvidia/driver:595.91.07"
    assert not any(s.error for s in ok.states)


def test_disabled_components_render_nothing() -> None:
    r = rendered(
        driver={"enabled": False}, migManager={"enabled": False}, toolkit={"enabled": False}
    )
    for name in ("state-driver", "state-container-toolkit", "state-mig-manager"):
        assert r.state(name).enabled is False
        assert r.state(name).objects == ()
    # without a managed driver, operands use the host's driver root
    assert env(main(r, "nvidia-device-plugin-daemonset"))["NVIDIA_DRIVER_ROOT"] == "/"
    assert (
        env(main(rendered(), "nvidia-device-plugin-daemonset"))["NVIDIA_DRIVER_ROOT"]
        == "/run/nvidia/driver"
    )


def test_without_gpu_nodes_no_daemonset_is_rendered() -> None:
    r = render(spec(), ClusterFacts(gpu_nodes=0))
    assert not [o for o in r.objects() if o["kind"] == "DaemonSet"]
    assert [o for o in r.objects() if o["kind"] == "ServiceAccount"]


def test_mig_strategy_reaches_the_plugin_gfd_mps_and_plugin_validation() -> None:
    r = rendered(mig={"strategy": "mixed"})
    for ds in (
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-device-plugin-mps-control-daemon",
    ):
        e = env(main(r, ds))
        assert e["MIG_STRATEGY"] == "mixed"
        assert e["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    plugin_check = pod(r, "nvidia-operator-validator")["initContainers"][-1]
    assert plugin_check["name"] == "plugin-validation"
    assert env(plugin_check)["MIG_STRATEGY"] == "mixed"
    none = env(main(rendered(mig={"strategy": "none"}), "nvidia-device-plugin-daemonset"))
    assert none["MIG_STRATEGY"] == "none" and "NVIDIA_MIG_MONITOR_DEVICES" not in none


def test_a_spec_change_changes_only_the_affected_daemonsets_hashes() -> None:
    def hashes(r: Rendered) -> dict[str, str]:
        return {
            o["metadata"]["name"]: o["metadata"]["annotations"][HASH_ANNOTATION]
            for o in r.objects()
            if o["kind"] == "DaemonSet"
        }

    before, after = hashes(rendered()), hashes(rendered(mig={"strategy": "mixed"}))
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-mps-control-daemon",
        "gpu-feature-discovery",
        "nvidia-operator-validator",
    }
    assert hashes(rendered()) == before  # deterministic


def test_every_object_is_labelled_owned_and_hashed() -> None:
    for obj in rendered().objects():
        meta = obj["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "kubegpu-operator"
        assert meta["labels"]["kubegpu.io/state"] in STATE_NAMES
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "name": "cluster-policy",
                "uid": "0b6c1c4e-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["annotations"][HASH_ANNOTATION] == object_hash(obj)
        if obj["kind"] not in {"RuntimeClass", "ClusterRole", "ClusterRoleBinding"}:
            assert meta["namespace"] == "gpu-operator"


def test_operand_daemonsets_select_their_deploy_label_and_tolerate_gpu_nodes() -> None:
    r = rendered(
        daemonsets={"priorityClassName": "gpu-critical", "rollingUpdate": {"maxUnavailable": "10%"}}
    )
    for s in r.states:
        for name in s.daemonsets:
            ds = r.daemonset(name)
            p = ds["spec"]["template"]["spec"]
            assert ds["spec"]["selector"] == {"matchLabels": {"app": name}}
            assert p["priorityClassName"] == "gpu-critical"
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in p[
                "tolerations"
            ]
            assert any(k.startswith("nvidia.com/gpu.deploy.") for k in p["nodeSelector"])
            if name != "nvidia-driver-daemonset":
                assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "10%"}
    assert pod(r, "nvidia-device-plugin-daemonset")["nodeSelector"] == {
        "nvidia.com/gpu.deploy.device-plugin": "true"
    }
    assert pod(r, "nvidia-device-plugin-mps-control-daemon")["nodeSelector"] == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/mps.capable": "true",
    }
    count = rendered(daemonsets={"rollingUpdate": {"maxUnavailable": "2"}}).daemonset(
        "gpu-feature-discovery"
    )
    assert count["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 2}


def test_operands_wait_for_the_validators_ready_files() -> None:
    r = rendered()
    for ds in (
        "nvidia-device-plugin-daemonset",
        "gpu-feature-discovery",
        "nvidia-mig-manager",
        "nvidia-dcgm-exporter",
        "nvidia-device-plugin-mps-control-daemon",
    ):
        (init,) = pod(r, ds)["initContainers"]
        assert init["command"] == ["kubegpu", "validator", "wait"]
        assert init["args"] == ["toolkit-ready"]
        assert {"name": "run-nvidia-validations", "mountPath": "/run/nvidia/validations"} in init[
            "volumeMounts"
        ]
    toolkit_init = pod(r, "nvidia-container-toolkit-daemonset")["initContainers"]
    assert [c["name"] for c in toolkit_init] == ["driver-validation"]
    assert env(toolkit_init[0])["WITH_WAIT"] == "true"


def test_the_validator_checks_driver_toolkit_cuda_then_plugin() -> None:
    r = rendered(
        validator={
            "env": [{"name": "X", "value": "1"}],
            "cuda": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]},
        }
    )
    inits = pod(r, "nvidia-operator-validator")["initContainers"]
    assert [c["name"] for c in inits] == [
        "driver-validation",
        "toolkit-validation",
        "cuda-validation",
        "plugin-validation",
    ]
    assert [env(c)["COMPONENT"] for c in inits] == ["driver", "toolkit", "cuda", "plugin"]
    assert all(c["command"] == ["kubegpu", "validator", "check"] for c in inits)
    assert all(env(c)["X"] == "1" for c in inits)
    assert env(inits[2])["WITH_WORKLOAD"] == "false"  # per-check env wins
    assert env(inits[3])["VALIDATOR_IMAGE"] == IMAGE
    without_plugin = rendered(devicePlugin={"enabled": False})
    assert [c["name"] for c in pod(without_plugin, "nvidia-operator-validator")["initContainers"]][
        -1
    ] == "cuda-validation"


def test_device_plugin_named_configs() -> None:
    r = rendered(devicePlugin={"config": {"name": "plugin-configs", "default": "any"}})
    p = pod(r, "nvidia-device-plugin-daemonset")
    assert {"name": "available-configs", "configMap": {"name": "plugin-configs"}} in p["volumes"]
    e = env(main(r, "nvidia-device-plugin-daemonset"))
    assert e["CONFIG_FILE_SRCDIR"] == "/available-configs"
    assert e["DEFAULT_CONFIG"] == "any"
    assert "CONFIG_FILE_SRCDIR" not in env(main(rendered(), "nvidia-device-plugin-daemonset"))


def test_policy_env_and_args_override_the_main_container() -> None:
    r = rendered(
        devicePlugin={
            "env": [
                {"name": "DEVICE_LIST_STRATEGY", "value": "cdi-cri"},
                {"name": "MIG_STRATEGY", "value": "none"},
            ]
        },
        gfd={"args": ["--oneshot"]},
        migManager={"env": [{"name": "WITH_REBOOT", "value": "true"}]},
    )
    e = env(main(r, "nvidia-device-plugin-daemonset"))
    assert e["DEVICE_LIST_STRATEGY"] == "cdi-cri"
    assert e["MIG_STRATEGY"] == "none"
    assert main(r, "gpu-feature-discovery")["args"] == ["--oneshot"]
    assert env(main(r, "nvidia-mig-manager"))["WITH_REBOOT"] == "true"


def test_mig_manager_default_and_custom_configs() -> None:
    r = rendered()
    cms = {
        o["metadata"]["name"]: o
        for o in r.state("state-mig-manager").objects
        if o["kind"] == "ConfigMap"
    }
    assert set(cms) == {"default-mig-parted-config", "default-gpu-clients"}
    configs = yaml.safe_load(cms["default-mig-parted-config"]["data"]["config.yaml"])
    assert configs["version"] == "v1"
    assert {"all-disabled", "all-enabled", "all-balanced", "all-1g.18gb"} <= set(
        configs["mig-configs"]
    )
    e = env(main(r, "nvidia-mig-manager"))
    assert e["DEFAULT_CONFIG_FILE"] == "/mig-parted-config/config-default.yaml"
    assert "CONFIG_FILE" not in e
    custom = rendered(
        migManager={"config": {"name": "my-mig"}, "gpuClientsConfig": {"name": "my-clients"}}
    )
    assert not [o for o in custom.state("state-mig-manager").objects if o["kind"] == "ConfigMap"]
    assert (
        env(main(custom, "nvidia-mig-manager"))["CONFIG_FILE"] == "/mig-parted-config/config.yaml"
    )
    assert {"name": "mig-parted-config", "configMap": {"name": "my-mig"}} in pod(
        custom, "nvidia-mig-manager"
    )["volumes"]
    assert default_mig_config() == default_mig_config()


def test_the_exporter_has_a_service_and_an_optional_service_monitor() -> None:
    r = rendered(
        dcgmExporter={
            "serviceMonitor": {
                "enabled": True,
                "interval": "30s",
                "additionalLabels": {"release": "prom"},
            }
        }
    )
    kinds = [o["kind"] for o in r.state("state-dcgm-exporter").objects]
    assert "ServiceMonitor" not in kinds  # the monitoring CRD is not installed
    service = next(o for o in r.state("state-dcgm-exporter").objects if o["kind"] == "Service")
    assert service["spec"]["ports"] == [
        {"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}
    ]
    assert main(r, "nvidia-dcgm-exporter")["ports"] == [{"name": "metrics", "containerPort": 9400}]
    with_crd = render(
        spec(dcgmExporter={"serviceMonitor": {"enabled": True, "interval": "30s"}}),
        ClusterFacts(
            gpu_nodes=1,
            service_monitor_crd=True,
            image_env={"DRIVER_IMAGE": "d", "CONTAINER_TOOLKIT_IMAGE": "t"},
        ),
    )
    monitor = next(o for o in with_crd.objects() if o["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"] == [
        {"port": "gpu-metrics", "path": "/metrics", "interval": "30s"}
    ]
    off = render(spec(), ClusterFacts(gpu_nodes=1, service_monitor_crd=True))
    assert not [o for o in off.objects() if o["kind"] == "ServiceMonitor"]


def test_cdi_and_nri_rules() -> None:
    assert env(main(rendered(), "nvidia-device-plugin-daemonset"))["CDI_ENABLED"] == "true"
    assert "CDI_ENABLED" not in env(
        main(rendered(cdi={"enabled": False}), "nvidia-device-plugin-daemonset")
    )
    bad = rendered(cdi={"enabled": False, "nriPluginEnabled": True})
    assert bad.problems == ("cdi.nriPluginEnabled needs cdi.enabled=true",)
    nri = rendered(cdi={"nriPluginEnabled": True})
    assert nri.state("pre-requisites").objects == ()
    assert "runtimeClassName" not in pod(nri, "nvidia-device-plugin-daemonset")
    assert pod(rendered(), "nvidia-device-plugin-daemonset")["runtimeClassName"] == "nvidia"


def test_sandbox_workloads_deploy_the_vm_operands() -> None:
    images = {
        section: {"repository": "nvcr.io/nvidia", "image": section.lower(), "version": "v1"}
        for section in ("vfioManager", "sandboxDevicePlugin", "vgpuManager", "vgpuDeviceManager")
    }
    r = rendered(
        sandboxWorkloads={"enabled": True},
        vfioManager={"enabled": True, **images["vfioManager"]},
        sandboxDevicePlugin={"enabled": True, **images["sandboxDevicePlugin"]},
        vgpuManager={"enabled": True, **images["vgpuManager"]},
        vgpuDeviceManager={"enabled": True, **images["vgpuDeviceManager"]},
    )
    enabled = {s.name for s in r.states if s.enabled}
    assert {
        "state-vfio-manager",
        "state-sandbox-device-plugin",
        "state-sandbox-validation",
        "state-vgpu-manager",
        "state-vgpu-device-manager",
    } <= enabled
    assert "state-kata-device-plugin" not in enabled  # mode kubevirt
    assert "state-kata-manager" not in enabled  # deprecated: never
    assert main(r, "nvidia-vfio-manager")["image"] == "nvcr.io/nvidia/vfiomanager:v1"
    assert not any(s.error for s in r.states)
    assert not rendered(vfioManager={"enabled": True}).state("state-vfio-manager").enabled


def test_cc_manager_default_mode_becomes_its_default_cc_mode() -> None:
    cc = {"enabled": True, "repository": "nvcr.io/nvidia/cloud-native", "image": "k8s-cc-manager"}
    sandbox = {"enabled": True, "mode": "kata"}
    r = rendered(sandboxWorkloads=sandbox, ccManager={**cc, "version": "v1", "defaultMode": "on"})
    assert env(main(r, "nvidia-cc-manager"))["DEFAULT_CC_MODE"] == "on"
    unset = rendered(sandboxWorkloads=sandbox, ccManager={**cc, "version": "v1"})
    assert "DEFAULT_CC_MODE" not in env(main(unset, "nvidia-cc-manager"))
    own = [{"name": "DEFAULT_CC_MODE", "value": "devtools"}]
    mine = rendered(
        sandboxWorkloads=sandbox, ccManager={**cc, "version": "v1", "defaultMode": "on", "env": own}
    )
    assert env(main(mine, "nvidia-cc-manager"))["DEFAULT_CC_MODE"] == "devtools"


def test_gds_and_gdrcopy_reach_the_device_plugin_as_upstream_sets_them() -> None:
    plugin = "nvidia-device-plugin-daemonset"
    both = env(main(rendered(gds={"enabled": True}, gdrcopy={"enabled": True}), plugin))
    gpudirect = ("GDS_ENABLED", "MOFED_ENABLED", "GDRCOPY_ENABLED")
    assert {name: both[name] for name in gpudirect} == dict.fromkeys(gpudirect, "true")
    neither = env(main(rendered(gds={"enabled": False}), plugin))
    assert not set(gpudirect) & set(neither)


def test_the_validators_pull_secrets_reach_its_workload_pods() -> None:
    secret = {"imagePullSecrets": ["regcred", "mirror"]}
    inits = pod(rendered(validator=secret), "nvidia-operator-validator")["initContainers"]
    cuda = next(c for c in inits if c["name"] == "cuda-validation")
    assert env(cuda)["VALIDATOR_IMAGE_PULL_SECRETS"] == "regcred,mirror"
    plain = pod(rendered(), "nvidia-operator-validator")["initContainers"]
    assert all("VALIDATOR_IMAGE_PULL_SECRETS" not in env(c) for c in plain)
