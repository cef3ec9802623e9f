"""`kubegpu operator` is a Program on `node.runtime`, as every component: the command parses
its flags and hands the runtime an `OperatorProgram`, which serves the probes and runs the
loop until stopped."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import yaml
from lightkube import KubeConfig
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.node import runtime
from kubegpu.node.runtime import Component, ComponentError
from kubegpu.operator import program as program_mod
from kubegpu.operator.program import OperatorFlags, OperatorProgram

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_the_command_hands_the_runtime_an_operator_program(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    made: list[object] = []
    token = runtime.HOST.set(lambda make: made.append(make()))
    try:
        result = CliRunner().invoke(
            app,
            ["operator", "--namespace", "ops", "--health-port", "0", "--kubeconfig", str(config)],
            env={"LOG_LEVEL": "debug", "DRIVER_IMAGE": "reg/driver:1"},
        )
    finally:
        runtime.HOST.reset(token)
    assert result.exit_code == 0, result.stderr
    [program] = made
    assert isinstance(program, OperatorProgram) and isinstance(program, Component)
    assert program.flags.namespace == "ops" and program.flags.health_port == 0
    assert program.operator.config.namespace == "ops"
    assert program.operator.config.image_env == {"DRIVER_IMAGE": "reg/driver:1"}


def _program(port: int) -> OperatorProgram:
    config = KubeConfig.from_dict(yaml.safe_load(KUBECONFIG))
    return OperatorProgram(OperatorFlags(health_address="127.0.0.1", health_port=port), config)


def _taken_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


async def test_a_stop_while_the_probe_port_is_still_held_ends_the_program() -> None:
    sock, port = _taken_port()
    try:
        program = _program(port)
        task = asyncio.create_task(program.run())
        await asyncio.sleep(0.3)
        assert not task.done()  # waiting for the port, the loop not started
        program.stop()
        await asyncio.wait_for(task, 5)
        assert program.operator.reconciles == 0
    finally:
        sock.close()


async def test_a_probe_port_never_freed_is_a_component_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(program_mod, "PORT_ATTEMPTS", 2)
    monkeypatch.setattr(program_mod, "PORT_RETRY_S", 0.01)
    sock, port = _taken_port()
    try:
        with pytest.raises(ComponentError, match=f"--health-port {port}: .* after 2 tries"):
            await _program(port).run()
    finally:
        sock.close()
