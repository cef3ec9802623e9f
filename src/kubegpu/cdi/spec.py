"""A CDI spec as typed values: built, written as JSON/YAML, parsed back and validated.

The format is the Container Device Interface's (node-runtime.md §3.1): a `kind`
(`vendor/class`), devices each with their own container edits, and spec-wide edits. The
version written is the lowest one the content needs, as nvcdi writes it; a parsed spec
that declares less than its content needs is refused, as the CDI library refuses it.
Every refusal is a `SpecError` naming the file, the field and the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubegpu.base.loader import InputError, check_size, excerpt, parse_yaml

Json = dict[str, Any]

#: The versions of the CDI format, oldest first.
VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
HOOK_NAMES = frozenset(
    {"createRuntime", "createContainer", "startContainer", "poststart", "poststop", "prestart"}
)
DEVICE_TYPES = frozenset({"b", "c", "u", "p"})
SPEC_SUFFIXES = (".json", ".yaml")  # the only files a CDI scan reads

_VENDOR = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS = _VENDOR
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


class SpecError(InputError):
    """A spec refused: which file, which field, which value (cut short), and why."""

    def __init__(self, source: str, field_path: str, value: object, reason: str) -> None:
        self.source, self.field, self.value, self.reason = source, field_path, value, reason
        super().__init__(f"CDI spec {source}: {field_path}: {excerpt(value)}: {reason}")


class _Undecodable(SpecError):
    """The file is not JSON/YAML at all (the shape `base.loader` reports errors in)."""

    def __init__(self, message: str) -> None:
        source, _, reason = message.partition(": ")
        super().__init__(source, "(document)", None, reason or message)


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str | None = None  # None: the same as `path`
    type: str | None = None  # b, c, u or p; None: from the host node
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None  # None: rwm
    uid: int | None = None
    gid: int | None = None

    @property
    def host(self) -> str:
        return self.host_path or self.path


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()
    # kept as given (kubegpu writes neither): Intel RDT and network devices
    intel_rdt: Mapping[str, Any] | None = None
    net_devices: tuple[Mapping[str, Any], ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.env
            or self.device_nodes
            or self.mounts
            or self.hooks
            or self.additional_gids
            or self.intel_rdt
            or self.net_devices
        )

    def env_map(self) -> dict[str, str]:
        return dict(e.partition("=")[::2] for e in self.env)

    def then(self, other: ContainerEdits) -> ContainerEdits:
        """These edits, then `other`'s, as a runtime applies them: env set by key, device
        nodes by path, mounts replacing any at the same container path, hooks appended."""
        env = {**self.env_map(), **other.env_map()}
        nodes = {n.path: n for n in (*self.device_nodes, *other.device_nodes)}
        mounts = {m.container_path: m for m in (*self.mounts, *other.mounts)}
        hooks = tuple(dict.fromkeys((*self.hooks, *other.hooks)))
        gids = tuple(dict.fromkeys((*self.additional_gids, *other.additional_gids)))
        return ContainerEdits(
            env=tuple(f"{k}={v}" for k, v in env.items()),
            device_nodes=tuple(nodes.values()),
            mounts=tuple(mounts.values()),
            hooks=hooks,
            additional_gids=gids,
            intel_rdt=other.intel_rdt or self.intel_rdt,
            net_devices=(*self.net_devices, *other.net_devices),
        )


def merge(edits: Iterable[ContainerEdits]) -> ContainerEdits:
    out = ContainerEdits()
    for e in edits:
        out = out.then(e)
    return out


@dataclass(frozen=True)
class Device:
    name: str
    edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    kind: str
    devices: tuple[Device, ...]
    edits: ContainerEdits = field(default_factory=ContainerEdits)
    annotations: Mapping[str, str] = field(default_factory=dict)
    version: str | None = None  # None: the lowest the content needs

    @property
    def vendor(self) -> str:
        return self.kind.partition("/")[0]

    @property
    def cdi_class(self) -> str:
        return self.kind.partition("/")[2]

    def device(self, name: str) -> Device | None:
        return next((d for d in self.devices if d.name == name), None)

    def qualified(self, device: str) -> str:
        return f"{self.kind}={device}"


def file_name(kind: str, transient_id: str = "", suffix: str = ".json") -> str:
    """The CDI library's file name: `vendor-class[_transientID]` (node-runtime.md §2.5)."""
    base = kind.replace("/", "-")
    return f"{base}_{transient_id}{suffix}" if transient_id else f"{base}{suffix}"


