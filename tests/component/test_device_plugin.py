"""The device plugin against simulated GPUs, spoken to over its real sockets by a kubelet
stand-in: registration, ListAndWatch, Allocate under every strategy, preferred allocation,
config changes and refusals, health, kubelet restarts and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from kubegpu.device_plugin import (
    DevicePlugin,
    MpsControlDaemon,
    MpsOptions,
    PluginOptions,
    RecordingMps,
)
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from kubegpu.mig.config import MigConfigEntry
from kubegpu.mig.parted import apply_config
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml import NvmlError
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.sharing.health import XidPolicy

pytestmark = pytest.mark.asyncio(loop_scope="function")

WAIT_S = 10.0


class Kubelet(dp_grpc.RegistrationServicer):
    """kubelet's side: the Registration service, and gRPC clients for each plugin."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / "kubelet.sock"
        self.registrations: asyncio.Queue[dp.RegisterRequest] = asyncio.Queue()
        self._server: grpc.aio.Server | None = None
        self._channels: list[grpc.aio.Channel] = []

    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        dp_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        self.socket.unlink(missing_ok=True)

    async def close(self) -> None:
        await self.stop()
        for ch in self._channels:
            await ch.close()
        self._channels.clear()

    async def restart(self) -> None:
        """As kubelet does on restart: every socket in the directory goes, a new one comes."""
        await self.stop()
        for sock in self.plugin_dir.glob("*.sock"):
            sock.unlink()
        await self.start()

    async def Register(self, request: dp.RegisterRequest, context: Any) -> dp.Empty:
        await self.registrations.put(request)
        return dp.Empty()

    async def next_registration(self) -> dp.RegisterRequest:
        return await asyncio.wait_for(self.registrations.get(), WAIT_S)

    async def registered(self, n: int) -> dict[str, dp.RegisterRequest]:
        out = {}
        for _ in range(n):
            r = await self.next_registration()
            out[r.resource_name] = r
        return out

    def plugin(self, endpoint: str) -> dp_grpc.DevicePluginStub:
        channel = grpc.aio.insecure_channel(f"unix://{self.plugin_dir / endpoint}")
        self._channels.append(channel)
        return dp_grpc.DevicePluginStub(channel)


class Watch:
    """One ListAndWatch stream: the latest list and a way to wait for a change."""

    def __init__(self, stub: dp_grpc.DevicePluginStub) -> None:
        self.call = stub.ListAndWatch(dp.Empty())
        self.lists: asyncio.Queue[dict[str, str] | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for response in self.call:
                await self.lists.put({d.ID: d.health for d in response.devices})
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        await self.lists.put(None)  # the stream ended

    async def next(self) -> dict[str, str] | None:
        return await asyncio.wait_for(self.lists.get(), WAIT_S)

    async def until(self, check: Callable[[dict[str, str]], bool]) -> dict[str, str]:
        while True:
            devices = await self.next()
            assert devices is not None, "the stream ended"
            if check(devices):
                return devices

    def close(self) -> None:
        self.call.cancel()
        self.task.cancel()


Start = Callable[..., Awaitable[tuple[DevicePlugin, Kubelet, SimNvml]]]


async def until(check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    """Wait until `check()` holds; fail after `timeout`."""

    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout)


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """Start a plugin on a fresh simulated node (short paths: unix sockets are limited)."""
    running: list[tuple[DevicePlugin, asyncio.Task[None], Kubelet]] = []
    roots: list[str] = []
    watches: list[Watch] = []

    async def make(
        spec: str,
        config: str | None = None,
        *,
        kubelet: bool = True,
        mig: dict[str, int] | None = None,
        **options: Any,
    ) -> tuple[DevicePlugin, Kubelet, SimNvml]:
        root = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
        roots.append(str(root))
        nvml = SimNvml.create(root / "gpus.json", spec)
        if mig is not None:
            entry = MigConfigEntry.model_validate(
                {"devices": "all", "mig-enabled": True, "mig-devices": mig}
            )
            apply_config(nvml, "test", [entry])
        config_file = None
        if config is not None:
            config_file = root / "config.yaml"
            config_file.write_text(config)
        kube = Kubelet(root / "dp")
        if kubelet:
            await kube.start()
        settings: dict[str, Any] = {
            "config_file": config_file,
            "plugin_dir": root / "dp",
            "kubelet_socket": root / "dp/kubelet.sock",
            "cdi_root": root / "cdi",
            "container_driver_root": root / "driver-root",  # no driver there unless a test puts one
            "poll_s": 0.05,
            "retry_s": 0.2,
            "event_wait_s": 0.1,
            **options,
        }
        plugin = DevicePlugin(SimNvml(root / "gpus.json"), PluginOptions(**settings))
        task = asyncio.create_task(plugin.run())
        running.append((plugin, task, kube))
        await asyncio.wait_for(plugin.ready.wait(), WAIT_S)
        return plugin, kube, nvml

    make.watches = watches  # type: ignore[attr-defined]
    yield make
    for w in watches:
        w.close()
    for plugin, task, kube in running:
        plugin.stop()
        await asyncio.wait_for(task, WAIT_S)
        await kube.close()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def watch(start: Start, stub: dp_grpc.DevicePluginStub) -> Watch:
    w = Watch(stub)
    start.watches.append(w)  # type: ignore[attr-defined]
    return w


async def allocate(stub: dp_grpc.DevicePluginStub, *ids: str) -> dp.ContainerAllocateResponse:
    response = await stub.Allocate(
        dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=list(ids))])
    )
    (car,) = response.container_responses
    return cast(dp.ContainerAllocateResponse, car)


