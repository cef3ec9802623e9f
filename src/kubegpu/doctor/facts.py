"""What a node's labels and the policy objects say, read the same way by every check.

Pure functions over a `Snapshot`: the GPU model behind `nvidia.com/gpu.product`, the driver,
whether MIG is on, and which device-plugin config a node runs (chosen as the device plugin
chooses it: the node's label, else the policy's default, else a config named `default`, else
the only one, else the built-in defaults).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kubegpu.catalog import GpuModel, all_models, nvidia
from kubegpu.catalog.models import parse_driver_version
from kubegpu.doctor.snapshot import CustomObject, NodeInfo, Snapshot
from kubegpu.mig.config import ConfigError, MigPartedConfig
from kubegpu.mig.config import parse_config as parse_mig_config
from kubegpu.node.overrides import OverrideError, config_overrides, flag_of
from kubegpu.sharing.config import ENV_OVERRIDES, PluginConfig, SharingConfigError, parse_config
from kubegpu.sharing.labels import MAX_VALUE as MAX_LABEL_VALUE
from kubegpu.sharing.labels import sanitise

_MIG_COUNT = re.compile(re.escape(nvidia.MIG_RESOURCE_PREFIX) + r".+\.count$")
_ISOLATION = re.compile(re.escape(nvidia.ISOLATION_LABEL_PREFIX) + r"(\d+)\.isolation$")
MIG_PARTED_KEY = "config.yaml"


class LabelError(ValueError):
    """What a node's labels (with the layouts they name) do not say; names the node and
    the label."""


def node_ref(node: NodeInfo | str) -> str:
    return f"node/{node if isinstance(node, str) else node.name}"


def gpu_model(node: NodeInfo) -> GpuModel | None:
    """The catalog model behind the node's `nvidia.com/gpu.product` (see `model_of_product`)."""
    return model_of_product(node.labels.get(nvidia.GPU_PRODUCT, ""))


PRODUCT_MIG_TAG = "-MIG-"  # single strategy: `<product>-MIG-<profile>` (or `-MIG-INVALID`)
PRODUCT_SHARED_TAG = "-SHARED"  # replicated without a rename: `<product>[-MIG-...]-SHARED`


def split_product(product: str) -> tuple[str, str]:
    """`nvidia.com/gpu.product` as (model part, MIG profile or "")."""
    base, _, profile = product.removesuffix(PRODUCT_SHARED_TAG).partition(PRODUCT_MIG_TAG)
    return base, profile


@functools.lru_cache(maxsize=256)
def model_of_product(product: str) -> GpuModel | None:
    """The catalog model GPU feature discovery named in `nvidia.com/gpu.product`.

    The one reading of that label for doctor and what-if. Feature discovery writes
    `<sanitised product name>[-MIG-<profile>][-SHARED]`, the name part shortened when the
    whole value would pass 63 characters (`kubegpu.sharing.labels`). So: the tags are
    taken off, the rest must be a model's sanitised product name exactly, or, only where
    that name plus the tags is too long for a label, the start of exactly one model's name.
    Anything else (another vendor's suffix, a name cut short for no reason, a cut that two
    models share) names no model: a guess would judge the wrong GPU.
    """
    if not product:
        return None
    base, _ = split_product(product)
    tail = len(product) - len(base)
    names = [(m, sanitise(m.product_name)) for m in all_models()]
    exact = [m for m, name in names if name == base]
    if exact:
        return exact[0]
    cut = [
        m
        for m, name in names
        if len(name) + tail > MAX_LABEL_VALUE and base and name.startswith(base)
    ]
    return cut[0] if len(cut) == 1 else None


def driver(node: NodeInfo) -> str | None:
    """The driver version GPU feature discovery reported, if it parses."""
    version = node.labels.get(nvidia.CUDA_DRIVER_VERSION_FULL)
    if not version:
        return None
    try:
        parse_driver_version(version)
    except ValueError:
        return None
    return version


def is_gpu_node(node: NodeInfo) -> bool:
    """A node with GPUs by any account: the operator's label, GFD's labels, NFD's PCI label
    or an NVIDIA resource in its capacity."""
    return (
        node.gpu_present
        or nvidia.GPU_PRODUCT in node.labels
        or any(node.labels.get(k) == "true" for k in nvidia.NFD_GPU_LABELS)
        or any(k.startswith(nvidia.PREFIX) and v not in ("", "0") for k, v in node.capacity.items())
    )


def wanted_mig_config(node: NodeInfo) -> str | None:
    """The mig-parted config the node's label asks for, unless it is `all-disabled`."""
    value = node.labels.get(nvidia.MIG_CONFIG)
    return value if value and value != nvidia.MIG_ALL_DISABLED else None


