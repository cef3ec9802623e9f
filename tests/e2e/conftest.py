"""End-to-end fixtures: a control plane (the integration tests' fixture, scoped to this
package so a full run never holds two at once), a few simulated nodes and kubegpu installed
with its Helm chart.

One helm install serves the package (`gpu_stack`); the tests that use it run in file order
and each leaves the cluster as the next expects it, on the package's event loop.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from integration import conftest as integration
from kubegpu.sim.cluster import NodeEntry
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.stack import find_chart

from .stack import NODES, VALUES, E2EStack


@pytest.fixture(scope="package")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    """The running control plane (stopped when the e2e tests are done)."""
    yield from integration.control_plane.__wrapped__(tmp_path_factory, request)  # type: ignore[attr-defined]


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def gpu_stack(control_plane: ControlPlane) -> AsyncIterator[E2EStack]:
    workdir = Path(tempfile.mkdtemp(prefix="kg-e2e-", dir="/tmp"))  # short: unix socket paths
    stack = E2EStack(
        control_plane,
        NODES,
        workdir,
        chart=find_chart(),
        values=VALUES,
        field_manager="kubegpu-e2e",
        lease_interval_s=5.0,
    )
    LIVE.append(stack)
    try:
        await stack.up()
        yield stack
    finally:
        if stack in LIVE:
            LIVE.remove(stack)
            await stack.down()
        shutil.rmtree(workdir, ignore_errors=True)


LIVE: list[E2EStack] = []  # the shared installation while it is up


async def retire_shared_stack() -> None:
    """Uninstall the package's shared installation, for a module that installs its own
    (one kubegpu release per control plane)."""
    while LIVE:
        await LIVE.pop().down()


@contextlib.asynccontextmanager
async def own_stack(
    control_plane: ControlPlane,
    nodes: Sequence[NodeEntry],
    name: str,
    values: dict[str, object],
) -> AsyncIterator[E2EStack]:
    """A module's own kubegpu installation (the shared one retired first): its nodes, the
    chart with `values`, field manager `kubegpu-<name>`; down and its files gone after."""
    await retire_shared_stack()
    workdir = Path(tempfile.mkdtemp(prefix="kg-own-", dir="/tmp"))  # short: unix socket paths
    stack = E2EStack(
        control_plane,
        list(nodes),
        workdir,
        chart=find_chart(),
        values=values,
        field_manager=f"kubegpu-{name}",
        lease_interval_s=5.0,
    )
    try:
        await stack.up()
        yield stack
    finally:
        await stack.down()
        shutil.rmtree(workdir, ignore_errors=True)