async def prefer(
    stub: dp_grpc.DevicePluginStub, available: list[str], size: int, must: list[str] | None = None
) -> list[str]:
    response = await stub.GetPreferredAllocation(
        dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must or [],
                    allocation_size=size,
                )
            ]
        )
    )
    return list(response.container_responses[0].deviceIDs)


TS4 = "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 4}\n"


# -- registration and listing ------------------------------------------------------------------


async def test_each_resource_registers_on_its_own_socket_like_upstream(start: Start) -> None:
    plugin, kubelet, nvml = await start(
        "h200-nvl:2", "flags: {migStrategy: mixed}", mig={"1g.18gb": 3, "2g.35gb": 1}
    )
    regs = await kubelet.registered(2)
    assert set(regs) == {"nvidia.com/mig-1g.18gb", "nvidia.com/mig-2g.35gb"}
    r = regs["nvidia.com/mig-1g.18gb"]
    assert (r.version, r.endpoint) == ("v1beta1", "nvidia-mig-1g.18gb.sock")
    assert r.options.get_preferred_allocation_available is True
    assert regs["nvidia.com/mig-2g.35gb"].endpoint == "nvidia-mig-2g.35gb.sock"

    stub = kubelet.plugin("nvidia-mig-1g.18gb.sock")
    options = await stub.GetDevicePluginOptions(dp.Empty())
    assert options.get_preferred_allocation_available and not options.pre_start_required
    response = await stub.ListAndWatch(dp.Empty()).read()
    uuids = {m.uuid for i in (0, 1) for m in nvml.mig_devices(i) if m.profile == "1g.18gb"}
    assert {d.ID for d in response.devices} == uuids
    assert {d.health for d in response.devices} == {"Healthy"}
    # NUMA node of each device's GPU (GPU 0 on CPU 0, GPU 1 on CPU 1)
    numa = {d.ID: [n.ID for n in d.topology.nodes] for d in response.devices}
    assert {m.uuid: numa[m.uuid] for m in nvml.mig_devices(1) if m.uuid in numa} == {
        m.uuid: [1] for m in nvml.mig_devices(1) if m.profile == "1g.18gb"
    }
    assert plugin.counts() == {"nvidia.com/mig-1g.18gb": 6, "nvidia.com/mig-2g.35gb": 2}


async def test_time_slicing_advertises_replicas_of_every_gpu(start: Start) -> None:
    _, kubelet, nvml = await start("l4:4", TS4)
    (reg,) = (await kubelet.registered(1)).values()
    assert reg.resource_name == "nvidia.com/gpu"
    devices = await watch(start, kubelet.plugin(reg.endpoint)).next()
    assert devices is not None and len(devices) == 16
    uuids = [nvml.device(i).uuid for i in range(4)]
    assert set(devices) == {f"{u}::{n}" for u in uuids for n in range(4)}


async def test_a_plugin_started_before_kubelet_registers_when_kubelet_comes(start: Start) -> None:
    plugin, kubelet, _ = await start("l4:1", kubelet=False)
    assert plugin.servers["nvidia.com/gpu"].serving
    assert not plugin.servers["nvidia.com/gpu"].registered
    await kubelet.start()
    reg = await kubelet.next_registration()
    assert reg.resource_name == "nvidia.com/gpu"


async def test_a_kubelet_restart_makes_every_resource_register_again(start: Start) -> None:
    _, kubelet, _ = await start(
        "h200-nvl:1,l4:1", "flags: {migStrategy: mixed}", mig={"3g.71gb": 2}
    )
    assert set(await kubelet.registered(2)) == {"nvidia.com/gpu", "nvidia.com/mig-3g.71gb"}
    old = watch(start, kubelet.plugin("nvidia-gpu.sock"))
    assert await old.next() is not None
    await kubelet.restart()  # our sockets are deleted, kubelet.sock is a new file
    assert set(await kubelet.registered(2)) == {"nvidia.com/gpu", "nvidia.com/mig-3g.71gb"}
    assert await old.next() is None  # the old stream ended with the old server
    again = await watch(start, kubelet.plugin("nvidia-gpu.sock")).next()
    assert again is not None and len(again) == 1


async def test_stop_removes_the_sockets_and_ends_the_streams(start: Start) -> None:
    plugin, kubelet, _ = await start("l4:2")
    reg = await kubelet.next_registration()
    w = watch(start, kubelet.plugin(reg.endpoint))
    assert await w.next() is not None
    plugin.stop()
    assert await w.next() is None
    await asyncio.sleep(0.2)
    assert not (kubelet.plugin_dir / "nvidia-gpu.sock").exists()


# -- Allocate ------------------------------------------------------------------------------------


