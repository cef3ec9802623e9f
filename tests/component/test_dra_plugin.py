"""The DRA plugin against simulated GPUs, spoken to over its real sockets by a kubelet
stand-in: registration, slice publication (at start, after every registration, after a
MIG layout change or a lost GPU), prepare / unprepare in both API versions, idempotent
retries, invalid configs refused with nothing prepared, MPS, restarts and a crash between
PrepareStarted and PrepareCompleted, and the device plugin kept off the node.

The API server is replaced by a claim reader and a recording publisher here; the plugin
against the real API server and scheduler is tests/integration/test_dra*.py."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubegpu.cdi.registry import Registry
from kubegpu.dra.checkpoint import CheckpointFile, ClaimRecord, PreparedDevice, State
from kubegpu.dra.partitions import Pool
from kubegpu.dra.program import DraPluginFlags, DraPluginProgram
from kubegpu.kube.kubelet import dra_v1_pb2 as dra
from kubegpu.kube.kubelet import dra_v1_pb2_grpc as dra_grpc
from kubegpu.kube.kubelet import dra_v1beta1_pb2 as dra_beta
from kubegpu.kube.kubelet import dra_v1beta1_pb2_grpc as dra_beta_grpc
from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg
from kubegpu.kube.kubelet import pluginregistration_v1_pb2_grpc as reg_grpc
from kubegpu.kube.kubelet import unix_target
from kubegpu.node.gpus import sim_backend
from kubegpu.node.runtime import ComponentError
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.sim.kubelet.dramanager import cdi_env

pytestmark = pytest.mark.asyncio(loop_scope="function")

WAIT_S = 10.0
NODE = "node-a"
API = "resource.nvidia.com/v1beta1"


# --- stand-ins for the API server -----------------------------------------------------------


@dataclass
class Api:
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    reads: int = 0

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.claims.get((namespace, name))

    def add(
        self,
        name: str,
        uid: str,
        results: Sequence[tuple[str, str]],
        config: Sequence[dict[str, Any]] = (),
    ) -> dra.Claim:
        self.claims[("ml", name)] = {
            "metadata": {"namespace": "ml", "name": name, "uid": uid},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": r, "driver": "gpu.nvidia.com", "pool": NODE, "device": d}
                            for r, d in results
                        ],
                        "config": list(config),
                    }
                }
            },
        }
        return dra.Claim(namespace="ml", name=name, uid=uid)


class Publisher:
    def __init__(self) -> None:
        self.published: list[tuple[list[str], bool]] = []
        self._changed = asyncio.Condition()
        self._last: list[str] | None = None
        self.pool = Pool(())

    async def publish(self, pool: Pool, force: bool = False) -> None:
        self.pool = pool
        names = [d.name for d in pool.devices]
        if not force and names == self._last:
            return
        self._last = names
        async with self._changed:
            self.published.append((names, force))
            self._changed.notify_all()

    async def wait_for(self, n: int) -> tuple[list[str], bool]:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.published) >= n), WAIT_S)
        return self.published[n - 1]


# --- the plugin and a kubelet ----------------------------------------------------------------


@pytest.fixture
def root() -> Iterator[Path]:
    # unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="kdra-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Node:
    root: Path
    state: Path
    api: Api = field(default_factory=Api)
    publisher: Publisher = field(default_factory=Publisher)
    gates: str = "TimeSlicingSettings=true,MPSSupport=true"

    @property
    def flags(self) -> DraPluginFlags:
        return DraPluginFlags(
            node_name=NODE,
            plugins_registry=self.root / "registry",
            plugins_dir=self.root / "plugins",
            cdi_root=self.root / "cdi",
            device_plugin_dir=self.root / "device-plugins",
            feature_gates=self.gates,
            container_driver_root=self.root / "driver-root",
            poll_s=0.05,
        )

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / "gpu.nvidia.com"

    def program(self) -> DraPluginProgram:
        return DraPluginProgram(
            self.flags,
            sim_backend(self.state),
            read_claim=self.api.read,
            publisher=self.publisher,
        )

    def cdi_spec(self, uid: str) -> Path:
        return self.root / "cdi" / f"k8s.gpu.nvidia.com-claim_{uid}.json"

    def checkpoint(self) -> dict[str, ClaimRecord]:
        return CheckpointFile(self.plugin_dir / "checkpoint.json").load().claims


@pytest.fixture
def node(root: Path) -> Node:
    SimNvml.create(root / "gpus.json", "h100-80gb:2").close()
    return Node(root, root / "gpus.json")


@pytest.fixture
async def running(node: Node) -> AsyncIterator[DraPluginProgram]:
    async with _run(node.program()) as program:
        yield program


class _run:
    def __init__(self, program: DraPluginProgram) -> None:
        self.program = program
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> DraPluginProgram:
        self.task = asyncio.create_task(self.program.run())
        ready = asyncio.create_task(self.program.ready.wait())
        await asyncio.wait({self.task, ready}, timeout=WAIT_S, return_when="FIRST_COMPLETED")
        ready.cancel()
        if self.task.done():
            self.task.result()
        assert self.program.ready.is_set()
        return self.program

    async def __aexit__(self, *exc: object) -> None:
        self.program.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, WAIT_S)


class Kubelet:
    """The kubelet's plugin watcher and DRA manager, reduced to their calls."""

    def __init__(self, registry: Path) -> None:
        self.registry = registry
        self.channels: list[grpc.aio.Channel] = []

    async def register(self) -> reg.PluginInfo:
        (sock,) = self.registry.glob("*-reg.sock")
        async with grpc.aio.insecure_channel(unix_target(sock)) as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = await stub.GetInfo(reg.InfoRequest(), timeout=WAIT_S)
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=WAIT_S
            )
        return info

    def dra(self, info: reg.PluginInfo) -> dra_grpc.DRAPluginStub:
        ch = grpc.aio.insecure_channel(unix_target(info.endpoint))
        self.channels.append(ch)
        return dra_grpc.DRAPluginStub(ch)

    def dra_beta(self, info: reg.PluginInfo) -> dra_beta_grpc.DRAPluginStub:
        ch = grpc.aio.insecure_channel(unix_target(info.endpoint))
        self.channels.append(ch)
        return dra_beta_grpc.DRAPluginStub(ch)

    async def close(self) -> None:
        for ch in self.channels:
            await ch.close()


