"""The simulated node's container runtime and its config on the node's host root.

A node runs containerd or CRI-O (chosen per node in the cluster file). Each keeps its
config where the real one does, in its own format, so NVIDIA's toolkit installer (stood in
for by `toolkit`) edits the same files a real node has:

- containerd: `/etc/containerd/config.toml`, which reads only the files its top-level
  `imports` name (globs allowed, relative to the file, in order, later wins; `plugins` is
  merged by plugin key, each value replaced whole, as containerd before 2.1 does);
- CRI-O: `/etc/crio/crio.conf`, then every file in `/etc/crio/crio.conf.d` in lexical
  order, each merged into what was read before.

The runtime handlers a pod's `runtimeClassName` may name are those of the *loaded* config:
edits take effect only when the runtime restarts (`Runtime.restart`), as on a real node.
"""

from __future__ import annotations

import glob
import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

Json = dict[str, Any]
RuntimeName = Literal["containerd", "cri-o"]

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DROP_IN_DIR = "/etc/containerd/conf.d"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CRIO_CONFIG = "/etc/crio/crio.conf"
CRIO_DROP_IN_DIR = "/etc/crio/crio.conf.d"
CRIO_SOCKET = "/var/run/crio/crio.sock"

DEFAULT_VERSIONS: dict[str, str] = {"containerd": "2.0.5", "cri-o": "1.31.3"}

# the CRI plugin's key in containerd's config, by config version (TK engine/containerd)
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


class RuntimeConfigError(ValueError):
    """A runtime config file that cannot be read (its path and the parser's reason)."""


@dataclass(frozen=True)
class RuntimeOptions:
    """A node's runtime, as its cluster file or SimNodeConfig gives it.

    `strict`: the node enforces the runtime's contract (handlers, injection, the toolkit);
    off by default until the operator's operands meet it (docs/architecture.md)."""

    name: RuntimeName = "containerd"
    version: str = ""
    strict: bool = False

    def __post_init__(self) -> None:
        if self.name not in DEFAULT_VERSIONS:
            raise ValueError(
                f"runtime.name: {self.name!r} is not a runtime; expected containerd or cri-o"
            )

    @property
    def resolved_version(self) -> str:
        return self.version or DEFAULT_VERSIONS[self.name]

    @property
    def container_runtime_version(self) -> str:
        """What the node reports in status.nodeInfo.containerRuntimeVersion."""
        return f"{self.name}://{self.resolved_version}"

    @property
    def major(self) -> int:
        return int(self.resolved_version.split(".", 1)[0] or 0)

    @property
    def config_path(self) -> str:
        return CONTAINERD_CONFIG if self.name == "containerd" else CRIO_CONFIG

    @property
    def socket_path(self) -> str:
        return CONTAINERD_SOCKET if self.name == "containerd" else CRIO_SOCKET


def host_path(root: Path, path: str) -> Path:
    """`path` of the node's host, under the node's simulated root."""
    return root / path.lstrip("/")


def read_toml(path: Path) -> Json:
    """A TOML file, `{}` when missing; a file that does not parse is a RuntimeConfigError."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise RuntimeConfigError(f"{path}: {exc}") from exc


def write_toml(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(dict(data)))


def default_config(options: RuntimeOptions) -> Json:
    """The config a freshly installed runtime has: runc (and CRI-O's crun) only."""
    if options.name == "containerd":
        version = 3 if options.major >= 2 else 2
        runc = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "runc"}}
        return {
            "version": version,
            "imports": [f"{CONTAINERD_DROP_IN_DIR}/*.toml"],
            "plugins": {
                CRI_PLUGIN[version]: {
                    "containerd": {"default_runtime_name": "runc", "runtimes": {"runc": runc}}
                }
            },
        }
    return {
        "crio": {
            "runtime": {
                "default_runtime": "crun",
                "runtimes": {
                    "crun": {"runtime_path": "/usr/bin/crun", "runtime_type": "oci"},
                    "runc": {"runtime_path": "/usr/bin/runc", "runtime_type": "oci"},
                },
            }
        }
    }