async def test_envvar_strategy(start: Start) -> None:
    _, kubelet, nvml = await start("l4:4", TS4)
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    u1, u3 = nvml.device(1).uuid, nvml.device(3).uuid
    car = await allocate(stub, f"{u1}::2", f"{u3}::0", f"{u1}::3")
    assert dict(car.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{u1},{u3}"}
    assert list(car.mounts) == [] and list(car.cdi_devices) == [] and dict(car.annotations) == {}


async def test_index_ids_and_device_specs(start: Start) -> None:
    config = "flags: {plugin: {deviceIDStrategy: index, passDeviceSpecs: true}}"
    _, kubelet, nvml = await start("l4:4", config)
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    car = await allocate(stub, nvml.device(2).uuid)
    assert dict(car.envs) == {"NVIDIA_VISIBLE_DEVICES": "2"}
    assert [(d.container_path, d.host_path, d.permissions) for d in car.devices] == [
        ("/dev/nvidia2", "/dev/nvidia2", "rw")
    ]


async def test_volume_mounts_strategy(start: Start) -> None:
    _, kubelet, nvml = await start(
        "h200-nvl:1",
        "flags: {migStrategy: mixed, plugin: {deviceListStrategy: volume-mounts}}",
        mig={"1g.18gb": 7},
    )
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    m = nvml.mig_devices(0)[4].uuid
    car = await allocate(stub, m)
    assert dict(car.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(x.container_path, x.host_path, x.read_only) for x in car.mounts] == [
        (f"/var/run/nvidia-container-devices/{m}", "/dev/null", True)
    ]


async def test_cdi_strategies_and_the_cdi_spec(start: Start) -> None:
    config = "flags: {plugin: {deviceListStrategy: [cdi-annotations, cdi-cri]}}"
    plugin, kubelet, nvml = await start("l4:2", config)
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    u = nvml.device(1).uuid
    car = await allocate(stub, u)
    name = f"k8s.device-plugin.nvidia.com/gpu={u}"
    assert [c.name for c in car.cdi_devices] == [name]
    ((key, value),) = car.annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_") and value == name
    assert dict(car.envs) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    again = await allocate(stub, u)
    assert next(iter(again.annotations)) != key  # a fresh request id each time

    assert plugin.options.cdi_root is not None
    spec = json.loads(
        (plugin.options.cdi_root / "k8s.device-plugin.nvidia.com-gpu.json").read_text()
    )
    assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
    names = {d["name"] for d in spec["devices"]}
    assert names == {nvml.device(0).uuid, u, "0", "1", "all"}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]


async def test_the_cdi_spec_mounts_the_drivers_files_from_the_host_driver_root(
    start: Start, tmp_path: Path
) -> None:
    """Found where the container sees the driver (`/driver-root`), mounted from where the
    host has it (`nvidiaDriverRoot`, here a containerized driver's /run/nvidia/driver)."""
    root = tmp_path / "driver-root"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15").write_text("elf")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!")
    plugin, _, _ = await start(
        "h100-80gb:1",
        "flags: {nvidiaDriverRoot: /run/nvidia/driver}",
        container_driver_root=root,
    )
    assert plugin.options.cdi_root is not None
    spec = json.loads(
        (plugin.options.cdi_root / "k8s.device-plugin.nvidia.com-gpu.json").read_text()
    )
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
    assert mounts == {
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15": (
            "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15"
        ),
        "/usr/bin/nvidia-smi": "/run/nvidia/driver/usr/bin/nvidia-smi",
    }
    hooks = [h["args"][1] for h in spec["containerEdits"]["hooks"]]
    # no libcuda: no libcuda.so link to create
    assert hooks == ["enable-cuda-compat", "update-ldcache", "disable-device-node-modification"]
    assert all("mounts" not in d["containerEdits"] for d in spec["devices"])


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        (["GPU-not-here"], "invalid request: unknown device: GPU-not-here"),
        (["{u}::0", "{u}::1"], "maximum request size for shared resources is 1; found 2"),
    ],
)
async def test_refused_allocations_fail_the_call_with_upstreams_words(
    start: Start, ids: list[str], error: str
) -> None:
    config = TS4.replace(
        "  timeSlicing:\n", "  timeSlicing:\n    failRequestsGreaterThanOne: true\n"
    )
    _, kubelet, nvml = await start("l4:2", config)
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    u = nvml.device(0).uuid
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await allocate(stub, *[i.format(u=u) for i in ids])
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error in str(info.value.details())