@pytest.fixture
async def kubelet(node: Node) -> AsyncIterator[Kubelet]:
    k = Kubelet(node.root / "registry")
    yield k
    await k.close()


async def prepare(stub: dra_grpc.DRAPluginStub, *claims: dra.Claim) -> Any:
    return await stub.NodePrepareResources(
        dra.NodePrepareResourcesRequest(claims=list(claims)), timeout=WAIT_S
    )


async def unprepare(stub: dra_grpc.DRAPluginStub, *claims: dra.Claim) -> Any:
    return await stub.NodeUnprepareResources(
        dra.NodeUnprepareResourcesRequest(claims=list(claims)), timeout=WAIT_S
    )


def gpu_config(requests: list[str], **sharing: Any) -> dict[str, Any]:
    return {
        "source": "FromClaim",
        "requests": requests,
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {"apiVersion": API, "kind": "GpuConfig", "sharing": sharing},
        },
    }


# --- registration and slices ---------------------------------------------------------------


async def test_registers_as_a_dra_plugin_and_republishes_after_each_registration(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    assert (node.root / "registry" / "gpu.nvidia.com-reg.sock").is_socket()
    assert await node.publisher.wait_for(1) == (["gpu-0", "gpu-1"], True)

    info = await kubelet.register()
    assert info.type == "DRAPlugin"
    assert info.name == "gpu.nvidia.com"
    assert info.endpoint == str(node.plugin_dir / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    # the kubelet deleted the node's slices when it started: publish again, same devices
    assert await node.publisher.wait_for(2) == (["gpu-0", "gpu-1"], True)
    await kubelet.register()
    assert await node.publisher.wait_for(3) == (["gpu-0", "gpu-1"], True)


async def test_a_mig_layout_change_and_a_lost_gpu_show_up_in_the_slice(
    node: Node, running: DraPluginProgram
) -> None:
    await node.publisher.wait_for(1)
    with SimNvml(node.state) as nvml:
        nvml.set_mig_mode(0, True)
        if nvml.mig_mode(0).change_pending:
            nvml.reset(0)
        profile = next(p for p in nvml.gpu_instance_profiles(0) if p.name == "1g.10gb")
        gi = nvml.create_gpu_instance(0, profile.id, 0)
        ci = next(c for c in nvml.compute_instance_profiles(0, gi.id) if c.slice_count == 1)
        nvml.create_compute_instance(0, gi.id, ci.id)
    names, force = await node.publisher.wait_for(2)
    assert names == [f"gpu-0-mig-1g10gb-{profile.id}-0", "gpu-1"]
    assert not force
    SimControls(node.state).lose_gpu(1)
    names, _ = await node.publisher.wait_for(3)
    assert names == [f"gpu-0-mig-1g10gb-{profile.id}-0"]


# --- prepare / unprepare ---------------------------------------------------------------------


async def test_a_claims_spec_mounts_the_drivers_files_found_under_the_driver_root(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    lib = node.root / "driver-root/usr/lib64"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.570.86.15").write_text("elf")
    (node.root / "driver-root/usr/bin").mkdir(parents=True)
    (node.root / "driver-root/usr/bin/nvidia-smi").write_text("#!")
    stub = kubelet.dra(await kubelet.register())
    claim = node.api.add("one", "u-d", [("gpus", "gpu-0")])
    assert (await prepare(stub, claim)).claims["u-d"].error == ""
    edits = json.loads(node.cdi_spec("u-d").read_text())["containerEdits"]
    assert [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]] == [
        ("/usr/lib64/libcuda.so.570.86.15", "/usr/lib64/libcuda.so.570.86.15"),
        ("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
    ]
    assert [h["args"][1] for h in edits["hooks"]] == [
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
        "disable-device-node-modification",
    ]
    assert "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64" in edits["env"]


async def test_prepare_writes_a_cdi_spec_and_unprepare_removes_it(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    info = await kubelet.register()
    stub = kubelet.dra(info)
    claim = node.api.add("two", "u-2", [("gpus", "gpu-0"), ("gpus", "gpu-1")])

    reply = await prepare(stub, claim)
    result = reply.claims["u-2"]
    assert result.error == ""
    assert [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
        for d in result.devices
    ] == [
        (["gpus"], NODE, "gpu-0", ["k8s.gpu.nvidia.com/claim=u-2-gpu-0"]),
        (["gpus"], NODE, "gpu-1", ["k8s.gpu.nvidia.com/claim=u-2-gpu-1"]),
    ]
    spec = json.loads(node.cdi_spec("u-2").read_text())
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    uuids = {d.name: d.uuid for d in running.devices.values()}
    assert {d["name"]: d["containerEdits"]["env"] for d in spec["devices"]} == {
        "u-2-gpu-0": [f"NVIDIA_VISIBLE_DEVICES={uuids['gpu-0']}"],
        "u-2-gpu-1": [f"NVIDIA_VISIBLE_DEVICES={uuids['gpu-1']}"],
    }
    # nvcdi voids NVIDIA_VISIBLE_DEVICES spec-wide; each device names its GPU again
    assert spec["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=void",
        "KUBEGPU_DRA_CLAIM=ml/two",
    ]
    assert node.checkpoint()["u-2"].state is State.PREPARE_COMPLETED

    # the kubelet retries a call it got no answer for: same devices, nothing redone
    reads = node.api.reads
    again = await prepare(stub, claim)
    assert again.claims["u-2"] == result
    assert node.api.reads == reads

    done = await unprepare(stub, claim)
    assert done.claims["u-2"].error == ""
    assert not node.cdi_spec("u-2").exists()
    assert "u-2" not in node.checkpoint()
    # unpreparing what is not prepared succeeds
    assert (await unprepare(stub, claim)).claims["u-2"].error == ""


async def test_the_v1beta1_service_answers_the_same(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    stub = kubelet.dra_beta(await kubelet.register())
    node.api.add("one", "u-1", [("gpu", "gpu-1")])
    reply = await stub.NodePrepareResources(
        dra_beta.NodePrepareResourcesRequest(
            claims=[dra_beta.Claim(namespace="ml", name="one", uid="u-1")]
        ),
        timeout=WAIT_S,
    )
    assert [list(d.cdi_device_ids) for d in reply.claims["u-1"].devices] == [
        ["k8s.gpu.nvidia.com/claim=u-1-gpu-1"]
    ]
    gone = await stub.NodeUnprepareResources(
        dra_beta.NodeUnprepareResourcesRequest(claims=[dra_beta.Claim(uid="u-1")]),
        timeout=WAIT_S,
    )
    assert gone.claims["u-1"].error == ""
    assert not node.cdi_spec("u-1").exists()


async def test_claim_problems_are_answered_per_claim(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    stub = kubelet.dra(await kubelet.register())
    good = node.api.add("good", "u-g", [("gpu", "gpu-0")])
    bad = node.api.add(
        "bad",
        "u-b",
        [("gpu", "gpu-1")],
        [gpu_config(["gpu"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Forever"})],
    )
    missing = dra.Claim(namespace="ml", name="gone", uid="u-x")
    stale = dra.Claim(namespace="ml", name="good", uid="u-old")

    reply = await prepare(stub, good, bad, missing, stale)
    assert reply.claims["u-g"].error == ""
    assert "claim ml/bad: config 0" in reply.claims["u-b"].error
    assert "field sharing.timeSlicingConfig.interval, value 'Forever'" in reply.claims["u-b"].error
    assert reply.claims["u-x"].error == "claim ml/gone: not found in the API server"
    assert (
        "the API server has UID 'u-g', the kubelet asked for 'u-old'" in reply.claims["u-old"].error
    )
    assert not reply.claims["u-b"].devices
    # nothing prepared for the refused claims
    assert set(node.checkpoint()) == {"u-g"}
    assert sorted(p.name for p in (node.root / "cdi").iterdir()) == [
        "k8s.gpu.nvidia.com-claim_u-g.json"
    ]


async def test_sharing_needs_the_feature_gate(node: Node, kubelet: Kubelet) -> None:
    node.gates = ""
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        claim = node.api.add(
            "ts", "u-t", [("gpu", "gpu-0")], [gpu_config([], strategy="TimeSlicing")]
        )
        reply = await prepare(stub, claim)
    assert reply.claims["u-t"].error == (
        "claim ml/ts: request 'gpu': 'TimeSlicing' is selected as the GPU sharing strategy, "
        "but the 'TimeSlicingSettings' feature gate is not enabled"
    )


async def test_mps_claim_starts_a_daemon_and_unprepare_stops_it(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    stub = kubelet.dra(await kubelet.register())
    claim = node.api.add(
        "mps",
        "u-m",
        [("gpu", "gpu-0")],
        [
            gpu_config(
                ["gpu"],
                strategy="MPS",
                mpsConfig={
                    "defaultActiveThreadPercentage": 50,
                    "defaultPinnedDeviceMemoryLimit": "10Gi",
                },
            )
        ],
    )
    assert (await prepare(stub, claim)).claims["u-m"].error == ""
    directory = node.plugin_dir / "mps" / "u-m"
    limits = json.loads((directory / "limits.json").read_text())
    assert limits["defaultActiveThreadPercentage"] == 50
    assert [d["pinnedDeviceMemoryLimitMiB"] for d in limits["devices"]] == [10240]
    spec = json.loads(node.cdi_spec("u-m").read_text())
    (entry,) = spec["devices"]
    assert f"CUDA_MPS_PIPE_DIRECTORY={directory / 'pipe'}" in entry["containerEdits"]["env"]
    assert entry["containerEdits"]["mounts"][0]["hostPath"] == str(directory / "pipe")

    await unprepare(stub, claim)
    assert not directory.exists()


async def test_time_slicing_interval_reaches_the_container(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    stub = kubelet.dra(await kubelet.register())
    claim = node.api.add(
        "ts",
        "u-t",
        [("gpu", "gpu-1")],
        [gpu_config([], strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"})],
    )
    assert (await prepare(stub, claim)).claims["u-t"].error == ""
    spec = json.loads(node.cdi_spec("u-t").read_text())
    (entry,) = spec["devices"]
    assert "KUBEGPU_DRA_TIMESLICE_INTERVAL=Long" in entry["containerEdits"]["env"]


async def test_gpu_test5_each_sharing_config_reaches_only_its_own_gpu(
    node: Node, running: DraPluginProgram, kubelet: Kubelet
) -> None:
    """NVIDIA's gpu-test5 shape: one claim, two GPUs, a TimeSlicing config naming request
    ts-gpu and an MPS config naming mps-gpu. The containers of each request must see only
    their own GPU's sharing: the time-sliced ones are no MPS clients, the MPS ones are not
    told of an interval, and the MPS daemon serves the MPS GPU alone."""
    stub = kubelet.dra(await kubelet.register())
    claim = node.api.add(
        "test5",
        "u-5",
        [("ts-gpu", "gpu-0"), ("mps-gpu", "gpu-1")],
        [
            gpu_config(["ts-gpu"], strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}),
            gpu_config(
                ["mps-gpu"],
                strategy="MPS",
                mpsConfig={
                    "defaultActiveThreadPercentage": 50,
                    "defaultPinnedDeviceMemoryLimit": "10Gi",
                },
            ),
        ],
    )
    got = (await prepare(stub, claim)).claims["u-5"]
    assert got.error == ""
    ids = {d.request_names[0]: list(d.cdi_device_ids) for d in got.devices}
    specs = [json.loads(node.cdi_spec("u-5").read_text())]
    registry = Registry.scan([node.root / "cdi"])
    ts_env, mps_env = (cdi_env(ids[r], registry) for r in ("ts-gpu", "mps-gpu"))
    pipe = node.plugin_dir / "mps" / "u-5" / "pipe"
    assert ts_env["KUBEGPU_DRA_TIMESLICE_INTERVAL"] == "Long"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in ts_env
    assert mps_env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    assert "KUBEGPU_DRA_TIMESLICE_INTERVAL" not in mps_env
    assert ts_env["NVIDIA_VISIBLE_DEVICES"] != mps_env["NVIDIA_VISIBLE_DEVICES"]
    entries = {e["name"]: e["containerEdits"] for e in specs[0]["devices"]}
    assert "mounts" not in entries["u-5-gpu-0"]
    assert [m["hostPath"] for m in entries["u-5-gpu-1"]["mounts"]] == [str(pipe)]
    limits = json.loads((pipe.parent / "limits.json").read_text())
    assert [d["uuid"] for d in limits["devices"]] == [mps_env["NVIDIA_VISIBLE_DEVICES"]]
    assert [d["pinnedDeviceMemoryLimitMiB"] for d in limits["devices"]] == [10240]


# --- restarts and crashes --------------------------------------------------------------------


async def test_a_restarted_plugin_keeps_what_it_prepared(node: Node, kubelet: Kubelet) -> None:
    claim = node.api.add("one", "u-1", [("gpu", "gpu-0")])
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        first = (await prepare(stub, claim)).claims["u-1"]
    assert not (node.plugin_dir / "dra.sock").exists()
    assert not (node.root / "registry" / "gpu.nvidia.com-reg.sock").exists()

    del node.api.claims[("ml", "one")]  # deleted meanwhile: the checkpoint still answers
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        assert (await prepare(stub, claim)).claims["u-1"] == first
        await unprepare(stub, claim)
    assert not node.cdi_spec("u-1").exists()
    assert node.checkpoint() == {}


async def test_a_claim_left_half_prepared_is_rolled_back_and_prepared_again(
    node: Node, kubelet: Kubelet
) -> None:
    # what a plugin killed between PrepareStarted and PrepareCompleted leaves behind: the
    # checkpoint entry, a half-written CDI spec and an MPS directory
    stale_mps = node.plugin_dir / "mps" / "u-1"
    stale_mps.mkdir(parents=True)
    (stale_mps / "limits.json").write_text("{}")
    node.cdi_spec("u-1").parent.mkdir(parents=True)
    node.cdi_spec("u-1").write_text('{"cdiVersion": "0.6.0", "devices": [')
    CheckpointFile(node.plugin_dir / "checkpoint.json").save(
        replace(CheckpointFile(node.plugin_dir / "checkpoint.json").load()).with_claim(
            ClaimRecord(
                "u-1",
                "ml",
                "one",
                State.PREPARE_STARTED,
                (PreparedDevice(("gpu",), NODE, "gpu-1", ("x",)),),
                mps_directory=str(stale_mps),
            )
        )
    )
    claim = node.api.add("one", "u-1", [("gpu", "gpu-0")])
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        reply = (await prepare(stub, claim)).claims["u-1"]
    assert reply.error == ""
    assert [d.device_name for d in reply.devices] == ["gpu-0"]
    assert not stale_mps.exists()
    spec = json.loads(node.cdi_spec("u-1").read_text())
    assert [d["name"] for d in spec["devices"]] == ["u-1-gpu-0"]
    assert node.checkpoint()["u-1"].state is State.PREPARE_COMPLETED


async def test_a_claim_killed_while_its_cdi_spec_was_written_leaves_no_temporary_file(
    node: Node, kubelet: Kubelet
) -> None:
    tmp = node.cdi_spec("u-1").with_name(f".{node.cdi_spec('u-1').name}.tmp")
    tmp.parent.mkdir(parents=True)
    tmp.write_text('{"cdiVersion": "0.6.0", "dev')
    CheckpointFile(node.plugin_dir / "checkpoint.json").save(
        CheckpointFile(node.plugin_dir / "checkpoint.json")
        .load()
        .with_claim(ClaimRecord("u-1", "ml", "one", State.PREPARE_STARTED))
    )
    claim = node.api.add("one", "u-1", [("gpu", "gpu-0")])
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        assert (await prepare(stub, claim)).claims["u-1"].error == ""
    assert sorted(p.name for p in tmp.parent.iterdir()) == [node.cdi_spec("u-1").name]


async def test_a_prepared_claim_whose_cdi_spec_is_gone_is_prepared_again(
    node: Node, kubelet: Kubelet
) -> None:
    # after a reboot /var/run/cdi is empty while the checkpoint (under /var/lib) remains:
    # answering from the checkpoint would hand out CDI ids nothing resolves
    claim = node.api.add("one", "u-1", [("gpu", "gpu-0")])
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        first = (await prepare(stub, claim)).claims["u-1"]
    node.cdi_spec("u-1").unlink()
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        assert (await prepare(stub, claim)).claims["u-1"] == first
    spec = json.loads(node.cdi_spec("u-1").read_text())
    assert [d["name"] for d in spec["devices"]] == ["u-1-gpu-0"]
    assert node.checkpoint()["u-1"].state is State.PREPARE_COMPLETED


class FailingMps:
    """An MPS daemon that does not start."""

    def start(self, resource: Any, directory: Path) -> None:
        raise OSError("nvidia-cuda-mps-control: no such file")

    def stop(self, resource: Any, directory: Path) -> None:
        pass


async def test_a_failure_while_preparing_leaves_nothing_behind(
    node: Node, kubelet: Kubelet
) -> None:
    program = DraPluginProgram(
        node.flags,
        replace(sim_backend(node.state), mps=FailingMps()),
        read_claim=node.api.read,
        publisher=node.publisher,
    )
    claim = node.api.add("mps", "u-m", [("gpu", "gpu-0")], [gpu_config([], strategy="MPS")])
    async with _run(program):
        stub = kubelet.dra(await kubelet.register())
        reply = (await prepare(stub, claim)).claims["u-m"]
    assert reply.error == "claim ml/mps: OSError: nvidia-cuda-mps-control: no such file"
    assert node.checkpoint() == {}
    assert not node.cdi_spec("u-m").exists()
    assert not (node.plugin_dir / "mps" / "u-m").exists()


# --- refusals --------------------------------------------------------------------------------


async def test_refuses_to_start_next_to_a_device_plugin(node: Node) -> None:
    dp_dir = node.root / "device-plugins"
    dp_dir.mkdir()
    stale = dp_dir / "nvidia-mig-1g.10gb.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # a socket file nobody listens on: not a device plugin
    async with _run(node.program()):
        pass
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dp_dir / "nvidia-gpu.sock"))
        s.listen()
        program = node.program()
        with pytest.raises(
            ComponentError, match=r"a device plugin serves NVIDIA GPUs on this node"
        ):
            await program.run()
    assert not (node.root / "registry" / "gpu.nvidia.com-reg.sock").exists()


async def test_refuses_bad_flags(node: Node) -> None:
    with pytest.raises(ComponentError, match="--node-name"):
        DraPluginProgram(replace(node.flags, node_name=None), sim_backend(node.state))
    with pytest.raises(ComponentError, match="unknown feature gate 'Bogus'"):
        DraPluginProgram(replace(node.flags, feature_gates="Bogus=true"), sim_backend(node.state))


# --- dynamic MIG -----------------------------------------------------------------------------


def _enable_mig(state: Path, index: int = 0) -> None:
    with SimNvml(state) as nvml:
        nvml.set_mig_mode(index, True)
        if nvml.mig_mode(index).change_pending:
            nvml.reset(index)


def _instances(state: Path, index: int = 0) -> list[tuple[int, int]]:
    with SimNvml(state) as nvml:
        return sorted((gi.profile_id, gi.placement.start) for gi in nvml.gpu_instances(index))


@pytest.fixture
def dynamic(node: Node) -> Node:
    _enable_mig(node.state)
    node.gates = "DynamicMIG=true,TimeSlicingSettings=true"
    return node


async def test_dynamic_mig_creates_the_allocated_device_and_unprepare_destroys_it(
    dynamic: Node, kubelet: Kubelet
) -> None:
    node = dynamic
    async with _run(node.program()) as program:
        await node.publisher.wait_for(1)
        pool = node.publisher.pool
        assert [c.name for c in pool.counter_sets] == ["gpu-0-counter-set"]
        assert "gpu-0-mig-3g40gb-9-4" in program.devices
        assert "gpu-1" in program.devices
        stub = kubelet.dra(await kubelet.register())
        claim = node.api.add("dyn", "u-d", [("mig", "gpu-0-mig-3g40gb-9-4")])
        reply = (await prepare(stub, claim)).claims["u-d"]
        assert reply.error == ""
        assert _instances(node.state) == [(9, 4)]
        with SimNvml(node.state) as nvml:
            (made,) = nvml.mig_devices(0)
        spec = json.loads(node.cdi_spec("u-d").read_text())
        assert spec["devices"][0]["containerEdits"]["env"] == [
            f"NVIDIA_VISIBLE_DEVICES={made.uuid}"
        ]
        record = node.checkpoint()["u-d"]
        assert record.devices[0].dynamic_mig == (0, 9, 4)
        assert record.devices[0].uuid == made.uuid
        # the device it created stays a partitionable device of the pool
        await asyncio.sleep(0.3)
        assert program.devices["gpu-0-mig-3g40gb-9-4"].dynamic

        assert (await unprepare(stub, claim)).claims["u-d"].error == ""
        assert _instances(node.state) == []
        assert not node.cdi_spec("u-d").exists()


async def test_a_placement_taken_meanwhile_is_refused_and_left_alone(
    dynamic: Node, kubelet: Kubelet
) -> None:
    node = dynamic
    async with _run(node.program()):
        stub = kubelet.dra(await kubelet.register())
        claim = node.api.add("dyn", "u-d", [("mig", "gpu-0-mig-3g40gb-9-0")])
        with SimNvml(node.state) as nvml:  # e.g. `kubegpu mig apply` before the slice caught up
            nvml.create_gpu_instance(0, 9, 0)
        reply = (await prepare(stub, claim)).claims["u-d"]
    assert "cannot create a GPU instance of profile 9 at placement 0" in reply.error
    assert _instances(node.state) == [(9, 0)], "somebody else's instance is not destroyed"
    assert node.checkpoint() == {}


async def test_a_dynamic_claim_left_half_prepared_is_rolled_back(
    dynamic: Node, kubelet: Kubelet
) -> None:
    node = dynamic
    # the plugin created the GPU instance and died before it finished the claim
    with SimNvml(node.state) as nvml:
        nvml.create_gpu_instance(0, 14, 2)
    CheckpointFile(node.plugin_dir / "checkpoint.json").save(
        CheckpointFile(node.plugin_dir / "checkpoint.json")
        .load()
        .with_claim(
            ClaimRecord(
                "u-d",
                "ml",
                "dyn",
                State.PREPARE_STARTED,
                (
                    PreparedDevice(
                        ("mig",), NODE, "gpu-0-mig-2g20gb-14-2", ("x",), dynamic_mig=(0, 14, 2)
                    ),
                ),
            )
        )
    )
    claim = node.api.add("dyn", "u-d", [("mig", "gpu-0-mig-2g20gb-14-2")])
    async with _run(node.program()) as program:
        # the half-made device is the claim's, not a static one
        assert program.devices["gpu-0-mig-2g20gb-14-2"].dynamic
        stub = kubelet.dra(await kubelet.register())
        reply = (await prepare(stub, claim)).claims["u-d"]
    assert reply.error == ""
    assert _instances(node.state) == [(14, 2)]
    assert node.checkpoint()["u-d"].state is State.PREPARE_COMPLETED