def parse_name(name: str) -> tuple[str, str]:
    """`vendor/class=device` -> (kind, device); ValueError for anything else."""
    kind, sep, device = name.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not (sep and slash and _VENDOR.match(vendor) and _CLASS.match(cls)):
        raise ValueError(f'invalid CDI device name "{name}"')
    if not _DEVICE.match(device):
        raise ValueError(f'invalid CDI device name "{name}"')
    return kind, device


# -- versions ---------------------------------------------------------------------------------


def _all_edits(spec: Spec) -> list[ContainerEdits]:
    return [spec.edits, *(d.edits for d in spec.devices)]


def minimum_version(spec: Spec) -> str:
    """The lowest CDI version that has every feature the spec uses (node-runtime.md §3.1)."""
    edits = _all_edits(spec)
    need = "0.3.0"

    def at_least(v: str) -> None:
        nonlocal need
        need = max(need, v, key=VERSIONS.index)

    if any(m.type for e in edits for m in e.mounts):
        at_least("0.4.0")
    if any(d.name[:1].isdigit() for d in spec.devices) or any(
        n.host_path for e in edits for n in e.device_nodes
    ):
        at_least("0.5.0")
    if spec.annotations or any(d.annotations for d in spec.devices) or "." in spec.cdi_class:
        at_least("0.6.0")
    if any(e.additional_gids or e.intel_rdt for e in edits):
        at_least("0.7.0")
    if any(e.net_devices for e in edits):
        at_least("1.1.0")
    return need


# -- writing ----------------------------------------------------------------------------------


def _drop_empty(d: Json) -> Json:
    return {k: v for k, v in d.items() if v not in (None, [], {}, "")}


def _node_json(n: DeviceNode) -> Json:
    return _drop_empty(
        {
            "path": n.path,
            "hostPath": n.host_path if n.host_path != n.path else None,
            "type": n.type,
            "major": n.major,
            "minor": n.minor,
            "fileMode": n.file_mode,
            "permissions": n.permissions,
            "uid": n.uid,
            "gid": n.gid,
        }
    )


def edits_json(e: ContainerEdits) -> Json:
    return _drop_empty(
        {
            "env": list(e.env),
            "deviceNodes": [_node_json(n) for n in e.device_nodes],
            "mounts": [
                _drop_empty(
                    {
                        "hostPath": m.host_path,
                        "containerPath": m.container_path,
                        "options": list(m.options),
                        "type": m.type,
                    }
                )
                for m in e.mounts
            ],
            "hooks": [
                _drop_empty(
                    {
                        "hookName": h.hook_name,
                        "path": h.path,
                        "args": list(h.args),
                        "env": list(h.env),
                        "timeout": h.timeout,
                    }
                )
                for h in e.hooks
            ],
            "additionalGids": list(e.additional_gids),
            "intelRdt": dict(e.intel_rdt) if e.intel_rdt else None,
            "netDevices": [dict(n) for n in e.net_devices],
        }
    )


def to_json(spec: Spec) -> Json:
    """The document, with the version the content needs (or the one the spec names)."""
    out: Json = {"cdiVersion": spec.version or minimum_version(spec), "kind": spec.kind}
    if spec.annotations:
        out["annotations"] = dict(spec.annotations)
    devices = []
    for d in spec.devices:
        entry: Json = {"name": d.name}
        if d.annotations:
            entry["annotations"] = dict(d.annotations)
        entry["containerEdits"] = edits_json(d.edits)
        devices.append(entry)
    out["devices"] = devices
    out["containerEdits"] = edits_json(spec.edits)
    return out


def dumps(spec: Spec, suffix: str = ".json") -> str:
    doc = to_json(spec)
    if suffix == ".yaml":
        return yaml.safe_dump(doc, sort_keys=False)
    return json.dumps(doc, indent=1) + "\n"


# -- parsing ----------------------------------------------------------------------------------


