"""The device plugin's config file (`version: v1`) as pydantic models.

Same fields and meanings as NVIDIA's k8s-device-plugin: `flags` (shared with GPU feature
discovery and the MPS daemon), `resources`, `sharing.timeSlicing` / `sharing.mps` and
`imex`. Validation is strict and whole-file: one bad field rejects the config with an
error naming the file, field and value, so a node keeps its last good config.

Two deliberate differences: upstream parses per-resource `rename` and `devices` subsets
but resets them at runtime, kubegpu honours them; and a sharing entry for a resource this
config can never advertise (a MIG resource under `migStrategy: none`, `nvidia.com/gpu.shared`,
a typo) is refused instead of silently ignored. Files go through `kubegpu.base.loader`
and its bounds (docs/limits.md): a key given twice is an error.

One kubegpu extension: `sharing.mps.migInstances: true` shares MIG devices through MPS, one
daemon per MIG instance (docs/device-plugin.md). Without it MPS on MIG is refused, as upstream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    field_validator,
    model_validator,
)

from kubegpu.base import loader
from kubegpu.base.loader import excerpt
from kubegpu.catalog import nvidia
from kubegpu.catalog.profile import SUFFIXES

RESOURCE_PREFIX = nvidia.DOMAIN
SHARED_SUFFIX = nvidia.SHARED_SUFFIX
MAX_RESOURCE_NAME = 63
MPS_MAX_CLIENTS_VOLTA_PLUS = 48
MPS_MAX_CLIENTS_OLDER = 16
# Upper bounds on what one config may make a node advertise (docs/limits.md). A ListAndWatch
# message carries at most 68 bytes per device (a replica id `GPU-<uuid>::<n>`, its health and
# NUMA node), so MAX_DEVICES_PER_RESOURCE devices stay near 1.1 MB, a quarter of gRPC's 4 MiB
# default message size; MAX_REPLICAS lets 16 GPUs reach that bound with time-slicing.
MAX_REPLICAS = 1024
MAX_DEVICES_PER_RESOURCE = 16384
# GPU feature discovery's sleep interval: at least a second (0 would relabel the Node in a
# tight loop), at most a year; 'infinite' labels once per change.
MIN_SLEEP_INTERVAL_S = 1.0
MAX_SLEEP_INTERVAL_S = 365 * 86_400.0
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_MIG_INDEX = re.compile(r"^\d+:\d+$")
# What the mixed strategy can advertise: `mig-<G>g.<GB>gb[.me|.me.all|.gfx|-me]` (C == G only).
_MIXED_MIG_RESOURCE = re.compile(
    "^"
    + re.escape(nvidia.MIG_RESOURCE_PREFIX)
    + r"[1-9]\d*g\.[1-9]\d*gb(?:"
    + "|".join(re.escape(s.replace("+", ".")) for s in SUFFIXES if s)
    + ")?$"
)


class SharingConfigError(loader.InputError):
    """A device-plugin config that cannot be used. The message says where and why."""


def resource_name(name: str) -> str:
    """`gpu` -> `nvidia.com/gpu`; checks the length and DNS-1123 rules like upstream."""
    full = name if name.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{name}"
    short = full.split("/", 1)[1]
    if len(full) > MAX_RESOURCE_NAME:
        raise ValueError(
            f"resource name {excerpt(full)} is longer than {MAX_RESOURCE_NAME} characters"
        )
    if "/" in short or not _DNS1123_SUBDOMAIN.match(short):
        raise ValueError(
            f"resource name {excerpt(full)}: {excerpt(short)} is not a DNS-1123 subdomain"
        )
    return full


# Booleans and counts are taken as the file writes them: `"true"` or `"4"` in quotes is a
# type error, as it is for upstream's Go JSON decoder (pydantic would otherwise coerce).
StrictBool = Annotated[bool, Strict()]
StrictInt = Annotated[int, Strict()]


class _Strict(BaseModel):
    # Only the file's camelCase keys are accepted: `mig_strategy` is an unknown field.
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginFlags(_Strict):
    pass_device_specs: StrictBool = Field(False, alias="passDeviceSpecs")
    device_list_strategy: tuple[str, ...] = Field(("envvar",), alias="deviceListStrategy")
    device_id_strategy: Literal["uuid", "index"] = Field("uuid", alias="deviceIDStrategy")
    cdi_annotation_prefix: str = Field("cdi.k8s.io/", alias="cdiAnnotationPrefix")
    nvidia_ctk_path: str = Field("/usr/bin/nvidia-ctk", alias="nvidiaCTKPath")
    container_driver_root: str = Field("/driver-root", alias="containerDriverRoot")
    shared_devices_allocation_policy: Literal["distributed", "packed"] = Field(
        "distributed", alias="sharedDevicesAllocationPolicy"
    )

    @field_validator("device_list_strategy", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("device_list_strategy")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for v in value:
            if v not in DEVICE_LIST_STRATEGIES:
                raise ValueError(
                    f"invalid strategy: {v} (known: {', '.join(DEVICE_LIST_STRATEGIES)})"
                )
        if not value:
            raise ValueError("at least one device list strategy is needed")
        return value

    @property
    def cdi_enabled(self) -> bool:
        return any(s.startswith("cdi-") for s in self.device_list_strategy)

    @property
    def only_cdi(self) -> bool:
        """Every strategy is a CDI one: no env var or mount lists the devices."""
        return all(s.startswith("cdi-") for s in self.device_list_strategy)


class GfdFlags(_Strict):
    oneshot: StrictBool = False
    no_timestamp: StrictBool = Field(False, alias="noTimestamp")
    sleep_interval: str = Field("60s", alias="sleepInterval")
    output_file: str = Field(
        "/etc/kubernetes/node-feature-discovery/features.d/gfd", alias="outputFile"
    )
    machine_type_file: str = Field("/sys/class/dmi/id/product_name", alias="machineTypeFile")

    @field_validator("sleep_interval")
    @classmethod
    def _duration(cls, value: str) -> str:
        if (problem := sleep_interval_problem(value)) is not None:
            raise ValueError(problem)
        return value


class Flags(_Strict):
    mig_strategy: Literal["none", "single", "mixed"] = Field("none", alias="migStrategy")
    fail_on_init_error: StrictBool = Field(True, alias="failOnInitError")
    nvidia_driver_root: str = Field("/", alias="nvidiaDriverRoot")
    nvidia_dev_root: str | None = Field(None, alias="nvidiaDevRoot")
    mps_root: str | None = Field(None, alias="mpsRoot")
    gds_enabled: StrictBool = Field(False, alias="gdsEnabled")
    mofed_enabled: StrictBool = Field(False, alias="mofedEnabled")
    gdrcopy_enabled: StrictBool = Field(False, alias="gdrcopyEnabled")
    use_node_feature_api: StrictBool | None = Field(None, alias="useNodeFeatureAPI")
    device_discovery_strategy: Literal["auto", "nvml", "tegra", "vfio"] = Field(
        "auto", alias="deviceDiscoveryStrategy"
    )
    plugin: PluginFlags = Field(default_factory=PluginFlags)
    gfd: GfdFlags = Field(default_factory=GfdFlags)

    @property
    def dev_root(self) -> str:
        return self.nvidia_dev_root or self.nvidia_driver_root


def wildcard_match(pattern: str, text: str) -> bool:
    """Whether `text` is `pattern` with each `*` standing for any run of characters.

    One pass that returns to the last `*` on a mismatch: at most len(pattern) x len(text)
    steps. A regex of `.*` pieces backtracks exponentially on `*****...Z` from a config
    file and hung the component (it could not even be stopped: the regex holds the GIL)."""
    p = t = 0
    star, resume = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] == "*":
            star, resume = p, t
            p += 1
        elif p < len(pattern) and pattern[p] == text[t]:
            p += 1
            t += 1
        elif star >= 0:
            p, resume = star + 1, resume + 1
            t = resume
        else:
            return False
    return all(c == "*" for c in pattern[p:])


class ResourcePattern(_Strict):
    pattern: str
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return resource_name(value)

    def matches(self, text: str) -> bool:
        """Wildcard match (`*` any run), anchored as in upstream v0.20."""
        return wildcard_match(self.pattern, text)


class Resources(_Strict):
    gpus: tuple[ResourcePattern, ...] = ()
    mig: tuple[ResourcePattern, ...] = ()


DeviceRef = int | str


class ReplicatedResource(_Strict):
    name: str
    rename: str | None = None
    devices: Literal["all"] | int | tuple[DeviceRef, ...] = "all"
    replicas: StrictInt

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return resource_name(value)

    @field_validator("rename")
    @classmethod
    def _rename(cls, value: str | None) -> str | None:
        return resource_name(value) if value else None

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if value < 2:
            raise ValueError(f"number of replicas must be >= 2 (got {excerpt(value)})")
        if value > MAX_REPLICAS:
            raise ValueError(
                f"number of replicas must be <= {MAX_REPLICAS} (got {excerpt(value)}); "
                "see docs/limits.md"
            )
        return value

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "all":
            raise ValueError(f"devices {excerpt(value)}: the only string accepted is 'all'")
        if isinstance(value, bool):
            raise ValueError(f"devices {excerpt(value)}: expected 'all', a count or a list")
        if isinstance(value, int) and value <= 0:
            raise ValueError(f"devices count {value} must be > 0")
        if not isinstance(value, str | int | list | tuple):
            raise ValueError(f"devices {excerpt(value)}: expected 'all', a count or a list")
        if isinstance(value, list | tuple) and not value:
            raise ValueError("devices: the list is empty (leave the field out to mean 'all')")
        if isinstance(value, list | tuple):
            for item in value:
                ok = (isinstance(item, int) and not isinstance(item, bool) and item >= 0) or (
                    isinstance(item, str)
                    and (
                        item.isdigit()
                        or _MIG_INDEX.match(item)
                        or item.startswith(("GPU-", "MIG-"))
                    )
                )
                if not ok:
                    raise ValueError(
                        f"unsupported device reference {excerpt(item)} (use an index, 'gpu:mig', a GPU- or MIG- UUID)"
                    )
        return value


class ReplicatedResources(_Strict):
    rename_by_default: StrictBool = Field(False, alias="renameByDefault")
    fail_requests_greater_than_one: StrictBool | None = Field(
        None, alias="failRequestsGreaterThanOne"
    )
    resources: tuple[ReplicatedResource, ...]

    @field_validator("resources")
    @classmethod
    def _some(cls, value: tuple[ReplicatedResource, ...]) -> tuple[ReplicatedResource, ...]:
        if not value:
            raise ValueError("no resources specified")
        names = [r.name for r in value]
        for n in names:
            if names.count(n) > 1:
                raise ValueError(f"resource {n} is listed more than once")
        return value

    def shared_name(self, resource: ReplicatedResource) -> str | None:
        """Where replicas of `resource` are advertised: its rename, `<name>.shared` under
        renameByDefault, or None for the resource's own name."""
        if resource.rename:
            return resource.rename
        return resource_name(resource.name + SHARED_SUFFIX) if self.rename_by_default else None


