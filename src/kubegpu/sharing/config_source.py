"""Which device-plugin config file applies: one `--config-file`, or one of several named
configs. Shared by the device plugin, feature discovery and the MPS daemon so they agree.

Named configs live in a directory (a ConfigMap mounted as a volume: one file per key). The
node label `nvidia.com/device-plugin.config` names the one to use; without the label the
default applies, found as NVIDIA's config-manager finds it: `--default-config`, else a
config named `default`, else the only config in the directory, else the built-in defaults.
A label naming a config that does not exist is an error (the plugin keeps its last good
config and reports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubegpu.base import loader
from kubegpu.catalog import nvidia

CONFIG_LABEL = nvidia.DEVICE_PLUGIN_CONFIG


@dataclass(frozen=True)
class ConfigChoice:
    """The config to apply: `text` (None: built-in defaults), where it came from, or why
    none could be chosen."""

    source: str
    text: str | None = None
    error: str | None = None

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return (self.source, self.text, self.error)


@dataclass(frozen=True)
class ConfigSource:
    config_file: Path | None = None
    config_dir: Path | None = None
    default_config: str | None = None

    def named(self) -> dict[str, Path]:
        """The named configs in the directory (hidden files, e.g. `..data`, are not configs)."""
        if self.config_dir is None:
            return {}
        try:
            entries = sorted(self.config_dir.iterdir())
        except OSError:
            return {}
        return {p.name: p for p in entries if not p.name.startswith(".") and p.is_file()}

    def choose(self, label: str | None) -> ConfigChoice:
        if self.config_dir is None:
            if self.config_file is None:
                return ConfigChoice("built-in defaults")
            return _read(self.config_file, str(self.config_file))
        where = str(self.config_dir)
        if not self.config_dir.is_dir():
            # a mounted ConfigMap is always a directory, if an empty one: a wrong path is an
            # error, not "no configs, so the built-in defaults"
            what = "is not a directory" if self.config_dir.exists() else "does not exist"
            return ConfigChoice(f"configs in {where}", error=f"config directory {where} {what}")
        configs = self.named()
        if label:
            if label not in configs:
                known = ", ".join(configs) or "none"
                return ConfigChoice(
                    f"config {label!r} in {where}",
                    error=f"specified config {label!r} does not exist in {where} (known: {known})",
                )
            return _read(configs[label], f"config {label!r} in {where}")
        if self.default_config:
            if self.default_config in configs:
                name = self.default_config
                return _read(configs[name], f"default config {name!r} in {where}")
            return ConfigChoice(
                f"default config {self.default_config!r} in {where}",
                error=f"default config {self.default_config!r} does not exist in {where}",
            )
        if "default" in configs:
            return _read(configs["default"], f"config 'default' in {where}")
        if len(configs) == 1:
            ((name, path),) = configs.items()
            return _read(path, f"config {name!r} (the only one) in {where}")
        return ConfigChoice(f"built-in defaults (no default config in {where})")


def _read(path: Path, source: str) -> ConfigChoice:
    """The file's text, read within the loader's bounds (size, UTF-8), or why it cannot be.

    `-` is not standard input here: a component reads its config again and again, and
    standard input can be read once (or is closed, as in a DaemonSet's pod)."""
    if str(path) == loader.STDIN:
        return ConfigChoice(
            source,
            error=f"{source}: '-' (standard input) cannot be a device-plugin config: the "
            "config is read again while the component runs; give a file",
        )
    try:
        text, _ = loader.read_text(path, loader.InputError)
    except loader.InputError as exc:
        return ConfigChoice(source, error=str(exc))
    return ConfigChoice(source, text=text)