def mig_enabled(node: NodeInfo) -> bool:
    """MIG is on (by GFD's labels) or applied (by the MIG manager's state)."""
    product = node.labels.get(nvidia.GPU_PRODUCT, "")
    if "-MIG-" in product:
        return True
    if any(_MIG_COUNT.match(k) and v not in ("", "0") for k, v in node.labels.items()):
        return True
    return wanted_mig_config(node) is not None and (
        node.labels.get(nvidia.MIG_CONFIG_STATE) == nvidia.MIG_STATE_SUCCESS
    )


def spec_at(obj: CustomObject | None, *path: str) -> Any:
    """`spec.a.b.c` of a policy object, None where any step is missing."""
    node: Any = obj.spec if obj is not None else None
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


# --- the device-plugin config a node runs ------------------------------------------------------


@dataclass(frozen=True)
class PluginChoice:
    """Which config a node runs: its name (None: built-in defaults), the parsed config (None
    when it cannot be read) and, when there is a problem, why."""

    configmap: str | None
    name: str | None
    config: PluginConfig | None
    error: str | None = None

    @property
    def shown(self) -> str:
        return f"config {self.name!r}" if self.name else "the built-in defaults"


def plugin_configmap(snapshot: Snapshot) -> tuple[str | None, str | None]:
    """(ConfigMap name, default key) the ClusterPolicy gives the device plugin."""
    policy = snapshot.cluster_policy
    name = spec_at(policy, "devicePlugin", "config", "name")
    default = spec_at(policy, "devicePlugin", "config", "default")
    return (name or None, default or None) if isinstance(name, str) else (None, None)


def plugin_overrides(snapshot: Snapshot) -> tuple[dict[str, str], str | None]:
    """The flag and environment values the device plugin's DaemonSet gives it over its config
    file (the operator's MPS_ROOT, MIG_STRATEGY...), read by the plugin's own function
    (`config_overrides`); ({}, why) when one of them cannot be used."""
    ds = next((d for d in snapshot.daemon_sets if d.name == nvidia.DEVICE_PLUGIN_DAEMONSET), None)
    if ds is None:
        return {}, None
    flags: dict[str, object | None] = {}
    for key in ENV_OVERRIDES:
        flag = flag_of(key)
        for i, arg in enumerate(ds.args):
            if arg.startswith(flag + "="):
                flags[key] = arg.split("=", 1)[1]
            elif arg == flag and i + 1 < len(ds.args):
                flags[key] = ds.args[i + 1]
    try:
        return config_overrides(flags, ds.env), None
    except OverrideError as exc:
        return {}, f"daemonset {ds.namespace}/{ds.name}: {exc}"


def plugin_config_of(snapshot: Snapshot, node: NodeInfo) -> PluginChoice:
    """The device-plugin config `node` runs, chosen as the device plugin chooses it and read
    as it reads it: the file with the DaemonSet's overrides applied."""
    cm_name, default = plugin_configmap(snapshot)
    label = node.labels.get(nvidia.DEVICE_PLUGIN_CONFIG) or None
    overrides, bad = plugin_overrides(snapshot)
    if cm_name is None:
        return _builtin(overrides, bad)
    cm = snapshot.config_map(cm_name)
    configs = dict(cm.data) if cm is not None else {}
    if label:
        name: str | None = label
    elif default:
        name = default
    elif "default" in configs:
        name = "default"
    elif len(configs) == 1:
        name = next(iter(configs))
    else:
        return replace(_builtin(overrides, bad), configmap=cm_name)
    assert name is not None
    if name not in configs:
        return PluginChoice(cm_name, name, None, error="missing")
    if bad is not None:
        return PluginChoice(cm_name, name, None, error=bad)
    parsed, error = _plugin_config(
        configs[name], f"configmap {cm_name} key {name}", tuple(sorted(overrides.items()))
    )
    return PluginChoice(cm_name, name, parsed, error)


def _builtin(overrides: dict[str, str], bad: str | None) -> PluginChoice:
    if bad is not None:
        return PluginChoice(None, None, None, error=bad)
    parsed, error = _plugin_config("", "the built-in defaults", tuple(sorted(overrides.items())))
    return PluginChoice(None, None, parsed, error)


# A cluster's nodes share a handful of configs: each text is parsed once, not once per node.
@functools.lru_cache(maxsize=64)
def _plugin_config(
    text: str, source: str, overrides: tuple[tuple[str, str], ...] = ()
) -> tuple[PluginConfig | None, str | None]:
    try:
        return parse_config(text, source, dict(overrides)), None
    except SharingConfigError as exc:
        return None, str(exc)


@functools.lru_cache(maxsize=64)
def mig_parted_config(text: str, source: str) -> tuple[MigPartedConfig | None, str | None]:
    """A mig-parted config file's text parsed (or why it cannot be), once per text."""
    try:
        return parse_mig_config(text, source), None
    except ConfigError as exc:
        return None, str(exc)