async def test_mps_waits_for_its_daemon_then_hands_out_pipes_with_equal_limits(
    start: Start,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="kg-mps-", dir="/tmp"))
    try:
        config = (
            f"flags: {{mpsRoot: {root}}}\nsharing:\n  mps:\n    resources:\n"
            "    - {name: gpu, replicas: 4}\n"
        )
        plugin, kubelet, nvml = await start("l4:2", config)
        await asyncio.sleep(0.3)
        assert kubelet.registrations.empty()  # no daemon yet: not registered
        assert not plugin.servers["nvidia.com/gpu"].serving
        daemon = MpsControlDaemon(
            SimNvml(nvml.store.path),
            MpsOptions(mps_root=root, config_file=plugin.options.config_file, poll_s=0.05),
            RecordingMps(),
        )
        task = asyncio.create_task(daemon.run())
        try:
            reg = await kubelet.next_registration()
            assert reg.resource_name == "nvidia.com/gpu"
            stub = kubelet.plugin(reg.endpoint)
            u = nvml.device(1).uuid
            car = await allocate(stub, f"{u}::3")
            assert dict(car.envs) == {
                "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
                "NVIDIA_VISIBLE_DEVICES": u,
            }
            assert [(m.container_path, m.host_path, m.read_only) for m in car.mounts] == [
                ("/mps/nvidia.com/gpu/pipe", f"{root}/nvidia.com/gpu/pipe", False),
                ("/dev/shm", f"{root}/shm", False),
            ]
            with pytest.raises(grpc.aio.AioRpcError, match="maximum request size"):
                await allocate(stub, f"{u}::0", f"{u}::1")  # MPS defaults to one replica
            limits = json.loads((root / "nvidia.com/gpu/limits.json").read_text())
            memory = nvml.device(0).memory_total_mib
            assert limits["defaultActiveThreadPercentage"] == 25
            assert [
                (d["index"], d["pinnedDeviceMemoryLimitMiB"], d["activeThreadPercentage"])
                for d in limits["devices"]
            ] == [(0, memory // 4, 25), (1, memory // 4, 25)]
            assert limits["commands"][0] == f"set_default_device_pinned_mem_limit 0 {memory // 4}M"
            assert (root / "nvidia.com/gpu/pipe").is_dir() and (root / ".ready").exists()
        finally:
            daemon.stop()
            await asyncio.wait_for(task, WAIT_S)
        assert not (root / "nvidia.com/gpu/.started").exists()
        assert not (root / "nvidia.com/gpu/limits.json").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- GetPreferredAllocation -----------------------------------------------------------------------


async def test_whole_gpus_are_preferred_by_topology(start: Start) -> None:
    _, kubelet, nvml = await start("l4:4")
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    u = [nvml.device(i).uuid for i in range(4)]
    assert await prefer(stub, [u[0], u[1], u[2], u[3]], 2) == [u[0], u[1]]
    assert await prefer(stub, [u[1], u[2], u[3]], 2) == [u[2], u[3]]  # same CPU
    assert await prefer(stub, [u[0], u[1], u[2]], 1) == [u[2]]  # keeps 0+1 together
    assert await prefer(stub, u, 2, must=[u[3]]) == [u[3], u[2]]


@pytest.mark.parametrize(
    ("policy", "expected"), [("distributed", [1, 2, 3]), ("packed", [0, 0, 0])]
)
async def test_replicas_are_spread_or_packed(
    start: Start, policy: str, expected: list[int]
) -> None:
    config = f"flags: {{plugin: {{sharedDevicesAllocationPolicy: {policy}}}}}\n{TS4}"
    _, kubelet, nvml = await start("l4:4", config)
    stub = kubelet.plugin((await kubelet.next_registration()).endpoint)
    u = [nvml.device(i).uuid for i in range(4)]
    in_use = {f"{u[0]}::0"}
    available = [f"{x}::{n}" for x in u for n in range(4) if f"{x}::{n}" not in in_use]
    ids = await prefer(stub, available, 3)
    assert [u.index(i.split("::")[0]) for i in ids] == expected


# -- config changes and refusals ------------------------------------------------------------------


async def test_a_changed_config_file_re_advertises_without_a_restart(start: Start) -> None:
    plugin, kubelet, _ = await start("l4:4", "")
    reg = await kubelet.next_registration()
    w = watch(start, kubelet.plugin(reg.endpoint))
    assert len(await w.next() or {}) == 4
    assert plugin.options.config_file is not None
    plugin.options.config_file.write_text(TS4)
    await w.until(lambda devices: len(devices) == 16)
    # renaming moves the replicas to another resource: the old one goes away
    plugin.options.config_file.write_text(
        TS4.replace("  timeSlicing:\n", "  timeSlicing:\n    renameByDefault: true\n")
    )
    assert (await kubelet.next_registration()).resource_name == "nvidia.com/gpu.shared"
    assert await w.next() is None  # nvidia.com/gpu's server stopped
    assert plugin.counts() == {"nvidia.com/gpu.shared": 16}


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (TS4.replace("replicas: 4", "replicas: 1"), "number of replicas must be >= 2"),
        ("flags: {migStrategy: mixed, colour: red}", "field flags.colour"),
        (
            "flags: {mpsRoot: /m}\nsharing: {mps: {resources: [{name: gpu, replicas: 64}]}}",
            "maximum allowed replicas exceeded",
        ),
    ],
)
async def test_a_bad_config_is_refused_and_the_last_good_one_stays(
    start: Start, bad: str, error: str
) -> None:
    plugin, kubelet, _ = await start("l4:2", TS4)
    reg = await kubelet.next_registration()
    w = watch(start, kubelet.plugin(reg.endpoint))
    assert len(await w.next() or {}) == 8
    assert plugin.options.config_file is not None
    plugin.options.config_file.write_text(bad)

    await until(lambda: plugin.rejection is not None)
    assert plugin.rejection is not None and error in plugin.rejection
    kind, reason, message = plugin.node.events[-1]
    assert (kind, reason) == ("Warning", "DevicePluginConfigRejected")
    assert error in message and "keeping" in message
    assert plugin.counts() == {"nvidia.com/gpu": 8}
    stub = kubelet.plugin(reg.endpoint)
    assert len((await stub.ListAndWatch(dp.Empty()).read()).devices) == 8
    plugin.options.config_file.write_text("")  # fixed: the new config applies
    await w.until(lambda devices: len(devices) == 2)
    assert plugin.rejection is None


async def test_mps_on_a_mig_enabled_gpu_is_refused(start: Start) -> None:
    mps = "flags: {mpsRoot: /tmp/kg-none}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"
    plugin, _, _ = await start("h200-nvl:2", mps, mig={"1g.18gb": 7})
    assert plugin.rejection is not None
    assert "sharing using MPS is not supported on MIG-enabled GPUs" in plugin.rejection
    assert plugin.counts() == {}
    single = mps.replace("mpsRoot: /tmp/kg-none", "mpsRoot: /tmp/kg-none, migStrategy: single")
    assert plugin.options.config_file is not None
    plugin.options.config_file.write_text(single)
    await until(lambda: "for MIG devices" in (plugin.rejection or ""))


