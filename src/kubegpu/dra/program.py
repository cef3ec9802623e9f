"""The DRA plugin as a node component (`kubegpu dra-plugin`): NVML, the API client, the
two gRPC servers, slice publication and clean shutdown. `kubegpu.node.runtime.run()`
drives it.

With the DynamicMIG gate, MIG-enabled GPUs are published as partitionable devices
(`partitions`) and prepare creates the allocated MIG device (`dynamic`).

The pool is published at start, again after every registration with the kubelet (a
kubelet that restarts deletes the node's slices) and whenever the devices change (the MIG
manager applied a layout, a GPU fell off the bus), which a poll of NVML notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubegpu.catalog import nvidia
from kubegpu.cdi.driver import hook_path
from kubegpu.cdi.nodes import present_control_devices
from kubegpu.dra.config import DraConfigError, FeatureGates
from kubegpu.dra.dynamic import MigWriter
from kubegpu.dra.exclusive import device_plugin_sockets
from kubegpu.dra.facts import read_node_gpus
from kubegpu.dra.partitions import Pool, partitioned_pool
from kubegpu.dra.prepare import ClaimReader, Preparer, PrepareSettings
from kubegpu.dra.publisher import Publisher, SlicePublisher, read_claim
from kubegpu.dra.server import Servers
from kubegpu.dra.slices import DraDevice, devices
from kubegpu.kube.kubelet import (
    DEVICE_PLUGIN_PATH,
    PLUGINS_PATH,
    PLUGINS_REGISTRY_PATH,
    dra_endpoint,
    dra_registration_socket,
)
from kubegpu.mig.lock import MigLock
from kubegpu.node.api import api_client
from kubegpu.node.gpus import GpuBackend
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import Nvml, NvmlError

log = logging.getLogger("kubegpu.dra")


@dataclass(frozen=True)
class DraPluginFlags:
    node_name: str | None = None
    kubeconfig: str | None = None
    plugins_registry: Path = Path(PLUGINS_REGISTRY_PATH)
    plugins_dir: Path = Path(PLUGINS_PATH)
    cdi_root: Path = Path(nvidia.CDI_SPEC_DIR)
    device_plugin_dir: Path | None = Path(DEVICE_PLUGIN_PATH)  # None: do not check
    feature_gates: str | None = None
    driver_root: Path = Path("/")
    container_driver_root: Path = Path("/driver-root")
    dev_root: Path = Path("/")
    poll_s: float = 1.0


class DraPluginProgram:
    """`read_claim` and `publisher` default to the API server's; tests pass their own."""

    def __init__(
        self,
        flags: DraPluginFlags,
        gpus: GpuBackend,
        *,
        read_claim: ClaimReader | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        if not flags.node_name:
            raise ComponentError("--node-name (NODE_NAME) is required: it names the pool")
        try:
            self.gates = FeatureGates.parse(flags.feature_gates)
        except DraConfigError as exc:
            raise ComponentError(str(exc)) from None
        if (warning := self.gates.ignored_warning()) is not None:
            log.warning("%s", warning)
        self.flags = flags
        self.node_name = flags.node_name
        self.gpus = gpus
        self.driver = nvidia.DRA_DRIVER
        self.registration_socket = Path(
            dra_registration_socket(self.driver, flags.plugins_registry)
        )
        self.endpoint = Path(dra_endpoint(self.driver, flags.plugins_dir))
        self._read_claim = read_claim
        self._publisher = publisher
        self.devices: Mapping[str, DraDevice] = {}
        self.pool = Pool(())
        self.dynamic_mig = "DynamicMIG" in self.gates
        self._preparer: Preparer | None = None
        self.ready = asyncio.Event()
        self.registered = asyncio.Event()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._force = True  # publish even if the devices did not change

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # -- run --------------------------------------------------------------------------------
    async def run(self) -> None:
        if self.flags.device_plugin_dir is not None:
            live = device_plugin_sockets(self.flags.device_plugin_dir)
            if live:
                raise ComponentError(
                    f"a device plugin serves NVIDIA GPUs on this node ({', '.join(map(str, live))}): "
                    "the DRA plugin and the device plugin must not hand out the same GPUs. "
                    "Disable the device plugin on this node (docs/dra.md)"
                )
        nvml = self.gpus.open_or_fail()
        client = None
        try:
            read, publisher = self._read_claim, self._publisher
            if read is None or publisher is None:
                client = api_client("kubegpu-dra-plugin", self.flags.kubeconfig)
                api = client
                if read is None:

                    async def read(namespace: str, name: str) -> dict[str, object] | None:
                        return await read_claim(api, namespace, name)

                publisher = publisher or SlicePublisher(client, self.node_name, self.driver)
            mig = (
                MigWriter(nvml, MigLock.for_node(nvml, "dra-plugin")) if self.dynamic_mig else None
            )
            preparer = Preparer(self._settings(), read, lambda: self.devices, self.gpus.mps, mig)
            self._preparer = preparer
            self._refresh(nvml)
            servers = Servers(
                self.driver, self.registration_socket, self.endpoint, preparer, self._on_status
            )
            await servers.start()
            log.info(
                "DRA driver %s serving on %s, registration socket %s",
                self.driver,
                self.endpoint,
                self.registration_socket,
            )
            self.ready.set()
            try:
                await self._loop(nvml, publisher)
            finally:
                await servers.stop()
        finally:
            if client is not None:
                await client.close()
            nvml.close()

    def _settings(self) -> PrepareSettings:
        f = self.flags
        dev_root = f.dev_root
        return PrepareSettings(
            node_name=self.node_name,
            plugin_dir=self.endpoint.parent,
            cdi_root=f.cdi_root,
            gates=self.gates,
            driver_root=f.driver_root,
            dev_root=str(dev_root),
            container_driver_root=f.container_driver_root,
            hook_path=hook_path(os.environ),
            control_devices=present_control_devices(dev_root),
        )

    def _refresh(self, nvml: Nvml) -> None:
        """Re-read the devices (a GPU that cannot be read keeps its last state)."""
        try:
            node = read_node_gpus(nvml, partitionable=self.dynamic_mig)
        except NvmlError as exc:
            log.warning("cannot read the GPUs (%s); keeping the last known devices", exc)
            return
        if self.dynamic_mig and self._preparer is not None:
            pool = partitioned_pool(node, self._preparer.created_placements())
        else:
            pool = Pool(tuple(devices(node)))
        now = {d.name: d for d in pool.devices}
        if self.devices and now != self.devices:
            log.info("devices changed: %s -> %s", sorted(self.devices), sorted(now))
        self.devices = now
        self.pool = pool

    async def _on_status(self, registered: bool, error: str) -> None:
        """After every registration: the kubelet may have deleted the node's slices."""
        if registered:
            self.registered.set()
            self._force = True
            self._wake.set()

    async def _loop(self, nvml: Nvml, publisher: Publisher) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            # in a worker thread: reading every GPU takes a while, and the event loop must
            # keep answering the kubelet meanwhile (it was the tail of prepare's latency)
            await asyncio.to_thread(self._refresh, nvml)
            force, self._force = self._force, False
            try:
                await publisher.publish(self.pool, force=force)
            except Exception as exc:  # the API server is away: try again next round
                log.warning("publishing the ResourceSlice failed (%s); retrying", exc)
                self._force = self._force or force
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flags.poll_s)
