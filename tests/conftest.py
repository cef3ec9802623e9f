"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import hang_watchdog
from kubegpu.nvml.sim import SimNvml


@pytest.fixture
def sim_node(tmp_path: Path) -> Callable[[str], SimNvml]:
    """Make a simulated GPU node from a spec such as 'a100-40gb:2'."""
    count = 0

    def make(spec: str) -> SimNvml:
        nonlocal count
        count += 1
        return SimNvml.create(tmp_path / f"node{count}.json", spec)

    return make


def pytest_configure(config: pytest.Config) -> None:
    hang_watchdog.pytest_configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    hang_watchdog.pytest_unconfigure(config)
