"""The real Kubernetes control plane that tests and the simulator run on."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.models.resource_v1 import CELDeviceSelector, DeviceClassSpec, DeviceSelector
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Namespace, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice

from kubegpu.sim.controlplane.binaries import COMPONENTS, find_bin_dir
from kubegpu.sim.controlplane.kube import LEADER_LEASE_S
from kubegpu.sim.controlplane.pids import PidRecord, read_pid_file, write_pid_file
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.controlplane.process import ControlPlaneError

pytestmark = pytest.mark.cluster

T = TypeVar("T")
NOWHERE = {"kubegpu.test/nowhere": "true"}  # a node selector no node matches


def eventually(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll ``check`` until it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what or check}")
        time.sleep(0.2)


def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _fake_bin_dir(path: Path, scripts: dict[str, str]) -> Path:
    path.mkdir()
    for name, body in scripts.items():
        exe = path / name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(0o755)
    return path


# --- the session's control plane ----------------------------------------------------------


def test_the_api_server_is_ready(control_plane: ControlPlane, kube: Client) -> None:
    assert control_plane.running
    assert control_plane.health() == dict.fromkeys(COMPONENTS)
    assert control_plane.server.startswith("https://127.0.0.1:")
    names = {ns.metadata.name for ns in kube.list(Namespace) if ns.metadata}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on ``port`` (hex, as /proc shows them)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


def test_every_component_listens_on_loopback_only(control_plane: ControlPlane) -> None:
    ports = control_plane.ports
    assert set(ports) == {"etcd", "etcd-peer", *COMPONENTS[1:]}
    for name, port in ports.items():
        assert _listening_addresses(port) == {"0100007F"}, f"{name} on port {port}"  # 127.0.0.1


def test_a_namespace_can_be_created_and_deleted(kube: Client) -> None:
    kube.create(Namespace(metadata=ObjectMeta(name="created-then-deleted")))
    ns = kube.get(Namespace, "created-then-deleted")
    assert ns.status and ns.status.phase == "Active"

    kube.delete(Namespace, "created-then-deleted")

    def gone() -> bool:
        try:
            kube.get(Namespace, "created-then-deleted")
        except ApiError as exc:
            return exc.status.code == 404
        return False

    # the controller-manager's namespace controller empties it and removes its finalizer
    eventually(gone, 60, "the namespace is deleted")


def test_the_dra_api_resource_k8s_io_v1_is_served(kube: Client) -> None:
    list(kube.list(DeviceClass))
    list(kube.list(ResourceSlice))
    cls = DeviceClass(
        metadata=ObjectMeta(name="test.kubegpu.example"),
        spec=DeviceClassSpec(
            selectors=[
                DeviceSelector(cel=CELDeviceSelector(expression='device.driver == "gpu.example"'))
            ]
        ),
    )
    kube.create(cls)
    try:
        got = kube.get(DeviceClass, "test.kubegpu.example")
        assert got.apiVersion == "resource.k8s.io/v1"
        assert got.spec and got.spec.selectors and got.spec.selectors[0].cel
    finally:
        kube.delete(DeviceClass, "test.kubegpu.example")


def test_the_controller_manager_and_scheduler_hold_their_leader_leases(kube: Client) -> None:
    for name in ("kube-controller-manager", "kube-scheduler"):
        lease = kube.get(Lease, name, namespace="kube-system")
        assert lease.spec and lease.spec.holderIdentity
        # long enough that a loaded API server does not make the only instance lose it
        assert lease.spec.leaseDurationSeconds == LEADER_LEASE_S


def test_the_controller_manager_runs_a_deployment_and_collects_its_garbage(
    kube: Client, namespace: str
) -> None:
    labels = {"app": "web"}
    kube.create(
        Deployment(
            metadata=ObjectMeta(name="web", namespace=namespace),
            spec=DeploymentSpec(
                replicas=2,
                selector=LabelSelector(matchLabels=labels),
                template=PodTemplateSpec(
                    metadata=ObjectMeta(labels=labels),
                    spec=PodSpec(
                        containers=[Container(name="main", image="registry.example/web:1")],
                        nodeSelector=NOWHERE,
                    ),
                ),
            ),
        )
    )

    def replica_sets() -> list[ReplicaSet]:
        return [
            rs
            for rs in kube.list(ReplicaSet, namespace=namespace)
            if rs.metadata
            and any(
                o.kind == "Deployment" and o.name == "web"
                for o in rs.metadata.ownerReferences or []
            )
        ]

    rs = eventually(replica_sets, what="the deployment controller creates a ReplicaSet")[0]
    assert rs.metadata and rs.metadata.name

    rs_name = rs.metadata.name

    def pods() -> list[Pod]:
        return [
            p
            for p in kube.list(Pod, namespace=namespace)
            if p.metadata and any(o.name == rs_name for o in p.metadata.ownerReferences or [])
        ]

    def two_pods() -> list[Pod] | None:
        found = pods()
        return found if len(found) == 2 else None

    eventually(two_pods, what="the ReplicaSet controller creates 2 pods")

    kube.delete(Deployment, "web", namespace=namespace)
    eventually(lambda: not replica_sets(), what="the garbage collector deletes the ReplicaSet")


def test_a_pod_with_no_node_to_run_on_is_marked_unschedulable_by_the_scheduler(
    kube: Client, namespace: str
) -> None:
    kube.create(
        Pod(
            metadata=ObjectMeta(name="lonely", namespace=namespace),
            spec=PodSpec(
                containers=[Container(name="main", image="registry.example/lonely:1")],
                nodeSelector=NOWHERE,
            ),
        )
    )

    def unschedulable() -> bool:
        pod = kube.get(Pod, "lonely", namespace=namespace)
        conds = (pod.status and pod.status.conditions) or []
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in conds
        )

    eventually(unschedulable, what="PodScheduled=False, reason Unschedulable")

    def failed_scheduling() -> list[Event]:
        return [
            e
            for e in kube.list(Event, namespace=namespace, fields={"involvedObject.name": "lonely"})
            if e.reason == "FailedScheduling"
        ]

    event = eventually(failed_scheduling, what="a FailedScheduling event")[0]
    assert event.reportingComponent == "default-scheduler"
    pod = kube.get(Pod, "lonely", namespace=namespace)
    assert pod.spec and pod.spec.nodeName is None
    assert pod.status and pod.status.phase == "Pending"


# --- lifecycle of separate control planes -------------------------------------------------


def test_stopping_a_control_plane_leaves_no_process_running(tmp_path: Path) -> None:
    workdir = tmp_path / "cp"
    workdir.mkdir()
    with _sleeper() as stale:
        # a process recorded by an earlier, killed run in the same directory
        write_pid_file(workdir / "pids", [PidRecord.of("etcd", stale.pid)])
        cp = ControlPlane(workdir)
        try:
            cp.start(timeout=180)
            assert stale.wait(timeout=5) == -signal.SIGTERM, "start() kills stale processes"

            pids = cp.pids
            assert set(pids) == set(COMPONENTS)
            assert {r.pid for r in read_pid_file(cp.pid_file)} == set(pids.values())
            with pytest.raises(ControlPlaneError, match="in use by another running control plane"):
                ControlPlane.cleanup_stale(workdir)  # a live control plane is not stale
            ports = cp.ports
        finally:
            cp.stop()

    assert not cp.running
    for name, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists(), f"{name} (pid {pid}) still exists"
    assert _processes_mentioning(str(workdir)) == []
    assert not cp.pid_file.exists()
    for port in ports.values():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    cp.stop()  # stopping twice is harmless


def test_stale_processes_of_a_killed_run_are_cleaned_up(tmp_path: Path) -> None:
    with _sleeper() as orphan, _sleeper() as stranger:
        # `orphan` was started by the killed run; `stranger` merely got a recorded pid later
        # (its start time differs from the recorded one), so it must be left alone
        stale = PidRecord.of("kube-apiserver", orphan.pid)
        reused = PidRecord("etcd", stranger.pid, start_ticks=(stale.start_ticks or 0) + 12345)
        write_pid_file(tmp_path / "pids", [stale, reused])

        killed = ControlPlane.cleanup_stale(tmp_path)

        assert killed == [stale]
        assert orphan.wait(timeout=5) == -signal.SIGTERM
        assert stranger.poll() is None
        assert not (tmp_path / "pids").exists()
    assert ControlPlane.cleanup_stale(tmp_path) == []  # nothing recorded: nothing to do


def test_a_missing_binary_is_named_with_the_command_that_builds_it(tmp_path: Path) -> None:
    bin_dir = _fake_bin_dir(
        tmp_path / "bin",
        {"etcd": "exit 0", "kube-apiserver": "exit 0", "kube-controller-manager": "exit 0"},
    )
    cp = ControlPlane(tmp_path / "cp", bin_dir=bin_dir)
    with pytest.raises(ControlPlaneError) as err:
        cp.start(timeout=10)
    assert err.value.component == "kube-scheduler"
    assert str(bin_dir / "kube-scheduler") in str(err.value)
    assert "scripts/build-kubernetes" in str(err.value)
    assert not (tmp_path / "cp").exists()  # nothing was started or written


def test_the_binaries_can_come_from_kubegpu_k8s_bin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEGPU_K8S_BIN", str(tmp_path / "empty"))
    with pytest.raises(ControlPlaneError, match="scripts/build-kubernetes") as err:
        ControlPlane(tmp_path / "cp").start(timeout=10)
    assert err.value.component == "etcd"
    assert str(tmp_path / "empty" / "etcd") in str(err.value)


def test_a_component_that_dies_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    bin_dir = _fake_bin_dir(
        tmp_path / "bin",
        {
            "etcd": "echo 'etcd: the disk is on fire' >&2; exit 3",
            "kube-apiserver": "exit 0",
            "kube-controller-manager": "exit 0",
            "kube-scheduler": "exit 0",
        },
    )
    cp = ControlPlane(tmp_path / "cp", bin_dir=bin_dir)
    with pytest.raises(ControlPlaneError) as err:
        cp.start(timeout=30)
    message = str(err.value)
    assert err.value.component == "etcd"
    assert message.startswith("etcd: exited with status 3")
    assert str(cp.log_path("etcd")) in message
    assert "the disk is on fire" in message  # the end of the log is in the message
    assert not cp.running
    assert not cp.pid_file.exists()


def test_a_component_that_does_not_get_ready_in_time_is_named(tmp_path: Path) -> None:
    bin_dir = _fake_bin_dir(
        tmp_path / "bin",
        {
            "etcd": f"echo $$ > {tmp_path}/etcd.pid; echo 'etcd: waiting forever'; exec sleep 300",
            "kube-apiserver": "exit 0",
            "kube-controller-manager": "exit 0",
            "kube-scheduler": "exit 0",
        },
    )
    cp = ControlPlane(tmp_path / "cp", bin_dir=bin_dir)
    with pytest.raises(ControlPlaneError, match=r"^etcd: not ready within 2s") as err:
        cp.start(timeout=2)
    assert "waiting forever" in str(err.value)
    pid = int((tmp_path / "etcd.pid").read_text())
    assert not Path(f"/proc/{pid}").exists(), "the process that was not ready is stopped"
    assert not cp.pid_file.exists()


def test_a_port_taken_before_the_component_binds_it_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = _fake_bin_dir(
        tmp_path / "bin",
        {
            "kube-apiserver": "echo 'kube-apiserver: stopping the test here' >&2; exit 1",
            "kube-controller-manager": "exit 0",
            "kube-scheduler": "exit 0",
        },
    )
    (bin_dir / "etcd").symlink_to(find_bin_dir() / "etcd")
    with socket.socket() as taken:
        # the port handed to etcd is taken by someone else before etcd can bind it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = iter([int(taken.getsockname()[1])])
        free_port = ControlPlane._free_port
        monkeypatch.setattr(
            ControlPlane, "_free_port", lambda self: next(first, 0) or free_port(self)
        )
        cp = ControlPlane(tmp_path / "cp", bin_dir=bin_dir)
        with pytest.raises(ControlPlaneError) as err:
            cp.start(timeout=60)
    log = cp.log_path("etcd").read_text()
    assert "address already in use" in log
    assert "(attempt 2)" in log
    assert err.value.component == "kube-apiserver"  # etcd did start, on another port
    assert "stopping the test here" in str(err.value)
