"""The planner's algorithm core: a domain-free packing problem and two solvers behind one call.

`solve(provider, reporter, method=...)` asks the provider for bins, demands, patterns and
uses (see `problem.py`), solves with the exact integer programme (HiGHS), the greedy
heuristic, or both ("auto": the heuristic, then the exact solver when the problem is small
enough, started from the heuristic's answer), and tells the reporter what it decided.
"""

from __future__ import annotations

from typing import Literal

from kubegpu.plan.core.budget import Budget
from kubegpu.plan.core.classes import class_size, solve_classes
from kubegpu.plan.core.exact import solve_exact
from kubegpu.plan.core.heuristic import report_solution, solve_heuristic
from kubegpu.plan.core.problem import Bin, Demand, Group, Pattern, Problem, Provider, Use
from kubegpu.plan.core.reporter import BaseReporter
from kubegpu.plan.core.solution import BinPlan, Placement, Solution, evaluate, verify

__all__ = [
    "BaseReporter",
    "Bin",
    "BinPlan",
    "Budget",
    "Demand",
    "Group",
    "Method",
    "Pattern",
    "Placement",
    "Problem",
    "Provider",
    "Solution",
    "Use",
    "evaluate",
    "exact_size",
    "solve",
    "solve_problem",
    "verify",
]

Method = Literal["auto", "exact", "heuristic"]

# "auto" runs the exact solver when its integer programme (on classes of identical nodes,
# see classes.py) has at most this many item variables; above it the heuristic's answer
# stands. The exact solver stops after `node_limit` branch-and-bound nodes, so its answer
# does not depend on the machine's speed when it finishes within `time_limit`. The time
# limit is CPU time of this process (budget.py), so a busy machine slows the search rather
# than cutting it short; a wall-clock ceiling of WALL_FACTOR times it still applies. When
# either stops the search, the plan says it is not proven optimal and gives HiGHS's bound.
# 10,000 keeps the exact phase within memory: on the 2,000-GPU scale point (12,570 variables)
# HiGHS's root node alone grew to 1.47 GiB in 30 s of CPU; 1,000 GPUs (6,285) stay at ~260 MiB.
AUTO_EXACT_VARIABLES = 10_000
# Share of the time limit the heuristic may take when the exact solver follows it (it is
# then only the exact solver's first incumbent).
HEURISTIC_SHARE = 0.2


def exact_size(problem: Problem) -> int:
    """Item variables of the exact solver's integer programme (the dominant part of its size)."""
    return class_size(problem)


def solve(
    provider: Provider,
    reporter: BaseReporter | None = None,
    *,
    method: Method = "auto",
    time_limit: float = 30.0,
    node_limit: int = 20_000,
    budget: Budget | None = None,
) -> tuple[Problem, Solution]:
    problem = Problem.compile(provider)
    return problem, solve_problem(
        problem,
        reporter,
        method=method,
        time_limit=time_limit,
        node_limit=node_limit,
        budget=budget,
    )


def solve_problem(
    problem: Problem,
    reporter: BaseReporter | None = None,
    *,
    method: Method = "auto",
    time_limit: float = 30.0,
    node_limit: int = 20_000,
    budget: Budget | None = None,
) -> Solution:
    """Solve with `method`; `budget` (default: `time_limit` CPU seconds) bounds the search."""
    rep = reporter or BaseReporter()
    budget = budget or Budget(time_limit)
    use_exact = method == "exact" or (
        method == "auto" and exact_size(problem) <= AUTO_EXACT_VARIABLES
    )
    rep.starting(len(problem.bins), len(problem.demands), "exact" if use_exact else "heuristic")
    offered = problem.offered()
    for d, dem in enumerate(problem.demands):
        for o, option in enumerate(dem.options):
            if (d, o) not in offered:
                rep.unavailable(dem.key, option)
    sol = solve_heuristic(problem, budget=budget.part(HEURISTIC_SHARE) if use_exact else None)
    if use_exact:
        found = solve_classes(problem, sol, node_limit=node_limit, budget=budget)
        if found is None:  # the class solution does not split into nodes: solve per node
            found = solve_exact(problem, sol, node_limit=node_limit, budget=budget)
        sol = found
    report_solution(problem, sol, rep)
    rep.ending(sol)
    return sol