def install(root: Path, options: RuntimeOptions) -> None:
    """The runtime as installed on the host: its config (kept if one is there), its
    drop-in directory and its socket."""
    config = host_path(root, options.config_path)
    if not config.exists():
        write_toml(config, default_config(options))
    drop_in = CONTAINERD_DROP_IN_DIR if options.name == "containerd" else CRIO_DROP_IN_DIR
    host_path(root, drop_in).mkdir(parents=True, exist_ok=True)
    socket = host_path(root, options.socket_path)
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.touch()


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> Json:
    """`over` decoded onto `base`: tables merge key by key, other values are replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _containerd_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> Json:
    """containerd (<2.1) merging an imported file: `plugins` by plugin key, each plugin's
    table replaced whole; any other top-level key replaced."""
    out = dict(base)
    for key, value in over.items():
        if key == "plugins" and isinstance(value, Mapping):
            out["plugins"] = {**(out.get("plugins") or {}), **value}
        elif key != "imports":
            out[key] = value
    return out


def containerd_imports(config_file: Path, config: Mapping[str, Any], root: Path) -> list[Path]:
    """The files `imports` names, in order (globs sorted; relative to the file)."""
    found: list[Path] = []
    for entry in config.get("imports") or []:
        pattern = str(entry)
        if not pattern.startswith("/"):
            pattern = str(Path("/") / config_file.relative_to(root).parent / pattern)
        hits = sorted(glob.glob(str(host_path(root, pattern))))
        found.extend(Path(h) for h in hits if Path(h) != config_file)
    return found


def effective_config(root: Path, options: RuntimeOptions) -> Json:
    """The config the runtime would load now, from its files on the host root."""
    top = host_path(root, options.config_path)
    config = read_toml(top)
    if options.name == "containerd":
        for path in containerd_imports(top, config, root):
            config = _containerd_merge(config, read_toml(path))
        return config
    drop_ins = host_path(root, CRIO_DROP_IN_DIR)
    for path in sorted(drop_ins.iterdir()) if drop_ins.is_dir() else []:
        if path.is_file():
            config = deep_merge(config, read_toml(path))
    return config


def containerd_version(config: Mapping[str, Any]) -> int:
    """The config's version as containerd reads it: no key means 1."""
    version = config.get("version", 1)
    if not isinstance(version, int):
        raise RuntimeConfigError(f"unsupported type for version field: {version}")
    return version


@dataclass(frozen=True)
class Handlers:
    """The runtime handlers a loaded config defines, and its default one."""

    names: tuple[str, ...]
    default: str
    tables: dict[str, Json] = field(default_factory=dict)


def handlers(config: Mapping[str, Any], options: RuntimeOptions) -> Handlers:
    if options.name == "containerd":
        version = containerd_version(config) if config else 2
        cri = (config.get("plugins") or {}).get(CRI_PLUGIN.get(version, CRI_PLUGIN[3])) or {}
        section = cri.get("containerd") or {}
        default = str(section.get("default_runtime_name") or "runc")
    else:
        section = (config.get("crio") or {}).get("runtime") or {}
        default = str(section.get("default_runtime") or "crun")
    tables = dict(section.get("runtimes") or {})
    return Handlers(tuple(sorted(tables)), default, tables)


def sandbox_id(pod_uid: str) -> str:
    """A stable sandbox id for a pod (the runtime's 64-hex form)."""
    return hashlib.sha256(pod_uid.encode()).hexdigest()


def handler_error(
    loaded: Handlers, handler: str | None, options: RuntimeOptions, pod_uid: str
) -> str | None:
    """The runtime's own error when it cannot run a sandbox with `handler`, else None.

    An empty handler means the default runtime. The words are containerd's (1.7 and 2.x)
    and CRI-O's; CRI-O prints its runtime map, whose values are pointers."""
    name = handler or loaded.default
    if name in loaded.names:
        return None
    if options.name == "cri-o":
        entries = " ".join(
            f"{n}:0xc{int(hashlib.sha1(n.encode()).hexdigest()[:9], 16):09x}" for n in loaded.names
        )
        return f"failed to find runtime handler {name} from runtime list map[{entries}]"
    if options.major < 2:
        return f'failed to get sandbox runtime: no runtime for "{name}" is configured'
    return (
        f'unable to get OCI runtime for sandbox "{sandbox_id(pod_uid)}": '
        f'no runtime for "{name}" is configured'
    )


def sandbox_event_message(error: str) -> str:
    """The kubelet's FailedCreatePodSandBox event for a runtime's sandbox error."""
    return f"Failed to create pod sandbox: rpc error: code = Unknown desc = {error}"


class Runtime:
    """A node's runtime: its options, its files on the host root, its loaded handlers."""

    def __init__(self, root: Path, options: RuntimeOptions) -> None:
        self.root = root
        self.options = options
        self.loaded = Handlers((), "runc")
        self.restarts = 0

    def start(self) -> None:
        install(self.root, self.options)
        self.restart()

    def restart(self) -> None:
        """Read the config again, as a restarted runtime does. A config that does not parse
        keeps the runtime down: it then defines no handler."""
        try:
            self.loaded = handlers(effective_config(self.root, self.options), self.options)
        except RuntimeConfigError:
            self.loaded = Handlers((), self.loaded.default)
        self.restarts += 1

    @property
    def socket(self) -> Path:
        return host_path(self.root, self.options.socket_path)

    def sandbox_error(self, handler: str | None, pod_uid: str) -> str | None:
        return handler_error(self.loaded, handler, self.options, pod_uid)

    def handler_binary(self, handler: str | None) -> str:
        """The low-level runtime binary a handler runs (BinaryName / runtime_path)."""
        table = self.loaded.tables.get(handler or self.loaded.default) or {}
        if self.options.name == "containerd":
            return str((table.get("options") or {}).get("BinaryName") or "runc")
        return str(table.get("runtime_path") or "crun")