async def test_named_configs_in_a_directory_follow_their_contents(start: Start) -> None:
    root = Path(tempfile.mkdtemp(prefix="kg-cfg-", dir="/tmp"))
    try:
        (root / "plain").write_text("")
        (root / "shared").write_text(TS4)
        (root / "..data").mkdir()  # ConfigMap volume internals are not configs
        plugin, _, _ = await start("l4:1", config_dir=root, default_config="shared")
        assert plugin.source is not None and "'shared'" in plugin.source
        assert plugin.counts() == {"nvidia.com/gpu": 4}
        (root / "shared").write_text(TS4.replace("replicas: 4", "replicas: 6"))
        await until(lambda: plugin.counts() == {"nvidia.com/gpu": 6})
        plugin.node.label = "plain"  # what the label watch does when the node is relabelled
        plugin._wake.set()
        await until(lambda: plugin.counts() == {"nvidia.com/gpu": 1})
        plugin.node.label = "missing"
        plugin._wake.set()
        await until(lambda: plugin.rejection is not None)
        assert plugin.rejection is not None
        assert "specified config 'missing' does not exist" in plugin.rejection
        assert plugin.counts() == {"nvidia.com/gpu": 1}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- health ---------------------------------------------------------------------------------------


async def test_an_xid_marks_every_replica_of_its_gpu_and_recovery_restores_them(
    start: Start,
) -> None:
    plugin, kubelet, nvml = await start("l4:2", TS4, health_recovery_s=0.5)
    w = watch(start, kubelet.plugin((await kubelet.next_registration()).endpoint))
    assert set((await w.next() or {}).values()) == {"Healthy"}
    u0, u1 = nvml.device(0).uuid, nvml.device(1).uuid
    SimControls.of(nvml).inject_xid(0, 13)  # an application error: ignored
    SimControls.of(nvml).inject_xid(1, 48)  # double-bit ECC: counts
    sick = await w.until(lambda d: "Unhealthy" in d.values())
    assert {i for i, h in sick.items() if h == "Unhealthy"} == {f"{u1}::{n}" for n in range(4)}
    assert all(sick[f"{u0}::{n}"] == "Healthy" for n in range(4))
    assert plugin.node.events[-1][1] == "GpuUnhealthy"
    healed = await w.until(lambda d: set(d.values()) == {"Healthy"})
    assert len(healed) == 8
    assert plugin.node.events[-1][1] == "GpuRecovered"


async def test_a_scoped_xid_marks_only_the_mig_devices_of_its_gpu_instance(start: Start) -> None:
    _, kubelet, nvml = await start(
        "h200-nvl:1", "flags: {migStrategy: mixed}", mig={"1g.18gb": 7}, health_recovery_s=0
    )
    w = watch(start, kubelet.plugin((await kubelet.next_registration()).endpoint))
    await w.next()
    target = nvml.mig_devices(0)[2]
    SimControls.of(nvml).inject_xid(0, 94, gi=target.gpu_instance_id, ci=target.compute_instance_id)
    sick = await w.until(lambda d: "Unhealthy" in d.values())
    assert [i for i, h in sick.items() if h == "Unhealthy"] == [target.uuid]
    SimControls.of(nvml).inject_xid(0, 48)  # unscoped: the whole GPU
    sick = await w.until(lambda d: list(d.values()).count("Unhealthy") == 7)


async def test_a_lost_gpu_stays_unhealthy_until_nvml_answers_again(start: Start) -> None:
    plugin, kubelet, nvml = await start("l4:2", health_recovery_s=0.2)
    w = watch(start, kubelet.plugin((await kubelet.next_registration()).endpoint))
    await w.next()
    SimControls.of(nvml).lose_gpu(1)
    sick = await w.until(lambda d: "Unhealthy" in d.values())
    assert sick[SimControls.of(nvml).raw_state()["gpus"][1]["uuid"]] == "Unhealthy"
    await asyncio.sleep(0.6)  # well past the recovery period: NVML still cannot reach it
    assert plugin.unhealthy() == {
        "nvidia.com/gpu": {SimControls.of(nvml).raw_state()["gpus"][1]["uuid"]}
    }
    nvml.reset(1)  # back on the bus
    await w.until(lambda d: set(d.values()) == {"Healthy"})


async def test_health_checks_can_be_switched_off(start: Start) -> None:
    policy = XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"})
    _, kubelet, nvml = await start("l4:2", xid_policy=policy, health_recovery_s=0)
    w = watch(start, kubelet.plugin((await kubelet.next_registration()).endpoint))
    await w.next()
    SimControls.of(nvml).inject_xid(0, 48)  # off
    SimControls.of(nvml).lose_gpu(1)  # XID 79 forced on
    sick = await w.until(lambda d: "Unhealthy" in d.values())
    assert list(sick.values()) == ["Healthy", "Unhealthy"]


async def test_no_gpus_no_resources(start: Start) -> None:
    plugin, kubelet, nvml = await start("l4:1")
    await kubelet.next_registration()
    SimControls.of(nvml).lose_gpu(0)
    plugin.reload()
    await until(lambda: not plugin.counts())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(kubelet.registrations.get(), 0.3)
    assert not plugin.servers


