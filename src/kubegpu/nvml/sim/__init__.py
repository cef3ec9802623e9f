"""The simulated GPU backend: a virtual node whose state lives in a locked JSON file."""

from kubegpu.nvml.sim.backend import SimNvml
from kubegpu.nvml.sim.spec import NodeSpec, SpecError, parse_spec

__all__ = ["NodeSpec", "SimNvml", "SpecError", "parse_spec"]
