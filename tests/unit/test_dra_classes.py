"""The DeviceClasses select the driver's devices by type, as upstream's chart does, and the
YAML under deploy/ is what the function renders."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubegpu.dra.classes import device_classes, selector

ROOT = Path(__file__).resolve().parents[2]


def test_selectors_are_upstreams() -> None:
    assert selector("gpu") == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    gpu, mig = device_classes()
    assert gpu["metadata"]["name"] == "gpu.nvidia.com"
    assert mig["metadata"]["name"] == "mig.nvidia.com"
    assert mig["spec"]["selectors"] == [{"cel": {"expression": selector("mig")}}]
    assert "extendedResourceName" not in gpu["spec"]


def test_extended_resource_name_is_opt_in() -> None:
    gpu, mig = device_classes(extended_resource=True)
    assert gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in mig["spec"]


def test_deploy_yaml_is_the_rendered_classes() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/dra/deviceclasses.yaml").read_text()))
    assert [d for d in docs if d] == device_classes()
