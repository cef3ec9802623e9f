"""Doctor and what-if read a node's labels one way: the GPU model behind
`nvidia.com/gpu.product`, and the ConfigMap that holds the node's MIG layouts. The cases
are those where the two used to answer differently."""

from __future__ import annotations

import pytest

from kubegpu.catalog import get_model, nvidia
from kubegpu.doctor.facts import gpu_model, mig_parted_configmap, model_of_product
from kubegpu.doctor.snapshot import ConfigMapInfo, CustomObject, NodeInfo, Snapshot
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
