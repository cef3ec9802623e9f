"""The MIG manager's and the DRA plugin's intervals and timeouts are checked at start.

A poll interval of 0, a negative one or NaN would spin a CPU and flood the API server, and
a NaN timeout never expires; each is refused before any work, naming the flag and value.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kubegpu.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--poll-interval", "0"], "--poll-interval 0: must be 0.01 to 300 seconds"),
        (["--poll-interval", "-1"], "--poll-interval -1: must be"),
        (["--pods-timeout", "nan"], "--pods-timeout nan: must be 0 to 86400 seconds"),
        (["--reboot-timeout", "-5"], "--reboot-timeout -5: must be"),
        (["--unknown-config-wait", "inf"], "UNKNOWN_CONFIG_WAIT inf: must be"),
    ],
)
def test_the_mig_manager_refuses_intervals_that_would_spin_or_never_end(
    flags: list[str], message: str
) -> None:
    result = runner.invoke(
        app, ["mig-manager", "--node-name", "n1", "--nvml", "sim:/nonexistent/gpus.json", *flags]
    )
    assert result.exit_code == 1
    assert message in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_the_dra_plugin_refuses_a_poll_interval_that_would_spin(value: str) -> None:
    result = runner.invoke(
        app,
        ["dra-plugin", "--node-name", "n1", "--nvml", "sim:/nonexistent/gpus.json"],
        env={"KUBEGPU_POLL_INTERVAL": value},
    )
    assert result.exit_code == 1
    assert f"--poll-interval / KUBEGPU_POLL_INTERVAL {value}: must be" in result.stderr
