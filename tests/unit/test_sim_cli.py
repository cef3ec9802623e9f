"""What `kubegpu sim up` tells a user about reaching the cluster with kubectl."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubegpu.cli.app import app
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


KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {}}]
"""


@pytest.mark.parametrize(
    ("options", "kubeconfig", "message"),
    [
        (["--label", "gpu"], KUBECONFIG, "--label 'gpu': expected KEY=VALUE"),  # was dropped
        (["--label", "k=a b"], KUBECONFIG, "--label 'k=a b': a label value is at most 63"),
        (["--name", "Bad_Name"], KUBECONFIG, "--name 'Bad_Name': not a node name"),
        (["--gpus", "nope:1"], KUBECONFIG, "--gpus: sim node spec 'nope:1': unknown GPU model"),
        ([], "{bad", "not a usable kubeconfig (ParserError"),
        ([], "apiVersion: v1\nkind: Config\n", "not a usable kubeconfig (KeyError"),
    ],
)
def test_node_refuses_a_bad_option_before_writing_its_root(
    tmp_path: Path, options: list[str], kubeconfig: str, message: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig)
    base = ["--name", "n1", "--kubeconfig", str(path), "--root", str(tmp_path / "root")]
    result = CliRunner().invoke(app, ["sim", "node", *base, *options])
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "root").exists()