def mig_parted_configmap(snapshot: Snapshot, node: NodeInfo | str) -> str:
    """The ConfigMap the node's MIG manager takes its layouts from: the ClusterPolicy's
    `spec.migManager.config.name`; else the layouts it generated for the node's GPUs
    (`<node>-mig-config`) once it has; else the chart's default set. The one answer for
    doctor and what-if."""
    name = spec_at(snapshot.cluster_policy, "migManager", "config", "name")
    return layouts_configmap(
        name if isinstance(name, str) else None,
        node if isinstance(node, str) else node.name,
        lambda cm: snapshot.config_map(cm) is not None,
    )


def node_mig_layouts(snapshot: Snapshot, node: NodeInfo | str) -> MigPartedConfig | None:
    """The mig-parted configs the node's MIG manager reads, from the ConfigMap
    `mig_parted_configmap` names; None when that is not in the snapshot, `LabelError` when
    it does not load."""
    name = mig_parted_configmap(snapshot, node)
    cm = snapshot.config_map(name)
    if cm is None or MIG_PARTED_KEY not in cm.data:
        return None
    layouts, error = mig_parted_config(cm.data[MIG_PARTED_KEY], f"configmap/{cm.namespace}/{name}")
    if layouts is None:
        raise LabelError(error or f"configmap/{cm.namespace}/{name}: unreadable")
    return layouts


# --- how many GPUs a node has -------------------------------------------------------------------


def gpu_count(snapshot: Snapshot, node: NodeInfo) -> int:
    """How many physical GPUs the node has, by its labels: the one rule for doctor, the
    what-if twin and `plan --from-snapshot`.

    `nvidia.com/gpu.count` counts GPUs, except under the `single` strategy with MIG on
    (product `<name>-MIG-<profile>`), where it counts MIG devices: there the node's layout
    (`nvidia.com/mig.config` in its mig-parted ConfigMap) says how many there are per GPU.
    Where neither says (`-MIG-INVALID`: GPUs that disagree, `gpu.count` 0; a layout not in
    the snapshot), the per-GPU isolation labels kubegpu's feature discovery writes
    (`kubegpu.io/gpu.<i>.isolation`, one per GPU that advertises a device) count them. What
    the labels do not say is a `LabelError`, never a guess.
    """
    text = node.labels.get(nvidia.GPU_COUNT, "")
    _, profile = split_product(node.labels.get(nvidia.GPU_PRODUCT, ""))
    if not profile and text.isdigit():
        return int(text)
    indexes = [int(m.group(1)) for k in node.labels if (m := _ISOLATION.match(k))]
    try:
        if not text.isdigit():
            raise LabelError(f"node {node.name}: label {nvidia.GPU_COUNT}={text!r} is not a count")
        if profile == "INVALID":
            raise LabelError(
                f"node {node.name}: {nvidia.GPU_PRODUCT} ends in -MIG-INVALID: the labels do "
                "not say how many GPUs it has"
            )
        return _gpus_under_single(snapshot, node, profile, int(text))
    except LabelError:
        if indexes:
            return max(indexes) + 1
        raise


def known_gpu_count(snapshot: Snapshot, node: NodeInfo) -> int | None:
    """`gpu_count` where the labels say it (and it is above 0), else None."""
    try:
        count = gpu_count(snapshot, node)
    except LabelError:
        return None
    return count or None


def _gpus_under_single(snapshot: Snapshot, node: NodeInfo, profile: str, devices: int) -> int:
    layouts = node_mig_layouts(snapshot, node)
    name = node.labels.get(nvidia.MIG_CONFIG)
    if layouts is None or name is None or name not in layouts.mig_configs:
        raise LabelError(
            f"node {node.name}: {nvidia.GPU_PRODUCT} says single-strategy MIG ({profile}), but "
            f"its {nvidia.MIG_CONFIG} layout {name!r} is not in the snapshot's MIG configs"
        )
    entries = layouts.mig_configs[name]
    listed = [d for e in entries if isinstance(e.devices, tuple) for d in e.devices]
    if listed:
        return max(listed) + 1
    per_gpu = sum((e.mig_devices or {}).get(profile, 0) for e in entries if e.mig_enabled)
    if per_gpu <= 0 or devices % per_gpu:
        raise LabelError(
            f"node {node.name}: {devices} {profile} devices do not fit layout {name!r}"
        )
    return devices // per_gpu


def layouts_configmap(policy_name: str | None, node: str, exists: Callable[[str], bool]) -> str:
    """The rule of `mig_parted_configmap` over any view of the ConfigMaps: `exists(name)`
    says whether the operator's namespace has one of that name (what-if asks it of a
    snapshot with a change applied)."""
    if policy_name:
        return policy_name
    generated = node + nvidia.MIG_GENERATED_CONFIGMAP_SUFFIX
    if exists(generated):
        return generated
    return nvidia.MIG_PARTED_DEFAULT_CONFIGMAP
