"""The simulated GPU backend: a virtual node whose state lives in a locked JSON file.

`SimNvml` is the NVML interface over that file; `SimControls` are the lab's hands on it
(faults, display mode, processes, reboots).
"""

from kubegpu.nvml.sim.backend import SimNvml
from kubegpu.nvml.sim.controls import SimControls
from kubegpu.nvml.sim.spec import NodeSpec, SpecError, parse_spec

__all__ = ["NodeSpec", "SimControls", "SimNvml", "SpecError", "parse_spec"]
