"""Doctor, what-if and `plan --from-snapshot` read a node's labels one way: the GPU model
behind `nvidia.com/gpu.product`, the ConfigMap that holds the node's MIG layouts, and how
many GPUs it has. The cases are those where they used to answer differently."""

from __future__ import annotations

import re

import pytest

from kubegpu.catalog import get_model, nvidia
from kubegpu.doctor.facts import (
    LabelError,
    gpu_count,
    gpu_model,
    known_gpu_count,
    mig_parted_configmap,
    model_of_product,
)
from kubegpu.doctor.snapshot import ConfigMapInfo, CustomObject, NodeInfo, Snapshot
from kubegpu.replan.from_snapshot import SnapshotPlanError, start_from
from kubegpu.sharing.labels import MAX_VALUE, sanitise
from kubegpu.whatif.twin_spec import TwinSpecError, mig_layouts, node_gpus

MAXQ = get_model("rtx-pro-6000-maxq")  # the longest product name in the catalog


def cut_to_fit(name: str, tail: str) -> str:
    """What feature discovery writes when `name + tail` is too long for a label value:
    the name part shortened, the tags kept."""
    return name[: MAX_VALUE - len(tail)].rstrip("-") + tail


def node(product: str, name: str = "gpu-1") -> NodeInfo:
    return NodeInfo(
        name=name,
        labels={nvidia.GPU_PRESENT: "true", nvidia.GPU_PRODUCT: product, nvidia.GPU_COUNT: "1"},
    )


def test_a_product_name_cut_to_fit_a_mig_tag_still_names_its_model() -> None:
    # doctor matched whole names only and saw no model here
    label = cut_to_fit(sanitise(MAXQ.product_name), "-MIG-1g.24gb")
    assert len(label) <= MAX_VALUE and not label.startswith(sanitise(MAXQ.product_name))
    assert model_of_product(label) is MAXQ
    assert gpu_model(node(label)) is MAXQ


def test_a_known_name_with_a_tag_feature_discovery_never_writes_names_no_model() -> None:
    # doctor took the longest name the label starts with: another suffix read as an H100
    assert model_of_product("NVIDIA-H100-80GB-HBM3-OEM") is None
    with pytest.raises(TwinSpecError, match="names no GPU model"):
        node_gpus(node("NVIDIA-H100-80GB-HBM3-OEM"), Snapshot())


def test_a_short_label_that_was_not_cut_is_not_taken_for_a_longer_name() -> None:
    # what-if took the one model whose name it starts: NVIDIA-H100-80GB-HBM3
    assert model_of_product("NVIDIA-H100-80GB") is None
    assert model_of_product("NVIDIA-H100-80GB-MIG-1g.10gb") is None


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-H200", "h200"),
        ("NVIDIA-H200-NVL", "h200-nvl"),
        ("NVIDIA-H200-NVL-SHARED", "h200-nvl"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "h100-80gb"),
        ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED", "h100-80gb"),
        ("NVIDIA-A100-SXM4-40GB-MIG-INVALID", "a100-40gb"),
    ],
)
def test_the_tags_feature_discovery_adds_are_read_off(product: str, model: str) -> None:
    assert model_of_product(product) is get_model(model)


def test_the_layouts_without_a_policy_configmap_or_generated_ones_are_the_charts() -> None:
    # what-if looked only for <node>-mig-config and saw no layouts at all
    default = ConfigMapInfo(
        namespace="gpu-operator",
        name=nvidia.MIG_PARTED_DEFAULT_CONFIGMAP,
        data={
            "config.yaml": "version: v1\nmig-configs:\n  mine: [{devices: all, mig-enabled: false}]\n"
        },
    )
    snap = Snapshot(nodes=(node("NVIDIA-H100-80GB-HBM3"),), config_maps=(default,))
    assert mig_parted_configmap(snap, "gpu-1") == nvidia.MIG_PARTED_DEFAULT_CONFIGMAP
    layouts = mig_layouts("gpu-1", snap)
    assert layouts is not None and set(layouts.mig_configs) == {"mine"}


def test_the_layouts_the_policy_names_come_before_the_generated_ones() -> None:
    text = "version: v1\nmig-configs:\n  {name}: [{{devices: all, mig-enabled: false}}]\n"
    maps = tuple(
        ConfigMapInfo(namespace="gpu-operator", name=n, data={"config.yaml": text.format(name=c)})
        for n, c in (("gpu-1-mig-config", "generated"), ("layouts", "named"))
    )
    policy = CustomObject(
        kind="ClusterPolicy", name="p", spec={"migManager": {"config": {"name": "layouts"}}}
    )
    named = Snapshot(nodes=(node("x"),), config_maps=maps, cluster_policies=(policy,))
    unnamed = Snapshot(nodes=(node("x"),), config_maps=maps)
    assert [mig_parted_configmap(s, "gpu-1") for s in (named, unnamed)] == [
        "layouts",
        "gpu-1-mig-config",
    ]
    assert [set(mig_layouts("gpu-1", s).mig_configs) for s in (named, unnamed)] == [  # type: ignore[union-attr]
        {"named"},
        {"generated"},
    ]


