"""The kubelet's gRPC APIs: generated code is fresh, the wire format is the kubelet's, and the
stubs work end to end over unix sockets (device plugin v1beta1, pod-resources v1, plugin
registration v1, DRA v1 and v1beta1)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubegpu.kube import kubelet
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp
from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from kubegpu.kube.kubelet import dra_v1_pb2 as dra
from kubegpu.kube.kubelet import dra_v1_pb2_grpc as dra_grpc
from kubegpu.kube.kubelet import dra_v1beta1_pb2 as dra_beta
from kubegpu.kube.kubelet import dra_v1beta1_pb2_grpc as dra_beta_grpc
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.kube.kubelet import pluginregistration_v1_pb2_grpc as reg_grpc
from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-protos"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr + res.stdout


# ---------------------------------------------------------------------------------------------
# wire format: names, numbers and types as the kubelet has them (reference/device-plugin.md §7)

# message -> field -> (number, scalar type or message name, repeated)
DEVICE_PLUGIN_FIELDS: dict[str, dict[str, tuple[int, str, bool]]] = {
    "DevicePluginOptions": {
        "pre_start_required": (1, "bool", False),
        "get_preferred_allocation_available": (2, "bool", False),
    },
    "RegisterRequest": {
        "version": (1, "string", False),
        "endpoint": (2, "string", False),
        "resource_name": (3, "string", False),
        "options": (4, "DevicePluginOptions", False),
    },
    "Empty": {},
    "ListAndWatchResponse": {"devices": (1, "Device", True)},
    "TopologyInfo": {"nodes": (1, "NUMANode", True)},
    "NUMANode": {"ID": (1, "int64", False)},
    "Device": {
        "ID": (1, "string", False),
        "health": (2, "string", False),
        "topology": (3, "TopologyInfo", False),
    },
    "PreStartContainerRequest": {"devices_ids": (1, "string", True)},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {
        "container_requests": (1, "ContainerPreferredAllocationRequest", True)
    },
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": (1, "string", True),
        "must_include_deviceIDs": (2, "string", True),
        "allocation_size": (3, "int32", False),
    },
    "PreferredAllocationResponse": {
        "container_responses": (1, "ContainerPreferredAllocationResponse", True)
    },
    "ContainerPreferredAllocationResponse": {"deviceIDs": (1, "string", True)},
    "AllocateRequest": {"container_requests": (1, "ContainerAllocateRequest", True)},
    "ContainerAllocateRequest": {"devices_ids": (1, "string", True)},
    "CDIDevice": {"name": (1, "string", False)},
    "AllocateResponse": {"container_responses": (1, "ContainerAllocateResponse", True)},
    "ContainerAllocateResponse": {
        "envs": (1, "map<string,string>", True),
        "mounts": (2, "Mount", True),
        "devices": (3, "DeviceSpec", True),
        "annotations": (4, "map<string,string>", True),
        "cdi_devices": (5, "CDIDevice", True),
    },
    "Mount": {
        "container_path": (1, "string", False),
        "host_path": (2, "string", False),
        "read_only": (3, "bool", False),
    },
    "DeviceSpec": {
        "container_path": (1, "string", False),
        "host_path": (2, "string", False),
        "permissions": (3, "string", False),
    },
}

POD_RESOURCES_FIELDS: dict[str, dict[str, tuple[int, str, bool]]] = {
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {
        "devices": (1, "ContainerDevices", True),
        "cpu_ids": (2, "int64", True),
        "memory": (3, "ContainerMemory", True),
    },
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": (1, "PodResources", True)},
    "PodResources": {
        "name": (1, "string", False),
        "namespace": (2, "string", False),
        "containers": (3, "ContainerResources", True),
        "cpu_ids": (4, "int64", True),
        "memory": (5, "ContainerMemory", True),
    },
    "ContainerResources": {
        "name": (1, "string", False),
        "devices": (2, "ContainerDevices", True),
        "cpu_ids": (3, "int64", True),
        "memory": (4, "ContainerMemory", True),
        "dynamic_resources": (5, "DynamicResource", True),
    },
    "ContainerMemory": {
        "memory_type": (1, "string", False),
        "size": (2, "uint64", False),
        "topology": (3, "TopologyInfo", False),
    },
    "ContainerDevices": {
        "resource_name": (1, "string", False),
        "device_ids": (2, "string", True),
        "topology": (3, "TopologyInfo", False),
    },
    "TopologyInfo": {"nodes": (1, "NUMANode", True)},
    "NUMANode": {"ID": (1, "int64", False)},
    "DynamicResource": {
        "claim_name": (2, "string", False),
        "claim_namespace": (3, "string", False),
        "claim_resources": (4, "ClaimResource", True),
    },
    "ClaimResource": {
        "cdi_devices": (1, "CDIDevice", True),
        "driver_name": (2, "string", False),
        "pool_name": (3, "string", False),
        "device_name": (4, "string", False),
        "share_id": (5, "string", False),
    },
    "CDIDevice": {"name": (1, "string", False)},
    "GetPodResourcesRequest": {
        "pod_name": (1, "string", False),
        "pod_namespace": (2, "string", False),
    },
    "GetPodResourcesResponse": {"pod_resources": (1, "PodResources", False)},
}

# reference/dcgm-dra.md section 3.6
DRA_FIELDS: dict[str, dict[str, tuple[int, str, bool]]] = {
    "NodePrepareResourcesRequest": {"claims": (1, "Claim", True)},
    "NodePrepareResourcesResponse": {
        "claims": (1, "map<string,NodePrepareResourceResponse>", True)
    },
    "NodePrepareResourceResponse": {
        "devices": (1, "Device", True),
        "error": (2, "string", False),
    },
    "Device": {
        "request_names": (1, "string", True),
        "pool_name": (2, "string", False),
        "device_name": (3, "string", False),
        "cdi_device_ids": (4, "string", True),
        "share_id": (5, "string", False),
    },
    "NodeUnprepareResourcesRequest": {"claims": (1, "Claim", True)},
    "NodeUnprepareResourcesResponse": {
        "claims": (1, "map<string,NodeUnprepareResourceResponse>", True)
    },
    "NodeUnprepareResourceResponse": {"error": (1, "string", False)},
    "Claim": {
        "namespace": (1, "string", False),
        "uid": (2, "string", False),
        "name": (3, "string", False),
    },
}

REGISTRATION_FIELDS: dict[str, dict[str, tuple[int, str, bool]]] = {
    "InfoRequest": {},
    "PluginInfo": {
        "type": (1, "string", False),
        "name": (2, "string", False),
        "endpoint": (3, "string", False),
        "supported_versions": (4, "string", True),
    },
    "RegistrationStatus": {
        "plugin_registered": (1, "bool", False),
        "error": (2, "string", False),
    },
    "RegistrationStatusResponse": {},
}

_SCALARS = {
    "TYPE_BOOL": "bool",
    "TYPE_STRING": "string",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_UINT64": "uint64",
}


def _fields(message: Any) -> dict[str, tuple[int, str, bool]]:
    out = {}
    for f in message.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            key, value = (f.message_type.fields_by_name[n] for n in ("key", "value"))
            value_kind = (
                value.message_type.name
                if value.message_type is not None
                else _SCALARS[_type_name(value)]
            )
            kind = f"map<{_SCALARS[_type_name(key)]},{value_kind}>"
        elif f.message_type is not None:
            kind = f.message_type.name
        else:
            kind = _SCALARS[_type_name(f)]
        out[f.name] = (f.number, kind, f.is_repeated)
    return out


def _type_name(field: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor

    names = {v: k for k, v in vars(FieldDescriptor).items() if k.startswith("TYPE_")}
    return names[field.type]


@pytest.mark.parametrize(
    ("module", "package", "expected"),
    [
        (dp, "v1beta1", DEVICE_PLUGIN_FIELDS),
        (pr, "v1", POD_RESOURCES_FIELDS),
        (dra, "k8s.io.kubelet.pkg.apis.dra.v1", DRA_FIELDS),
        (dra_beta, "k8s.io.kubelet.pkg.apis.dra.v1beta1", DRA_FIELDS),
        (reg, "pluginregistration", REGISTRATION_FIELDS),
    ],
    ids=["deviceplugin", "podresources", "dra-v1", "dra-v1beta1", "pluginregistration"],
)
def test_messages_match_the_kubelet_api(
    module: Any, package: str, expected: dict[str, dict[str, tuple[int, str, bool]]]
) -> None:
    fd = module.DESCRIPTOR
    assert fd.package == package
    assert sorted(fd.message_types_by_name) == sorted(expected)
    for name, fields in expected.items():
        assert _fields(fd.message_types_by_name[name]) == fields, name
    assert not fd.dependencies, "plain proto3: no imports (no gogoproto)"


def test_share_id_is_proto3_optional() -> None:
    claim = pr.ClaimResource(driver_name="gpu.nvidia.com")
    assert not claim.HasField("share_id")
    claim.share_id = ""
    assert claim.HasField("share_id")


def test_services_have_the_kubelet_wire_names() -> None:
    def methods(module: Any, service: str) -> dict[str, tuple[str, str, bool]]:
        svc = module.DESCRIPTOR.services_by_name[service]
        assert not any(m.client_streaming for m in svc.methods)
        return {
            f"/{svc.full_name}/{m.name}": (
                m.input_type.name,
                m.output_type.name,
                m.server_streaming,
            )
            for m in svc.methods
        }

    assert methods(dp, "Registration") == {
        "/v1beta1.Registration/Register": ("RegisterRequest", "Empty", False)
    }
    assert methods(dp, "DevicePlugin") == {
        "/v1beta1.DevicePlugin/GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "/v1beta1.DevicePlugin/ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "/v1beta1.DevicePlugin/GetPreferredAllocation": (
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
            False,
        ),
        "/v1beta1.DevicePlugin/Allocate": ("AllocateRequest", "AllocateResponse", False),
        "/v1beta1.DevicePlugin/PreStartContainer": (
            "PreStartContainerRequest",
            "PreStartContainerResponse",
            False,
        ),
    }
    assert methods(pr, "PodResourcesLister") == {
        "/v1.PodResourcesLister/List": (
            "ListPodResourcesRequest",
            "ListPodResourcesResponse",
            False,
        ),
        "/v1.PodResourcesLister/GetAllocatableResources": (
            "AllocatableResourcesRequest",
            "AllocatableResourcesResponse",
            False,
        ),
        "/v1.PodResourcesLister/Get": ("GetPodResourcesRequest", "GetPodResourcesResponse", False),
    }
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == kubelet.REGISTRATION_SERVICE
    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == kubelet.DEVICE_PLUGIN_SERVICE
    assert (
        pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name
        == kubelet.POD_RESOURCES_SERVICE
    )


def test_device_encodes_as_the_kubelet_expects() -> None:
    device = dp.Device(
        ID="GPU-0", health=kubelet.HEALTHY, topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=1)])
    )
    # field 1 "GPU-0", field 2 "Healthy", field 3 {field 1 {field 1 = 1}}
    assert device.SerializeToString() == b"\n\x05GPU-0\x12\x07Healthy\x1a\x04\n\x02\x08\x01"


def test_constants() -> None:
    assert kubelet.DEVICE_PLUGIN_VERSION == "v1beta1"
    assert kubelet.KUBELET_SOCKET == "kubelet.sock"
    assert kubelet.REGISTRATION_SOCKET == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert kubelet.POD_RESOURCES_SOCKET == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert kubelet.unix_target(Path("/run/x.sock")) == "unix:///run/x.sock"
    with pytest.raises(ValueError, match="absolute"):
        kubelet.unix_target("x.sock")


# ---------------------------------------------------------------------------------------------
# round trips over unix sockets


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="kgpu-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class _Kubelet(dp_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.registered: asyncio.Queue[dp.RegisterRequest] = asyncio.Queue()

    async def Register(
        self, request: dp.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> dp.Empty:
        if request.version != kubelet.DEVICE_PLUGIN_VERSION:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad version {request.version}")
        await self.registered.put(request)
        return dp.Empty()


class _Plugin(dp_grpc.DevicePluginServicer):
    def __init__(self) -> None:
        self.unhealthy = asyncio.Event()

    @staticmethod
    def _devices(bad: str = "") -> dp.ListAndWatchResponse:
        return dp.ListAndWatchResponse(
            devices=[
                dp.Device(
                    ID=f"GPU-{i}",
                    health=kubelet.UNHEALTHY if f"GPU-{i}" == bad else kubelet.HEALTHY,
                    topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=i // 2)]),
                )
                for i in range(4)
            ]
        )

    async def GetDevicePluginOptions(
        self, request: dp.Empty, context: grpc.aio.ServicerContext
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(
        self, request: dp.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[dp.ListAndWatchResponse]:
        yield self._devices()
        await self.unhealthy.wait()
        yield self._devices(bad="GPU-2")

    async def GetPreferredAllocation(
        self, request: dp.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            rest = [d for d in req.available_deviceIDs if d not in req.must_include_deviceIDs]
            pick = [*req.must_include_deviceIDs, *rest][: req.allocation_size]
            responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=pick))
        return dp.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(
        self, request: dp.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> dp.AllocateResponse:
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            responses.append(
                dp.ContainerAllocateResponse(
                    envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)},
                    mounts=[
                        dp.Mount(
                            container_path="/usr/bin/nvidia-smi",
                            host_path="/usr/bin/nvidia-smi",
                            read_only=True,
                        )
                    ],
                    devices=[
                        dp.DeviceSpec(
                            container_path=f"/dev/nvidia{i}",
                            host_path=f"/dev/nvidia{i}",
                            permissions="rw",
                        )
                        for i in range(len(ids))
                    ],
                    annotations={"cdi.k8s.io/nvidia-device-plugin": "nvidia.com/gpu=all"},
                    cdi_devices=[dp.CDIDevice(name=f"nvidia.com/gpu={d}") for d in ids],
                )
            )
        return dp.AllocateResponse(container_responses=responses)


async def test_device_plugin_round_trip_over_unix_sockets(sock_dir: Path) -> None:
    kubelet_sock = sock_dir / kubelet.KUBELET_SOCKET
    plugin_sock = sock_dir / "nvidia-gpu.sock"
    registry, plugin = _Kubelet(), _Plugin()

    kubelet_server = grpc.aio.server()
    dp_grpc.add_RegistrationServicer_to_server(registry, kubelet_server)
    assert kubelet_server.add_insecure_port(kubelet.unix_target(kubelet_sock)) > 0
    plugin_server = grpc.aio.server()
    dp_grpc.add_DevicePluginServicer_to_server(plugin, plugin_server)
    assert plugin_server.add_insecure_port(kubelet.unix_target(plugin_sock)) > 0
    await kubelet_server.start()
    await plugin_server.start()
    try:
        # the plugin registers with the kubelet
        async with grpc.aio.insecure_channel(kubelet.unix_target(kubelet_sock)) as channel:
            registration = dp_grpc.RegistrationStub(channel)
            reply = await registration.Register(
                dp.RegisterRequest(
                    version=kubelet.DEVICE_PLUGIN_VERSION,
                    endpoint=plugin_sock.name,
                    resource_name="nvidia.com/gpu",
                    options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=5,
            )
            assert reply == dp.Empty()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await registration.Register(dp.RegisterRequest(version="v1alpha"), timeout=5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        req = registry.registered.get_nowait()
        assert (req.version, req.endpoint, req.resource_name) == (
            "v1beta1",
            "nvidia-gpu.sock",
            "nvidia.com/gpu",
        )
        assert req.options.get_preferred_allocation_available
        assert not req.options.pre_start_required

        # the kubelet dials the plugin's endpoint
        async with grpc.aio.insecure_channel(kubelet.unix_target(sock_dir / req.endpoint)) as ch:
            stub = dp_grpc.DevicePluginStub(ch)
            options = await stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
            assert options.get_preferred_allocation_available

            stream = stub.ListAndWatch(dp.Empty(), timeout=5)
            updates = aiter(stream)
            first = await anext(updates)
            assert [(d.ID, d.health) for d in first.devices] == [
                (f"GPU-{i}", "Healthy") for i in range(4)
            ]
            assert [n.ID for n in first.devices[3].topology.nodes] == [1]
            plugin.unhealthy.set()
            second = await anext(updates)
            assert {d.ID: d.health for d in second.devices}["GPU-2"] == "Unhealthy"
            assert len(second.devices) == 4, "every update carries the full list"
            with pytest.raises(StopAsyncIteration):
                await anext(updates)

            preferred = await stub.GetPreferredAllocation(
                dp.PreferredAllocationRequest(
                    container_requests=[
                        dp.ContainerPreferredAllocationRequest(
                            available_deviceIDs=["GPU-0", "GPU-1", "GPU-3"],
                            must_include_deviceIDs=["GPU-3"],
                            allocation_size=2,
                        )
                    ]
                ),
                timeout=5,
            )
            assert [list(r.deviceIDs) for r in preferred.container_responses] == [
                ["GPU-3", "GPU-0"]
            ]

            allocated = await stub.Allocate(
                dp.AllocateRequest(
                    container_requests=[
                        dp.ContainerAllocateRequest(devices_ids=["GPU-0", "GPU-1"]),
                        dp.ContainerAllocateRequest(devices_ids=["GPU-3"]),
                    ]
                ),
                timeout=5,
            )
            first_ctr, second_ctr = allocated.container_responses
            assert dict(first_ctr.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}
            assert [(m.container_path, m.read_only) for m in first_ctr.mounts] == [
                ("/usr/bin/nvidia-smi", True)
            ]
            assert [(d.host_path, d.permissions) for d in first_ctr.devices] == [
                ("/dev/nvidia0", "rw"),
                ("/dev/nvidia1", "rw"),
            ]
            assert dict(first_ctr.annotations) == {
                "cdi.k8s.io/nvidia-device-plugin": "nvidia.com/gpu=all"
            }
            assert [c.name for c in second_ctr.cdi_devices] == ["nvidia.com/gpu=GPU-3"]

            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.PreStartContainer(dp.PreStartContainerRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await plugin_server.stop(grace=None)
        await kubelet_server.stop(grace=None)


class _PodResources(pr_grpc.PodResourcesListerServicer):
    """A blocking (thread-pool) server, to exercise the sync flavour of the stubs."""

    topology = pr.TopologyInfo(nodes=[pr.NUMANode(ID=0)])

    def _pod(self) -> pr.PodResources:
        return pr.PodResources(
            name="train",
            namespace="ml",
            containers=[
                pr.ContainerResources(
                    name="main",
                    devices=[
                        pr.ContainerDevices(
                            resource_name="nvidia.com/gpu",
                            device_ids=["GPU-0::1"],
                            topology=self.topology,
                        )
                    ],
                    cpu_ids=[2, 3],
                    memory=[pr.ContainerMemory(memory_type="memory", size=1 << 30)],
                    dynamic_resources=[
                        pr.DynamicResource(
                            claim_name="gpu-claim",
                            claim_namespace="ml",
                            claim_resources=[
                                pr.ClaimResource(
                                    cdi_devices=[
                                        pr.CDIDevice(name="k8s.gpu.nvidia.com/device=gpu-1")
                                    ],
                                    driver_name="gpu.nvidia.com",
                                    pool_name="node-a",
                                    device_name="gpu-1",
                                )
                            ],
                        )
                    ],
                )
            ],
        )

    def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=[self._pod()])

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(
            devices=[
                pr.ContainerDevices(
                    resource_name="nvidia.com/gpu",
                    device_ids=[f"GPU-0::{i}" for i in range(4)],
                    topology=self.topology,
                )
            ],
            cpu_ids=list(range(8)),
        )

    def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        if (request.pod_namespace, request.pod_name) != ("ml", "train"):
            context.abort(grpc.StatusCode.NOT_FOUND, "no such pod")
        return pr.GetPodResourcesResponse(pod_resources=self._pod())


def test_pod_resources_round_trip_over_a_unix_socket(sock_dir: Path) -> None:
    target = kubelet.unix_target(sock_dir / kubelet.KUBELET_SOCKET)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(), server)
    assert server.add_insecure_port(target) > 0
    server.start()
    try:
        with grpc.insecure_channel(target) as channel:
            stub = pr_grpc.PodResourcesListerSyncStub(channel)

            listed = stub.List(pr.ListPodResourcesRequest(), timeout=5)
            (pod,) = listed.pod_resources
            assert (pod.name, pod.namespace) == ("train", "ml")
            (ctr,) = pod.containers
            (devs,) = ctr.devices
            assert (devs.resource_name, list(devs.device_ids)) == ("nvidia.com/gpu", ["GPU-0::1"])
            assert [n.ID for n in devs.topology.nodes] == [0]
            assert list(ctr.cpu_ids) == [2, 3]
            assert ctr.memory[0].size == 1 << 30
            (claim,) = ctr.dynamic_resources
            (res,) = claim.claim_resources
            assert (claim.claim_name, res.driver_name, res.pool_name, res.device_name) == (
                "gpu-claim",
                "gpu.nvidia.com",
                "node-a",
                "gpu-1",
            )
            assert not res.HasField("share_id")
            assert [c.name for c in res.cdi_devices] == ["k8s.gpu.nvidia.com/device=gpu-1"]

            alloc = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
            assert list(alloc.devices[0].device_ids) == [f"GPU-0::{i}" for i in range(4)]
            assert list(alloc.cpu_ids) == list(range(8))

            got = stub.Get(
                pr.GetPodResourcesRequest(pod_name="train", pod_namespace="ml"), timeout=5
            )
            assert got.pod_resources == pod
            with pytest.raises(grpc.RpcError) as err:
                stub.Get(pr.GetPodResourcesRequest(pod_name="x", pod_namespace="ml"), timeout=5)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop(grace=None).wait()


# ---------------------------------------------------------------------------------------------
# plugin registration and DRA (reference/dcgm-dra.md section 3.6)


@pytest.mark.parametrize(("module", "version"), [(dra, "v1"), (dra_beta, "v1beta1")])
def test_dra_service_has_the_kubelet_wire_names(module: Any, version: str) -> None:
    svc = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert svc.full_name == f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin"
    assert {
        f"/{svc.full_name}/{m.name}": (m.input_type.name, m.output_type.name, m.server_streaming)
        for m in svc.methods
    } == {
        f"/{svc.full_name}/NodePrepareResources": (
            "NodePrepareResourcesRequest",
            "NodePrepareResourcesResponse",
            False,
        ),
        f"/{svc.full_name}/NodeUnprepareResources": (
            "NodeUnprepareResourcesRequest",
            "NodeUnprepareResourcesResponse",
            False,
        ),
    }
    assert (
        module.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
        == {"v1": kubelet.DRA_V1_SERVICE, "v1beta1": kubelet.DRA_V1BETA1_SERVICE}[version]
    )


def test_registration_service_has_the_kubelet_wire_names() -> None:
    svc = reg.DESCRIPTOR.services_by_name["Registration"]
    assert svc.full_name == kubelet.PLUGIN_REGISTRATION_SERVICE
    assert {
        f"/{svc.full_name}/{m.name}": (m.input_type.name, m.output_type.name) for m in svc.methods
    } == {
        "/pluginregistration.Registration/GetInfo": ("InfoRequest", "PluginInfo"),
        "/pluginregistration.Registration/NotifyRegistrationStatus": (
            "RegistrationStatus",
            "RegistrationStatusResponse",
        ),
    }


def test_dra_share_id_is_proto3_optional() -> None:
    device = dra.Device(device_name="gpu-0")
    assert not device.HasField("share_id")
    device.share_id = ""
    assert device.HasField("share_id")


def test_dra_claim_encodes_as_the_kubelet_expects() -> None:
    claim = dra.Claim(namespace="ml", uid="u1", name="c")
    # field 1 "ml", field 2 "u1", field 3 "c"
    assert claim.SerializeToString() == b"\n\x02ml\x12\x02u1\x1a\x01c"
    # the two versions share one wire format
    assert dra_beta.Claim.FromString(claim.SerializeToString()) == dra_beta.Claim(
        namespace="ml", uid="u1", name="c"
    )


def test_dra_constants() -> None:
    assert kubelet.DRA_PLUGIN_TYPE == "DRAPlugin"
    assert kubelet.DRA_SUPPORTED_VERSIONS == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    assert (
        kubelet.dra_registration_socket("gpu.nvidia.com")
        == "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"
    )
    assert (
        kubelet.dra_endpoint("gpu.nvidia.com") == "/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock"
    )
    assert kubelet.dra_registration_socket("d.x", "/r") == "/r/d.x-reg.sock"


class _Registrar(reg_grpc.RegistrationServicer):
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.status: asyncio.Queue[reg.RegistrationStatus] = asyncio.Queue()

    async def GetInfo(self, request: reg.InfoRequest, context: Any) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=kubelet.DRA_PLUGIN_TYPE,
            name="gpu.nvidia.com",
            endpoint=str(self.endpoint),
            supported_versions=list(kubelet.DRA_SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Any
    ) -> reg.RegistrationStatusResponse:
        await self.status.put(request)
        return reg.RegistrationStatusResponse()


class _Driver(dra_grpc.DRAPluginServicer):
    async def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: Any
    ) -> dra.NodePrepareResourcesResponse:
        out = dra.NodePrepareResourcesResponse()
        for c in request.claims:
            if c.name == "bad":
                out.claims[c.uid].error = "no allocation"
                continue
            out.claims[c.uid].devices.append(
                dra.Device(
                    request_names=["gpu"],
                    pool_name="node-a",
                    device_name="gpu-0",
                    cdi_device_ids=[f"k8s.gpu.nvidia.com/claim={c.uid}-gpu-0"],
                )
            )
        return out

    async def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: Any
    ) -> dra.NodeUnprepareResourcesResponse:
        out = dra.NodeUnprepareResourcesResponse()
        for c in request.claims:
            out.claims[c.uid].error = ""
        return out


async def test_dra_registration_and_prepare_round_trip(sock_dir: Path) -> None:
    reg_sock = Path(kubelet.dra_registration_socket("gpu.nvidia.com", sock_dir))
    endpoint = sock_dir / "dra.sock"
    registrar = _Registrar(endpoint)
    reg_server = grpc.aio.server()
    reg_grpc.add_RegistrationServicer_to_server(registrar, reg_server)
    assert reg_server.add_insecure_port(kubelet.unix_target(reg_sock)) > 0
    dra_server = grpc.aio.server()
    dra_grpc.add_DRAPluginServicer_to_server(_Driver(), dra_server)
    assert dra_server.add_insecure_port(kubelet.unix_target(endpoint)) > 0
    await reg_server.start()
    await dra_server.start()
    try:
        # the kubelet's plugin watcher finds the socket, asks, and answers
        async with grpc.aio.insecure_channel(kubelet.unix_target(reg_sock)) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(reg.InfoRequest(), timeout=5)
            assert (info.type, info.name, list(info.supported_versions)) == (
                "DRAPlugin",
                "gpu.nvidia.com",
                ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
            )
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=5
            )
        assert registrar.status.get_nowait().plugin_registered

        async with grpc.aio.insecure_channel(kubelet.unix_target(info.endpoint)) as channel:
            prepared = await dra_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra.NodePrepareResourcesRequest(
                    claims=[
                        dra.Claim(namespace="ml", uid="u1", name="c"),
                        dra.Claim(namespace="ml", uid="u2", name="bad"),
                    ]
                ),
                timeout=5,
            )
            assert list(prepared.claims["u1"].devices[0].cdi_device_ids) == [
                "k8s.gpu.nvidia.com/claim=u1-gpu-0"
            ]
            assert prepared.claims["u2"].error == "no allocation"
            unprepared = await dra_grpc.DRAPluginStub(channel).NodeUnprepareResources(
                dra.NodeUnprepareResourcesRequest(claims=[dra.Claim(uid="u1")]), timeout=5
            )
            assert set(unprepared.claims) == {"u1"}
            # the v1beta1 service is a different gRPC name: not served here
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await dra_beta_grpc.DRAPluginStub(channel).NodePrepareResources(
                    dra_beta.NodePrepareResourcesRequest(), timeout=5
                )
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await dra_server.stop(grace=None)
        await reg_server.stop(grace=None)
