"""`kubegpu plan`: match cards, sharing methods and MIG layouts to a workload mix.

Exit codes: 0 every replica placed; 1 bad input (file, field, model or value); 2 bad
command line; 3 a partial plan: some replicas are left over (the plan is still printed and
written, with what is left and why). With `--from-snapshot --verify` the twin's answer
decides instead: 0 every Pending pod runs there, 4 some would still be Pending (named).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console
from rich.table import Table

from kubegpu.cli.options import fail, read_kubeconfig
from kubegpu.doctor.snapshot import Snapshot
from kubegpu.plan import Plan, PlanInputError, load_input, make_plan, plan_json, render
from kubegpu.plan.dra import DraPlan, DraPlanError, dra_json, dra_plan
from kubegpu.plan.emit import render_dra
from kubegpu.plan.rules import RULES
from kubegpu.replan import from_snapshot as plan_snapshot
from kubegpu.sharing import isolation

EXIT_PARTIAL = 3
EXIT_STILL_PENDING = 4  # --verify: some Pending pods would not run on the twin

console = Console(highlight=False)


def _node_table(plan: Plan) -> Table:
    table = Table(
        "node", "GPUs", "MIG strategy", "sharing", "per-GPU layout", "labels", title="Nodes"
    )
    for n in plan.nodes:
        texts = []
        for g in n.gpus:
            if g.role == "mig":
                text = " + ".join(f"{k}x{p}" for p, k in sorted(g.mig.items()))
            elif g.role == "shared":
                text = f"shared x{g.replicas}"
            else:
                text = g.role
            texts.append((g.index, text))
        layout = []
        i = 0
        while i < len(texts):  # runs of GPUs alike on one line: "0-3: 7x1g.18gb"
            j = i
            while j + 1 < len(texts) and texts[j + 1][1] == texts[i][1]:
                j += 1
            first, last = texts[i][0], texts[j][0]
            span = str(first) if first == last else f"{first}-{last}"
            layout.append(f"{span}: {texts[i][1]}")
            i = j + 1
        title = n.name + (f" [buy {n.bought}]" if n.bought else "")
        sharing = "none" if n.sharing == "none" else f"{n.sharing} x{n.replicas}"
        labels = "\n".join(f"{k}={v}" for k, v in sorted(n.labels.items()))
        table.add_row(title, n.models(), n.mig_strategy, sharing, "\n".join(layout), labels)
    return table


def _workload_table(plan: Plan, dra: DraPlan | None = None) -> Table:
    table = Table(
        "workload",
        "method",
        "claim (per pod)" if dra else "request (per replica)",
        "placed",
        "where",
        title="Workloads",
    )
    for w in plan.workloads:
        method = (w.method or "-") + (f" {w.profile}" if w.profile else "")
        request = ", ".join(f"{k}: {v}" for k, v in w.resources.items()) or "-"
        if dra is not None:
            claims = dict.fromkeys(g.claim for g in dra.groups if g.workload == w.name)
            request = ", ".join(claims) or "-"
        placed = f"{w.placed}/{w.replicas}" + (f" [red]({w.left} left)[/red]" if w.left else "")
        where = ", ".join(f"{n} x{k}" for n, k in sorted(w.nodes.items())) or "-"
        table.add_row(w.name, method, request, placed, where)
    return table


def _claim_table(dp: DraPlan) -> Table:
    """Each claim, what it asks for, and the pods that use it (by name where they share)."""
    table = Table(title="DRA claims")
    table.add_column("claim", no_wrap=True)
    for name in ("devices", "sharing", "used by"):
        table.add_column(name)
    users: dict[str, list[str]] = {}
    for g in dp.groups:
        pods = f": {', '.join(g.pods)}" if g.shared else ""
        users.setdefault(g.claim, []).append(f"{g.workload} x{len(g.pods)} on {g.node}{pods}")
    for c in dp.claims:
        what = ("shared claim" if c.shared else "template") + f", {c.count}x {c.model}"
        what += f" {c.profile}" if c.profile else ""
        sharing = "-"
        params = c.parameters()
        if params is not None:
            sharing = f"{c.strategy} x{c.replicas}"
            mps = params["sharing"].get("mpsConfig")
            if mps:
                sharing += (
                    f": {mps['defaultActiveThreadPercentage']}% threads, "
                    f"{mps['defaultPinnedDeviceMemoryLimit']} pinned"
                )
        table.add_row(c.name, what, sharing, "\n".join(users[c.name]))
    return table


def _explain(plan: Plan) -> None:
    console.print("[bold]Why[/bold]")
    for subject, reasons in plan.reporter.by_subject().items():
        console.print(f"[bold]{subject}[/bold]")
        for r in reasons:
            source = f" [dim]({RULES[r.rule].source})[/dim]" if r.rule in RULES else ""
            console.print(f"  - {r.text}{source}", soft_wrap=True)
    # the same words as the node labels, pod annotations and exporter metric
    isolated = [
        (n.name, g.index, m)
        for n in plan.nodes
        for g in n.gpus
        if (m := isolation.plan_method(g.role, n.sharing)) is not None
    ]
    if isolated:
        console.print("[bold]Isolation[/bold]")
        for node, index, method in isolated:
            console.print(f"  - {node} GPU {index}: {isolation.describe(method)}", soft_wrap=True)


def plan(
    files: list[Path] | None = typer.Option(
        None, "--file", "-f", help="Input file(s): fleet or buy, workloads, options (merged)."
    ),
    from_snapshot: Path | None = typer.Option(
        None,
        "--from-snapshot",
        help="Plan from a doctor snapshot: its nodes as they run now, its Pending GPU pods as the demand.",
    ),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        help="Like --from-snapshot, with a snapshot captured read-only from this cluster now.",
    ),
    allow_evictions: bool = typer.Option(
        False,
        "--allow-evictions",
        help="With --from-snapshot: the runbook may delete running GPU pods (controller-owned) "
        "to repartition their node, fewest first.",
    ),
    verify: bool = typer.Option(
        False,
        "--verify",
        help="With --from-snapshot: apply the runbook to the snapshot's simulated twin "
        "(`kubegpu what-if`) and report the Pending pods that would still not run.",
    ),
    solver: str | None = typer.Option(
        None, "--solver", help="auto (default), exact or heuristic; overrides the file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
    explain: bool = typer.Option(False, "--explain", help="Print the reason for every decision."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write the plan's files (ConfigMaps, values, labels) here."
    ),
    allow_unconfirmed_mig: bool = typer.Option(
        False, "--allow-unconfirmed-mig", help="Plan MIG on models whose geometry is unconfirmed."
    ),
    mig_strategy: str | None = typer.Option(
        None, "--mig-strategy", help="auto (single where a node allows it) or mixed."
    ),
    api: str = typer.Option(
        "device-plugin",
        "--api",
        help="device-plugin (counted resources, ClusterPolicy) or dra (ResourceClaims, GPUCluster).",
    ),
    mig_fallback: bool = typer.Option(
        False,
        "--mig-fallback",
        help="--api dra: MIG claims prefer the planned profile and fall back to the next "
        "larger one the layouts have (firstAvailable, Kubernetes 1.36+).",
    ),
) -> None:
    """Plan which cards, sharing methods and MIG layouts serve a workload mix.

    Exit codes: 0 every replica placed; 1 bad input; 2 bad command line; 3 partial plan
    (some replicas left over; the plan is still printed and written). See docs/planner.md.
    """
    if solver not in (None, "auto", "exact", "heuristic"):
        fail(f"--solver {solver!r}: use auto, exact or heuristic", code=2)
    if mig_strategy not in (None, "auto", "mixed"):
        fail(f"--mig-strategy {mig_strategy!r}: use auto or mixed", code=2)
    if api not in ("device-plugin", "dra"):
        fail(f"--api {api!r}: use device-plugin or dra", code=2)
    if mig_fallback and api != "dra":
        fail("--mig-fallback: only with --api dra (a prioritized list is a DRA request)", code=2)
    sources = sum([bool(files), from_snapshot is not None, kubeconfig is not None])
    if sources != 1:
        fail("give exactly one of --file, --from-snapshot or --kubeconfig", code=2)
    start = snap_plan = snap = None
    if allow_evictions and from_snapshot is None and kubeconfig is None:
        fail("--allow-evictions is for --from-snapshot or --kubeconfig", code=2)
    if verify and from_snapshot is None and kubeconfig is None:
        fail("--verify is for --from-snapshot or --kubeconfig", code=2)
    if from_snapshot is not None or kubeconfig is not None:
        if api != "device-plugin":
            fail("--from-snapshot plans device-plugin resources only (--api device-plugin)", code=2)
        snap, start, snap_plan = _snapshot_start(from_snapshot, kubeconfig, solver, allow_evictions)
        inp = start.input
    else:
        try:
            inp = load_input([str(f) for f in files or []])
        except PlanInputError as exc:
            fail(str(exc))
    updates: dict[str, object] = {}
    if allow_unconfirmed_mig:
        updates["allow_unconfirmed_mig"] = True
    if mig_strategy:
        updates["mig_strategy"] = mig_strategy
    if updates:
        inp = inp.model_copy(update={"options": inp.options.model_copy(update=updates)})
    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out {out}: is a file; give a directory (it is created if missing)")
    method: Literal["auto", "exact", "heuristic"] | None = solver  # type: ignore[assignment]
    try:
        result = snap_plan if snap_plan is not None else make_plan(inp, solver=method)
    except ValueError as exc:
        fail(str(exc))
    dra: DraPlan | None = None
    if api == "dra":
        try:
            workloads = {w.name: w for w in inp.workloads}
            dra = dra_plan(result, workloads, mig_fallback)
            written = render_dra(result, workloads, mig_fallback)
        except DraPlanError as exc:
            fail(f"--api dra: the plan cannot be expressed through DRA: {exc}")
    else:
        written = render(result)
    change = None
    if start is not None:
        change = plan_snapshot.change_of(start, result)
        written = {**written, **plan_snapshot.files(start, result, change)}
    if out is not None:
        try:
            for rel, text in written.items():
                path = out / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            for script in ("label-nodes.sh", "apply-mig.sh"):
                if script in written:
                    (out / script).chmod(0o755)
        except OSError as exc:
            fail(f"--out {out}: cannot write the plan's files: {exc.strerror or exc}")
    if as_json:
        doc = plan_json(result)
        if dra is not None:
            doc["dra"] = dra_json(dra)
        typer.echo(json.dumps(doc, indent=2))
    else:
        console.print(_workload_table(result, dra))
        console.print(_node_table(result))
        if dra is not None:
            console.print(_claim_table(dra))
            for note in dra.notes:
                console.print(f"[yellow]dra[/yellow] {note}", soft_wrap=True)
        for n in result.nodes:
            for p in n.prerequisites:
                console.print(f"[yellow]prerequisite[/yellow] {n.name}: {p}", soft_wrap=True)
        for w in result.warnings:
            console.print(f"[yellow]warning[/yellow] {w}", soft_wrap=True)
        bought: dict[str, list[int]] = {}
        for n in result.nodes:
            if n.bought:
                bought.setdefault(n.bought, []).append(len(n.gpus))
        if bought:
            parts = [
                f"{name} x{len(cards)} ({sum(cards)} cards)"
                for name, cards in sorted(bought.items())
            ]
            console.print(f"to buy: {', '.join(parts)}")
        gpus = f"{result.gpus_used} GPUs used"
        cost = f", cost {result.cost:,.0f}" if result.cost else ""
        if result.optimal:
            proof = "optimal plan"
        elif result.solver == "heuristic":
            proof = "heuristic plan"
        elif result.bound is not None:
            # the time limit stopped the exact solver: say how far from optimal it may be
            proof = (
                f"plan not proven optimal: objective {result.objective:.4g}, "
                f"lower bound {result.bound:.4g}"
            )
        else:
            proof = "plan not proven optimal"
        console.print(f"{gpus}{cost}; {proof} ({result.note})")
        if change is not None and start is not None:
            console.print(
                f"change: {len(change.nodes)} nodes relabelled, {change.repartitioned} GPUs "
                f"repartitioned, {sum(len(p) for p in start.evicted.values())} running pods "
                "disrupted"
            )
            for line in start.not_planned:
                console.print(f"[yellow]not planned[/yellow] {line}", soft_wrap=True)
        if out is not None:
            console.print(f"wrote {len(written)} files to {out}")
    if explain:
        _explain(result)
    if verify and snap is not None and start is not None and change is not None:
        still = _verify(snap, start, change, str(from_snapshot or "the cluster"), as_json)
        raise typer.Exit(EXIT_STILL_PENDING if still else 0)
    if not result.complete:
        lines = []
        for wp in result.workloads:
            if wp.left:
                hint = f"; would fit with: {' or '.join(wp.suggestions)}" if wp.suggestions else ""
                lines.append(
                    f"{wp.name}: {wp.left} of {wp.replicas} replicas left over: {wp.left_reason}{hint}"
                )
        fail("\n".join(lines), code=EXIT_PARTIAL)


def _verify(
    snap: Snapshot,
    start: plan_snapshot.Start,
    change: plan_snapshot.Change,
    shown: str,
    as_json: bool,
) -> int:
    """The runbook tried on the snapshot's twin; prints each originally Pending pod's fate
    and returns how many would still not run."""
    import time

    from kubegpu.base.loader import InputError
    from kubegpu.replan.verify import runbook_steps
    from kubegpu.sim.stack import StackError
    from kubegpu.whatif.change import from_steps
    from kubegpu.whatif.command import prepare_snapshot, run
    from kubegpu.whatif.twin import TwinError
    from kubegpu.whatif.twin_spec import TwinSpecError

    err = Console(stderr=True, highlight=False)
    t0 = time.monotonic()

    def say(text: str) -> None:
        err.print(f"[bold cyan]{time.monotonic() - t0:6.1f}s[/] verify: {text}")

    try:
        steps = runbook_steps(snap, start, change)
        wchange = from_steps(
            steps.config_maps, steps.policy_patch, steps.labels, steps.notes, source="runbook"
        )
        spec = prepare_snapshot(snap, wchange, shown)
        report = asyncio.run(run(spec, wchange, chart=None, settle_timeout=300.0, say=say))
    except (plan_snapshot.SnapshotPlanError, InputError, TwinSpecError) as exc:
        fail(f"--verify: {exc}")
    except (TwinError, StackError) as exc:
        fail(f"--verify: the twin could not run: {exc}")
    still = report.still_pending
    out = err if as_json else console
    if not report.settled:
        out.print(f"[yellow]verify[/yellow] the twin did not settle: {'; '.join(report.unsettled)}")
    for o in report.was_pending:
        if o.ran:
            out.print(f"verify: {o.pod} runs on the twin (node {o.node})", soft_wrap=True)
        else:
            why = f": {o.reason}" if o.reason else ""
            out.print(
                f"[red]verify[/red]: {o.pod} would still be {o.phase or 'absent'}{why}",
                soft_wrap=True,
            )
    out.print(
        f"verify: {len(report.was_pending) - len(still)} of {len(report.was_pending)} "
        "Pending pods run on the twin after the runbook"
    )
    return len(still)


def _snapshot_start(
    path: Path | None, kubeconfig: Path | None, solver: str | None, allow_evictions: bool
) -> tuple[Snapshot, plan_snapshot.Start, Plan]:
    """The planner's starting point from a snapshot file or a read-only capture."""
    import httpx2
    from lightkube.core.exceptions import ApiError, ConfigError

    from kubegpu.doctor.snapshot import SnapshotError, load_snapshot

    try:
        snap = load_snapshot(path) if path is not None else asyncio.run(_capture(kubeconfig))
    except SnapshotError as exc:
        fail(str(exc))
    except (ApiError, ConfigError, OSError, httpx2.HTTPError) as exc:
        fail(f"cannot read the cluster: {exc}")
    try:
        return (
            snap,
            *plan_snapshot.plan_from(
                snap, solver=solver or "auto", allow_evictions=allow_evictions
            ),
        )
    except (plan_snapshot.SnapshotPlanError, ValueError) as exc:
        fail(f"{path or 'the cluster'}: {exc}")


async def _capture(kubeconfig: Path | None) -> Snapshot:
    from kubegpu.doctor.capture import capture_config

    return await capture_config(read_kubeconfig(kubeconfig))