# -- faults in the GPU layer and bad inputs: refused once, logged once --------------------------


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    """The log lines (INFO and above) that say `text`."""
    return [r for r in caplog.records if r.levelno >= logging.INFO and text in r.getMessage()]


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    shown = [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
    assert not shown, [r.getMessage() for r in shown]


@pytest.mark.parametrize(
    "damage",
    [lambda p: p.unlink(), lambda p: p.write_text("{corrupt"), lambda p: p.write_text("[]")],
    ids=["deleted", "corrupt", "not-a-state"],
)
async def test_a_gpu_layer_that_cannot_be_read_marks_every_device_unhealthy_once(
    start: Start, caplog: pytest.LogCaptureFixture, damage: Callable[[Path], object]
) -> None:
    caplog.set_level(logging.DEBUG, logger="kubegpu")
    plugin, kubelet, nvml = await start("l4:2", TS4, health_recovery_s=0.3)
    w = watch(start, kubelet.plugin((await kubelet.next_registration()).endpoint))
    assert set((await w.next() or {}).values()) == {"Healthy"}
    path = nvml.store.path
    saved = path.read_bytes()
    damage(path)

    sick = await w.until(lambda d: set(d.values()) == {"Unhealthy"})
    assert len(sick) == 8
    plugin.reload()  # a config apply that cannot read the GPUs either
    await asyncio.sleep(1.0)  # ~10 event waits and ~20 polls fail meanwhile
    assert plugin.counts() == {"nvidia.com/gpu": 8}  # still advertised, all unhealthy
    assert set(plugin.unhealthy()["nvidia.com/gpu"]) == set(sick)
    assert len(_lines(caplog, "waiting for GPU events failed")) == 1
    assert len(_lines(caplog, "cannot read the GPUs")) == 1
    assert [e[1] for e in plugin.node.events].count("GpuUnhealthy") == 1
    _no_tracebacks(caplog)

    # the GPUs are back, in one piece: the sim's own writers replace the file by rename,
    # and a reader that caught a half-written restore would see one more failure
    restored = path.with_name(path.name + ".restored")
    restored.write_bytes(saved)
    restored.replace(path)
    await w.until(lambda d: set(d.values()) == {"Healthy"})
    assert len(_lines(caplog, "GPU events can be read again")) == 1
    assert plugin.node.events[-1][1] == "GpuRecovered"


async def test_a_lost_gpu_is_logged_once_however_long_it_stays_lost(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kubegpu")
    plugin, kubelet, nvml = await start("l4:2", health_recovery_s=0.05)
    w = watch(start, kubelet.plugin((await kubelet.next_registration()).endpoint))
    await w.next()
    SimControls.of(nvml).lose_gpu(1)
    await w.until(lambda d: "Unhealthy" in d.values())
    await asyncio.sleep(1.0)  # ~20 recovery probes fail
    assert len(_lines(caplog, "GPU 1 not recovered yet")) == 1
    assert [e[1] for e in plugin.node.events].count("GpuUnhealthy") == 1
    _no_tracebacks(caplog)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (b"flags: {migStrategy: \xff}\n", b"not UTF-8 text (byte 0xff at offset 21)"),
        (TS4.replace("replicas: 4", "replicas: 10000000").encode(), b"must be <= 1024"),
        (b"flags: {migStrategy: [", b"malformed YAML"),
        (b"flags:\n  migStrategy: none\n  migStrategy: mixed\n", b"duplicate key"),
    ],
    ids=["not-utf8", "replicas", "yaml", "duplicate-key"],
)
async def test_a_running_plugin_refuses_a_bad_config_once(
    start: Start, caplog: pytest.LogCaptureFixture, bad: bytes, error: bytes
) -> None:
    caplog.set_level(logging.DEBUG, logger="kubegpu")
    plugin, _, _ = await start("l4:2", TS4)
    assert plugin.options.config_file is not None
    plugin.options.config_file.write_bytes(bad)
    await until(lambda: plugin.rejection is not None)
    await asyncio.sleep(0.5)  # ~10 polls see the same bad file
    assert error.decode() in (plugin.rejection or "")
    rejected = [e for e in plugin.node.events if e[1] == "DevicePluginConfigRejected"]
    assert len(rejected) == 1 and "keeping" in rejected[0][2]
    assert len(_lines(caplog, "DevicePluginConfigRejected")) == 1
    assert plugin.counts() == {"nvidia.com/gpu": 8}  # the last good config stays
    _no_tracebacks(caplog)


async def test_a_config_that_would_advertise_too_many_devices_is_refused_whole(
    start: Start,
) -> None:
    """8 GPUs x 7 MIG devices x 300 replicas = 16800 devices: over the bound, so the list
    is never built; the last good config stays."""
    plugin, _, _ = await start("h200-nvl:8", "flags: {migStrategy: mixed}", mig={"1g.18gb": 7})
    assert plugin.counts() == {"nvidia.com/mig-1g.18gb": 56}
    assert plugin.options.config_file is not None
    plugin.options.config_file.write_text(
        "flags: {migStrategy: mixed}\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: mig-1g.18gb, replicas: 300}\n"
    )
    await until(lambda: plugin.rejection is not None)
    assert "would advertise 16800 devices" in (plugin.rejection or "")
    assert plugin.node.events[-1][1] == "DevicePluginConfigRejected"
    assert plugin.counts() == {"nvidia.com/mig-1g.18gb": 56}


