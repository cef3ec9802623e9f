"""NVIDIA's toolkit installer (`nvidia-ctk-installer`), stood in for by the simulator.

A pod of NVIDIA's container-toolkit image on a strict node does what the installer does,
reading only the env and mounts its pod spec gives it: it installs the toolkit's files under
`<ROOT>/toolkit`, adds the `nvidia`, `nvidia-cdi` and `nvidia-legacy` handlers to the runtime
config at the paths its env names, and restarts the runtime through the socket its env
names. Paths are the container's: they reach the node's host root only through the pod's
host-path mounts; a write elsewhere lands in the container's own filesystem and configures
nothing. Wrong or missing env therefore means no handler, and the installer's error (its
own words) in the pod's log.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubegpu.sim.runtime.config import (
    CRI_PLUGIN,
    Json,
    Runtime,
    RuntimeConfigError,
    containerd_version,
    read_toml,
    write_toml,
)

TOOLKIT_IMAGE_MARKERS = ("container-toolkit",)  # nvcr.io/nvidia/k8s/container-toolkit
ERROR_PREFIX = "error running nvidia-ctk-installer: "
DEFAULT_ROOT = "/usr/local/nvidia"
RUNTIMES = ("containerd", "crio", "docker")
DEFAULTS: dict[str, dict[str, str]] = {
    "containerd": {
        "config": "/etc/containerd/config.toml",
        "drop_in": "/etc/containerd/conf.d/99-nvidia.toml",
        "socket": "/run/containerd/containerd.sock",
    },
    "crio": {
        "config": "/etc/crio/crio.conf",
        "drop_in": "/etc/crio/crio.conf.d/99-nvidia.toml",
        "socket": "/var/run/crio/crio.sock",
    },
    "docker": {
        "config": "/etc/docker/daemon.json",
        "drop_in": "",
        "socket": "/var/run/docker.sock",
    },
}
BINARIES = (
    "nvidia-container-runtime",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
    "nvidia-container-runtime-hook",
    "nvidia-container-cli",
    "nvidia-ctk",
    "nvidia-cdi-hook",
)
Mount = tuple[str, str, bool]  # host source, container path, read-only


def is_toolkit_image(image: str) -> bool:
    repo = image.rsplit("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return any(marker == repo for marker in TOOLKIT_IMAGE_MARKERS)


def first(env: Mapping[str, str], names: Sequence[str], default: str) -> str:
    """The first of `names` that is set wins (the installer's flag aliases)."""
    for name in names:
        if env.get(name):
            return env[name]
    return default


def truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class InstallerSettings:
    """What the installer reads from its environment."""

    runtime: str
    config: str
    drop_in: str
    drop_in_host_path: str
    socket: str
    root: str
    name: str
    set_as_default: bool
    enable_cdi: bool
    crio_mode: str
    restart_mode: str
    host_root: str
    no_config: bool


def settings(env: Mapping[str, str]) -> InstallerSettings:
    """The installer's settings from `env` (ValueError: the installer's own refusal)."""
    runtime = env.get("RUNTIME", "docker")
    if runtime not in RUNTIMES:
        raise ValueError(
            f'invalid runtime "{runtime}"; expected one of [containerd | crio | docker]'
        )
    d = DEFAULTS[runtime]
    alias = {"containerd": "CONTAINERD", "docker": "DOCKER"}.get(runtime)
    config_names = ["RUNTIME_CONFIG", *([f"{alias}_CONFIG"] if alias else [])]
    socket_names = ["RUNTIME_SOCKET", *([f"{alias}_SOCKET"] if alias else [])]
    name = first(env, ["NVIDIA_RUNTIME_NAME", "CONTAINERD_RUNTIME_CLASS"], "nvidia")
    return InstallerSettings(
        runtime=runtime,
        config=first(env, config_names, d["config"]),
        drop_in=env.get("RUNTIME_DROP_IN_CONFIG", d["drop_in"]),
        drop_in_host_path=env.get("RUNTIME_DROP_IN_CONFIG_HOST_PATH", ""),
        socket=first(env, socket_names, d["socket"]),
        root=first(env, ["TOOLKIT_INSTALL_DIR", "ROOT"], DEFAULT_ROOT),
        name="nvidia" if name in {"nvidia-cdi", "nvidia-legacy"} else name,
        set_as_default=truthy(
            first(env, ["NVIDIA_RUNTIME_SET_AS_DEFAULT", "CONTAINERD_SET_AS_DEFAULT"], "true")
        ),
        enable_cdi=truthy(first(env, ["RUNTIME_ENABLE_CDI", "CDI_ENABLED", "ENABLE_CDI"], "false")),
        crio_mode=env.get("CRIO_CONFIG_MODE", "config"),
        restart_mode=env.get("RUNTIME_RESTART_MODE", "systemd" if runtime == "crio" else "signal"),
        host_root=env.get("HOST_ROOT_MOUNT", "/host"),
        no_config=truthy(env.get("NO_RUNTIME_CONFIG", ""))
        or truthy(env.get("ENABLE_NRI_PLUGIN", "")),
    )


@dataclass
class ContainerFs:
    """The toolkit container's view of paths: its host-path mounts, else its own rootfs."""

    mounts: Sequence[Mount]
    rootfs: Path  # the container's own filesystem (writes there configure nothing)

    def resolve(self, path: str) -> Path:
        best: Mount | None = None
        for mount in self.mounts:
            dst = mount[1].rstrip("/") or "/"
            if (path == dst or path.startswith(dst.rstrip("/") + "/")) and (
                best is None or len(dst) > len(best[1].rstrip("/"))
            ):
                best = mount
        if best is None:
            return self.rootfs / path.lstrip("/")
        rest = path[len(best[1].rstrip("/")) :].lstrip("/")
        return Path(best[0]) / rest if rest else Path(best[0])


@dataclass
class InstallResult:
    """What one run of the installer did: its log and whether it failed."""

    log: list[str] = field(default_factory=list)
    error: str | None = None
    restarted: bool = False

    @property
    def exit_code(self) -> int:
        return 1 if self.error else 0


def handler_paths(s: InstallerSettings) -> dict[str, str]:
    """The three handlers and the wrapper each runs (TK operator.go)."""
    base = f"{s.root.rstrip('/')}/toolkit/nvidia-container-runtime"
    return {s.name: base, "nvidia-cdi": f"{base}.cdi", "nvidia-legacy": f"{base}.legacy"}


def install_toolkit(fs: ContainerFs, s: InstallerSettings) -> None:
    """The install tree `<ROOT>/toolkit`, removed and rebuilt on every start."""
    toolkit = fs.resolve(f"{s.root.rstrip('/')}/toolkit")
    if toolkit.is_dir():
        for entry in toolkit.iterdir():
            if entry.is_file():
                entry.unlink()
    toolkit.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        path = toolkit / name
        path.write_text(f'#!/bin/sh\n# {name}: simulated by kubegpu\nexec runc "$@"\n')
        path.chmod(0o755)
    for lib in ("libnvidia-container.so.1", "libnvidia-container-go.so.1"):
        (toolkit / lib).write_bytes(b"")
    cfg = {
        "nvidia-container-cli": {
            "root": "/run/nvidia/driver",
            "path": f"{toolkit}/nvidia-container-cli",
        },
        "nvidia-container-runtime": {"runtimes": ["runc", "crun"]},
    }
    write_toml(toolkit / ".config/nvidia-container-runtime/config.toml", cfg)


def _base_runtime(runtimes: Mapping[str, Any], default: str) -> Json:
    """A copy of the first runtime table that exists: the default (unless it is an nvidia
    one), runc, crun."""
    for candidate in ([default] if not default.startswith("nvidia") else []) + ["runc", "crun"]:
        if isinstance(runtimes.get(candidate), Mapping):
            return copy.deepcopy(dict(runtimes[candidate]))
    return {}


def configure_containerd(fs: ContainerFs, s: InstallerSettings) -> None:
    top_path = fs.resolve(s.config)
    try:
        top = read_toml(top_path)
        version = containerd_version(top) if top else 2
    except RuntimeConfigError as exc:
        raise ValueError(f"failed to parse config version: {exc}") from exc
    key = CRI_PLUGIN.get(version, CRI_PLUGIN[3])
    plugin = copy.deepcopy(dict((top.get("plugins") or {}).get(key) or {}))
    section = plugin.setdefault("containerd", {})
    runtimes = section.setdefault("runtimes", {})
    base = _base_runtime(runtimes, str(section.get("default_runtime_name") or ""))
    if not base:
        base = {"runtime_type": "io.containerd.runc.v2", "runtime_root": "", "runtime_engine": ""}
    for name, binary in handler_paths(s).items():
        table = copy.deepcopy(base)
        table["runtime_type"] = table.get("runtime_type") or "io.containerd.runc.v2"
        table.setdefault("options", {})["BinaryName"] = binary
        runtimes[name] = table
    if s.set_as_default:
        section["default_runtime_name"] = s.name
    elif section.get("default_runtime_name") == s.name:
        del section["default_runtime_name"]
    if s.enable_cdi:
        plugin["enable_cdi"] = True
    if version >= 2 and s.drop_in:
        write_toml(fs.resolve(s.drop_in), {"version": version, "plugins": {key: plugin}})
        pattern = f"{os.path.dirname(s.drop_in_host_path or s.drop_in)}/*.toml"
        imports = list(top.get("imports") or [])
        if pattern not in imports:
            imports.append(pattern)
        write_toml(top_path, {**top, "version": version, "imports": imports})
    else:
        plugins = {**(top.get("plugins") or {}), key: plugin}
        write_toml(top_path, {**top, "version": version, "plugins": plugins})


def configure_crio(fs: ContainerFs, s: InstallerSettings) -> None:
    if s.crio_mode == "hook":
        hook = {
            "version": "1.0.0",
            "hook": {
                "path": f"{s.root}/toolkit/nvidia-container-runtime-hook",
                "args": ["nvidia-container-runtime-hook", "prestart"],
            },
            "when": {"always": True, "commands": [".*"]},
            "stages": ["prestart"],
        }
        path = fs.resolve("/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(hook, indent=2))
        return
    top = read_toml(fs.resolve(s.config))
    section = (top.get("crio") or {}).get("runtime") or {}
    base = _base_runtime(section.get("runtimes") or {}, str(section.get("default_runtime") or ""))
    runtimes = {}
    for name, binary in handler_paths(s).items():
        runtimes[name] = {**base, "runtime_path": binary, "runtime_type": "oci"}
    drop_in: Json = {"crio": {"runtime": {"runtimes": runtimes}}}
    if s.set_as_default:
        drop_in["crio"]["runtime"]["default_runtime"] = s.name
    write_toml(fs.resolve(s.drop_in), drop_in)


def restart(fs: ContainerFs, s: InstallerSettings, runtime: Runtime, result: InstallResult) -> None:
    """Restart the runtime as the installer does; it restarts only if the socket (signal)
    or the host root (systemd) the installer reaches is the node's."""
    if s.restart_mode == "none":
        return
    if s.runtime == "crio":
        if s.restart_mode == "signal":
            raise ValueError("unable to setup runtime: supporting crio via signal is unsupported")
        host = fs.resolve(s.host_root)
        if runtime.options.name == "cri-o" and _same(host, runtime.root):
            runtime.restart()
            result.restarted = True
            return
        raise ValueError(
            "unable to setup runtime: unable to restart crio: failed to run command "
            f"chroot [{s.host_root} systemctl restart crio]: exit status 1"
        )
    socket = fs.resolve(s.socket)
    if socket.exists() and _same(socket, runtime.socket):
        runtime.restart()
        result.restarted = True
        return
    for attempt in range(1, 7):
        result.log.append(
            f"Error signaling {s.runtime}, attempt {attempt}/6: unable to dial: dial unix "
            f"{s.socket}: connect: no such file or directory"
        )
    raise ValueError(
        f"unable to setup runtime: unable to restart {s.runtime}: unable to dial: dial unix "
        f"{s.socket}: connect: no such file or directory"
    )


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def run_installer(env: Mapping[str, str], fs: ContainerFs, runtime: Runtime) -> InstallResult:
    """One start of the installer on a node: install, configure, restart."""
    result = InstallResult()
    try:
        s = settings(env)
        result.log.append(f"Installing NVIDIA container toolkit to '{s.root}/toolkit'")
        install_toolkit(fs, s)
        if s.no_config:
            result.log.append("Skipping runtime configuration")
            return result
        result.log.append(f"Configuring runtime {s.runtime} at {s.config}")
        if s.runtime == "containerd":
            configure_containerd(fs, s)
        elif s.runtime == "crio":
            configure_crio(fs, s)
        else:
            path = fs.resolve(s.config)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps({"runtimes": {s.name: {"path": handler_paths(s)[s.name], "args": []}}})
            )
        restart(fs, s, runtime, result)
        result.log.append("Waiting for signal")
    except (ValueError, OSError) as exc:
        result.error = ERROR_PREFIX + str(exc)
        result.log.append(result.error)
    return result


def _without_handlers(config: Json, key: str, names: Sequence[str]) -> Json:
    out = copy.deepcopy(config)
    runtimes = (((out.get("plugins") or {}).get(key) or {}).get("containerd") or {}).get("runtimes")
    if isinstance(runtimes, dict):
        for name in names:
            runtimes.pop(name, None)
    return out


def run_cleanup(env: Mapping[str, str], fs: ContainerFs, runtime: Runtime) -> InstallResult:
    """What the installer does on its signal: containerd loses the three handlers (from
    both files; the drop-in is deleted), CRI-O only its default runtime (the handlers stay,
    as NVIDIA's installer leaves them); then the runtime restarts."""
    result = InstallResult()
    try:
        s = settings(env)
        if s.no_config or s.runtime == "docker":
            return result
        names = list(handler_paths(s))
        if s.runtime == "containerd":
            top_path = fs.resolve(s.config)
            top = read_toml(top_path)
            if top:
                key = CRI_PLUGIN.get(containerd_version(top), CRI_PLUGIN[3])
                top = _without_handlers(top, key, names)
                if set(top) <= {"imports", "version"}:
                    top = {}
                write_toml(top_path, top)
            if s.drop_in:
                fs.resolve(s.drop_in).unlink(missing_ok=True)
        elif s.crio_mode == "config" and s.set_as_default:
            path = fs.resolve(s.drop_in)
            drop_in = read_toml(path)
            section = (drop_in.get("crio") or {}).get("runtime") or {}
            if section.pop("default_runtime", None) is not None:
                write_toml(path, drop_in)
        result.log.append("Reverting runtime configuration")
        restart(fs, s, runtime, result)
    except (ValueError, OSError) as exc:
        result.error = ERROR_PREFIX + str(exc)
        result.log.append(result.error)
    return result
