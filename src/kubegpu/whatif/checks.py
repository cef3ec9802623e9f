"""A change checked in full against its snapshot before any twin is built (pure).

A twin takes minutes to start; a change the API server or a component would refuse must be
refused before that, naming the file, the field and the value: the policy patch as the API
server judges it (types included: `mig.strategy: 5` is not a strategy), each changed
ConfigMap with the loader of the component that reads it (device plugin, MIG manager), and
each node label against the config it names.
"""

from __future__ import annotations

from typing import Any

from kubegpu.base import loader
from kubegpu.catalog import nvidia
from kubegpu.doctor.facts import layouts_configmap
from kubegpu.kube.label_syntax import key_problem, value_problem
from kubegpu.kube.policy import parse_policy_spec
from kubegpu.mig.config import ConfigError
from kubegpu.mig.config import parse_config as parse_mig_config
from kubegpu.sharing.config import SharingConfigError
from kubegpu.sharing.config import parse_config as parse_plugin_config
from kubegpu.whatif.change import (
    Change,
    ChangeError,
    ConfigMapChange,
    check_policy_patch,
    merge_patch,
)

MIG_CONFIG_KEY = "config.yaml"  # the key of a mig-parted ConfigMap
SHOWN_NAMES = 12  # configs named in an error; an error stays short (docs/limits.md)


def check_change(
    change: Change,
    policy_spec: dict[str, Any] | None,
    config_maps: dict[str, dict[str, str]],
) -> None:
    """ChangeError for the first part of `change` the cluster would refuse. `policy_spec` is
    the snapshot's ClusterPolicy spec (None: none), `config_maps` the snapshot's ConfigMaps
    of the operator's namespace by name (their data)."""
    spec = merge_patch(policy_spec or {}, change.policy_patch or {})
    if change.policy_patch:
        check_policy_patch(change.policy_patch, "the policy patch")
        try:
            parse_policy_spec(spec)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ChangeError(f"the patched ClusterPolicy spec: {exc}") from None
    plugin_cm = _config_name(spec, "devicePlugin")
    policy_mig_cm = _config_name(spec, "migManager")
    data = dict(config_maps)
    for cm in change.config_maps:
        if cm.name == plugin_cm:
            _check_plugin_configs(cm)
        elif _holds_layouts(cm.name, policy_mig_cm):
            _check_mig_configs(cm)
        data[cm.name] = cm.data
    for node, labels in sorted(change.labels.items()):
        for key, value in labels.items():
            # a planner directory's labels come from a file: judged as the API server would
            if (why := key_problem(key)) is not None:
                raise ChangeError(f"node {node}: label key {loader.excerpt(key)}: {why}")
            if value is None:
                continue
            if (why := value_problem(value)) is not None:
                raise ChangeError(f"node {node}: label {key}, value {loader.excerpt(value)}: {why}")
            if key == nvidia.DEVICE_PLUGIN_CONFIG and plugin_cm in data:
                _check_named(node, key, value, sorted(data[plugin_cm]), plugin_cm)
            elif (
                key == nvidia.MIG_CONFIG
                and (mig_cm := layouts_configmap(policy_mig_cm, node, data.__contains__)) in data
            ):
                text = data[mig_cm].get(MIG_CONFIG_KEY)
                if text is None:
                    continue
                try:
                    names = sorted(parse_mig_config(text, f"configmap {mig_cm}").mig_configs)
                except ConfigError as exc:  # the snapshot's own: the twin would meet it too
                    raise ChangeError(str(exc)) from None
                _check_named(node, key, value, names, mig_cm)


def _holds_layouts(name: str, policy_name: str | None) -> bool:
    """Whether a MIG manager may read its layouts from ConfigMap `name`: the policy's, or,
    when the policy names none, the chart's default or a node's generated set
    (`doctor.facts.layouts_configmap`)."""
    if policy_name:
        return name == policy_name
    return name == nvidia.MIG_PARTED_DEFAULT_CONFIGMAP or name.endswith(
        nvidia.MIG_GENERATED_CONFIGMAP_SUFFIX
    )


def _config_name(spec: dict[str, Any], section: str) -> str | None:
    part = spec.get(section)
    config = part.get("config") if isinstance(part, dict) else None
    name = config.get("name") if isinstance(config, dict) else None
    return name if isinstance(name, str) and name else None


def _check_plugin_configs(cm: ConfigMapChange) -> None:
    """Every key of a device-plugin ConfigMap is one config the plugin may be told to use."""
    for key, text in sorted(cm.data.items()):
        try:
            parse_plugin_config(text, f"{cm.source}: data.{key}")
        except SharingConfigError as exc:
            raise ChangeError(str(exc)) from None


def _check_mig_configs(cm: ConfigMapChange) -> None:
    text = cm.data.get(MIG_CONFIG_KEY)
    if text is None:
        raise ChangeError(
            f"{cm.source}: field data: the MIG manager reads its layouts from key "
            f"{MIG_CONFIG_KEY!r}, which this ConfigMap lacks (keys: {', '.join(sorted(cm.data))})"
        )
    try:
        parse_mig_config(text, f"{cm.source}: data.{MIG_CONFIG_KEY}")
    except ConfigError as exc:
        raise ChangeError(str(exc)) from None


def _check_named(node: str, key: str, value: str, names: list[str], cm: str) -> None:
    if value not in names:
        shown = ", ".join(names[:SHOWN_NAMES]) or "none"
        more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
        raise ChangeError(
            f"node {node}: label {key}, value {loader.excerpt(value)}: ConfigMap {cm} has no "
            f"such config (it has {shown}{more})"
        )
