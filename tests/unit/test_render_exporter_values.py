"""The exporter settings NVIDIA's chart passes on reach the DaemonSet and the ServiceMonitor:
the custom metrics ConfigMap, the scrape timeout, typed relabelings, pod annotations."""

from __future__ import annotations

from typing import Any

from kubegpu.kube.policy import parse_policy_spec
from kubegpu.operator.render import ClusterFacts, Rendered, render

FACTS = ClusterFacts(
    gpu_nodes=1,
    service_monitor_crd=True,
    image_env={"DRIVER_IMAGE": "d", "CONTAINER_TOOLKIT_IMAGE": "t"},
)
DS = "nvidia-dcgm-exporter"


def rendered(exporter: dict[str, Any]) -> Rendered:
    return render(parse_policy_spec({"dcgm": {"enabled": False}, "dcgmExporter": exporter}), FACTS)


def test_a_custom_metrics_configmap_is_mounted_and_read() -> None:
    r = rendered({"config": {"name": "custom-dcgm-metrics"}})
    pod = r.daemonset(DS)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("configMap")]
    assert volume["configMap"]["name"] == "custom-dcgm-metrics"
    main = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in main["env"]}
    (mount,) = [m for m in main["volumeMounts"] if m["name"] == volume["name"]]
    assert env["DCGM_EXPORTER_COLLECTORS"] == mount["mountPath"]
    assert mount["subPath"] == "dcgm-metrics.csv"


def test_scrape_timeout_and_relabelings_reach_the_service_monitor() -> None:
    r = rendered(
        {
            "serviceMonitor": {
                "enabled": True,
                "interval": "15s",
                "scrapeTimeout": "10s",
                "relabelings": [
                    {"action": "replace", "sourceLabels": ["__meta_node"], "targetLabel": "node"}
                ],
            }
        }
    )
    (monitor,) = [o for o in r.objects() if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scrapeTimeout"] == "10s"
    assert endpoint["relabelings"] == [
        {"action": "replace", "sourceLabels": ["__meta_node"], "targetLabel": "node"}
    ]


def test_exporter_annotations_go_on_its_pods() -> None:
    r = rendered({"annotations": {"example.com/team": "gpu"}})
    meta = r.daemonset(DS)["spec"]["template"]["metadata"]
    assert meta["annotations"]["example.com/team"] == "gpu"
