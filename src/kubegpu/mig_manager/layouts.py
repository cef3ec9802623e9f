"""Where the MIG manager's layouts come from: a mounted file, a ConfigMap, or the hardware.

With neither a file nor a ConfigMap configured, the standard set (all-disabled, all-enabled,
all-balanced, all-<profile>) is generated from the node's GPUs and published in the
ConfigMap `<node>-mig-config`, owned by the manager's Pod, as upstream does.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import ConfigMap, Pod

from kubegpu.catalog import GpuModel, find_by_pci_id, get_model
from kubegpu.kube.labels import API_ERRORS
from kubegpu.mig.config import ConfigError, MigPartedConfig, load_config, parse_config
from kubegpu.mig.parted import generate_config
from kubegpu.mig_manager.settings import (
    COMPONENT,
    GENERATED_CONFIG_KEY,
    GENERATED_HEADER,
    MigManagerSettings,
)
from kubegpu.nvml import Nvml

log = logging.getLogger(__name__)

FALLBACK = MigPartedConfig.model_validate(
    {"version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": False}]}}
)


def node_models(nvml: Nvml) -> list[GpuModel]:
    models = []
    for dev in nvml.devices():
        model = get_model(dev.model_id) if dev.model_id else find_by_pci_id(dev.pci_device_id)
        if model is not None:
            models.append(model)
    return models


def generate_for_node(nvml: Nvml, default_file: Path | None = None) -> MigPartedConfig:
    """The standard layouts for this node's GPUs; without MIG-capable GPUs, the layouts of
    `default_file` or else only all-disabled."""
    try:
        return generate_config(node_models(nvml))
    except ConfigError as exc:
        if default_file is not None:
            log.warning("no MIG layouts can be generated (%s); using %s", exc, default_file)
            return load_config(default_file)
        log.warning("no MIG layouts can be generated (%s); offering only all-disabled", exc)
        return FALLBACK


class Layouts:
    """The configured source of mig-parted configs, read again for every reconfiguration."""

    def __init__(self, settings: MigManagerSettings, client: AsyncClient, nvml: Nvml) -> None:
        self.settings = settings
        self.client = client
        self.nvml = nvml
        self.generated: MigPartedConfig | None = None

    @property
    def source(self) -> str:
        s = self.settings
        if s.config_file is not None:
            return str(s.config_file)
        name = s.config_map or s.generated_config_map
        return f"ConfigMap {s.namespace}/{name} key {s.config_key}"

    async def prepare(self) -> None:
        """Generate and publish the hardware's layouts when nothing else is configured."""
        s = self.settings
        if s.config_file is not None or s.config_map is not None:
            return
        try:
            self.generated = await asyncio.to_thread(
                generate_for_node, self.nvml, s.default_config_file
            )
        except ConfigError as exc:
            log.error("the default layouts cannot be used: %s", exc)
            self.generated = FALLBACK
        await self._publish(self.generated)

    async def load(self) -> MigPartedConfig:
        """The current configs; ConfigError says which file or ConfigMap is wrong and why."""
        s = self.settings
        if s.config_file is not None:
            return await asyncio.to_thread(load_config, s.config_file)
        if s.config_map is not None:
            try:
                cm = await self.client.get(ConfigMap, s.config_map, namespace=s.namespace)
            except ApiError as exc:
                raise ConfigError(f"{self.source}: {exc.status.message}") from None
            text = (cm.data or {}).get(s.config_key)
            if text is None:
                raise ConfigError(f"{self.source}: the ConfigMap has no key {s.config_key!r}")
            return parse_config(text, self.source)
        if self.generated is None:
            self.generated = await asyncio.to_thread(
                generate_for_node, self.nvml, s.default_config_file
            )
        return self.generated

    async def _owner(self) -> list[OwnerReference] | None:
        s = self.settings
        if not s.pod_name:
            return None
        try:
            pod = await self.client.get(Pod, s.pod_name, namespace=s.namespace)
        except ApiError as exc:
            log.warning("pod %s/%s: %s; the ConfigMap gets no owner", s.namespace, s.pod_name, exc)
            return None
        uid = pod.metadata.uid if pod.metadata else None
        if not uid:
            return None
        return [OwnerReference(apiVersion="v1", kind="Pod", name=s.pod_name, uid=uid)]

    async def _publish(self, config: MigPartedConfig) -> None:
        s = self.settings
        cm = ConfigMap(
            metadata=ObjectMeta(
                name=s.generated_config_map,
                namespace=s.namespace,
                labels={
                    "app.kubernetes.io/component": "nvidia-mig-manager",
                    "app.kubernetes.io/managed-by": COMPONENT,
                    "nvidia.com/node-name": s.node_name,
                },
                ownerReferences=await self._owner(),
            ),
            data={GENERATED_CONFIG_KEY: GENERATED_HEADER + config.to_yaml()},
        )
        try:
            await self.client.apply(cm, field_manager=COMPONENT, force=True)
        except API_ERRORS as exc:
            log.warning("cannot publish the generated layouts in %s: %s", self.source, exc)
