"""`run(component)`: how every node component runs as a program: stop and reload signals,
and the exit status for each way it can end."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from kubegpu.node.runtime import ComponentError, OneShot, run


class Agent:
    """A long-running component that records what the runtime asked of it."""

    def __init__(self, send: list[signal.Signals] | None = None, fail: str | None = None) -> None:
        self.send = send or []
        self.fail = fail
        self.stopped = asyncio.Event()
        self.reloads = 0
        self.calls: list[str] = []

    def stop(self) -> None:
        self.calls.append("stop")
        self.stopped.set()

    def reload(self) -> None:
        self.calls.append("reload")
        self.reloads += 1

    async def run(self) -> None:
        for sig in self.send:  # as if kubelet or an administrator sent it
            os.kill(os.getpid(), sig)
            await asyncio.sleep(0.05)
        if self.fail:
            raise ComponentError(self.fail, exit_code=3)
        await asyncio.wait_for(self.stopped.wait(), 5)


class NoReload:
    def __init__(self) -> None:
        self.stopped = asyncio.Event()

    def stop(self) -> None:
        self.stopped.set()

    async def run(self) -> None:
        os.kill(os.getpid(), signal.SIGQUIT)
        await asyncio.wait_for(self.stopped.wait(), 5)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT])
def test_a_stop_signal_stops_the_component_and_the_program_exits_0(sig: signal.Signals) -> None:
    agent = Agent(send=[sig])
    assert run(lambda: agent) == 0
    assert agent.calls == ["stop"]


def test_sighup_reloads_a_component_that_can_and_it_keeps_running() -> None:
    agent = Agent(send=[signal.SIGHUP, signal.SIGHUP, signal.SIGTERM])
    assert run(lambda: agent) == 0
    assert agent.calls == ["reload", "reload", "stop"]


def test_a_component_without_reload_still_stops_on_signals() -> None:
    assert run(NoReload) == 0


def test_the_signal_handlers_are_gone_after_the_run() -> None:
    run(lambda: Agent(send=[signal.SIGTERM]))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL


def test_a_component_error_is_printed_and_becomes_the_exit_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(lambda: Agent(fail="config.yaml: field flags.migStrategy\nsecond line")) == 3
    err = capsys.readouterr().err
    assert "error: config.yaml: field flags.migStrategy\nerror: second line\n" in err


def test_a_component_that_cannot_be_built_exits_1_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def make() -> Agent:
        raise ComponentError("--nvml 'gpu': use 'real' or 'sim:<state-file>'")

    assert run(make) == 1
    assert "error: --nvml 'gpu': use 'real' or 'sim:<state-file>'" in capsys.readouterr().err


def test_a_finished_one_shot_exits_0() -> None:
    done: list[bool] = []

    async def work() -> None:
        done.append(True)

    assert run(lambda: OneShot(work)) == 0
    assert done == [True]


def test_a_one_shot_stopped_by_a_signal_exits_128_plus_the_signal() -> None:
    async def forever() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(30)

    assert run(lambda: OneShot(forever)) == 128 + signal.SIGTERM


def test_an_unexpected_error_is_not_swallowed() -> None:
    async def broken() -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run(lambda: OneShot(broken))


def test_an_unknown_log_level_is_refused_before_the_component_is_built(
    capsys: pytest.CaptureFixture[str],
) -> None:
    built: list[bool] = []

    def make() -> Agent:
        built.append(True)
        return Agent(fail="never run")

    assert run(make, log_level="verbose") == 1
    assert built == []
    assert "error: --log-level / LOG_LEVEL 'verbose': use one of debug, info, warning, error" in (
        capsys.readouterr().err
    )
