"""The NVIDIA-facing names: spelled as upstream spells them, and used by every component."""

from __future__ import annotations

import pytest

from kubegpu.catalog import all_models, nvidia
from kubegpu.mig_manager import settings as mig_manager
from kubegpu.operator import labels as operator_labels
from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.config_source import CONFIG_LABEL
from kubegpu.sharing.devices import GPU_RESOURCE, mig_resource_name


@pytest.mark.parametrize(
    ("name", "spelling"),
    [
        (nvidia.GPU_PRESENT, "nvidia.com/gpu.present"),
        (nvidia.MIG_CONFIG, "nvidia.com/mig.config"),
        (nvidia.MIG_CONFIG_STATE, "nvidia.com/mig.config.state"),
        (nvidia.DEVICE_PLUGIN_CONFIG, "nvidia.com/device-plugin.config"),
        (nvidia.WORKLOAD_CONFIG, "nvidia.com/gpu.workload.config"),
        (nvidia.deploy_label("device-plugin"), "nvidia.com/gpu.deploy.device-plugin"),
        (nvidia.GPU_SHARED_RESOURCE, "nvidia.com/gpu.shared"),
        (nvidia.mig_resource("1g.10gb+me"), "nvidia.com/mig-1g.10gb.me"),
        (nvidia.mig_resource("1g.24gb+me.all"), "nvidia.com/mig-1g.24gb.me.all"),
        (nvidia.mig_resource("1g.24gb-me"), "nvidia.com/mig-1g.24gb-me"),
        (nvidia.CDI_PLUGIN_KIND, "k8s.device-plugin.nvidia.com/gpu"),
    ],
)
def test_names_are_spelled_as_upstream(name: str, spelling: str) -> None:
    assert name == spelling


def test_components_speak_the_same_names() -> None:
    assert mig_manager.MIG_CONFIG_LABEL == operator_labels.MIG_CONFIG == nvidia.MIG_CONFIG
    assert mig_manager.DEPLOY_PREFIX == operator_labels.DEPLOY_PREFIX == nvidia.DEPLOY_PREFIX
    assert CONFIG_LABEL == nvidia.DEVICE_PLUGIN_CONFIG
    assert GPU_RESOURCE == nvidia.GPU_RESOURCE


def test_every_catalog_profile_has_a_resource_name_the_mixed_strategy_can_share() -> None:
    mixed = PluginConfig.model_validate({"flags": {"migStrategy": "mixed"}})
    names = {p.name for m in all_models() if m.mig for p in m.mig.gpu_instance_profiles}
    assert names
    for profile in names:
        assert nvidia.mig_resource(profile) == mig_resource_name(profile)
        assert mixed.can_advertise(nvidia.mig_resource(profile)), profile
