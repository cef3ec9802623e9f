"""The planner: match cards, sharing methods and MIG layouts to a workload mix.

Built like resolvelib: `plan.core` is an algorithm core that knows nothing of GPUs (an
exact integer programme and a fast heuristic behind one `solve`), `plan.provider` supplies
the hardware facts and the rule book (`plan.rules`), and `plan.reporter` explains every
decision. `make_plan` runs them; `render` writes the plan in the upstream formats.
"""

from __future__ import annotations

from kubegpu.plan.emit import render
from kubegpu.plan.inputs import PlanInput, PlanInputError, load_input, parse_data, parse_input
from kubegpu.plan.planner import make_plan
from kubegpu.plan.reporter import PlanReporter, Reason
from kubegpu.plan.result import NodePlan, Plan, WorkloadPlan, plan_json

__all__ = [
    "NodePlan",
    "Plan",
    "PlanInput",
    "PlanInputError",
    "PlanReporter",
    "Reason",
    "WorkloadPlan",
    "load_input",
    "make_plan",
    "parse_data",
    "parse_input",
    "plan_json",
    "render",
]
