"""The mig-parted config file (`version: v1`, `mig-configs`) as pydantic models.

Loading is strict: unknown keys (the file's keys are kebab-case: `mig_enabled` is unknown),
a wrong version, a malformed profile, a count or flag of the wrong type (`"7"`, `7.0`, `true`
as a count; `"false"` as mig-enabled) or a key given twice reject the whole file with an
error naming the file, config, entry, field and value. Files go through `kubegpu.base.loader`
and its bounds (docs/limits.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from kubegpu.base import loader
from kubegpu.base.loader import excerpt
from kubegpu.catalog.profile import ProfileName, ProfileNameError

# Counts and flags are taken as the file writes them, never coerced: `"7"`, `7.0` or `true`
# is not a count and `"false"` is not a boolean (mig-parted's Go decoder refuses them too).
StrictInt = Annotated[int, Strict()]
StrictBool = Annotated[bool, Strict()]


class ConfigError(loader.InputError):
    """A mig-parted config that cannot be used. The message says where and why."""


def _parse_pci_id(text: str) -> tuple[int, int | None]:
    """`0x20B010DE` or `0x20B010DE:0x204D10DE` -> (device id, optional subsystem id)."""
    device, _, subsystem = text.partition(":")
    try:
        dev = int(device, 16)
        sub = int(subsystem, 16) if subsystem else None
    except ValueError:
        raise ValueError(f"{excerpt(text)} is not a PCI id like 0x20B010DE") from None
    if not device.lower().startswith("0x") or dev > 0xFFFFFFFF:
        raise ValueError(f"{excerpt(text)} is not a PCI id like 0x20B010DE")
    return dev, sub


class MigConfigEntry(BaseModel):
    """One element of a named config: which GPUs, MIG on/off, and which MIG devices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device_filter: tuple[str, ...] | None = Field(default=None, alias="device-filter")
    devices: Literal["all"] | tuple[int, ...]
    mig_enabled: StrictBool = Field(alias="mig-enabled")
    mig_devices: dict[str, StrictInt] | None = Field(default=None, alias="mig-devices")

    @field_validator("device_filter", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted 0x20B010DE as an integer; mig-parted reads it as text.
        def text(v: Any) -> Any:
            return f"0x{v:08X}" if isinstance(v, int) and not isinstance(v, bool) else v

        if isinstance(value, list):
            return [text(v) for v in value]
        return [text(value)] if isinstance(value, str | int) else value

    @field_validator("device_filter")
    @classmethod
    def _pci_ids(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for item in value or ():
            _parse_pci_id(item)
        return value

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "all":
            raise ValueError(
                f"{excerpt(value)}: the only string accepted is 'all'; otherwise a list of GPU indexes"
            )
        if isinstance(value, list):
            for v in value:
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{excerpt(v)} is not a GPU index (a whole number >= 0)")
        return value

    @field_validator("mig_devices")
    @classmethod
    def _profiles(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        if value is None:
            return None
        for name, count in value.items():
            try:
                parsed = ProfileName.parse(name)
            except ProfileNameError as exc:
                raise ValueError(str(exc)) from None
            if str(parsed) != name:  # '1g.18gb ' beside '1g.18gb' would add up unseen
                raise ValueError(f"{excerpt(name)}: write the profile as {str(parsed)!r}")
            if count < 0:
                raise ValueError(f"{name}: count {count} is negative")
        if value and not any(value.values()):
            raise ValueError("every count is 0; use {} for MIG enabled without instances")
        return value

    @model_validator(mode="after")
    def _devices_need_mig(self) -> MigConfigEntry:
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices must be empty or absent when mig-enabled is false")
        if self.mig_enabled and self.mig_devices is None:
            raise ValueError("mig-devices is required when mig-enabled is true (use {} for none)")
        return self

    def pci_filter(self) -> list[tuple[int, int | None]]:
        return [_parse_pci_id(x) for x in self.device_filter or ()]

    def selects(self, index: int, pci_device_id: int, pci_subsystem_id: int | None = None) -> bool:
        """Whether this entry applies to GPU `index` with that PCI id (mig-parted's walk)."""
        if self.devices != "all" and index not in self.devices:
            return False
        filters = self.pci_filter()
        if not filters:
            return True
        return any(
            dev == pci_device_id and (sub is None or sub == pci_subsystem_id)
            for dev, sub in filters
        )

    def wanted(self) -> dict[str, int]:
        return {k: v for k, v in (self.mig_devices or {}).items() if v}

    def to_yaml_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.device_filter:
            out["device-filter"] = list(self.device_filter)
        out["devices"] = self.devices if self.devices == "all" else list(self.devices)
        out["mig-enabled"] = self.mig_enabled
        if self.mig_enabled:
            out["mig-devices"] = dict(self.mig_devices or {})
        return out


class MigPartedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal["v1"]
    mig_configs: dict[str, tuple[MigConfigEntry, ...]] = Field(alias="mig-configs")

    @field_validator("mig_configs")
    @classmethod
    def _non_empty(
        cls, value: dict[str, tuple[MigConfigEntry, ...]]
    ) -> dict[str, tuple[MigConfigEntry, ...]]:
        if not value:
            raise ValueError("no configs: mig-configs is empty")
        for name, entries in value.items():
            if not entries:
                raise ValueError(f"config {excerpt(name)} has no entries")
        return value

    def select(
        self, name: str | None, source: str = "config"
    ) -> tuple[str, tuple[MigConfigEntry, ...]]:
        """The named config; with no name, the only one (mig-parted's -c rule)."""
        if name is None:
            if len(self.mig_configs) != 1:
                names = ", ".join(sorted(self.mig_configs))
                raise ConfigError(
                    f"{source}: {len(self.mig_configs)} configs ({names}); choose one with -c"
                )
            name = next(iter(self.mig_configs))
        if name not in self.mig_configs:
            names = ", ".join(sorted(self.mig_configs))
            raise ConfigError(f"{source}: unknown config name {excerpt(name)} (known: {names})")
        return name, self.mig_configs[name]

    def to_yaml(self) -> str:
        data = {
            "version": self.version,
            "mig-configs": {
                n: [e.to_yaml_dict() for e in es] for n, es in self.mig_configs.items()
            },
        }
        return yaml.safe_dump(data, sort_keys=False)


def _location(loc: tuple[int | str, ...], data: Any = None) -> str:
    """pydantic's error location as words: `config 'a', entry 0, field mig-devices.1g.5gb`."""
    parts = [str(x) for x in loader.clean_loc(loc)]
    if len(parts) >= 3 and parts[0] == "mig-configs":
        where = f"config {excerpt(parts[1])}, entry {parts[2]}"
        fields = [p for p in parts[3:] if not p.isdigit()]
        return where + (f", field {excerpt('.'.join(fields))[1:-1]}" if fields else "")
    if len(parts) == 2 and parts[0] == "mig-configs":
        return f"config {excerpt(parts[1])}"
    return f"field {excerpt('.'.join(parts))[1:-1]}" if parts else "top level"


def parse_config(
    text: str, source: str = "<config>", limits: loader.Limits = loader.DEFAULT_LIMITS
) -> MigPartedConfig:
    data = loader.parse_yaml(text, source, ConfigError, limits)
    return from_data(data, source)


def from_data(data: Any, source: str = "<config>") -> MigPartedConfig:
    """A config from an already parsed document (what `parse_config` does after the YAML)."""
    loader.require_mapping(data, source, ConfigError, "a mapping with 'version' and 'mig-configs'")
    return loader.validate(MigPartedConfig, data, source, ConfigError, _location)


def load_config(path: str | Path, limits: loader.Limits = loader.DEFAULT_LIMITS) -> MigPartedConfig:
    """Read a config file; `-` reads standard input."""
    text, source = loader.read_text(path, ConfigError, limits)
    return parse_config(text, source, limits)
