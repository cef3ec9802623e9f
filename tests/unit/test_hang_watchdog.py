"""The suite's hang watchdog (tests/hang_watchdog.py): a test that hangs where no signal
reaches it, a fixture's teardown included, ends the run within its budget with every
thread's stack printed, instead of holding CI until its own limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]

HANGS_IN_TEARDOWN = textwrap.dedent(
    """
    import threading
    import pytest

    @pytest.fixture(scope="module")
    def resource():
        yield
        threading.Event().wait()  # a join that never returns

    @pytest.mark.timeout(1)
    def test_uses_it(resource):
        pass
    """
)

HANGS_IN_CALL = textwrap.dedent(
    """
    import threading

    def test_waits_forever():
        threading.Event().wait()
    """
)


def run(tmp_path: Path, source: str, **env: str) -> tuple[int, str, float]:
    test = tmp_path / "test_hang.py"
    test.write_text(source)
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "hang_watchdog",
            "-p",
            "no:timeout",
            "-p",
            "no:cacheprovider",
            "-q",
            str(test),
        ],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS_DIR), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_a_fixture_teardown_that_hangs_ends_the_run_with_the_stacks(tmp_path: Path) -> None:
    code, output, took = run(tmp_path, HANGS_IN_TEARDOWN, KUBEGPU_TEST_HANG_MARGIN_S="2")
    assert code != 0
    assert "Timeout" in output and "Thread" in output
    assert "in resource" in output  # the stack names the fixture that hung
    assert took < 60


def test_the_whole_run_has_a_limit(tmp_path: Path) -> None:
    code, output, took = run(tmp_path, HANGS_IN_CALL, KUBEGPU_TEST_RUN_LIMIT_S="3")
    assert code != 0
    assert "in test_waits_forever" in output
    assert took < 60


def test_a_limit_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    code, output, _ = run(tmp_path, "def test_ok(): pass\n", KUBEGPU_TEST_RUN_LIMIT_S="soon")
    assert code != 0
    assert "KUBEGPU_TEST_RUN_LIMIT_S" in output and "'soon'" in output
