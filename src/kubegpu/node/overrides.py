"""Flag and environment values over the device-plugin config file, as upstream (flag > env >
file), gathered in one place for the device plugin, the MPS daemon and feature discovery.

The keys are the environment variables of `kubegpu.sharing.config.ENV_OVERRIDES`
(`MIG_STRATEGY`, `FAIL_ON_INIT_ERROR`...); each has the flag named after it
(`--mig-strategy`, `--fail-on-init-error`...). Every value is checked alone against the
config model, so a bad one is refused at start with its flag, variable and value named,
before any config file is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kubegpu.node.runtime import ComponentError
from kubegpu.sharing.config import ENV_OVERRIDES, PluginConfig, SharingConfigError, with_overrides


class OverrideError(ComponentError):
    """A flag or environment value the config cannot take."""


def flag_of(key: str) -> str:
    """The command-line flag that sets `key`: MIG_STRATEGY -> --mig-strategy."""
    return "--" + key.lower().replace("_", "-")


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The known override variables set (non-empty) in `environ` (default: os.environ)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in ENV_OVERRIDES if env.get(k)}


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_overrides(
    flags: Mapping[str, object | None], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The overrides for the config file: the flag values given (None or "" = not given),
    over the override variables of `environ` when it is passed.

    Typer already reads a flag's own variable, so components whose every override is a flag
    pass no `environ`; feature discovery, which has flags for only some, passes os.environ.
    OverrideError names the flag, the variable and the value that cannot be used.
    """
    unknown = sorted(set(flags) - set(ENV_OVERRIDES))
    if unknown:
        raise ValueError(f"not config overrides: {', '.join(unknown)}")
    out = env_overrides(environ) if environ is not None else {}
    out.update({k: _text(v) for k, v in flags.items() if v is not None and v != ""})
    for key, value in out.items():
        try:
            with_overrides(PluginConfig(), {key: value}, f"{flag_of(key)} / {key}")
        except SharingConfigError as exc:
            raise OverrideError(str(exc)) from None
    return out
