"""Chaos fixtures: a control plane of the package's own (the integration tests' fixture,
scoped here so a full run never holds two at once), kubegpu installed by its chart on three
simulated nodes, settled, and the run's record with its seed.

The seed is printed when the package starts and in the summary; `KUBEGPU_CHAOS_SEED=<seed>`
replays the same faults at the same random points (the timing of the cluster itself is not
replayed, so a race may need a few replays).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from e2e.stack import wait_for
from integration import conftest as integration
from kubegpu.catalog import nvidia
from kubegpu.sim.controlplane.plane import ControlPlane
from kubegpu.sim.stack import find_chart

from .cluster import GPU_NODES, MIG_NODE, NODES, VALUES, ChaosStack
from .invariants import Baseline, violations
from .record import REPORT_ENV, ChaosRun, chosen_seed

_run = pytest.StashKey[ChaosRun]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: faults injected into the simulated cluster (tests/chaos; default run)"
    )


@pytest.fixture(scope="package")
def chaos_run(request: pytest.FixtureRequest) -> ChaosRun:
    run = ChaosRun(chosen_seed())
    request.config.stash[_run] = run
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        run.say = reporter.write_line
    run.say(f"\nchaos seed {run.seed} (replay: KUBEGPU_CHAOS_SEED={run.seed})")
    return run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    run = terminalreporter.config.stash.get(_run, None)
    if run is None:
        return
    terminalreporter.section("chaos")
    for line in run.summary_lines():
        terminalreporter.write_line(line)
    if os.environ.get(REPORT_ENV):
        run.write(Path(os.environ[REPORT_ENV]))


@pytest.fixture(scope="package")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    yield from integration.control_plane.__wrapped__(tmp_path_factory, request)  # type: ignore[attr-defined]


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def chaos_stack(
    control_plane: ControlPlane, chaos_run: ChaosRun, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[ChaosStack, Baseline]]:
    """The installed stack once ClusterPolicy is ready and every invariant holds, with the
    baseline the invariants compare against."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kg-chaos-", dir="/tmp"))  # short socket paths
    stack = ChaosStack(
        control_plane,
        NODES,
        workdir,
        chart=find_chart(),
        values=VALUES,
        field_manager="kubegpu-chaos",
        lease_interval_s=5.0,
    )
    keep = True  # the work directory (the nodes' pod logs) unless all went well
    try:
        await stack.up()

        async def settled() -> Baseline:
            labels = await stack.node_labels(MIG_NODE)
            state = labels.get(nvidia.MIG_CONFIG_STATE)
            assert state == "success", f"{MIG_NODE}: {nvidia.MIG_CONFIG_STATE}={state}"
            baseline = Baseline({n: await stack.deploy_labels(n) for n in GPU_NODES})
            found = await violations(stack, baseline)
            assert not found, found
            return baseline

        baseline = await wait_for(settled, timeout=240, interval=1.0, what="the stack settled")
        chaos_run.setup_s = time.monotonic() - started
        yield stack, baseline
        keep = bool(request.session.testsfailed)
    finally:
        await stack.down()
        if keep:
            print(f"\nchaos: the nodes' pod logs are kept in {workdir}/nodes")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
