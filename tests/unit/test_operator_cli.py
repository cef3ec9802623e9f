"""`kubegpu operator render` and `kubegpu operator crds`: what the operator would apply."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.kube.crds import crd_manifests

runner = CliRunner()

POLICY = """
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  mig: {strategy: mixed}
  driver: {enabled: false}
  toolkit: {enabled: false}
  dcgm: {enabled: false}
"""


def test_render_prints_the_objects_in_state_order(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    result = runner.invoke(
        app, ["operator", "render", "-f", str(policy), "--namespace", "ops", "--image", "kg:dev"]
    )
    assert result.exit_code == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert docs[0]["kind"] == "RuntimeClass"
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    assert daemonsets[0]["metadata"]["name"] == "nvidia-operator-validator"
    assert all(d["metadata"]["namespace"] == "ops" for d in daemonsets)
    plugin = next(
        d for d in daemonsets if d["metadata"]["name"] == "nvidia-device-plugin-daemonset"
    )
    container = plugin["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "kg:dev"
    assert {"name": "MIG_STRATEGY", "value": "mixed"} in container["env"]
    none = runner.invoke(app, ["operator", "render", "-f", str(policy), "--gpu-nodes", "0"])
    assert "kind: DaemonSet" not in none.stdout


def test_render_names_what_is_missing(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("kind: ClusterPolicy\nspec: {dcgm: {enabled: false}}\n")
    result = runner.invoke(app, ["operator", "render", "-f", str(policy)], env={"DRIVER_IMAGE": ""})
    assert result.exit_code == 1
    assert (
        "state-driver: driver: no image: set driver.repository, driver.image, driver.version"
        in result.stderr
    )
    other = tmp_path / "other.yaml"
    other.write_text("kind: ConfigMap\n")
    assert (
        "not a ClusterPolicy" in runner.invoke(app, ["operator", "render", "-f", str(other)]).stderr
    )


def test_crds_prints_both_definitions() -> None:
    result = runner.invoke(app, ["operator", "crds"])
    assert result.exit_code == 0
    assert list(yaml.safe_load_all(result.stdout)) == crd_manifests()


def test_demo_without_a_chart_says_where_it_looked_before_starting_anything(
    tmp_path: Path,
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: gpu-1, gpus: 'l4:1'}]\n")
    result = runner.invoke(
        app, ["operator", "demo", "-f", str(cluster), "--chart", str(tmp_path / "no-chart")]
    )
    assert result.exit_code == 1
    assert f"--chart {tmp_path / 'no-chart'}: not a Helm chart" in result.stderr


def test_demo_with_a_bad_cluster_file_names_the_field(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: [{name: gpu-1, gpus: 'no-such-gpu:1'}]\n")
    result = runner.invoke(app, ["operator", "demo", "-f", str(cluster)])
    assert result.exit_code == 1
    assert str(cluster) in result.stderr
    assert "gpus" in result.stderr
    assert "no-such-gpu" in result.stderr


def test_the_operator_refuses_a_log_level_it_cannot_use() -> None:
    result = runner.invoke(app, ["operator"], env={"LOG_LEVEL": "verbose"})
    assert result.exit_code == 1
    assert "LOG_LEVEL 'verbose': use debug, info, warn or error" in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a typo'd field would be dropped: the rendered stack would silently be the default
        (
            "kind: ClusterPolicy\nspec: {migg: {strategy: mixed}}\n",
            "field spec.migg: not a ClusterPolicy field",
        ),
        (
            "kind: ClusterPolicy\nsepc: {mig: {strategy: mixed}}\n",
            "field sepc: not a field of a Kubernetes object",
        ),
        # the API server refuses a string where its schema says boolean: no coercion
        (
            "kind: ClusterPolicy\nspec: {devicePlugin: {enabled: 'false'}}\n",
            "field spec.devicePlugin.enabled, value 'false': Input should be a valid boolean",
        ),
        # an invalid value is the file's error, never a traceback
        (
            "kind: ClusterPolicy\nspec: {mig: {strategy: 5}}\n",
            "field spec.mig.strategy, value 5: Input should be 'none', 'single' or 'mixed'",
        ),
        ("kind: ClusterPolicy\nspec: [1, 2]\n", "field spec, value [1, 2]: expected a mapping"),
        (
            "apiVersion: nvidia.com/v2\nkind: ClusterPolicy\n",
            "field apiVersion, value 'nvidia.com/v2': a ClusterPolicy is nvidia.com/v1",
        ),
    ],
)
def test_render_refuses_a_policy_the_api_server_would_not_take_as_written(
    tmp_path: Path, text: str, message: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    result = runner.invoke(app, ["operator", "render", "-f", str(policy)])
    assert result.exit_code == 1
    assert f"{policy}: {message}" in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_the_operator_refuses_a_malformed_kubeconfig_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [\n")
    result = runner.invoke(app, ["operator", "--kubeconfig", str(bad)])
    assert result.exit_code == 1
    assert f"--kubeconfig: {bad}: not a usable kubeconfig (ParserError" in result.stderr