# --- how many GPUs a node has: one rule (doctor.facts.gpu_count) for doctor, twin, replan ---

H100_LABEL = "NVIDIA-H100-80GB-HBM3"
SINGLE_LAYOUTS = """\
version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  half:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [1, 2]
      mig-enabled: false
"""


def counted(**labels: str) -> tuple[NodeInfo, Snapshot]:
    n = NodeInfo(
        name="gpu-1",
        labels={nvidia.GPU_PRESENT: "true", nvidia.GPU_PRODUCT: H100_LABEL, **labels},
    )
    layouts = ConfigMapInfo(
        namespace="gpu-operator",
        name=nvidia.MIG_PARTED_DEFAULT_CONFIGMAP,
        data={"config.yaml": SINGLE_LAYOUTS},
    )
    return n, Snapshot(nodes=(n,), config_maps=(layouts,))


def _isolation(*indexes: int) -> dict[str, str]:
    return {nvidia.isolation_label(i): "mig" for i in indexes}


@pytest.mark.parametrize(
    ("labels", "gpus"),
    [
        pytest.param({nvidia.GPU_COUNT: "4"}, 4, id="whole GPUs: gpu.count"),
        pytest.param(
            {nvidia.GPU_COUNT: "3", **_isolation(0)}, 3, id="gpu.count before isolation labels"
        ),
        pytest.param(
            {
                nvidia.GPU_PRODUCT: H100_LABEL + "-MIG-1g.10gb",
                nvidia.GPU_COUNT: "28",
                nvidia.MIG_CONFIG: "all-1g.10gb",
            },
            4,
            id="single: MIG devices over the layout's per-GPU count",
        ),
        pytest.param(
            {
                nvidia.GPU_PRODUCT: H100_LABEL + "-MIG-1g.10gb",
                nvidia.GPU_COUNT: "7",
                nvidia.MIG_CONFIG: "half",
            },
            3,
            id="single: the GPUs the layout lists",
        ),
        pytest.param(
            {
                nvidia.GPU_PRODUCT: H100_LABEL + "-MIG-INVALID",
                nvidia.GPU_COUNT: "0",
                **_isolation(0, 1, 2),
            },
            3,
            id="MIG-INVALID: the isolation labels",
        ),
    ],
)
def test_doctor_the_twin_and_the_planner_count_a_nodes_gpus_alike(
    labels: dict[str, str], gpus: int
) -> None:
    n, snap = counted(**labels)
    assert gpu_count(snap, n) == gpus
    twin = node_gpus(n, snap)
    assert twin is not None and twin.split(";")[0] == f"h100-80gb:{gpus}"
    assert start_from(snap).nodes["gpu-1"].count == gpus


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        pytest.param({nvidia.GPU_COUNT: "two"}, "gpu.count='two' is not a count", id="garbled"),
        pytest.param(
            {nvidia.GPU_PRODUCT: H100_LABEL + "-MIG-INVALID", nvidia.GPU_COUNT: "0"},
            "-MIG-INVALID",
            id="MIG-INVALID without isolation labels",
        ),
        pytest.param(
            {
                nvidia.GPU_PRODUCT: H100_LABEL + "-MIG-1g.10gb",
                nvidia.GPU_COUNT: "7",
                nvidia.MIG_CONFIG: "nowhere",
            },
            "layout 'nowhere' is not in the snapshot",
            id="single without its layout",
        ),
        pytest.param(
            {
                nvidia.GPU_PRODUCT: H100_LABEL + "-MIG-1g.10gb",
                nvidia.GPU_COUNT: "9",
                nvidia.MIG_CONFIG: "all-1g.10gb",
            },
            "9 1g.10gb devices do not fit",
            id="single: a device count the layout cannot make",
        ),
    ],
)
def test_what_the_labels_do_not_say_is_an_error_for_all_three(
    labels: dict[str, str], said: str
) -> None:
    n, snap = counted(**labels)
    with pytest.raises(LabelError, match=re.escape(said)):
        gpu_count(snap, n)
    assert known_gpu_count(snap, n) is None  # doctor's checks fall back to the layout's names
    with pytest.raises(TwinSpecError, match=re.escape(said)):
        node_gpus(n, snap)
    with pytest.raises(SnapshotPlanError):  # the node is left out, and so is the whole fleet
        start_from(snap)
