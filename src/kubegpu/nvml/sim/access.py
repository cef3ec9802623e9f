"""Reading and changing a simulated node's state file: what the NVML backend and the lab
controls share."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kubegpu.nvml import errors
from kubegpu.nvml.sim import telemetry
from kubegpu.nvml.sim.state import GpuState, NodeState, StateFile

T = TypeVar("T")


class SimStateAccess:
    """One handle on a sim state file, with the telemetry clock its changes are booked at."""

    def __init__(self, path: Path | str, clock: Callable[[], float] | None = None) -> None:
        self.store = StateFile(Path(path))
        self.clock: Callable[[], float] = clock or time.time  # tests may pin it

    def _change(self, fn: Callable[[NodeState], T]) -> T:
        with self.store.transaction() as state:
            telemetry.fold_energy(state, self.clock())  # load may change below
            return fn(state)

    @staticmethod
    def _gpu(state: NodeState, index: int, *, allow_lost: bool = False) -> GpuState:
        if not isinstance(index, int) or not 0 <= index < len(state["gpus"]):
            raise errors.InvalidArgument(
                f"no GPU with index {index} (node has {len(state['gpus'])})"
            )
        gpu = state["gpus"][index]
        if gpu["lost"] and not allow_lost:
            raise errors.GpuIsLost(f"GPU {index} ({gpu['uuid']}) has fallen off the bus")
        return gpu


def power_cycle(gpu: GpuState) -> None:
    """A GPU reset or node reboot: the pending MIG mode takes effect, instances and
    processes go, a lost GPU is back."""
    gpu["mig_current"] = gpu["mig_pending"]
    gpu["gpu_instances"] = []
    gpu["processes"] = []
    gpu["lost"] = False
