"""`kubegpu why` replayed on the what-if twin: the snapshot rebuilt as a simulated cluster,
the Pending pod recreated there, the relabels `doctor.replay.replay_plan` chose applied,
and the pod watched (I/O; what to try and what the outcome means are `doctor.replay`'s).

Only the pod asked about is recreated Pending: the snapshot's other Pending pods would
compete on the twin for the capacity a relabel makes, and the question is this pod's. The
running GPU pods are recreated on their nodes, holding devices there, as `what-if run` does.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from kubegpu.doctor.replay import (
    NodeSeen,
    PodSeen,
    ReplayPlan,
    ReplayResult,
    not_replayed,
    replay_plan,
    replayed,
)
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.doctor.why import Verdict, why
from kubegpu.sim.stack import StackError, find_chart, simulated_stack
from kubegpu.whatif.change import Change, ChangeError, check_nodes
from kubegpu.whatif.twin import (
    SETUP_TIMEOUT_S,
    Twin,
    TwinError,
    chart_values,
    cluster_spec,
)
from kubegpu.whatif.twin_spec import TwinSpec, TwinSpecError, twin_spec

Say = Callable[[str], None]
SETTLE_TIMEOUT_S = 300.0


def replay_spec(snapshot: Snapshot, plan: ReplayPlan) -> TwinSpec:
    """The snapshot's twin with the running GPU pods and, of the Pending ones, `plan.pod`."""
    spec = twin_spec(snapshot)
    pods = tuple(p for p in spec.pods if p.node or p.key == plan.pod)
    if not any(p.key == plan.pod for p in pods):
        raise TwinSpecError(
            f"pod {plan.pod}: the twin does not recreate it ("
            + ("; ".join(s for s in spec.skipped if plan.pod in s) or "not Pending")
            + ")"
        )
    return replace(spec, pods=pods)


async def _pod(twin: Twin, key: str) -> PodSeen:
    namespace, _, name = key.partition("/")
    try:
        pod = await twin.client.get(Pod, name, namespace=namespace)
    except ApiError:
        return PodSeen("")
    phase = (pod.status.phase if pod.status else None) or ""
    node = (pod.spec.nodeName if pod.spec else None) or ""
    reason = ""
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "PodScheduled" and c.status != "True":
            reason = c.message or c.reason or ""
    return PodSeen(phase, node, reason)


async def replay_on_twin(
    snapshot: Snapshot,
    plan: ReplayPlan,
    *,
    chart: Path,
    workdir: Path,
    settle_timeout: float = SETTLE_TIMEOUT_S,
    say: Say = lambda _: None,
) -> ReplayResult:
    """Build the twin, see the pod as the snapshot has it, apply the plan's relabels, wait
    (at most `settle_timeout`) and see it again."""
    spec = replay_spec(snapshot, plan)
    change = Change(labels={t.node: dict(t.labels) for t in plan.tries})
    check_nodes(change, [n.name for n in spec.nodes])
    notes = tuple(s for s in spec.skipped if plan.pod not in s)
    async with simulated_stack(
        cluster_spec(spec), workdir, chart=chart, values=chart_values(spec), say=say
    ) as stack:
        twin = Twin(stack, spec, say)
        await twin.build(SETUP_TIMEOUT_S)
        await twin.settle(SETUP_TIMEOUT_S, mig_nodes=set(), what="the twin as the snapshot")
        before = await _pod(twin, plan.pod)
        if change.empty or before.phase == "Running":
            return ReplayResult(before, notes=notes)
        say("relabelling: " + "; ".join(change.describe()))
        mig_nodes = await twin.apply(change)
        unsettled = await twin.settle(
            settle_timeout, mig_nodes=mig_nodes, what="after the relabel", must=False
        )
        after = await _pod(twin, plan.pod)
        state, _ = await twin.observe(unsettled)
    tried = {t.node for t in plan.tries}
    nodes = tuple(
        NodeSeen(n.name, n.mig_state, n.mig_message, dict(n.advertised))
        for n in state.nodes
        if n.name in tried
    )
    return ReplayResult(before, after, nodes, unsettled, notes)


async def explain(
    snapshot: Snapshot,
    ref: str,
    *,
    replay: bool = True,
    chart: Path | None = None,
    settle_timeout: float = SETTLE_TIMEOUT_S,
    say: Say = lambda _: None,
) -> Verdict:
    """`kubegpu why`: the snapshot's verdict, replayed on the twin where `replay_plan` says
    the scheduler's reason is not enough. A twin that cannot be built leaves the snapshot's
    verdict, saying why it was not replayed (and where the twin's logs are)."""
    verdict = why(snapshot, ref)
    plan = replay_plan(snapshot, verdict)
    if plan is None:
        return verdict
    if not replay:
        return not_replayed(verdict, plan, "--no-replay")
    work = Path(tempfile.mkdtemp(prefix="kubegpu-why-", dir="/tmp"))  # short socket paths
    try:
        result = await replay_on_twin(
            snapshot,
            plan,
            chart=find_chart(chart),
            workdir=work,
            settle_timeout=settle_timeout,
            say=say,
        )
    except (TwinSpecError, ChangeError) as exc:
        shutil.rmtree(work, ignore_errors=True)
        return not_replayed(verdict, plan, f"the twin cannot be built: {exc}")
    except (TwinError, StackError) as exc:
        return not_replayed(verdict, plan, f"the twin failed: {exc}; its logs are under {work}")
    shutil.rmtree(work, ignore_errors=True)
    return replayed(verdict, plan, result)