async def test_the_mps_daemon_says_once_that_it_cannot_read_the_gpus(
    caplog: pytest.LogCaptureFixture, short_root: Path
) -> None:
    caplog.set_level(logging.INFO, logger="kubegpu")
    state = short_root / "gpus.json"
    nvml = SimNvml.create(state, "l4:2")
    saved = state.read_bytes()
    config = short_root / "config.yaml"
    config.write_text("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n")
    root = short_root / "mps"
    daemon = MpsControlDaemon(
        nvml,
        MpsOptions(
            mps_root=root,
            config_file=config,
            poll_s=0.05,
            overrides={"MPS_ROOT": str(root)},
        ),
        RecordingMps(),
    )
    state.unlink()
    task = asyncio.create_task(daemon.run())
    try:
        await asyncio.sleep(0.6)  # ~12 rounds cannot read the GPUs
        assert not daemon.running
        assert len(_lines(caplog, "cannot read the GPUs")) == 1
        _no_tracebacks(caplog)
        state.write_bytes(saved)
        await until((root / "nvidia.com/gpu/.started").exists)
        assert len(_lines(caplog, "the GPUs can be read again")) == 1
    finally:
        daemon.stop()
        await asyncio.wait_for(task, WAIT_S)


# -- the programs ------------------------------------------------------------------------------


