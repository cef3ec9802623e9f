"""Fixtures for tests against the real Kubernetes control plane.

One control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) is started
for the whole session. If it cannot start, every test that needs it fails with the reason:
a missing control plane is a broken test setup, never a reason to skip.

When a test of the session failed, the control plane's work directory (logs, kubeconfig,
certificates) is kept and its path printed in the summary; otherwise it is removed.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.controlplane.process import ControlPlaneError

from .simnodes import SimNodes

START_TIMEOUT_S = 180.0
FIELD_MANAGER = "kubegpu-tests"

_kept_dirs = pytest.StashKey[list[str]]()


def _keep(config: pytest.Config, message: str) -> None:
    config.stash.setdefault(_kept_dirs, []).append(message)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say where the logs of a control plane that failed or served failed tests are."""
    kept = terminalreporter.config.stash.get(_kept_dirs, [])
    if kept:
        terminalreporter.section("kubernetes control plane")
        for line in kept:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    """The session's running control plane (admin kubeconfig: ``.kubeconfig_path``)."""
    workdir = tmp_path_factory.mktemp("control-plane")
    cp = ControlPlane(workdir)
    failure = None
    try:
        cp.start(timeout=START_TIMEOUT_S)
    except ControlPlaneError as exc:
        failure = str(exc)
    if failure is not None:
        if cp.logs_dir.exists():
            _keep(request.config, f"control plane failed to start; logs kept in {cp.logs_dir}")
        pytest.fail(f"the Kubernetes control plane did not start: {failure}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
        if request.session.testsfailed:
            _keep(request.config, f"tests failed; control plane logs kept in {cp.logs_dir}")
            print(f"\ncontrol plane logs kept in {cp.logs_dir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _kubeconfig(control_plane: ControlPlane) -> KubeConfig:
    return KubeConfig.from_file(control_plane.kubeconfig_path)


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[Client]:
    """A lightkube client with the admin's credentials."""
    client = Client(_kubeconfig(control_plane), field_manager=FIELD_MANAGER)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
async def akube(control_plane: ControlPlane) -> AsyncIterator[AsyncClient]:
    """A lightkube async client with the admin's credentials."""
    client = AsyncClient(_kubeconfig(control_plane), field_manager=FIELD_MANAGER)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def sim_nodes(control_plane: ControlPlane, akube: AsyncClient) -> AsyncIterator[SimNodes]:
    """The test's simulated nodes (`SimNodes.start`); each is stopped, its Node deleted, its
    directory removed and no pod process of it left after the test."""
    nodes = SimNodes(control_plane.kubeconfig_path, akube)
    try:
        yield nodes
    finally:
        await nodes.close()


@pytest.fixture
def namespace(kube: Client) -> Iterator[str]:
    """A fresh namespace, ready for pods (its default ServiceAccount exists); deleted after."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create(Namespace(metadata=ObjectMeta(name=name)))
    deadline = time.monotonic() + 30
    while True:
        try:
            kube.get(ServiceAccount, "default", namespace=name)
            break
        except ApiError as exc:
            if exc.status.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield name
    finally:
        kube.delete(Namespace, name)
