"""Reserved keys: labels, annotations and env names the operator relies on cannot be set by
policy values; a policy that tries renders nothing and names the field and the key."""

from __future__ import annotations

from typing import Any

import pytest

from kubegpu.kube.policy import parse_gpu_cluster_spec, parse_policy_spec
from kubegpu.operator.gpucluster import render_gpu_cluster
from kubegpu.operator.render import MANAGED_BY, MANAGED_BY_LABEL, ClusterFacts, Owner, render
from kubegpu.operator.reserved import RESERVED_ANNOTATIONS, RESERVED_ENV, RESERVED_LABELS

FACTS = ClusterFacts(owner=Owner("cluster-policy", "uid-1"), gpu_nodes=2)
BASE: dict[str, Any] = {
    "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
    "toolkit": {"repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit", "version": "v1"},
    "dcgm": {"enabled": True},
}


def policy(**changes: Any) -> Any:
    return parse_policy_spec({**BASE, **changes})


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        (
            {"daemonsets": {"labels": {MANAGED_BY_LABEL: "other"}}},
            f"field daemonsets.labels, key '{MANAGED_BY_LABEL}': reserved",
        ),
        ({"daemonsets": {"labels": {"app": "mine"}}}, "field daemonsets.labels, key 'app'"),
        (
            {"daemonsets": {"annotations": {"nvidia.com/last-applied-hash": "x"}}},
            "field daemonsets.annotations, key 'nvidia.com/last-applied-hash': reserved",
        ),
        (
            {"gfd": {"env": [{"name": "A", "value": "1"}, {"name": "NODE_NAME", "value": "n2"}]}},
            "field gfd.env[1].name, value 'NODE_NAME': reserved, the operator sets it from the "
            "downward API (spec.nodeName)",
        ),
        (
            {"validator": {"plugin": {"env": [{"name": "OPERATOR_NAMESPACE", "value": "x"}]}}},
            "field validator.plugin.env[0].name, value 'OPERATOR_NAMESPACE'",
        ),
        (
            {"migManager": {"env": [{"name": "POD_NAME", "value": "x"}]}},
            "field migManager.env[0].name, value 'POD_NAME'",
        ),
        (
            {
                "dcgmExporter": {
                    "serviceMonitor": {"enabled": True, "additionalLabels": {MANAGED_BY_LABEL: "x"}}
                }
            },
            "field dcgmExporter.serviceMonitor.additionalLabels",
        ),
    ],
)
def test_a_policy_setting_a_reserved_key_renders_nothing_and_names_it(
    changes: dict[str, Any], names: str
) -> None:
    rendered = render(policy(**changes), FACTS)
    assert rendered.objects() == []
    assert any(names in p for p in rendered.problems), rendered.problems


def test_a_gpu_cluster_setting_a_reserved_key_renders_nothing() -> None:
    gc = parse_gpu_cluster_spec(
        {
            "draDriver": {
                "gpus": {"kubeletPlugin": {"env": [{"name": "NODE_NAME", "value": "other"}]}}
            },
            "daemonsets": {"labels": {MANAGED_BY_LABEL: "other"}},
        }
    )
    rendered = render_gpu_cluster(gc, FACTS)
    assert rendered.objects() == []
    assert [p.split(",")[0] for p in rendered.problems] == [
        "field daemonsets.labels",
        "field draDriver.gpus.kubeletPlugin.env[0].name",
    ]


def test_other_user_labels_annotations_and_env_still_land() -> None:
    rendered = render(
        policy(
            daemonsets={"labels": {"team": "ml"}, "annotations": {"note": "x"}},
            gfd={"env": [{"name": "GFD_SLEEP_INTERVAL", "value": "30s"}]},
        ),
        FACTS,
    )
    assert rendered.problems == ()
    gfd = rendered.daemonset("gpu-feature-discovery")
    assert gfd["metadata"]["labels"]["team"] == "ml"
    assert gfd["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
    assert gfd["spec"]["template"]["metadata"]["labels"]["team"] == "ml"
    assert gfd["spec"]["template"]["metadata"]["annotations"]["note"] == "x"
    env = gfd["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "GFD_SLEEP_INTERVAL", "value": "30s"} in env


def _everything() -> Any:
    return policy(
        migManager={"enabled": True},
        nodeStatusExporter={"enabled": True},
        dcgmExporter={"serviceMonitor": {"enabled": True}},
    )


def test_the_tables_cover_every_key_the_operator_relies_on() -> None:
    """Each downward-API env, each label a selector matches and each annotation the operator
    reads back is in the reserved tables (a new one added to an operand must be too)."""
    facts = ClusterFacts(owner=Owner("p", "u"), gpu_nodes=1, service_monitor_crd=True)
    rendered = [render(_everything(), facts), render_gpu_cluster(parse_gpu_cluster_spec({}), facts)]
    objects = [o for r in rendered for o in r.objects()]
    for obj in objects:
        assert MANAGED_BY_LABEL in RESERVED_LABELS
        assert set(obj["metadata"]["annotations"]) <= set(RESERVED_ANNOTATIONS) | {
            "prometheus.io/scrape"
        }
        if obj["kind"] != "DaemonSet":
            continue
        assert set(obj["spec"]["selector"]["matchLabels"]) <= set(RESERVED_LABELS)
        pod = obj["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            downward = {e["name"] for e in c.get("env", []) if "valueFrom" in e}
            assert downward <= set(RESERVED_ENV), (obj["metadata"]["name"], downward)


@pytest.mark.parametrize("value", ["lots", "1 Gi", "5_0", "1.2.3", "Ki", ""])
def test_a_resource_value_that_is_no_quantity_renders_nothing_and_names_the_field(
    value: str,
) -> None:
    rendered = render(policy(dcgmExporter={"resources": {"limits": {"cpu": value}}}), FACTS)
    assert rendered.objects() == []
    assert rendered.problems == (
        f"field dcgmExporter.resources.limits.cpu, value {value!r}: not a quantity "
        "(e.g. 500m, 2, 1Gi)",
    )


@pytest.mark.parametrize("value", ["500m", "2", "1Gi", "1.5", "1e3", "-1", ".5", 4])
def test_quantities_render(value: str | int) -> None:
    """A negative amount is a quantity: the API server refuses it at the pass's dry-run."""
    rendered = render(policy(devicePlugin={"resources": {"requests": {"memory": value}}}), FACTS)
    assert rendered.problems == ()