class _Reader:
    """Field-by-field checks of one document; every refusal names its field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, value: object, reason: str) -> SpecError:
        return SpecError(self.source, path, value, reason)

    def mapping(self, value: object, path: str, known: Iterable[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, value, "not a mapping")
        for key in value:
            if key not in known:
                raise self.fail(f"{path}.{key}" if path else str(key), value[key], "unknown field")
        return value

    def seq(self, value: object, path: str) -> Sequence[Any]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(path, value, "not a list")
        return value

    def text(self, value: object, path: str, required: bool = True) -> str | None:
        if value is None and not required:
            return None
        if not isinstance(value, str) or (required and not value):
            raise self.fail(path, value, "not a non-empty string")
        return value

    def integer(self, value: object, path: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, value, "not an integer")
        return value

    def strings(self, value: object, path: str) -> tuple[str, ...]:
        out = []
        for i, item in enumerate(self.seq(value, path)):
            if not isinstance(item, str):
                raise self.fail(f"{path}[{i}]", item, "not a string")
            out.append(item)
        return tuple(out)

    def annotations(self, value: object, path: str) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self.fail(path, value, "not a mapping of strings")
        return dict(value)

    def env(self, value: object, path: str) -> tuple[str, ...]:
        env = self.strings(value, path)
        for i, item in enumerate(env):
            if not item.partition("=")[0] or "=" not in item:
                raise self.fail(f"{path}[{i}]", item, "not KEY=VALUE")
        return env

    def absolute(self, value: object, path: str) -> str:
        text = self.text(value, path)
        assert text is not None
        if not text.startswith("/"):
            raise self.fail(path, text, "not an absolute path")
        return text

    def node(self, value: object, path: str) -> DeviceNode:
        m = self.mapping(
            value,
            path,
            ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"),
        )
        kind = self.text(m.get("type"), f"{path}.type", required=False)
        if kind is not None and kind not in DEVICE_TYPES:
            raise self.fail(f"{path}.type", kind, "not one of b, c, u, p")
        perms = self.text(m.get("permissions"), f"{path}.permissions", required=False)
        if perms is not None and (not perms or set(perms) - set("rwm")):
            raise self.fail(f"{path}.permissions", perms, "not a combination of r, w, m")
        host = m.get("hostPath")
        return DeviceNode(
            path=self.absolute(m.get("path"), f"{path}.path"),
            host_path=None if host is None else self.absolute(host, f"{path}.hostPath"),
            type=kind,
            major=self.integer(m.get("major"), f"{path}.major"),
            minor=self.integer(m.get("minor"), f"{path}.minor"),
            file_mode=self.integer(m.get("fileMode"), f"{path}.fileMode"),
            permissions=perms,
            uid=self.integer(m.get("uid"), f"{path}.uid"),
            gid=self.integer(m.get("gid"), f"{path}.gid"),
        )

    def mount(self, value: object, path: str) -> Mount:
        m = self.mapping(value, path, ("hostPath", "containerPath", "options", "type"))
        return Mount(
            host_path=self.absolute(m.get("hostPath"), f"{path}.hostPath"),
            container_path=self.absolute(m.get("containerPath"), f"{path}.containerPath"),
            options=self.strings(m.get("options"), f"{path}.options"),
            type=self.text(m.get("type"), f"{path}.type", required=False),
        )

    def hook(self, value: object, path: str) -> Hook:
        m = self.mapping(value, path, ("hookName", "path", "args", "env", "timeout"))
        name = self.text(m.get("hookName"), f"{path}.hookName")
        if name not in HOOK_NAMES:
            raise self.fail(f"{path}.hookName", name, f"not one of {', '.join(sorted(HOOK_NAMES))}")
        return Hook(
            hook_name=name,
            path=self.absolute(m.get("path"), f"{path}.path"),
            args=self.strings(m.get("args"), f"{path}.args"),
            env=self.env(m.get("env"), f"{path}.env"),
            timeout=self.integer(m.get("timeout"), f"{path}.timeout"),
        )

    def edits(self, value: object, path: str) -> ContainerEdits:
        if value is None:
            return ContainerEdits()
        m = self.mapping(
            value,
            path,
            ("env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"),
        )
        gids = []
        for i, g in enumerate(self.seq(m.get("additionalGids"), f"{path}.additionalGids")):
            gid = self.integer(g, f"{path}.additionalGids[{i}]")
            if gid is None or gid < 0:
                raise self.fail(f"{path}.additionalGids[{i}]", g, "not a group id")
            gids.append(gid)
        rdt = m.get("intelRdt")
        if rdt is not None and not isinstance(rdt, Mapping):
            raise self.fail(f"{path}.intelRdt", rdt, "not a mapping")
        nets = self.seq(m.get("netDevices"), f"{path}.netDevices")
        for i, n in enumerate(nets):
            if not isinstance(n, Mapping):
                raise self.fail(f"{path}.netDevices[{i}]", n, "not a mapping")
        return ContainerEdits(
            env=self.env(m.get("env"), f"{path}.env"),
            device_nodes=tuple(
                self.node(n, f"{path}.deviceNodes[{i}]")
                for i, n in enumerate(self.seq(m.get("deviceNodes"), f"{path}.deviceNodes"))
            ),
            mounts=tuple(
                self.mount(x, f"{path}.mounts[{i}]")
                for i, x in enumerate(self.seq(m.get("mounts"), f"{path}.mounts"))
            ),
            hooks=tuple(
                self.hook(x, f"{path}.hooks[{i}]")
                for i, x in enumerate(self.seq(m.get("hooks"), f"{path}.hooks"))
            ),
            additional_gids=tuple(gids),
            intel_rdt=dict(rdt) if rdt is not None else None,
            net_devices=tuple(dict(n) for n in nets),
        )


def parse_spec(data: object, source: str) -> Spec:
    """A spec document (already decoded) as a `Spec`; SpecError when it is not a valid one."""
    r = _Reader(source)
    m = r.mapping(data, "", ("cdiVersion", "kind", "annotations", "devices", "containerEdits"))
    version = m.get("cdiVersion")
    if not isinstance(version, str) or version not in VERSIONS:
        raise r.fail("cdiVersion", version, f"not one of {', '.join(VERSIONS)}")
    kind = m.get("kind")
    vendor, slash, cls = str(kind).partition("/") if isinstance(kind, str) else ("", "", "")
    if not (slash and _VENDOR.match(vendor) and _CLASS.match(cls)):
        raise r.fail("kind", kind, "not vendor/class")
    devices: list[Device] = []
    seen: set[str] = set()
    for i, d in enumerate(r.seq(m.get("devices"), "devices")):
        dm = r.mapping(d, f"devices[{i}]", ("name", "annotations", "containerEdits"))
        name = dm.get("name")
        if not isinstance(name, str) or not _DEVICE.match(name):
            raise r.fail(f"devices[{i}].name", name, "not a valid CDI device name")
        if name in seen:
            raise r.fail(f"devices[{i}].name", name, "duplicate device")
        seen.add(name)
        devices.append(
            Device(
                name,
                r.edits(dm.get("containerEdits"), f"devices[{i}].containerEdits"),
                r.annotations(dm.get("annotations"), f"devices[{i}].annotations"),
            )
        )
    spec = Spec(
        kind=str(kind),
        devices=tuple(devices),
        edits=r.edits(m.get("containerEdits"), "containerEdits"),
        annotations=r.annotations(m.get("annotations"), "annotations"),
        version=version,
    )
    need = minimum_version(spec)
    if VERSIONS.index(version) < VERSIONS.index(need):
        raise r.fail("cdiVersion", version, f"the spec version must be at least v{need}")
    return spec


def loads(text: str, source: str, suffix: str) -> Spec:
    """Parse a spec file's text (`suffix` .json or .yaml); SpecError when it is invalid."""
    if suffix != ".json":  # bounded: size, depth, values, duplicate keys (base.loader)
        return parse_spec(parse_yaml(text, source, _Undecodable), source)
    check_size(text, source, _Undecodable)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SpecError(source, "(document)", None, f"not JSON: {excerpt(str(exc), 120)}") from None
    return parse_spec(data, source)


def load(path: Path) -> Spec:
    """Read and parse one spec file (OSError when it cannot be read)."""
    return loads(path.read_text(), str(path), path.suffix)
