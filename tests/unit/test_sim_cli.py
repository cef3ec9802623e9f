"""What `kubegpu sim up` tells a user about reaching the cluster with kubectl."""

from __future__ import annotations

from pathlib import Path

from kubegpu.cli.sim import kubectl_usage


def test_up_says_where_the_kubeconfig_and_the_built_kubectl_are(tmp_path: Path) -> None:
    kubectl = tmp_path / "bin" / "kubectl"
    kubectl.parent.mkdir()
    kubectl.write_text("")
    lines = kubectl_usage(tmp_path / "admin.kubeconfig", kubectl.parent)
    assert lines[0] == f"export KUBECONFIG={tmp_path / 'admin.kubeconfig'}"
    assert lines[1].startswith(f"export PATH={kubectl.parent}:$PATH")
    assert f"# kubectl: {kubectl}" in lines[1]
    assert lines[2] == "kubectl get nodes"


def test_up_says_how_to_build_kubectl_when_it_is_missing(tmp_path: Path) -> None:
    lines = kubectl_usage(tmp_path / "admin.kubeconfig", tmp_path)
    assert (
        lines[1] == f"kubectl is not built ({tmp_path / 'kubectl'}): run scripts/build-kubernetes"
    )
