"""Spec values the operator accepts but renders into no operand are named, so the operator can
warn about them instead of letting them look applied."""

from __future__ import annotations

from kubegpu.kube.policy import parse_gpu_cluster_spec, parse_policy_spec
from kubegpu.operator.ignored_fields import ignored_cluster_fields, ignored_policy_fields


def fields(found: tuple[str, ...]) -> list[str]:
    return [f.split(":", 1)[0] for f in found]


def test_a_plain_policy_and_an_upstream_sample_have_nothing_ignored() -> None:
    assert ignored_policy_fields(parse_policy_spec({})) == ()
    sample = {
        "operator": {"use_ocp_driver_toolkit": False, "metrics": {"serviceMonitor": {}}},
        "driver": {"usePrecompiled": False, "kernelModuleType": "auto"},
        "dcgmExporter": {"hpcJobMapping": {"enabled": False}},
        "migManager": {"gpuClientsConfig": {"name": ""}},
    }
    assert ignored_policy_fields(parse_policy_spec(sample)) == ()


def test_policy_values_no_operand_carries_are_named() -> None:
    spec = parse_policy_spec(
        {
            "operator": {
                "use_ocp_driver_toolkit": True,
                "metrics": {"serviceMonitor": {"enabled": True}},
            },
            "psp": {"enabled": True},
            "driver": {
                "usePrecompiled": True,
                "useOpenKernelModules": True,
                "virtualTopology": {"config": "topo"},
            },
            "dcgmExporter": {
                "hpcJobMapping": {"enabled": True, "directory": "/var/lib/hpc"},
                "podLabelAllowlistRegex": ["^app$"],
            },
            "migManager": {"gpuClientsConfig": {"name": "my-clients"}},
            "validator": {"args": ["--verbose"]},
            "gds": {"enabled": True},
        }
    )
    assert fields(ignored_policy_fields(spec)) == [
        "operator.use_ocp_driver_toolkit",
        "operator.metrics.serviceMonitor.enabled",
        "psp.enabled",
        "driver.usePrecompiled",
        "driver.useOpenKernelModules",
        "gds.enabled",
        "driver.virtualTopology.config",
        "validator.args",
        "dcgmExporter.hpcJobMapping.enabled",
        "dcgmExporter.podLabelAllowlistRegex",
        "migManager.gpuClientsConfig.name",
    ]


def test_values_of_disabled_operands_are_not_named() -> None:
    spec = parse_policy_spec(
        {
            "driver": {"enabled": False, "usePrecompiled": True},
            "dcgmExporter": {"enabled": False, "hpcJobMapping": {"enabled": True}},
            "migManager": {"enabled": False, "gpuClientsConfig": {"name": "c"}},
        }
    )
    assert ignored_policy_fields(spec) == ()


def test_gpu_cluster_values_no_operand_carries_are_named() -> None:
    assert ignored_cluster_fields(parse_gpu_cluster_spec({})) == ()
    gc = parse_gpu_cluster_spec(
        {
            "hostPaths": {"driverInstallDir": "/run/nvidia/driver", "kubeletRootDir": "/k"},
            "draDriver": {
                "computeDomains": {"enabled": True},
                "gpus": {"kubeletPlugin": {"healthcheck": {"enabled": True, "port": 51515}}},
            },
        }
    )
    assert fields(ignored_cluster_fields(gc)) == [
        "hostPaths.driverInstallDir",
        "draDriver.computeDomains.enabled",
        "draDriver.gpus.kubeletPlugin.healthcheck.enabled",
    ]