async def _run(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubegpu",
        *args,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


@pytest.fixture
def short_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_the_device_plugin_program_takes_upstreams_env_and_stops_cleanly(
    short_root: Path,
) -> None:
    kubelet = Kubelet(short_root / "dp")
    await kubelet.start()
    (short_root / "config.yaml").write_text(TS4)
    env = {
        "CONFIG_FILE": str(short_root / "config.yaml"),
        "KUBELET_SOCKET": str(kubelet.socket),
        "DEVICE_LIST_STRATEGY": "cdi-cri",
        "DEVICE_ID_STRATEGY": "index",
        "CDI_ROOT": str(short_root / "cdi"),
        "KUBEGPU_NVML": f"sim:{short_root / 'gpus.json'}",
        "KUBEGPU_SIM_NODE": "l4:2",
        "KUBEGPU_POLL_INTERVAL": "0.1",
    }
    proc = await _run("device-plugin", env=env)
    try:
        reg = await asyncio.wait_for(kubelet.next_registration(), 30)
        assert (reg.resource_name, reg.endpoint) == ("nvidia.com/gpu", "nvidia-gpu.sock")
        stub = kubelet.plugin(reg.endpoint)
        ids = [d.ID for d in (await stub.ListAndWatch(dp.Empty()).read()).devices]
        assert len(ids) == 8
        car = await allocate(stub, ids[5])
        assert [c.name for c in car.cdi_devices] == ["k8s.device-plugin.nvidia.com/gpu=1"]
        assert (short_root / "cdi/k8s.device-plugin.nvidia.com-gpu.json").exists()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        assert not (short_root / "dp/nvidia-gpu.sock").exists()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MIG_STRATEGY": "half"}, "field flags.migStrategy"),
        ({"PASS_DEVICE_SPECS": "maybe"}, "PASS_DEVICE_SPECS='maybe' is not a boolean"),
        ({"CONFIG_FILE": "/nonexistent/config.yaml"}, "no such file"),
        (
            {"KUBEGPU_NVML": "sim:/tmp/kg-missing/gpus.json", "KUBEGPU_SIM_NODE": ""},
            "does not exist",
        ),
        ({"KUBEGPU_POLL_INTERVAL": "0"}, "--poll-interval / KUBEGPU_POLL_INTERVAL 0: must be"),
        ({"KUBEGPU_POLL_INTERVAL": "nan"}, "KUBEGPU_POLL_INTERVAL nan: must be 0.01 to 300"),
        ({"KUBEGPU_POLL_INTERVAL": "inf"}, "KUBEGPU_POLL_INTERVAL inf: must be"),
        ({"DP_HEALTH_RECOVERY_PERIOD": "-1"}, "DP_HEALTH_RECOVERY_PERIOD -1: must be 0 or"),
        ({"DP_HEALTH_RECOVERY_PERIOD": "1e12"}, "DP_HEALTH_RECOVERY_PERIOD 1e+12: must be"),
    ],
)
async def test_the_device_plugin_program_refuses_bad_flags(
    short_root: Path, env: dict[str, str], message: str
) -> None:
    base = {
        "KUBEGPU_NVML": f"sim:{short_root / 'gpus.json'}",
        "KUBEGPU_SIM_NODE": "l4:1",
        "KUBELET_SOCKET": "",
        "CDI_ROOT": "",
    }
    proc = await _run("device-plugin", env={**base, **env})
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:  # it should have refused to start: do not leave it running
            proc.kill()
            await proc.wait()
    assert proc.returncode == 1
    assert message in out.decode()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["device-plugin", "--config-file", "-"], "--config-file -: standard input cannot"),
        (["mps-control-daemon", "--config-file", "-"], "--config-file -: standard input cannot"),
        (["feature-discovery", "--oneshot", "--config-file", "-"], "'-' (standard input)"),
        (["mig", "validate", "-f", "-"], "standard input is closed"),
        (["exporter", "-f", "-", "-a", "127.0.0.1:0"], "-: cannot read counters file"),
    ],
    ids=["device-plugin", "mps", "gfd", "mig", "exporter"],
)
async def test_closed_stdin_is_a_clear_error_never_a_traceback(
    short_root: Path, command: list[str], message: str
) -> None:
    env = {
        **os.environ,
        "KUBEGPU_NVML": f"sim:{short_root / 'gpus.json'}",
        "KUBEGPU_SIM_NODE": "l4:1",
        "KUBELET_SOCKET": "",
        "CDI_ROOT": "",
        "MPS_ROOT": str(short_root / "mps"),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubegpu",
        *command,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=lambda: os.close(0),  # standard input closed, not merely empty
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    assert proc.returncode != 0, text
    assert message in text and "error:" in text
    assert "Traceback" not in text


async def test_the_mps_daemon_program_records_its_limits_on_a_simulated_node(
    short_root: Path,
) -> None:
    config = short_root / "config.yaml"
    config.write_text("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 3}\n")
    mps_root = short_root / "mps"
    env = {
        "CONFIG_FILE": str(config),
        "MPS_ROOT": str(mps_root),
        "KUBEGPU_NVML": f"sim:{short_root / 'gpus.json'}",
        "KUBEGPU_SIM_NODE": "l40s:1",
        "KUBEGPU_POLL_INTERVAL": "0.1",
    }
    proc = await _run("mps-control-daemon", env=env)
    try:
        limits = mps_root / "nvidia.com/gpu/limits.json"
        await until(limits.exists, 30)
        record = json.loads(limits.read_text())
        assert record["commands"] == [
            f"set_default_device_pinned_mem_limit 0 {46068 // 3}M",
            "set_default_active_thread_percentage 33",
        ]
        assert (mps_root / "nvidia.com/gpu/.started").exists()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        assert not limits.exists() and not (mps_root / ".ready").exists()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_programs_flags_become_the_plugins_options() -> None:
    from kubegpu.device_plugin.runner import DevicePluginFlags, plugin_options

    flags = DevicePluginFlags(
        config_dir=Path("/available-configs"),
        default_config="ts4",
        node_name="n1",
        overrides={"MIG_STRATEGY": "mixed", "PASS_DEVICE_SPECS": "true", "MPS_ROOT": None},
        kubelet_socket=Path("/var/lib/kubelet/device-plugins/kubelet.sock"),
        cdi_root=Path("/var/run/cdi"),
        health_recovery_s=2.5,
        poll_s=0.2,
    )
    options, fail_on_init = plugin_options(flags, environ={"DP_DISABLE_HEALTHCHECKS": "48"})
    assert options == PluginOptions(
        config_dir=Path("/available-configs"),
        default_config="ts4",
        node_name="n1",
        overrides={"MIG_STRATEGY": "mixed", "PASS_DEVICE_SPECS": "true"},
        plugin_dir=Path("/var/lib/kubelet/device-plugins"),
        kubelet_socket=Path("/var/lib/kubelet/device-plugins/kubelet.sock"),
        cdi_root=Path("/var/run/cdi"),
        health_recovery_s=2.5,
        xid_policy=XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": "48"}),
        poll_s=0.2,
    )
    assert fail_on_init is True
    _, fail_on_init = plugin_options(
        DevicePluginFlags(overrides={"FAIL_ON_INIT_ERROR": "false"}), environ={}
    )
    assert fail_on_init is False


def _no_driver() -> SimNvml:
    raise NvmlError("libnvidia-ml.so.1: cannot open shared object file")


async def test_without_nvml_the_program_refuses_to_start_by_default() -> None:
    from kubegpu.device_plugin.runner import DevicePluginFlags, DevicePluginProgram
    from kubegpu.node.gpus import real_backend

    gpus = replace(real_backend(), opener=_no_driver)
    program = DevicePluginProgram(DevicePluginFlags(), gpus)
    with pytest.raises(ComponentError, match=r"cannot start NVML: .*cannot open shared object"):
        await program.run()


async def test_without_nvml_and_fail_on_init_error_false_it_waits_until_stopped() -> None:
    from kubegpu.device_plugin.runner import DevicePluginFlags, DevicePluginProgram
    from kubegpu.node.gpus import real_backend

    gpus = replace(real_backend(), opener=_no_driver)
    flags = DevicePluginFlags(overrides={"FAIL_ON_INIT_ERROR": "false"})
    program = DevicePluginProgram(flags, gpus)
    running = asyncio.create_task(program.run())
    await asyncio.sleep(0.1)
    assert not running.done()  # no devices, but up: as upstream, "waiting indefinitely"
    program.stop()
    await asyncio.wait_for(running, 5)


async def test_without_nvml_the_named_config_the_node_runs_decides_fail_on_init_error(
    tmp_path: Path,
) -> None:
    """With --config-dir the config is chosen by name, not given at start: its
    flags.failOnInitError still decides whether the plugin exits or waits."""
    from kubegpu.device_plugin.runner import DevicePluginFlags, DevicePluginProgram
    from kubegpu.node.gpus import real_backend

    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "lenient").write_text("flags: {failOnInitError: false}\n")
    (configs / "strict").write_text("flags: {failOnInitError: true}\n")
    gpus = replace(real_backend(), opener=_no_driver)
    lenient = DevicePluginProgram(
        DevicePluginFlags(config_dir=configs, default_config="lenient"), gpus
    )
    running = asyncio.create_task(lenient.run())
    await asyncio.sleep(0.2)
    assert not running.done()  # the named config said false: up, with no devices
    lenient.stop()
    await asyncio.wait_for(running, 5)
    strict = DevicePluginProgram(
        DevicePluginFlags(config_dir=configs, default_config="strict"), gpus
    )
    with pytest.raises(ComponentError, match="cannot start NVML"):
        await strict.run()
