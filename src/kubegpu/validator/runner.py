"""Running one validation: ready-file discipline, waiting, and the workload pods.

`Validator(settings).run()` deletes the component's ready file, runs its check (again
every `sleep_interval_s` with WITH_WAIT, once otherwise) and writes the file on success.
Workload pods (CUDA; the plugin check's pod asking for a GPU) are pinned to the node, run
`kubegpu validator workload <kind>` from the validator's own image, and are deleted after.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod

from kubegpu.kube.nodes import watch_node
from kubegpu.node.gpus import GpuBackend
from kubegpu.validator.checks import (
    DEFAULT_CDI_DIRS,
    CheckFailed,
    CheckResult,
    check_cuda_here,
    check_driver,
    check_host_driver,
    check_plugin_cdi,
    check_toolkit,
    gpu_resources,
    workload_resource,
)
from kubegpu.validator.files import DEFAULT_OUTPUT_DIR, ReadyFiles

log = logging.getLogger(__name__)

COMPONENTS = ("driver", "toolkit", "cuda", "plugin")
WORKLOAD_APPS = {"cuda": "nvidia-cuda-validator", "plugin": "nvidia-device-plugin-validator"}


@dataclass(frozen=True)
class ValidatorSettings:
    component: str
    output_dir: Path = DEFAULT_OUTPUT_DIR
    with_wait: bool = False
    with_workload: bool = False
    sleep_interval_s: float = 5.0
    node_name: str | None = None
    namespace: str = "gpu-operator"
    mig_strategy: str = "single"
    driver_root: str = "/"
    container_driver_root: Path = Path("/driver-root")
    host_root: Path = Path("/host")  # where the host's root is mounted (a pre-installed driver)
    cdi_dirs: tuple[Path, ...] = DEFAULT_CDI_DIRS
    image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()  # the workload pods' (the validator's own)
    runtime_class: str | None = None
    workload_timeout_s: float = 300.0
    plugin_timeout_s: float = 150.0
    extra_labels: dict[str, str] = field(default_factory=dict)


class Validator:
    def __init__(
        self,
        settings: ValidatorSettings,
        gpus: GpuBackend,
        client: AsyncClient | None = None,
    ) -> None:
        if settings.component not in COMPONENTS:
            raise ValueError(
                f"unknown component {settings.component!r}; known: {', '.join(COMPONENTS)}"
            )
        self.s = settings
        self.gpus = gpus
        self.client = client
        self.files = ReadyFiles(settings.output_dir)

    async def run(self) -> CheckResult:
        """Check until it passes (WITH_WAIT) or once; write the ready file on success."""
        self.files.clear(self.s.component)
        while True:
            try:
                result = await self.check()
            except CheckFailed as exc:
                if not self.s.with_wait:
                    raise
                log.info(
                    "%s not ready: %s; checking again in %.0fs",
                    self.s.component,
                    exc,
                    self.s.sleep_interval_s,
                )
                await asyncio.sleep(self.s.sleep_interval_s)
                continue
            self.files.write(self.s.component, result.env)
            log.info("%s ready: %s", self.s.component, result.message)
            return result

    async def check(self) -> CheckResult:
        match self.s.component:
            case "driver":
                if self.s.driver_root in ("", "/") and self.gpus.host_driver_files:
                    return await asyncio.to_thread(check_host_driver, self.s.host_root)
                return await asyncio.to_thread(
                    check_driver,
                    self.gpus.open,
                    self.s.driver_root,
                    self.s.output_dir,
                    self.s.container_driver_root,
                    ready_file=self.gpus.driver_ready_file,
                )
            case "toolkit":
                return await asyncio.to_thread(check_toolkit, self.gpus.open, self.s.cdi_dirs)
            case "cuda":
                if self.s.with_workload:
                    return CheckResult("cuda", await self.workload_pod("cuda", None))
                return await asyncio.to_thread(
                    check_cuda_here, self.gpus.open, self.gpus.cuda, None, self._ctr_root()
                )
            case _:
                return await self.check_plugin()

    def _ctr_root(self) -> Path | None:
        return None if self.s.driver_root in ("", "/") else self.s.container_driver_root

    def _api(self) -> tuple[AsyncClient, str]:
        if self.client is None or not self.s.node_name:
            raise CheckFailed(f"{self.s.component}: needs the Kubernetes API and NODE_NAME")
        return self.client, self.s.node_name

    async def check_plugin(self) -> CheckResult:
        """The node advertises GPUs (polled for plugin_timeout_s) and the plugin's CDI spec
        is current, then optionally a pod asking for one runs."""
        client, node_name = self._api()
        resources: dict[str, int] = {}
        nodes = cast(AsyncGenerator[Node | None, None], watch_node(client, node_name))
        try:
            async with asyncio.timeout(self.s.plugin_timeout_s):
                async for node in nodes:
                    allocatable = node.status.allocatable if node and node.status else None
                    resources = gpu_resources(allocatable)
                    if resources:
                        break
        except TimeoutError:
            raise CheckFailed(
                f"node {node_name} advertises no nvidia.com/gpu or nvidia.com/mig-* device "
                f"after {self.s.plugin_timeout_s:.0f}s"
            ) from None
        finally:
            await nodes.aclose()
        shown = ", ".join(f"{k}={v}" for k, v in sorted(resources.items()))
        cdi = await asyncio.to_thread(check_plugin_cdi, self.gpus.open, self.s.cdi_dirs)
        shown = f"{shown}; {cdi}"
        if not self.s.with_workload:
            return CheckResult("plugin", f"node advertises {shown}")
        resource = workload_resource(resources, self.s.mig_strategy)
        outcome = await self.workload_pod("plugin", resource)
        return CheckResult("plugin", f"node advertises {shown}; {outcome}")

    # -- workload pods -----------------------------------------------------------------------------
    def workload_pod_manifest(self, kind: str, resource: str | None) -> dict[str, Any]:
        node = self.s.node_name or ""
        app = WORKLOAD_APPS[kind]
        suffix = hashlib.sha256(node.encode()).hexdigest()[:8]
        container: dict[str, Any] = {
            "name": f"{kind}-validation",
            "image": self.s.image,
            "imagePullPolicy": self.s.image_pull_policy,
            "command": ["kubegpu", "validator", "workload", kind],
            "env": [],
        }
        if resource:
            container["resources"] = {"limits": {resource: 1}}
        else:
            container["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
        spec: dict[str, Any] = {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
        }
        if self.s.runtime_class:
            spec["runtimeClassName"] = self.s.runtime_class
        if self.s.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": name} for name in self.s.image_pull_secrets]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{app}-{suffix}",
                "namespace": self.s.namespace,
                "labels": {"app": app, **self.s.extra_labels},
            },
            "spec": spec,
        }

    async def workload_pod(self, kind: str, resource: str | None) -> str:
        client, _ = self._api()
        if not self.s.image:
            raise CheckFailed(f"{kind} workload: no image to run (VALIDATOR_IMAGE)")
        manifest = self.workload_pod_manifest(kind, resource)
        name = manifest["metadata"]["name"]
        await self._delete_pod(client, name)
        await client.create(cast(Pod, Pod.from_dict(manifest)))
        try:
            return await self._wait_pod(client, name, kind)
        finally:
            await self._delete_pod(client, name)

    async def _wait_pod(self, client: AsyncClient, name: str, kind: str) -> str:
        deadline = time.monotonic() + self.s.workload_timeout_s
        while time.monotonic() < deadline:
            pod = await client.get(Pod, name, namespace=self.s.namespace)
            status = pod.status
            phase = status.phase if status else None
            if phase == "Succeeded":
                return f"{kind} workload pod {name} succeeded"
            if phase == "Failed":
                raise CheckFailed(f"{kind} workload pod {name} failed: {_why(pod)}")
            await asyncio.sleep(1.0)
        raise CheckFailed(
            f"{kind} workload pod {name} did not finish in {self.s.workload_timeout_s:.0f}s"
        )

    async def _delete_pod(self, client: AsyncClient, name: str) -> None:
        with contextlib.suppress(ApiError):
            await client.delete(Pod, name, namespace=self.s.namespace, grace_period=0)
        # wait until it is gone, so the next create does not collide
        for _ in range(100):
            try:
                await client.get(Pod, name, namespace=self.s.namespace)
            except ApiError as exc:
                if exc.status.code == 404:
                    return
                raise
            await asyncio.sleep(0.2)


def _why(pod: Pod) -> str:
    """What the pod's status says about its failure."""
    status = pod.status
    if status is None:
        return "no status"
    parts = [p for p in (status.reason, status.message) if p]
    for c in status.containerStatuses or []:
        terminated = c.state.terminated if c.state else None
        if terminated is not None:
            parts.append(f"container {c.name} exited with {terminated.exitCode}")
    return "; ".join(parts) or "no reason given"
