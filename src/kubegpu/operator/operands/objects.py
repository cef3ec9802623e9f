"""Small pure helpers that build the pieces of pod specs (env vars, mounts, volumes, probes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubegpu.kube.policy import EnvVar, ProbeSpec

Obj = dict[str, Any]


def env_var(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def field_env_var(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def merge_env(base: Sequence[Obj], *overrides: Sequence[EnvVar | Obj]) -> list[Obj]:
    """Upsert env vars by name, keeping the order of first appearance."""
    out: dict[str, Obj] = {e["name"]: e for e in base}
    for group in overrides:
        for e in group:
            item = env_var(e.name, e.value) if isinstance(e, EnvVar) else e
            out[item["name"]] = item
    return list(out.values())


def volume_mount(
    name: str, path: str, *, read_only: bool = False, propagation: str | None = None
) -> Obj:
    m: Obj = {"name": name, "mountPath": path}
    if read_only:
        m["readOnly"] = True
    if propagation:
        m["mountPropagation"] = propagation
    return m


def host_path_volume(name: str, path: str, kind: str = "DirectoryOrCreate") -> Obj:
    v: Obj = {"name": name, "hostPath": {"path": path}}
    if kind:
        v["hostPath"]["type"] = kind
    return v


def configmap_volume(name: str, configmap: str, items: list[Obj] | None = None) -> Obj:
    cm: Obj = {"name": configmap}
    if items:
        cm["items"] = items
    return {"name": name, "configMap": cm}


def int_or_string(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def exec_probe(settings: ProbeSpec | None, command: list[str], defaults: ProbeSpec) -> Obj:
    s = settings or defaults
    probe: Obj = {"exec": {"command": command}}
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "failureThreshold"):
        value = getattr(s, key) if getattr(s, key) is not None else getattr(defaults, key)
        if value is not None:
            probe[key] = value
    return probe
