"""A simulated container's environment, by kubelet's rules: the node's base variables,
`envFrom`, `env` with $(VAR) expansion and `valueFrom` (downward API, ConfigMap and Secret
keys), then what the device plugins returned for the container."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubegpu.sim.kubelet.devicemanager import ContainerAllocation
from kubegpu.sim.kubelet.volumes import FieldResolver, PodObjects

Json = dict[str, Any]

ENV_NODE_ROOT = "KUBEGPU_SIM_NODE_ROOT"  # marks every simulated pod process, for cleanup


def base_env(
    hostname: str, api_host: str, api_port: int, node_root: Path, extra: Mapping[str, str]
) -> dict[str, str]:
    """What every container starts with: a PATH, the in-cluster API address, the marker
    that finds its processes again, and the node's extra variables."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/root",
        "HOSTNAME": hostname,
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        ENV_NODE_ROOT: str(node_root.resolve()),
        **extra,
    }


def field_value(pod: Json, node_name: str, path: str) -> str:
    """A downward API field of the pod (fieldRef.fieldPath)."""
    meta = pod["metadata"]
    simple: dict[str, str] = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta["uid"],
        "spec.nodeName": node_name,
        "spec.serviceAccountName": str(pod["spec"].get("serviceAccountName", "default")),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
        "status.podIPs": "127.0.0.1",
    }
    if path in simple:
        return simple[path]
    for prefix, source in (
        ("metadata.labels", meta.get("labels") or {}),
        ("metadata.annotations", meta.get("annotations") or {}),
    ):
        if path.startswith(prefix + "["):
            key = path[len(prefix) + 1 : -1].strip("'\"")
            return str(source.get(key, ""))
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted(source.items()))
    raise ValueError(f"field path {path!r} is not supported")


async def container_env(
    container: Json,
    base: Mapping[str, str],
    objects: PodObjects,
    field: FieldResolver,
    allocation: ContainerAllocation | None,
) -> dict[str, str]:
    """The container's environment, in kubelet's order (later sources win)."""
    env = dict(base)
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "configMapRef" in src:
            files = await objects.configmap_files(
                {
                    "name": src["configMapRef"]["name"],
                    "optional": src["configMapRef"].get("optional"),
                }
            )
        else:
            files = await objects.secret_files(
                {"name": src["secretRef"]["name"], "optional": src["secretRef"].get("optional")}
            )
        env.update({prefix + k: v.decode() for k, v in files.items()})
    for item in container.get("env") or []:
        if "value" in item or "valueFrom" not in item:
            env[item["name"]] = expand(str(item.get("value", "")), env)
            continue
        vf = item["valueFrom"]
        if "fieldRef" in vf:
            env[item["name"]] = field(vf["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in vf:
            ref = vf["configMapKeyRef"]
            files = await objects.configmap_files(
                {"name": ref["name"], "optional": ref.get("optional")}
            )
            if ref["key"] in files:
                env[item["name"]] = files[ref["key"]].decode()
            elif not ref.get("optional"):  # the kubelet's CreateContainerConfigError
                raise ValueError(f"couldn't find key {ref['key']} in ConfigMap {ref['name']}")
        elif "secretKeyRef" in vf:
            ref = vf["secretKeyRef"]
            files = await objects.secret_files(
                {"name": ref["name"], "optional": ref.get("optional")}
            )
            if ref["key"] in files:
                env[item["name"]] = files[ref["key"]].decode()
            elif not ref.get("optional"):
                raise ValueError(f"couldn't find key {ref['key']} in Secret {ref['name']}")
        elif "resourceFieldRef" in vf:
            env[item["name"]] = "0"
    if allocation is not None:
        env.update(allocation.envs)
    return env


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion in env values, args and commands."""
    out = value
    for key, val in env.items():
        out = out.replace(f"$({key})", val)
    return out
