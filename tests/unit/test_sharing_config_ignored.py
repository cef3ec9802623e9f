"""Upstream config fields kubegpu accepts but does not act on are named, so the components
can say so instead of letting the value look applied."""

from __future__ import annotations

import pytest

from kubegpu.sharing.config import parse_config


def ignored(text: str) -> list[str]:
    return [field for field, _, _ in parse_config(text, "dp.yaml").ignored_fields()]


def test_defaults_and_upstream_samples_have_nothing_ignored() -> None:
    assert ignored("") == []
    assert ignored("flags: {deviceDiscoveryStrategy: nvml, useNodeFeatureAPI: false}") == []
    assert ignored("flags: {plugin: {nvidiaCTKPath: /usr/bin/nvidia-ctk}}") == []
    assert ignored("imex: {channelIDs: [0], required: false}") == []
    nfd = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
    assert ignored(f"flags: {{gfd: {{outputFile: {nfd}, sleepInterval: 60s}}}}") == []


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("flags: {plugin: {nvidiaCTKPath: /opt/bin/nvidia-ctk}}", "flags.plugin.nvidiaCTKPath"),
        ("flags: {plugin: {containerDriverRoot: /host}}", "flags.plugin.containerDriverRoot"),
        ("flags: {gfd: {outputFile: /tmp/gfd}}", "flags.gfd.outputFile"),
        ("flags: {deviceDiscoveryStrategy: tegra}", "flags.deviceDiscoveryStrategy"),
        ("flags: {useNodeFeatureAPI: true}", "flags.useNodeFeatureAPI"),
        ("imex: {channelIDs: [0], required: true}", "imex.required"),
    ],
)
def test_a_value_kubegpu_does_not_act_on_is_named(text: str, field: str) -> None:
    found = parse_config(text, "dp.yaml").ignored_fields()
    assert [f for f, _, _ in found] == [field]
    _, value, why = found[0]
    assert value and why
