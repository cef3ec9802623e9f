"""The change what-if tries: read strictly from the user's files and options, a planner's
output directory included; a bad input names the file or option, the field and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.catalog import nvidia
from kubegpu.plan import make_plan, parse_input
from kubegpu.plan.emit import render
from kubegpu.whatif.change import (
    Change,
    ChangeError,
    ConfigMapChange,
    check_namespaces,
    check_nodes,
    label_change,
    load_configmap,
    load_plan_dir,
    load_policy_patch,
    merge_patch,
    plan_policy_patch,
)
from kubegpu.whatif.checks import check_change


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"mig": {"strategy": "single"}, "devicePlugin": {"config": {"name": "a"}}}
    patch = {"mig": {"strategy": None}, "devicePlugin": {"config": {"default": "x"}}}
    assert merge_patch(target, patch) == {
        "mig": {},
        "devicePlugin": {"config": {"name": "a", "default": "x"}},
    }


def test_a_policy_patch_in_json_or_yaml_is_the_spec_to_merge(tmp_path: Path) -> None:
    as_json = write(tmp_path, "p.json", '{"spec": {"mig": {"strategy": "mixed"}}}')
    as_yaml = write(tmp_path, "p.yaml", "spec:\n  mig:\n    strategy: mixed\n")
    assert (
        load_policy_patch(as_json) == load_policy_patch(as_yaml) == {"mig": {"strategy": "mixed"}}
    )


def test_a_policy_patch_that_touches_more_than_the_spec_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "spec: {}\nstatus: {state: ready}\n")
    with pytest.raises(ChangeError, match=r"p.yaml: field status.*Extra inputs"):
        load_policy_patch(path)


def test_a_configmap_manifest_gives_its_name_and_data(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plugin-configs}\n"
        "data:\n  ts: 'version: v1'\n",
    )
    cm = load_configmap(path)
    assert (cm.name, cm.data) == ("plugin-configs", {"ts": "version: v1"})


def test_a_configmap_whose_data_is_not_text_names_the_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {replicas: 4}\n",
    )
    with pytest.raises(ChangeError, match=r"cm.yaml: field data.replicas, value 4"):
        load_configmap(path)


def test_label_options_become_node_labels() -> None:
    change = label_change(["gpu-1=all-1g.10gb"], ["gpu-1=time-sliced", "gpu-2=mps"])
    assert change.labels == {
        "gpu-1": {nvidia.MIG_CONFIG: "all-1g.10gb", nvidia.DEVICE_PLUGIN_CONFIG: "time-sliced"},
        "gpu-2": {nvidia.DEVICE_PLUGIN_CONFIG: "mps"},
    }


@pytest.mark.parametrize(
    "bad", ["gpu-1", "=x", "gpu-1=", "gpu-1=bad value", "gpu-1=all-disabled\n", "gpu-1\n=x"]
)
def test_a_label_option_that_is_not_node_equals_value_is_refused(bad: str) -> None:
    with pytest.raises(ChangeError, match="--mig-config"):
        label_change([bad], [])


def test_a_node_the_snapshot_does_not_have_is_an_error_not_a_no_op() -> None:
    change = label_change(["gpu-9=all-disabled"], [])
    with pytest.raises(ChangeError, match="node 'gpu-9': not in the snapshot"):
        check_nodes(change, ["gpu-1", "gpu-2"])


def test_later_changes_win_when_combined() -> None:
    first = Change(policy_patch={"mig": {"strategy": "single"}}, labels={"a": {"k": "1"}})
    second = Change(policy_patch={"mig": {"strategy": "mixed"}}, labels={"a": {"k": "2"}})
    combined = first.combine(second)
    assert combined.policy_patch == {"mig": {"strategy": "mixed"}}
    assert combined.labels == {"a": {"k": "2"}}


def test_an_empty_mig_strategy_in_plan_values_removes_the_key() -> None:
    values = {"mig": {"strategy": ""}, "devicePlugin": {"config": {"name": "p"}}, "other": 1}
    assert plan_policy_patch(values) == {
        "mig": {"strategy": None},
        "devicePlugin": {"config": {"name": "p"}},
    }


PLAN = """\
fleet:
  - name: gpu-h100
    gpus: h100-80gb:1
workloads:
  - name: chat
    replicas: 7
    memory: 9GiB
    compute: 0.1