class MpsResources(ReplicatedResources):
    """`sharing.mps`: upstream's fields plus `migInstances`, a kubegpu extension that lets
    MIG devices be shared through MPS (one daemon per MIG instance). Off by default, so a
    config written for upstream is refused on MIG exactly as upstream refuses it."""

    mig_instances: StrictBool = Field(False, alias="migInstances")


MPS_MIG_FIELD = "sharing.mps.migInstances"
MPS_MIG_HINT = f"kubegpu shares MIG instances through MPS only with {MPS_MIG_FIELD}: true"


class Sharing(_Strict):
    time_slicing: ReplicatedResources | None = Field(None, alias="timeSlicing")
    mps: MpsResources | None = None


class Imex(_Strict):
    channel_ids: tuple[StrictInt, ...] = Field((), alias="channelIDs")
    required: StrictBool = False

    @field_validator("channel_ids")
    @classmethod
    def _channels(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if value not in ((), (0,)):
            raise ValueError("invalid IMEX config: channelIDs must be [] or [0]")
        return value


SharingStrategy = Literal["none", "time-slicing", "mps"]


class PluginConfig(_Strict):
    version: Literal["v1"] = "v1"
    flags: Flags = Field(default_factory=Flags)
    resources: Resources = Field(default_factory=Resources)
    sharing: Sharing = Field(default_factory=Sharing)
    imex: Imex = Field(default_factory=Imex)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if value in ("", None):
            return "v1"
        if value != "v1":
            raise ValueError(f"unknown version {excerpt(value)}")
        return value

    @model_validator(mode="after")
    def _rules(self) -> PluginConfig:
        if self.sharing.mps is not None and not self.flags.mps_root:
            raise ValueError("using MPS requires --mps-root to be specified (flags.mpsRoot)")
        return self

    @property
    def mps_on_mig(self) -> bool:
        """MIG devices may be MPS-shared (kubegpu's `sharing.mps.migInstances`)."""
        return self.sharing.mps is not None and self.sharing.mps.mig_instances

    def mps_problem(self) -> tuple[str, str, str] | None:
        """(field, value, why) when this config asks for MPS where it cannot have it."""
        if self.sharing.mps is None or self.flags.mig_strategy != "mixed" or self.mps_on_mig:
            return None
        return (
            "flags.migStrategy",
            "mixed",
            f"using --mig-strategy=mixed is not supported with MPS ({MPS_MIG_HINT})",
        )

    def unadvertised(self) -> tuple[str, str] | None:
        """(field, name) of the first sharing entry for a resource this config never
        advertises, or None when every entry can take effect on some node."""
        for key, block in (("timeSlicing", self.sharing.time_slicing), ("mps", self.sharing.mps)):
            for i, resource in enumerate(block.resources if block is not None else ()):
                if not self.can_advertise(resource.name):
                    return f"sharing.{key}.resources.{i}.name", resource.name
        return None

    def can_advertise(self, resource: str) -> bool:
        """Whether some node's GPUs could be advertised as `resource` under this config."""
        gpus = {p.name for p in self.resources.gpus} or {nvidia.GPU_RESOURCE}
        migs = {p.name for p in self.resources.mig}
        strategy = self.flags.mig_strategy
        if strategy == "single" and not migs:
            migs = {nvidia.GPU_RESOURCE}
        if resource in gpus or (strategy != "none" and resource in migs):
            return True
        return strategy == "mixed" and not migs and _MIXED_MIG_RESOURCE.match(resource) is not None

    def name_clash(self) -> tuple[str, str, str] | None:
        """(field, name, why) for the first rename that gives two kinds of device one
        resource name, or a name another kind or strategy advertises; None when none does.
        Kubelet counts a resource's devices as interchangeable, so a whole H100 renamed to
        `nvidia.com/mig-1g.10gb` would be handed out as a seventh of itself."""
        gpu_names = {p.name for p in self.resources.gpus} or {nvidia.GPU_RESOURCE}
        single = self.flags.mig_strategy == "single"
        for i, p in enumerate(self.resources.gpus):
            if _MIXED_MIG_RESOURCE.match(p.name):
                return (
                    f"resources.gpus.{i}.name",
                    p.name,
                    f"{p.name} is the name the mixed strategy gives MIG devices; whole GPUs "
                    "and MIG devices cannot share a resource name",
                )
        for i, p in enumerate(self.resources.mig):
            if p.name in gpu_names and not (single and p.name == nvidia.GPU_RESOURCE):
                return (
                    f"resources.mig.{i}.name",
                    p.name,
                    f"{p.name} is also the name of whole GPUs (resources.gpus); whole GPUs "
                    "and MIG devices cannot share a resource name",
                )
            own = f"{nvidia.MIG_RESOURCE_PREFIX}{p.pattern.replace('+', '.')}"
            if _MIXED_MIG_RESOURCE.match(p.name) and p.name != own:
                return (
                    f"resources.mig.{i}.name",
                    p.name,
                    f"{p.name} is the name the mixed strategy gives MIG devices of another "
                    f"profile than {p.pattern!r}; rename to a name of your own",
                )
        claimed = gpu_names | {p.name for p in self.resources.mig}
        for key, block in (("timeSlicing", self.sharing.time_slicing), ("mps", self.sharing.mps)):
            seen: dict[str, int] = {}
            for i, entry in enumerate(block.resources if block is not None else ()):
                target = block.shared_name(entry) if block is not None else None
                if target is None:
                    continue
                field = f"sharing.{key}.resources.{i}." + ("rename" if entry.rename else "name")
                if target in claimed or _MIXED_MIG_RESOURCE.match(target):
                    return (
                        field,
                        target,
                        f"the replicas of {entry.name} would be advertised as {target}, a name "
                        "this config or a MIG strategy gives unshared devices; replicas and "
                        "whole devices cannot share a resource name",
                    )
                if target in seen:
                    return (
                        field,
                        target,
                        f"sharing.{key}.resources.{seen[target]} already advertises its "
                        f"replicas as {target}; two kinds of device cannot share a resource name",
                    )
                seen[target] = i
        return None

    def advertised_words(self) -> str:
        names = sorted({p.name for p in self.resources.gpus} or {nvidia.GPU_RESOURCE})
        strategy = self.flags.mig_strategy
        if strategy != "none":
            names += sorted({p.name for p in self.resources.mig} - set(names))
            if strategy == "mixed" and not self.resources.mig:
                names.append(f"{nvidia.MIG_RESOURCE_PREFIX}<profile>")
        return (
            f"this config never advertises that resource (migStrategy {strategy} advertises "
            f"{', '.join(names)}); only advertised resources can be shared"
        )

    @property
    def sharing_strategy(self) -> SharingStrategy:
        """MPS wins when both are set, as upstream."""
        if self.sharing.mps is not None and any(r.replicas > 1 for r in self.sharing.mps.resources):
            return "mps"
        ts = self.sharing.time_slicing
        if ts is not None and any(r.replicas > 1 for r in ts.resources):
            return "time-slicing"
        return "none"

    @property
    def replicated(self) -> ReplicatedResources | None:
        return self.sharing.mps if self.sharing.mps is not None else self.sharing.time_slicing

    @property
    def fail_requests_greater_than_one(self) -> bool:
        """MPS defaults to true when omitted; time-slicing to false."""
        rr = self.replicated
        if rr is None:
            return False
        if rr.fail_requests_greater_than_one is None:
            return self.sharing.mps is not None
        return rr.fail_requests_greater_than_one

    def to_yaml(self) -> str:
        return yaml.safe_dump(
            self.model_dump(by_alias=True, exclude_defaults=True, mode="json"), sort_keys=False
        )

    def ignored_fields(self) -> tuple[tuple[str, str, str], ...]:
        """(field, value, why) for each upstream field this config sets to a value kubegpu
        accepts (so upstream's files load) but does not act on: the components say so once
        rather than let the value look applied."""
        flags, plugin = self.flags, self.flags.plugin
        out: list[tuple[str, str, str]] = []
        if plugin.nvidia_ctk_path != PluginFlags().nvidia_ctk_path:
            out.append(
                (
                    "flags.plugin.nvidiaCTKPath",
                    plugin.nvidia_ctk_path,
                    "kubegpu writes its CDI spec itself and never runs nvidia-ctk",
                )
            )
        if plugin.container_driver_root != PluginFlags().container_driver_root:
            out.append(
                (
                    "flags.plugin.containerDriverRoot",
                    plugin.container_driver_root,
                    "kubegpu reads the GPUs through NVML, not the driver's files",
                )
            )
        if flags.gfd.output_file != GfdFlags().output_file:
            out.append(
                (
                    "flags.gfd.outputFile",
                    flags.gfd.output_file,
                    "feature discovery labels the Node directly; only --output-file "
                    "(GFD_OUTPUT_FILE) writes a features file",
                )
            )
        if flags.device_discovery_strategy not in ("auto", "nvml"):
            out.append(
                (
                    "flags.deviceDiscoveryStrategy",
                    flags.device_discovery_strategy,
                    "kubegpu discovers devices through NVML only",
                )
            )
        if flags.use_node_feature_api:
            out.append(
                (
                    "flags.useNodeFeatureAPI",
                    "true",
                    "feature discovery labels the Node directly, without NodeFeature objects",
                )
            )
        if self.imex.required:
            out.append(
                (
                    "imex.required",
                    "true",
                    "kubegpu does not check that the IMEX channel exists on the node",
                )
            )
        return tuple(out)


def sleep_interval_problem(text: str) -> str | None:
    """Why `text` cannot be GFD's sleep interval, or None when it can."""
    if text == "infinite":
        return None
    seconds = parse_duration(text)
    if seconds is None:
        return f"{excerpt(text)} is not a duration like 60s, 5m or 'infinite'"
    if not MIN_SLEEP_INTERVAL_S <= seconds <= MAX_SLEEP_INTERVAL_S:
        return (
            f"{excerpt(text)}: a sleep interval must be between {MIN_SLEEP_INTERVAL_S:g}s and "
            f"{MAX_SLEEP_INTERVAL_S / 3600:g}h, or 'infinite'"
        )
    return None


def parse_duration(text: str) -> float | None:
    """Go-style durations: `60s`, `5m`, `1h30m`, `500ms`. None when not a duration."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)


def parse_config(
    text: str,
    source: str = "<config>",
    overrides: Mapping[str, Any] | None = None,
    limits: loader.Limits = loader.DEFAULT_LIMITS,
) -> PluginConfig:
    """Parse a config file's text (YAML or JSON). An empty file is the default config.

    `overrides` (flag/env values, keys as in ENV_OVERRIDES) are applied before the file is
    validated, so a flag can supply what the file leaves out (e.g. `--mps-root`).
    """
    data: Any = loader.parse_yaml(text, source, SharingConfigError, limits)
    if data is None:
        data = {}
    loader.require_mapping(data, source, SharingConfigError)
    if overrides:
        _merge(data, overrides, source)
    return _validate(data, source)


def _validate(data: dict[str, Any], source: str) -> PluginConfig:
    config = loader.validate(PluginConfig, data, source, SharingConfigError)
    if (problem := config.mps_problem()) is not None:
        field, value, why = problem
        raise SharingConfigError(f"{source}: field {field}, value {excerpt(value)}: {why}")
    if (clash := config.name_clash()) is not None:
        field, name, why = clash
        raise SharingConfigError(f"{source}: field {field}, value {excerpt(name)}: {why}")
    if (bad := config.unadvertised()) is not None:
        field, name = bad
        raise SharingConfigError(
            f"{source}: field {field}, value {excerpt(name)}: {config.advertised_words()}"
        )
    return config


def load_config(
    path: str | Path,
    overrides: Mapping[str, Any] | None = None,
    limits: loader.Limits = loader.DEFAULT_LIMITS,
) -> PluginConfig:
    text, source = loader.read_text(path, SharingConfigError, limits)
    return parse_config(text, source, overrides, limits)


# Environment variables that override config-file fields, as upstream (flag > env > file).
ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "MIG_STRATEGY": ("flags", "migStrategy"),
    "FAIL_ON_INIT_ERROR": ("flags", "failOnInitError"),
    "NVIDIA_DRIVER_ROOT": ("flags", "nvidiaDriverRoot"),
    "NVIDIA_DEV_ROOT": ("flags", "nvidiaDevRoot"),
    "MPS_ROOT": ("flags", "mpsRoot"),
    "GDS_ENABLED": ("flags", "gdsEnabled"),
    "MOFED_ENABLED": ("flags", "mofedEnabled"),
    "GDRCOPY_ENABLED": ("flags", "gdrcopyEnabled"),
    "PASS_DEVICE_SPECS": ("flags", "plugin", "passDeviceSpecs"),
    "DEVICE_LIST_STRATEGY": ("flags", "plugin", "deviceListStrategy"),
    "DEVICE_ID_STRATEGY": ("flags", "plugin", "deviceIDStrategy"),
}


BOOL_OVERRIDES = frozenset(
    {"FAIL_ON_INIT_ERROR", "GDS_ENABLED", "MOFED_ENABLED", "GDRCOPY_ENABLED", "PASS_DEVICE_SPECS"}
)
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(text: str) -> bool | None:
    """A boolean flag or env value as Go's strconv.ParseBool reads it; None when it is not one."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def with_overrides(
    config: PluginConfig, values: Mapping[str, Any], source: str = "flags"
) -> PluginConfig:
    """A copy of `config` with explicit flag/env values (keys as in ENV_OVERRIDES) applied."""
    data = config.model_dump(by_alias=True, mode="json")
    _merge(data, values, source)
    return _validate(data, source)


def _merge(data: dict[str, Any], values: Mapping[str, Any], source: str) -> None:
    """Put flag/env values into a config document (flag > env > file, as upstream)."""
    for key, raw in values.items():
        if raw is None:
            continue
        value: Any = raw
        path = ENV_OVERRIDES[key]
        node: Any = data
        for part in path[:-1]:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                break  # the file has a non-mapping here: validation refuses it below
        if not isinstance(node, dict):
            continue
        if key == "DEVICE_LIST_STRATEGY" and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        elif key in BOOL_OVERRIDES and isinstance(value, str):
            parsed = parse_bool(value)
            if parsed is None:
                raise SharingConfigError(f"{source}: {key}={value!r} is not a boolean")
            value = parsed
        node[path[-1]] = value
