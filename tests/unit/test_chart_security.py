"""The operator's pod, as the Helm chart renders it, runs with no privilege at all: it only
talks to the API server (docs/security.md, "The operator's pod")."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.sim.controlplane.binaries import find_bin_dir

CHART = Path(__file__).parents[2] / "deploy" / "helm" / "kubegpu"


@cache
def operator_pod(*sets: str) -> dict[str, Any]:
    flags = [f"--set={s}" for s in sets]
    out = subprocess.run(
        [str(find_bin_dir() / "helm"), "template", "kg", str(CHART), "-n", "gpu-operator", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


# values a user might set that must not loosen the operator's securityContext
VALUE_SETS = [(), ("operator.resources=null",), ("operator.logLevel=DEBUG",)]


@pytest.mark.parametrize("sets", VALUE_SETS)
def test_the_operator_runs_as_a_non_root_user(sets: tuple[str, ...]) -> None:
    pod = operator_pod(*sets)
    sc = pod["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] > 0 and sc["runAsGroup"] > 0
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("sets", VALUE_SETS)
def test_the_operator_container_has_no_capabilities_and_a_read_only_root(
    sets: tuple[str, ...],
) -> None:
    (container,) = operator_pod(*sets)["containers"]
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not sc.get("privileged")
    assert "runAsUser" not in sc or sc["runAsUser"] > 0


def test_the_operator_needs_nothing_from_its_node() -> None:
    pod = operator_pod()
    assert not any("hostPath" in v for v in pod.get("volumes") or [])
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
