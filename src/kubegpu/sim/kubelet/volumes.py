"""A simulated pod's volumes, by kubelet's rules: where each volume's files come from and
how they are laid out on the node, and which host paths each container mounts where.

hostPath volumes are directories under the node's root; ConfigMap, Secret, downward API and
projected volumes (service-account tokens included) are written under the pod's directory
and rewritten when their source changes; emptyDir is an empty directory there.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccountToken

from kubegpu.sim.kubelet.devicemanager import ContainerAllocation
from kubegpu.sim.kubelet.mounted import MountedObjects, ObjectKey

Json = dict[str, Any]
Mount = tuple[str, str, bool]  # host path, container path, read-only
FieldResolver = Callable[[str], str]  # a downward API field path -> its value


@dataclass(frozen=True)
class PodObjects:
    """The API objects a pod's volumes and environment read, in the pod's namespace."""

    client: AsyncClient
    namespace: str
    service_account: str
    cache: MountedObjects  # ConfigMaps and Secrets, watched (kubelet.mounted)
    clock: Callable[[], float] = time.monotonic
    # (audience, lifetime s) -> (token, when it is due for refresh on `clock`)
    tokens: dict[tuple[str | None, int], tuple[str, float]] = field(
        default_factory=dict, compare=False
    )

    def mounted(self, vol: Json) -> set[ObjectKey]:
        """The ConfigMaps and Secrets a volume shows, as the cache names them."""
        refs = [vol, *((vol.get("projected") or {}).get("sources") or [])]
        keys = set()
        for ref in refs:
            if "configMap" in ref:
                keys.add(("ConfigMap", self.namespace, str(ref["configMap"]["name"])))
            if "secret" in ref:
                secret = ref["secret"]
                name = secret.get("secretName") or secret.get("name")
                keys.add(("Secret", self.namespace, str(name)))
        return keys

    async def _object(self, kind: str, ref: Json, name: str) -> Json | None:
        obj = await self.cache.get(kind, self.namespace, name)
        if obj is None and not ref.get("optional"):
            raise ValueError(f'{kind.lower()} "{name}" not found')
        return obj

    async def configmap_files(self, ref: Json) -> dict[str, bytes]:
        cm = await self._object("ConfigMap", ref, str(ref["name"])) or {}
        data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        return _select(data, ref.get("items"))

    async def secret_files(self, ref: Json) -> dict[str, bytes]:
        name = str(ref.get("secretName") or ref.get("name"))
        secret = await self._object("Secret", ref, name) or {}
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        return _select(data, ref.get("items"))

    async def token(self, seconds: int, audience: str | None = None) -> str:
        """A token for the pod's service account (never shorter than ten minutes), reused
        until 80% of its life has passed, when kubelet's token manager asks for a new one."""
        lifetime = max(600, seconds)
        cached = self.tokens.get((audience, lifetime))
        if cached is not None and self.clock() < cached[1]:
            return cached[0]
        request = ServiceAccountToken(
            metadata=ObjectMeta(),
            spec=TokenRequestSpec(
                audiences=[audience] if audience else [], expirationSeconds=lifetime
            ),
        )
        result = await self.client.create(request, self.service_account, namespace=self.namespace)
        token = result.status.token if result.status else None
        if not token:
            raise ValueError(
                f"no token issued for service account {self.namespace}/{self.service_account}"
            )
        self.tokens[(audience, lifetime)] = (str(token), self.clock() + 0.8 * lifetime)
        return str(token)

    def token_refresh_in(self) -> float | None:
        """Seconds until the first token handed out is due for refresh; None with none."""
        if not self.tokens:
            return None
        return max(0.0, min(due for _, due in self.tokens.values()) - self.clock())


async def prepare_volume(
    vol: Json, node_root: Path, pod_dir: Path, objects: PodObjects, field: FieldResolver
) -> Path:
    """Create one volume on the node; returns the host path its mounts point at."""
    name = str(vol["name"])
    if "hostPath" in vol:
        hp = vol["hostPath"]
        path = node_root / str(hp["path"]).lstrip("/")
        kind = hp.get("type", "")
        if kind in {"File", "FileOrCreate"}:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        elif kind != "Socket" and not path.exists():
            path.mkdir(parents=True, exist_ok=True)
        return path
    target = volume_dir(pod_dir, name)
    if "emptyDir" in vol:
        target.mkdir(parents=True, exist_ok=True)
        return target
    files = await volume_files(vol, objects, field)
    write_files(target, files)
    return target


def holds_token(vol: Json) -> bool:
    """Whether a volume shows a service-account token (a projected source of one)."""
    sources = (vol.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in src for src in sources)


def volume_dir(pod_dir: Path, name: str) -> Path:
    """Where a volume kubelet writes (not a hostPath) lives on the node."""
    return pod_dir / "volumes" / name


async def volume_files(vol: Json, objects: PodObjects, field: FieldResolver) -> dict[str, bytes]:
    """The files of a ConfigMap, Secret, downward API or projected volume, by relative path."""
    if "configMap" in vol:
        return await objects.configmap_files(vol["configMap"])
    if "secret" in vol:
        return await objects.secret_files(vol["secret"])
    if "downwardAPI" in vol:
        return {
            i["path"]: field(i["fieldRef"]["fieldPath"]).encode()
            for i in vol["downwardAPI"].get("items", [])
        }
    if "projected" in vol:
        out: dict[str, bytes] = {}
        for src in vol["projected"].get("sources") or []:
            if "serviceAccountToken" in src:
                sat = src["serviceAccountToken"]
                token = await objects.token(sat.get("expirationSeconds", 3607), sat.get("audience"))
                out[sat["path"]] = token.encode()
            elif "configMap" in src:
                out.update(await objects.configmap_files(src["configMap"]))
            elif "secret" in src:
                out.update(await objects.secret_files(src["secret"]))
            elif "downwardAPI" in src:
                for i in src["downwardAPI"].get("items", []):
                    out[i["path"]] = field(i["fieldRef"]["fieldPath"]).encode()
        return out
    raise ValueError(f"volume {vol['name']!r}: kind not supported by the simulated kubelet")


def container_mounts(
    container: Json,
    sources: Mapping[str, Path],
    allocation: ContainerAllocation | None,
    node_root: Path,
) -> list[Mount]:
    """A container's mounts: its volumeMounts, then what its device allocation mounts."""
    mounts = []
    for vm in container.get("volumeMounts") or []:
        src = sources.get(vm["name"])
        if src is None:
            raise ValueError(f"container {container['name']}: no volume {vm['name']!r}")
        if vm.get("subPath"):
            src = src / vm["subPath"]
        mounts.append((str(src), vm["mountPath"], bool(vm.get("readOnly", False))))
    if allocation is not None:
        for container_path, host_path, ro in allocation.mounts:
            # device nodes (volume-mounts' /dev/null) are the machine's: a simulated node
            # shares the host's /dev; every other host path lives under the node's root
            source = (
                host_path if host_path.startswith("/dev/") else node_root / host_path.lstrip("/")
            )
            mounts.append((str(source), container_path, ro))
    return mounts


def _select(data: dict[str, bytes], items: list[Json] | None) -> dict[str, bytes]:
    if not items:
        return data
    return {i["path"]: data[i["key"]] for i in items if i["key"] in data}


def write_files(target: Path, files: dict[str, bytes]) -> None:
    """Write a volume's files; each changed file is replaced atomically."""
    target.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_bytes() == content:
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, path)
    for existing in target.rglob("*"):
        if (
            existing.is_file()
            and str(existing.relative_to(target)) not in files
            and not existing.name.startswith(".")
        ):
            existing.unlink()
