"""What the two `kubegpu what-if` commands do, below their options.

`read_source` is the only code that talks to the source cluster, through `doctor.capture`,
which only lists and gets. `run` loads every input first (snapshot, change), so a bad file
stops it before anything starts, then builds the twin in a work directory of its own that
is removed afterwards, unless the twin failed: then its logs are named in the error.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from lightkube import AsyncClient, KubeConfig

from kubegpu.base.loader import STDIN
from kubegpu.doctor.capture import capture
from kubegpu.doctor.snapshot import Snapshot, load_snapshot
from kubegpu.sim.stack import StackError, find_chart
from kubegpu.whatif.change import (
    Change,
    ChangeError,
    check_namespaces,
    check_nodes,
    label_change,
    load_configmap,
    load_plan_dir,
    load_policy_patch,
)
from kubegpu.whatif.checks import check_change
from kubegpu.whatif.report import Report
from kubegpu.whatif.twin import TwinError, what_if
from kubegpu.whatif.twin_spec import TwinSpec, TwinSpecError, twin_spec


async def read_source(kubeconfig: Path | None, namespace: str) -> Snapshot:
    """The source cluster as a snapshot: list and get calls only."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    context = config.current_context or ""
    client = AsyncClient(config)
    try:
        return await capture(client, namespace=namespace, source=f"kubeconfig:{context}")
    finally:
        await client.close()


def load_change(
    *,
    policy_patch: Path | None,
    config_maps: list[Path],
    mig_configs: list[str],
    device_plugin_configs: list[str],
    plan_dir: Path | None,
) -> Change:
    """Every change option, read and checked: plan directory first, then the ConfigMaps,
    the ClusterPolicy patch and the labels named one by one (the later win)."""
    change = load_plan_dir(plan_dir) if plan_dir else Change()
    maps = tuple(load_configmap(p) for p in config_maps)
    patch = load_policy_patch(policy_patch) if policy_patch else None
    change = change.combine(Change(config_maps=maps, policy_patch=patch))
    return change.combine(label_change(mig_configs, device_plugin_configs))


def prepare(snapshot_file: Path, change: Change) -> TwinSpec:
    """The twin's spec from the snapshot file, with the change's nodes checked against it.
    What the snapshot cannot say (no GPU node among others) is refused here, naming the file,
    before anything starts."""
    shown = "<stdin>" if str(snapshot_file) == STDIN else str(snapshot_file)
    return prepare_snapshot(load_snapshot(snapshot_file), change, shown)


def prepare_snapshot(snapshot: Snapshot, change: Change, shown: str) -> TwinSpec:
    """`prepare` for a snapshot already loaded (`plan --from-snapshot --verify`); `shown`
    names where it came from in errors."""
    try:
        spec = twin_spec(snapshot)
    except TwinSpecError as exc:
        raise TwinSpecError(f"{shown}: {exc}") from None
    check_nodes(change, [n.name for n in spec.nodes])
    check_namespaces(change, snapshot.operator_namespace)
    policy = snapshot.cluster_policy
    maps = {
        c.name: c.data for c in snapshot.config_maps if c.namespace == snapshot.operator_namespace
    }
    check_change(change, policy.spec if policy is not None else None, maps)
    if change.policy_patch and not any(p.kind == "ClusterPolicy" for p in spec.policies):
        raise ChangeError(f"{shown}: the change patches a ClusterPolicy; there is none")
    return spec


async def run(
    spec: TwinSpec,
    change: Change,
    *,
    chart: Path | None,
    settle_timeout: float,
    say: Callable[[str], None],
) -> Report:
    found = find_chart(chart)
    work = Path(tempfile.mkdtemp(prefix="kubegpu-whatif-", dir="/tmp"))  # short socket paths
    try:
        report = await what_if(
            spec, change, chart=found, workdir=work, settle_timeout=settle_timeout, say=say
        )
    except (TwinError, StackError) as exc:
        raise TwinError(f"{exc}\n(the twin's logs are kept under {work})") from None
    shutil.rmtree(work, ignore_errors=True)
    return report