"""


def test_a_planner_output_directory_is_its_configmaps_values_and_labels(tmp_path: Path) -> None:
    plan = make_plan(parse_input(PLAN, "plan.yaml"))
    out = tmp_path / "out"
    for rel, text in render(plan).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    change = load_plan_dir(out)
    assert sorted(c.name for c in change.config_maps) == [
        "kubegpu-plan-device-plugin-config",
        "kubegpu-plan-mig-parted-config",
    ]
    assert change.policy_patch is not None
    assert change.policy_patch["migManager"]["config"]["name"] == "kubegpu-plan-mig-parted-config"
    labels = change.labels["gpu-h100"]
    assert labels[nvidia.MIG_CONFIG] == plan.nodes[0].mig_config
    assert labels[nvidia.DEVICE_PLUGIN_CONFIG] == plan.nodes[0].device_plugin_config
    check_change(change, None, {})  # what the planner writes, the cluster would take


def test_a_directory_without_the_planner_files_is_refused_naming_them(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text("{}")
    with pytest.raises(ChangeError, match=r"missing mig-parted-configmap\.yaml"):
        load_plan_dir(tmp_path)


def test_the_readme_example_patch_loads() -> None:
    example = Path(__file__).parents[2] / "examples/what-if/mixed-strategy.yaml"
    assert load_policy_patch(example) == {"mig": {"strategy": "mixed"}}


def test_a_policy_patch_with_a_field_the_schema_lacks_is_refused_not_pruned(
    tmp_path: Path,
) -> None:
    # the twin's API server would drop `migg`: the report would say nothing changes
    path = tmp_path / "patch.yaml"
    path.write_text("spec:\n  migg: {strategy: mixed}\n  devicePlugin: {enabeld: false}\n")
    with pytest.raises(ChangeError) as err:
        load_policy_patch(path)
    assert str(err.value) == (
        f"{path}: field spec.migg: not a ClusterPolicy field; the API server would refuse or "
        "drop it (and 1 more)"
    )
    path.write_text("spec:\n  mig: {strategy: mixed}\n  devicePlugin: null\n")
    assert load_policy_patch(path) == {"mig": {"strategy": "mixed"}, "devicePlugin": None}


def test_a_configmap_for_another_namespace_is_refused_not_moved(tmp_path: Path) -> None:
    # kubectl would create it in kube-system, where the operator never reads it
    path = tmp_path / "cm.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: kube-system}\n"
        "data: {a: b}\n"
    )
    change = Change(config_maps=(load_configmap(path),))
    with pytest.raises(ChangeError) as err:
        check_namespaces(change, "gpu-operator")
    assert str(err.value).startswith(
        f"{path}: field metadata.namespace, value 'kube-system': the operator reads its "
        "ConfigMaps in 'gpu-operator'"
    )
    check_namespaces(change, "kube-system")
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
    check_namespaces(Change(config_maps=(load_configmap(path),)), "gpu-operator")


# -- a change checked in full before a twin is built (issue 29) --------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # this patch used to build a twin and end minutes later in a traceback
        ("spec: {mig: {strategy: 5}}", "field spec.mig.strategy, value 5: Input should be"),
        ("spec: {devicePlugin: {enabled: 'false'}}", "field spec.devicePlugin.enabled, value"),
        ("spec: {migManager: on}", "field spec.migManager, value True"),
        (
            "spec: {devicePlugin: {config: {default: [a]}}}",
            "field spec.devicePlugin.config.default",
        ),
    ],
)
def test_a_policy_patch_of_the_wrong_type_is_refused_when_read(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, "patch.yaml", text + "\n")
    with pytest.raises(ChangeError) as err:
        load_policy_patch(path)
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)


def test_a_policy_patch_may_still_delete_with_null(tmp_path: Path) -> None:
    path = write(tmp_path, "patch.yaml", "spec: {mig: {strategy: null}, migManager: null}\n")
    assert load_policy_patch(path) == {"mig": {"strategy": None}, "migManager": None}


POLICY = {
    "devicePlugin": {"config": {"name": "dp-configs"}},
    "migManager": {"config": {"name": "mig-layouts"}},
}
LAYOUTS = (
    "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
)
SNAPSHOT_MAPS = {"dp-configs": {"ts": "version: v1\n"}, "mig-layouts": {"config.yaml": LAYOUTS}}


def cm(name: str, **data: str) -> ConfigMapChange:
    return ConfigMapChange(name, dict(data), f"{name}.yaml")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            Change(config_maps=(cm("dp-configs", bad="flags: {migStrategy: 5}\n"),)),
            "dp-configs.yaml: data.bad: field flags.migStrategy, value 5",
        ),
        (
            Change(config_maps=(cm("mig-layouts", **{"config.yaml": "version: v2\n"}),)),
            "mig-layouts.yaml: data.config.yaml",
        ),
        (
            Change(config_maps=(cm("mig-layouts", layouts=LAYOUTS),)),
            "mig-layouts.yaml: field data: the MIG manager reads its layouts from key 'config.yaml'",
        ),
        (
            Change(labels={"n1": {nvidia.DEVICE_PLUGIN_CONFIG: "mps"}}),
            "node n1: label nvidia.com/device-plugin.config, value 'mps': ConfigMap dp-configs "
            "has no such config (it has ts)",
        ),
        (
            Change(labels={"n1": {nvidia.MIG_CONFIG: "all-1g.10gb"}}),
            "node n1: label nvidia.com/mig.config, value 'all-1g.10gb': ConfigMap mig-layouts "
            "has no such config (it has all-disabled)",
        ),
        # a planner directory's labels are read from its plan.json, not the command line
        (
            Change(labels={"n1": {"bad key!": "x"}}),
            "node n1: label key 'bad key!': ",
        ),
        (
            Change(labels={"n1": {"team": "not a value"}}),
            "node n1: label team, value 'not a value': ",
        ),
        # the patched policy names another ConfigMap: its keys are what the label must name
        (
            Change(
                policy_patch={"devicePlugin": {"config": {"name": "other"}}},
                config_maps=(cm("other", mps="version: v1\n"),),
                labels={"n1": {nvidia.DEVICE_PLUGIN_CONFIG: "ts"}},
            ),
            "node n1: label nvidia.com/device-plugin.config, value 'ts': ConfigMap other has no "
            "such config (it has mps)",
        ),
    ],
)
def test_a_change_is_checked_in_full_against_the_snapshot(change: Change, message: str) -> None:
    with pytest.raises(ChangeError) as err:
        check_change(change, POLICY, SNAPSHOT_MAPS)
    assert str(err.value).startswith(message), str(err.value)


def test_a_change_that_the_cluster_would_take_passes_the_checks() -> None:
    check_change(
        Change(
            config_maps=(cm("dp-configs", ts="version: v1\n", mps="version: v1\n"),),
            labels={"n1": {nvidia.DEVICE_PLUGIN_CONFIG: "mps", nvidia.MIG_CONFIG: "all-disabled"}},
        ),
        POLICY,
        SNAPSHOT_MAPS,
    )
    # a ConfigMap the snapshot does not hold is not guessed at; a removed label is fine
    check_change(Change(labels={"n1": {nvidia.MIG_CONFIG: None}}), None, {})
    check_change(Change(labels={"n1": {nvidia.DEVICE_PLUGIN_CONFIG: "x"}}), None, {})


def test_a_label_naming_no_config_lists_a_dozen_configs_at_most() -> None:
    maps = {"dp-configs": {f"c{i:02d}": "version: v1\n" for i in range(40)}}
    with pytest.raises(ChangeError) as err:
        check_change(Change(labels={"n1": {nvidia.DEVICE_PLUGIN_CONFIG: "x"}}), POLICY, maps)
    assert str(err.value).endswith(
        "(it has c00, c01, c02, c03, c04, c05, c06, c07, c08, c09, c10, c11 and 28 more)"
    )


def test_without_a_policy_configmap_a_label_is_checked_against_the_nodes_generated_layouts() -> (
    None
):
    """The MIG manager reads the layouts it generated for its node when the policy names no
    ConfigMap (`doctor.facts.layouts_configmap`, the rule doctor uses too), not the chart's
    default set."""
    maps = {
        "n1" + nvidia.MIG_GENERATED_CONFIGMAP_SUFFIX: {"config.yaml": LAYOUTS},
        nvidia.MIG_PARTED_DEFAULT_CONFIGMAP: {
            "config.yaml": "version: v1\nmig-configs:\n  only-default:\n    - devices: all\n"
            "      mig-enabled: false\n"
        },
    }
    check_change(Change(labels={"n1": {nvidia.MIG_CONFIG: "all-disabled"}}), None, maps)
    with pytest.raises(ChangeError, match="only-default"):
        check_change(Change(labels={"n2": {nvidia.MIG_CONFIG: "all-disabled"}}), None, maps)
