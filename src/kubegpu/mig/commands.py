"""The `kubegpu mig` commands as plain functions of their options.

Each returns the text to print (or reports progress through `report`) and raises
CommandError with the message and exit code for anything that stops it, so the CLI
module is only options and one call. The GPUs are opened through `open_gpus` only when a
command needs them, so a bad config is refused before any backend is touched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubegpu.catalog import UnknownModelError, all_models, get_model
from kubegpu.mig.config import ConfigError, MigConfigEntry, MigPartedConfig, load_config
from kubegpu.mig.geometry import LayoutError, iter_layouts
from kubegpu.mig.lock import MigLock, MigLockError, check_timeout
from kubegpu.mig.parted import (
    DEFAULT_WRITER,
    ApplyError,
    NodeStateError,
    Report,
    apply_config,
    assert_config,
    describe_node,
    export_config,
    generate_config,
)
from kubegpu.mig.targets import check_against_catalog, check_against_model, parse_model_count
from kubegpu.nvml import Nvml, NvmlError

OpenGpus = Callable[[], Nvml]
RESET_PENDING_EXIT = 3


class CommandError(Exception):
    """A command cannot go on: print `message` (one error per line) and exit with `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _load(path: str) -> MigPartedConfig:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None


def _selected(config_file: str, selected: str | None) -> tuple[str, tuple[MigConfigEntry, ...]]:
    """The config named by -c (or the file's only one)."""
    try:
        return _load(config_file).select(selected, config_file)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None


def _config_errors(config_file: str, exc: ConfigError) -> str:
    """A static-check failure, one line per problem, each naming the file."""
    return "\n".join(f"{config_file}: {line}" for line in str(exc).splitlines())


def _render(cfg: MigPartedConfig, fmt: str) -> str:
    if fmt not in {"yaml", "json"}:
        raise CommandError(f"--output-format {fmt!r}: use yaml or json")
    if fmt == "yaml":
        return cfg.to_yaml()
    return json.dumps(yaml.safe_load(cfg.to_yaml()), indent=2) + "\n"


# -- catalog ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelRow:
    """One catalog model as `mig models` lists it (field order is the JSON's)."""

    id: str
    product: str
    memory_mib: int
    mig: bool
    profiles: list[str]
    unconfirmed: list[str]


def model_rows() -> list[ModelRow]:
    """Every catalog model with its MIG profiles and its facts no source confirms."""
    return [
        ModelRow(
            m.id,
            m.product_name,
            m.memory_mib,
            bool(m.mig),
            [p.name for p in m.mig.gpu_instance_profiles] if m.mig else [],
            m.unconfirmed_facts(),
        )
        for m in all_models()
    ]


def layouts(model: str, profiles: str, all_layouts: bool) -> Iterator[str]:
    """One line per layout of `model` (maximal ones unless `all_layouts`), then the count.
    The model and profiles are checked before the first line."""
    try:
        gpu = get_model(model)
        if gpu.mig is None:
            raise LayoutError(f"{gpu.id} ({gpu.product_name}) is not MIG-capable")
        chosen = [gpu.mig.profile(p.strip()) for p in profiles.split(",") if p.strip()] or None
        if chosen is None and profiles.strip():  # "," is not "every profile"
            raise CommandError(f"--profiles {profiles!r}: names no profile")
    except UnknownModelError as exc:
        raise CommandError(str(exc)) from None
    except KeyError as exc:
        raise CommandError(f"profile {exc.args[0]!r} does not exist on {model}") from None
    except LayoutError as exc:
        raise CommandError(str(exc)) from None

    def lines() -> Iterator[str]:
        n = 0
        for layout in iter_layouts(gpu, chosen, maximal_only=not all_layouts):
            n += 1
            yield " + ".join(str(pi) for pi in sorted(layout, key=lambda pi: pi.start))
        yield f"{n} layouts"

    return lines()


# -- mig-parted ---------------------------------------------------------------------------------


def validate(config_file: str, selected: str | None, model: str | None) -> str:
    """Check configs against the catalog, or against a node of `MODEL[:COUNT]` exactly as
    apply and assert would judge them there."""
    cfg = _load(config_file)
    try:
        names = [cfg.select(selected, config_file)[0]] if selected else sorted(cfg.mig_configs)
        gpu, count = parse_model_count(model) if model else (None, None)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    problems = []
    for name in names:
        entries = cfg.mig_configs[name]
        try:
            if gpu is not None:
                check_against_model(name, entries, gpu, count)
            else:
                check_against_catalog(name, entries)
        except ConfigError as exc:
            problems.append(_config_errors(config_file, exc))
    if problems:
        raise CommandError("\n".join(problems))
    target = f" for {model}" if model else ""
    return f"{config_file}: {len(names)} config(s) valid{target}: {', '.join(names)}"


def apply(
    config_file: str,
    selected: str | None,
    open_gpus: OpenGpus,
    *,
    mode_only: bool = False,
    skip_reset: bool = False,
    lock_timeout_s: float | None = None,
    report: Report,
) -> str:
    """Apply a config under the node's MIG lock; the final line, or CommandError."""
    name, entries = _selected(config_file, selected)
    gpus = open_gpus()
    try:
        if lock_timeout_s is not None:
            check_timeout(lock_timeout_s, "--lock-timeout")
        lock = MigLock.for_node(gpus, "kubegpu " + DEFAULT_WRITER, lock_timeout_s)
        result = apply_config(
            gpus,
            name,
            entries,
            mode_only=mode_only,
            skip_reset=skip_reset,
            report=report,
            lock=lock,
        )
    except ConfigError as exc:
        raise CommandError(_config_errors(config_file, exc) + "\nnothing was applied") from None
    except (ApplyError, MigLockError, NvmlError) as exc:
        raise CommandError(str(exc)) from None
    if result.reset_required:
        ids = ",".join(map(str, result.reset_required))
        raise CommandError(
            f"MIG mode change pending on GPU(s) {ids}: reset them (nvidia-smi -r -i {ids}) or reboot the node, then apply again",
            RESET_PENDING_EXIT,
        )
    return f"config {name!r} applied" + ("" if result.changed else " (nothing to change)")


def assert_applied(
    config_file: str,
    selected: str | None,
    open_gpus: OpenGpus,
    *,
    mode_only: bool = False,
    valid_config: bool = False,
) -> str:
    """`config '<name>' is applied` (or `is valid`), else CommandError listing mismatches."""
    name, entries = _selected(config_file, selected)
    if valid_config:
        return f"config {name!r} is valid"
    try:
        problems = assert_config(open_gpus(), name, entries, mode_only=mode_only)
    except ConfigError as exc:
        raise CommandError(_config_errors(config_file, exc)) from None
    except NvmlError as exc:
        raise CommandError(str(exc)) from None
    if problems:
        raise CommandError(
            "\n".join(
                ["assertion failure: selected configuration not currently applied", *problems]
            )
        )
    return f"config {name!r} is applied"


def export(open_gpus: OpenGpus, label: str, fmt: str) -> str:
    """This node's MIG state as a mig-parted config, rendered as yaml or json."""
    try:
        cfg = export_config(open_gpus(), label)
    except (NodeStateError, NvmlError) as exc:
        raise CommandError(str(exc)) from None
    return _render(cfg, fmt)


def generate(
    models: Sequence[str], open_gpus: OpenGpus, fmt: str, out_file: Path | None = None
) -> str | None:
    """The standard configs for `models` (or this node's GPUs); the text, or None when
    written to `out_file`."""
    try:
        if models:
            gpus = [get_model(m) for m in models]
        else:
            node = open_gpus()
            gpus = [get_model(d.model_id) for d in node.devices() if d.model_id]
        cfg = generate_config(gpus)
    except UnknownModelError as exc:
        raise CommandError(str(exc)) from None
    except (ConfigError, NvmlError) as exc:
        raise CommandError(str(exc)) from None
    text = _render(cfg, fmt)
    if out_file is None:
        return text
    try:
        out_file.write_text(text)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if not out_file.parent.is_dir():
            why += f" (directory {out_file.parent} does not exist)"
        elif out_file.is_dir():
            why += " (it is a directory; name a file)"
        raise CommandError(f"--file {out_file}: cannot write: {why}") from None
    return None


def show(open_gpus: OpenGpus) -> str:
    """One line per GPU: MIG mode, MIG devices, and any instance an interrupted change left."""
    return describe_node(open_gpus())
