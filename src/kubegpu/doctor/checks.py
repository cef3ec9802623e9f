"""The doctor's checks: each a small pure function from a Snapshot to its findings.

Every check looks for one pitfall the reference documents (docs/doctor.md lists them with
their evidence and fix) and says what in the snapshot shows it. None does I/O, so each is
tested on snapshots (captured from the simulated cluster broken on purpose, or built by
hand) and `kubegpu what-if` runs the same checks on its simulated twin.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

from kubegpu.catalog import nvidia
from kubegpu.catalog.models import driver_at_least
from kubegpu.catalog.placement import PlacedInstance, mig_driver_problem
from kubegpu.doctor.facts import (
    MIG_PARTED_KEY,
    driver,
    gpu_model,
    is_gpu_node,
    known_gpu_count,
    mig_enabled,
    mig_parted_config,
    mig_parted_configmap,
    node_ref,
    plugin_config_of,
    plugin_configmap,
    spec_at,
    wanted_mig_config,
)
from kubegpu.doctor.findings import Finding, Severity
from kubegpu.doctor.snapshot import NodeInfo, PodInfo, Snapshot
from kubegpu.mig.config import ConfigError
from kubegpu.mig.headroom import fits_after_repack, free_slices, more_instances
from kubegpu.mig.targets import NodeGpu, plan_coverage, plan_node
from kubegpu.sharing.isolation import STRENGTH, AnnotationError, Method, parse_annotation

ERROR, WARNING = Severity.ERROR, Severity.WARNING
Check = Callable[[Snapshot], Iterator[Finding]]

# The workload label convention (docs/doctor.md): the weakest isolation a pod accepts, in the
# words of kubegpu.sharing.isolation (the node labels, the pod annotation, `plan --explain`).
ISOLATION_LABEL = nvidia.ISOLATION_REQUIRED_LABEL
CRASH_RESTARTS = 3  # restarts after which a failing operand counts as crash-looping...
STABLE_S = 600.0  # ...unless it has run this long since its last restart


def _gpu_nodes(snapshot: Snapshot) -> Iterator[NodeInfo]:
    return (n for n in snapshot.nodes if is_gpu_node(n))


def _labels(node: NodeInfo, *keys: str) -> str:
    return ", ".join(f"{k}={node.labels[k]}" for k in keys if k in node.labels) or "(no labels)"


# --- the cluster as a whole ------------------------------------------------------------------


def no_gpu_nodes(snapshot: Snapshot) -> Iterator[Finding]:
    """Not one GPU node: every other check has nothing to look at, so silence from them is
    no clean bill of health (a wrong kubeconfig context, or no operator or NFD to label)."""
    if any(is_gpu_node(n) for n in snapshot.nodes):
        return
    source = f" from {snapshot.source}" if snapshot.source else ""
    owners = [f"{o.kind} {o.name}" for o in (*snapshot.cluster_policies, *snapshot.gpu_clusters)]
    policies = ", ".join(owners) if owners else "no ClusterPolicy or GPUCluster either"
    yield Finding(
        check="no-gpu-nodes",
        severity=WARNING,
        object="cluster",
        summary=f"no GPU node among the {len(snapshot.nodes)} node(s) read: nothing was checked "
        "on GPUs",
        evidence=f"{len(snapshot.nodes)} node(s){source}; none has {nvidia.GPU_PRESENT}=true, "
        f"a {nvidia.GPU_PRODUCT} label, one of {', '.join(nvidia.NFD_GPU_LABELS)}=true or an "
        f"{nvidia.PREFIX} resource in its capacity; {policies}",
        fix="check that the kubeconfig context is the GPU cluster's, and that Node Feature "
        "Discovery (or the chart's node labeller) and the operator run there and label the "
        "GPU nodes",
    )


# --- MIG strategy and layout -----------------------------------------------------------------


def mig_single_invalid(snapshot: Snapshot) -> Iterator[Finding]:
    """`single` on a node whose GPUs disagree: GFD labels the product `-MIG-INVALID`."""
    for node in _gpu_nodes(snapshot):
        if node.labels.get(nvidia.GPU_PRODUCT, "").endswith(nvidia.MIG_INVALID_SUFFIX):
            yield Finding(
                check="mig-single-invalid",
                severity=ERROR,
                object=node_ref(node),
                summary="MIG strategy 'single' on GPUs with different layouts or some without MIG",
                evidence=_labels(
                    node,
                    nvidia.GPU_PRODUCT,
                    nvidia.MIG_STRATEGY,
                    nvidia.GPU_COUNT,
                    nvidia.MIG_CONFIG,
                ),
                fix="give every GPU of the node the same MIG layout (a uniform "
                f"{nvidia.MIG_CONFIG} config), or set the ClusterPolicy's spec.mig.strategy "
                "to 'mixed'",
            )


def mps_on_mig(snapshot: Snapshot) -> Iterator[Finding]:
    """MPS configured on a node with MIG on: the device plugin and GFD refuse it."""
    for node in _gpu_nodes(snapshot):
        if not (mig_enabled(node) or wanted_mig_config(node)):
            continue
        choice = plugin_config_of(snapshot, node)
        config = choice.config
        if config is None or config.sharing.mps is None or config.mps_on_mig:
            continue
        yield Finding(
            check="mps-on-mig",
            severity=ERROR,
            object=node_ref(node),
            summary=f"MPS sharing ({choice.shown}) on a node whose GPUs have MIG enabled",
            evidence=f"{choice.shown} of configmap {choice.configmap} sets sharing.mps; "
            + _labels(node, nvidia.DEVICE_PLUGIN_CONFIG, nvidia.MIG_CONFIG, nvidia.GPU_PRODUCT),
            fix=f"label the node {nvidia.DEVICE_PLUGIN_CONFIG} with a config without MPS "
            f"(time-slicing or none), or set {nvidia.MIG_CONFIG}={nvidia.MIG_ALL_DISABLED}; "
            "kubegpu shares MIG instances through MPS only with sharing.mps.migInstances: true",
        )


def mig_config_state(snapshot: Snapshot) -> Iterator[Finding]:
    """`nvidia.com/mig.config.state` pending or failed, with the MIG manager's last word."""
    for node in _gpu_nodes(snapshot):
        state = node.labels.get(nvidia.MIG_CONFIG_STATE)
        if state not in (nvidia.MIG_STATE_PENDING, nvidia.MIG_STATE_FAILED):
            continue
        events = [
            e
            for e in snapshot.events_about("Node", node.name)
            if e.component.endswith("mig-manager")
        ]
        last = (
            f"; last MIG manager event: {events[-1].reason}: {events[-1].message}"
            if events
            else ("; no event from the MIG manager")
        )
        failed = state == nvidia.MIG_STATE_FAILED
        yield Finding(
            check="mig-config-state",
            severity=ERROR if failed else WARNING,
            object=node_ref(node),
            summary=f"MIG reconfiguration {state} for {node.labels.get(nvidia.MIG_CONFIG, '?')!r}",
            evidence=_labels(node, nvidia.MIG_CONFIG, nvidia.MIG_CONFIG_STATE) + last,
            fix=(
                "read the MIG manager's event and logs, fix the cause (layout, busy GPU, "
                f"driver), then relabel {nvidia.MIG_CONFIG}"
                if failed
                else "if it stays pending, check that the MIG manager runs on the node "
                "(its DaemonSet and the nvidia.com/gpu.deploy.mig-manager label) and its logs"
            ),
        )


def mig_layout_unplaceable(snapshot: Snapshot) -> Iterator[Finding]:
    """A node labelled for a MIG layout that is not in the mig-parted ConfigMap, or that its
    GPUs cannot place (the rules of `kubegpu mig validate --model`, with the node's driver)."""
    for node in _gpu_nodes(snapshot):
        wanted = wanted_mig_config(node)
        if wanted is None:
            continue
        cm_name = mig_parted_configmap(snapshot, node)
        cm = snapshot.config_map(cm_name)
        if cm is None and cm_name == _policy_mig_configmap(snapshot):
            continue  # one finding for the cluster: policy-configmap-missing
        parsed, parse_error = (
            mig_parted_config(cm.data[MIG_PARTED_KEY], f"configmap {cm_name}")
            if cm is not None and MIG_PARTED_KEY in cm.data
            else (None, None)
        )
        ref = node_ref(node)
        evidence = _labels(node, nvidia.MIG_CONFIG, nvidia.GPU_PRODUCT, nvidia.GPU_COUNT)
        if parsed is None or wanted not in parsed.mig_configs:
            why = parse_error or (
                f"configmap {snapshot.operator_namespace}/{cm_name} "
                + ("does not exist" if cm is None else f"has no config {wanted!r}")
            )
            yield Finding(
                check="mig-layout-unplaceable",
                severity=ERROR,
                object=ref,
                summary=f"MIG config {wanted!r} is not defined",
                evidence=f"{evidence}; {why}",
                fix=f"add {wanted!r} to the mig-parted ConfigMap or label the node with a "
                "config it defines",
            )
            continue
        model = gpu_model(node)
        if model is None:
            continue
        count = known_gpu_count(snapshot, node)
        entries = parsed.mig_configs[wanted]
        # a count the labels do not say (`facts.gpu_count`: MIG-INVALID without isolation
        # labels): as many GPUs as the config names, so no index is "out of range" for want
        # of a count
        named = [i for e in entries if e.devices != "all" for i in e.devices]
        gpus = [
            NodeGpu(i, model.pci_device_id, model)
            for i in range(count or (max(named) + 1 if named else 1))
        ]
        try:
            if count is None:
                plan = plan_coverage(wanted, entries, gpus, driver(node))
                problems = list(plan.uncovered.values())
                if problems:
                    raise ConfigError("\n".join(problems))
            else:
                plan_node(wanted, entries, gpus, driver(node))
        except ConfigError as exc:
            yield Finding(
                check="mig-layout-unplaceable",
                severity=ERROR,
                object=ref,
                summary=f"the node's {model.id} GPUs cannot place MIG config {wanted!r}",
                evidence=f"{evidence}; {str(exc).splitlines()[0]}",
                fix=f"check it with `kubegpu mig validate -f config.yaml -c {wanted} --model "
                f"{model.id}{f':{count}' if count else ''}` and label the node with a layout "
                "that fits",
            )


def _layout_of(snapshot: Snapshot, node: NodeInfo) -> list[tuple[int, list[PlacedInstance]]]:
    """The MIG instances on each GPU of a node whose layout is applied (`mig.config` with
    state success), as the MIG manager places them; [] when that cannot be known."""
    wanted = wanted_mig_config(node)
    model = gpu_model(node)
    if wanted is None or model is None or model.mig is None:
        return []
    if node.labels.get(nvidia.MIG_CONFIG_STATE) != nvidia.MIG_STATE_SUCCESS:
        return []
    cm_name = mig_parted_configmap(snapshot, node)
    cm = snapshot.config_map(cm_name)
    if cm is None or MIG_PARTED_KEY not in cm.data:
        return []
    parsed, _ = mig_parted_config(cm.data[MIG_PARTED_KEY], f"configmap {cm_name}")
    if parsed is None or wanted not in parsed.mig_configs:
        return []
    entries = parsed.mig_configs[wanted]
    named = [i for e in entries if e.devices != "all" for i in e.devices]
    count = known_gpu_count(snapshot, node) or (max(named) + 1 if named else 1)
    gpus = [NodeGpu(i, model.pci_device_id, model) for i in range(count)]
    try:
        plan = plan_coverage(wanted, entries, gpus, driver(node))
    except ConfigError:
        return []  # mig-layout-unplaceable says why
    return [
        (t.index, [PlacedInstance(d.start, d.gi_profile) for d in t.devices])
        for t in plan.targets
        if t.mig_enabled
    ]


def mig_fragmented(snapshot: Snapshot) -> Iterator[Finding]:
    """Pending pods ask for a MIG profile no GPU has room for where its instances are, while
    some GPU would hold it after a repacking (its instances destroyed and recreated
    elsewhere, which needs the GPU drained): the fix is a new layout, not more GPUs."""
    asked: dict[str, list[str]] = {}
    for pod in snapshot.workload_pods:
        if pod.phase != "Pending" or pod.node:
            continue
        for resource in pod.gpu_resources:
            if resource.startswith(nvidia.MIG_RESOURCE_PREFIX):
                asked.setdefault(resource.removeprefix(nvidia.MIG_RESOURCE_PREFIX), []).append(
                    pod.key
                )
    if not asked:
        return
    layouts = [(node, _layout_of(snapshot, node)) for node in _gpu_nodes(snapshot)]
    for profile, pods in sorted(asked.items()):
        room, repack = [], []
        for node, gpus in layouts:
            model = gpu_model(node)
            if (
                model is None
                or model.mig is None
                or profile not in {p.name for p in model.mig.gpu_instance_profiles}
            ):
                continue
            for index, placed in gpus:
                if more_instances(model, placed, driver(node)).get(profile, 0) > 0:
                    room.append(f"{node.name} GPU {index}")
                elif fits_after_repack(model, placed, profile, driver(node)):
                    free = free_slices(model, placed)
                    shown = ", ".join(str(pi) for pi in placed) or "none"
                    repack.append(
                        f"{node.name} GPU {index} ({free} slices free; instances {shown})"
                    )
        if room or not repack:
            continue
        yield Finding(
            check="mig-fragmented",
            severity=WARNING,
            object="cluster",
            summary=f"{len(pods)} Pending pod(s) ask for {profile}, which no GPU has room for "
            "where its instances are; a repacking would make room",
            evidence=f"pods {', '.join(sorted(pods)[:5])}; room after a repacking on: "
            + "; ".join(repack[:5]),
            fix=f"label one of those nodes {nvidia.MIG_CONFIG} with a layout that includes "
            f"{profile} (the MIG manager recreates the GPU's instances: drain it first); "
            "`kubegpu mig layouts` lists the layouts",
        )


# --- device-plugin configs ---------------------------------------------------------------------


def _config_names(snapshot: Snapshot, cm_name: str | None) -> str:
    cm = snapshot.config_map(cm_name) if cm_name else None
    if cm is None:
        return "(the ConfigMap does not exist)"
    return ", ".join(sorted(cm.data)) or "no configs"


def _policy_mig_configmap(snapshot: Snapshot) -> str | None:
    name = spec_at(snapshot.cluster_policy, "migManager", "config", "name")
    return name if isinstance(name, str) and name else None


def policy_configmap_missing(snapshot: Snapshot) -> Iterator[Finding]:
    """A ConfigMap the ClusterPolicy names (device-plugin configs, MIG layouts) that does not
    exist: one finding for the policy field, not one per node that would read it."""
    policy = snapshot.cluster_policy
    if policy is None:
        return
    plugin_cm, _ = plugin_configmap(snapshot)
    named = (
        ("spec.devicePlugin.config.name", plugin_cm, "the device plugin and GFD keep the "
         "built-in defaults (kubegpu) or fail to start (upstream)"),
        ("spec.migManager.config.name", _policy_mig_configmap(snapshot),
         "the MIG manager has no layouts to apply"),
    )  # fmt: skip
    for field, name, effect in named:
        if name is None or snapshot.config_map(name) is not None:
            continue
        readers = [n.name for n in _gpu_nodes(snapshot)]
        yield Finding(
            check="policy-configmap-missing",
            severity=ERROR,
            object=f"clusterpolicy/{policy.name}",
            summary=f"ConfigMap {name!r} named by {field} does not exist",
            evidence=f"{field}={name}; no ConfigMap {snapshot.operator_namespace}/{name}; "
            f"{effect}; GPU nodes affected: {', '.join(readers) or 'none'}",
            fix=f"create ConfigMap {name} in {snapshot.operator_namespace} or correct {field}",
        )


def plugin_config_missing(snapshot: Snapshot) -> Iterator[Finding]:
    """A node's `nvidia.com/device-plugin.config` (or the policy's default) names a config the
    ConfigMap does not have, or one that does not load."""
    cm_name, _ = plugin_configmap(snapshot)
    if cm_name is not None and snapshot.config_map(cm_name) is None:
        return  # policy-configmap-missing says it once
    for node in _gpu_nodes(snapshot):
        choice = plugin_config_of(snapshot, node)
        if choice.error is None:
            continue
        missing = choice.error == "missing"
        yield Finding(
            check="plugin-config-missing" if missing else "plugin-config-invalid",
            severity=ERROR,
            object=node_ref(node),
            summary=(
                f"device-plugin config {choice.name!r} does not exist"
                if missing
                else f"device-plugin config {choice.name!r} does not load"
            ),
            evidence=(
                f"{_labels(node, nvidia.DEVICE_PLUGIN_CONFIG)}; configmap "
                f"{snapshot.operator_namespace}/{cm_name} has: " + _config_names(snapshot, cm_name)
                if missing
                else choice.error or ""
            ),
            fix=(
                f"add {choice.name!r} to the ConfigMap or relabel the node with an existing config"
                if missing
                else f"correct config {choice.name!r} (`kubegpu device-plugin --config FILE` "
                "checks a file)"
            ),
        )


def plugin_config_no_default(snapshot: Snapshot) -> Iterator[Finding]:
    """Several device-plugin configs, none of them the default: an unlabelled node silently
    runs the built-in defaults."""
    cm_name, default = plugin_configmap(snapshot)
    if cm_name is None or default:
        return
    cm = snapshot.config_map(cm_name)
    if cm is None or "default" in cm.data or len(cm.data) == 1:
        return
    unlabelled = [
        n.name for n in _gpu_nodes(snapshot) if not n.labels.get(nvidia.DEVICE_PLUGIN_CONFIG)
    ]
    yield Finding(
        check="plugin-config-no-default",
        severity=WARNING,
        object=f"configmap/{cm.namespace}/{cm.name}",
        summary="device-plugin configs without a default",
        evidence=f"configs {', '.join(sorted(cm.data)) or 'none'}; no key 'default' and no "
        "spec.devicePlugin.config.default in the ClusterPolicy"
        + (
            f"; unlabelled GPU nodes run the built-in defaults: {', '.join(unlabelled)}"
            if unlabelled
            else ""
        ),
        fix="set spec.devicePlugin.config.default in the ClusterPolicy (or add a 'default' key)",
    )


# --- policies and plugins -------------------------------------------------------------------


def policy_and_gpucluster(snapshot: Snapshot) -> Iterator[Finding]:
    """A ClusterPolicy next to a GPUCluster: two owners for one node stack."""
    if snapshot.cluster_policies and snapshot.gpu_clusters:
        policies = ", ".join(p.name for p in snapshot.cluster_policies)
        clusters = ", ".join(c.name for c in snapshot.gpu_clusters)
        yield Finding(
            check="clusterpolicy-and-gpucluster",
            severity=ERROR,
            object=f"gpucluster/{snapshot.gpu_clusters[0].name}",
            summary="a ClusterPolicy and a GPUCluster both manage the GPU stack",
            evidence=f"ClusterPolicy {policies}; GPUCluster {clusters}",
            fix="keep one: delete the GPUCluster to stay with the device plugin, or move to "
            "DRA and delete the ClusterPolicy",
        )


def _dra_devices(snapshot: Snapshot, node: str) -> int:
    return sum(
        len(s.devices)
        for s in snapshot.resource_slices
        if s.node == node and s.driver == nvidia.DRA_DRIVER
    )


def _plugin_resources(node: NodeInfo) -> dict[str, str]:
    return {
        k: v
        for k, v in node.allocatable.items()
        if (
            k == nvidia.GPU_RESOURCE
            or k.startswith((nvidia.GPU_RESOURCE + ".", nvidia.MIG_RESOURCE_PREFIX))
        )
        and v not in ("", "0")
    }


def dra_and_device_plugin(snapshot: Snapshot) -> Iterator[Finding]:
    """The DRA plugin and the device plugin both hand out the same node's GPUs."""
    for node in snapshot.nodes:
        devices = _dra_devices(snapshot, node.name)
        advertised = _plugin_resources(node)
        if not devices or not advertised:
            continue
        yield Finding(
            check="dra-and-device-plugin",
            severity=ERROR,
            object=node_ref(node),
            summary="both the DRA plugin and the device plugin serve this node's GPUs",
            evidence=f"ResourceSlices of {nvidia.DRA_DRIVER} publish {devices} device(s); "
            "allocatable " + ", ".join(f"{k}={v}" for k, v in sorted(advertised.items())),
            fix=f"set {nvidia.deploy_label('device-plugin')}=false on the node (or disable "
            "the device plugin) where DRA serves the GPUs, or stop the DRA plugin there",
        )


# --- hardware and driver -----------------------------------------------------------------------


def display_mode_graphics(snapshot: Snapshot) -> Iterator[Finding]:
    """RTX PRO Workstation / Max-Q / 5000 cards still in graphics display mode: MIG cannot
    be enabled until they are switched to compute."""
    for node in _gpu_nodes(snapshot):
        model = gpu_model(node)
        if model is None or model.mig is None or not model.mig.display_mode_compute_required:
            continue
        if node.labels.get(nvidia.GPU_MODE) != nvidia.GPU_MODE_GRAPHICS:
            continue
        wanted = wanted_mig_config(node)
        yield Finding(
            check="display-mode-graphics",
            severity=ERROR if wanted else WARNING,
            object=node_ref(node),
            summary=f"{model.product_name} in graphics display mode"
            + (f": MIG config {wanted!r} cannot be applied" if wanted else ": MIG is unavailable"),
            evidence=_labels(node, nvidia.GPU_PRODUCT, nvidia.GPU_MODE, nvidia.MIG_CONFIG),
            fix="switch the cards to compute mode on the host (`DisplayModeSelector "
            "--gpumode=compute`, then reboot), as the MIG guide requires",
        )


def driver_minimum(snapshot: Snapshot) -> Iterator[Finding]:
    """A driver below the MIG minimum (where MIG is wanted) or the DRA minimum (where the DRA
    plugin serves the node)."""
    dra_cluster = bool(snapshot.gpu_clusters)
    for node in _gpu_nodes(snapshot):
        version = driver(node)
        if version is None:
            continue
        model = gpu_model(node)
        evidence = _labels(node, nvidia.CUDA_DRIVER_VERSION_FULL, nvidia.GPU_PRODUCT)
        if (
            model is not None
            and model.mig is not None
            and (wanted_mig_config(node) or mig_enabled(node))
        ):
            problem = mig_driver_problem(model.mig, version)
            if problem:
                yield Finding(
                    check="driver-minimum",
                    severity=ERROR,
                    object=node_ref(node),
                    summary=f"driver {version} is below the MIG minimum for {model.id}",
                    evidence=f"{evidence}, {_labels(node, nvidia.MIG_CONFIG)}; {problem}",
                    fix=f"upgrade the driver to {model.mig.min_driver} or newer "
                    "(ClusterPolicy spec.driver.version), or leave MIG off on this node",
                )
        dra = dra_cluster or _dra_devices(snapshot, node.name) > 0
        if dra and not driver_at_least(version, nvidia.DRA_MIN_DRIVER):
            yield Finding(
                check="driver-minimum",
                severity=ERROR,
                object=node_ref(node),
                summary=f"driver {version} is below the DRA driver's minimum",
                evidence=f"{evidence}; the DRA driver for GPUs needs {nvidia.DRA_MIN_DRIVER} "
                "or newer",
                fix=f"upgrade the driver to {nvidia.DRA_MIN_DRIVER} or newer before serving "
                "the node with DRA",
            )


def nfd_labels(snapshot: Snapshot) -> Iterator[Finding]:
    """GPU nodes without the NFD labels the operator needs: the PCI label that makes a node a
    GPU node, and the kernel and OS labels the driver image is chosen by."""
    managed_driver = spec_at(snapshot.cluster_policy, "driver", "enabled") is not False
    for node in _gpu_nodes(snapshot):
        if not any(node.labels.get(k) == "true" for k in nvidia.NFD_GPU_LABELS):
            yield Finding(
                check="nfd-labels-missing",
                severity=ERROR,
                object=node_ref(node),
                summary="GPU node without NFD's NVIDIA PCI label: the operator does not see it",
                evidence=f"none of {', '.join(nvidia.NFD_GPU_LABELS)} is 'true'; "
                + _labels(node, nvidia.GPU_PRESENT, nvidia.GPU_PRODUCT),
                fix="deploy Node Feature Discovery (or the chart's node labeller) and check "
                "that it runs on this node",
            )
            continue
        if not snapshot.cluster_policies or not managed_driver:
            continue
        missing = [
            k
            for k in (nvidia.NFD_KERNEL_VERSION, nvidia.NFD_OS_ID, nvidia.NFD_OS_VERSION_ID)
            if not node.labels.get(k)
        ]
        if missing:
            yield Finding(
                check="nfd-labels-missing",
                severity=WARNING,
                object=node_ref(node),
                summary="GPU node without the NFD kernel/OS labels the driver image is chosen by",
                evidence=f"missing {', '.join(missing)}",
                fix="run Node Feature Discovery with its kernel and system sources on this node",
            )


# --- pods ------------------------------------------------------------------------------------


def operand_crash_loop(snapshot: Snapshot) -> Iterator[Finding]:
    """Operand pods crash-looping, with the container's last message."""
    for pod in snapshot.operand_pods:
        for c in pod.containers:
            looping = c.state == "waiting" and c.reason == "CrashLoopBackOff"
            failing = (
                c.restart_count >= CRASH_RESTARTS
                and c.last_exit_code not in (None, 0)
                and (c.state != "running" or _seconds(c.started_at, snapshot.taken_at) < STABLE_S)
            )
            if not (looping or failing):
                continue
            last = c.last_message.strip() or c.last_reason or "no message"
            exit_code = f", exit code {c.last_exit_code}" if c.last_exit_code is not None else ""
            yield Finding(
                check="operand-crash-loop",
                severity=ERROR,
                object=f"pod/{pod.namespace}/{pod.name}",
                summary=f"{pod.owner_name} container {c.name} is crash-looping on "
                f"{pod.node or '?'} ({c.restart_count} restarts)",
                evidence=f"state {c.state} {c.reason}{exit_code}; last message: {last}",
                fix=f"read `kubectl logs -n {pod.namespace} {pod.name} -c {c.name} --previous`"
                " and fix what it reports (often the ClusterPolicy's settings for this operand)",
            )


# container states in which an operand never starts: the kubelet cannot build its config
# (a ConfigMap, Secret or key it names is missing) or its image
NOT_STARTING = ("CreateContainerConfigError", "CreateContainerError", "ErrImagePull",
                "ImagePullBackOff", "InvalidImageName")  # fmt: skip


def operand_not_starting(snapshot: Snapshot) -> Iterator[Finding]:
    """Operand containers stuck before they start: no restart count ever grows, so the
    crash-loop check does not see them."""
    for pod in snapshot.operand_pods:
        for c in pod.containers:
            if c.state != "waiting" or c.reason not in NOT_STARTING:
                continue
            yield Finding(
                check="operand-not-starting",
                severity=ERROR,
                object=f"pod/{pod.namespace}/{pod.name}",
                summary=f"{pod.owner_name} container {c.name} cannot start on "
                f"{pod.node or '?'}: {c.reason}",
                evidence=f"state waiting {c.reason}: {c.message or 'no message'}",
                fix="create what the message names (a ConfigMap, Secret or key the ClusterPolicy "
                "points the operand at), or correct the image in the ClusterPolicy",
            )


def pod_admission_failed(snapshot: Snapshot) -> Iterator[Finding]:
    """GPU pods the kubelet refused after the scheduler placed them: the device plugin (or
    its resource) failed the allocation, and the pod stays Failed, never retried."""
    for pod in snapshot.workload_pods:
        if pod.phase != "Failed" or not pod.reason.endswith("AdmissionError"):
            continue
        yield Finding(
            check="pod-admission-failed",
            severity=ERROR,
            object=f"pod/{pod.namespace}/{pod.name}",
            summary=f"the kubelet on {pod.node or '?'} refused the pod: {pod.reason}",
            evidence=f"phase Failed, reason {pod.reason}: {pod.message or 'no message'}; asks "
            + (", ".join(f"{k}={v}" for k, v in sorted(pod.gpu_resources.items())) or "claims"),
            fix="read the device plugin's log on the node (an Allocate that failed, e.g. "
            "failRequestsGreaterThanOne or an unhealthy device), fix it, and recreate the pod: "
            "a Failed pod is not retried",
        )


def _seconds(start: str, end: str) -> float:
    """Seconds from one RFC 3339 time to another (0 when either is unknown)."""
    try:
        a = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = dt.datetime.fromisoformat(end.replace("Z", "+00:00"))
        return (b - a).total_seconds()
    except (ValueError, TypeError):  # unparsable, or one without a time zone
        return 0.0


def _weaker(given: Method, wanted: Method) -> bool:
    return STRENGTH.index(given) > STRENGTH.index(wanted)


def _isolation_configured(snapshot: Snapshot, pod: PodInfo, resource: str) -> tuple[Method, str]:
    """What `resource` gives on the pod's node by its device-plugin config: (method, evidence)."""
    node = snapshot.node(pod.node)
    choice = plugin_config_of(snapshot, node) if node is not None else None
    config = choice.config if choice is not None else None
    shown = choice.shown if choice is not None else "no device-plugin config"
    if config is not None and config.sharing_strategy != "none" and config.replicated:
        replicated = config.replicated
        for r in replicated.resources:
            if r.replicas > 1 and resource in {r.name, replicated.shared_name(r)}:
                method = (
                    Method.TIME_SLICED if config.sharing_strategy == "time-slicing" else Method.MPS
                )
                return method, f"node {pod.node} runs {shown}, which shares {resource}"
    mig = resource.startswith(nvidia.MIG_RESOURCE_PREFIX) or (
        node is not None and mig_enabled(node)
    )
    method = Method.MIG if mig else Method.EXCLUSIVE
    return method, f"node {pod.node} runs {shown}, which does not share {resource}"


def _isolation_received(pod: PodInfo) -> tuple[Method, str] | None:
    """What the device plugin says the pod got (its isolation annotation), the weakest device
    first; None without a readable annotation."""
    text = pod.annotations.get(nvidia.ISOLATION_ANNOTATION)
    if not text:
        return None
    try:
        got = [i for devices in parse_annotation(text).values() for i in devices]
    except AnnotationError:
        return None
    if not got:
        return None
    weakest = max(got, key=lambda i: STRENGTH.index(i.method))
    return weakest.method, (
        f"annotation {nvidia.ISOLATION_ANNOTATION} says device {weakest.device} is "
        f"{weakest.method.value}"
    )


def isolation_unreadable(snapshot: Snapshot) -> Iterator[Finding]:
    """An isolation label or annotation the doctor cannot read: never silently unchecked."""
    words = ", ".join(m.value for m in STRENGTH)
    for pod in snapshot.workload_pods:
        value = pod.labels.get(ISOLATION_LABEL)
        if value is not None and value not in {m.value for m in Method}:
            yield Finding(
                check="isolation-label-invalid",
                severity=WARNING,
                object=f"pod/{pod.namespace}/{pod.name}",
                summary=f"label {ISOLATION_LABEL}={value!r} is not an isolation: the pod's "
                "isolation is not checked",
                evidence=f"label {ISOLATION_LABEL}, value {value!r}; the values are {words}",
                fix=f"set {ISOLATION_LABEL} to one of {words}",
            )
        text = pod.annotations.get(nvidia.ISOLATION_ANNOTATION)
        if text:
            try:
                parse_annotation(text)
            except AnnotationError as exc:
                yield Finding(
                    check="isolation-label-invalid",
                    severity=WARNING,
                    object=f"pod/{pod.namespace}/{pod.name}",
                    summary=f"annotation {nvidia.ISOLATION_ANNOTATION} does not parse: what "
                    "the pod got is judged by the node's config instead",
                    evidence=f"annotation {nvidia.ISOLATION_ANNOTATION}: {exc}",
                    fix="check the device plugin's version on the node (it writes the "
                    "annotation); do not edit it by hand",
                )


def isolation_not_met(snapshot: Snapshot) -> Iterator[Finding]:
    """Time-slicing (or MPS) where the workload's isolation label asks for more: judged by what
    the device plugin recorded on the pod, else by the node's device-plugin config."""
    for pod in snapshot.workload_pods:
        if ISOLATION_LABEL not in pod.labels:
            continue
        try:
            wanted = Method(pod.labels[ISOLATION_LABEL])
        except ValueError:
            continue  # isolation-label-invalid says so
        if not pod.node:
            continue
        received = _isolation_received(pod)
        if received is not None:
            given = [("its GPUs", *received)]
        else:
            given = [
                (res, *_isolation_configured(snapshot, pod, res))
                for res in sorted(pod.gpu_resources)
            ]
        for what, method, evidence in given:
            if not _weaker(method, wanted):
                continue
            yield Finding(
                check="isolation-not-met",
                severity=ERROR,
                object=f"pod/{pod.namespace}/{pod.name}",
                summary=f"asks for {wanted.value!r} isolation but gets {method.value} "
                f"({what}) on {pod.node}",
                evidence=f"label {ISOLATION_LABEL}={wanted.value}; {evidence}",
                fix="schedule the pod on a node without sharing (a nodeSelector on "
                f"{nvidia.GPU_SHARING_STRATEGY}=none, or MIG instances), or relax its label",
            )


CHECKS: tuple[tuple[str, Check], ...] = (
    ("no-gpu-nodes", no_gpu_nodes),
    ("mig-single-invalid", mig_single_invalid),
    ("mps-on-mig", mps_on_mig),
    ("policy-configmap-missing", policy_configmap_missing),
    ("plugin-config-missing", plugin_config_missing),
    ("plugin-config-no-default", plugin_config_no_default),
    ("clusterpolicy-and-gpucluster", policy_and_gpucluster),
    ("dra-and-device-plugin", dra_and_device_plugin),
    ("mig-config-state", mig_config_state),
    ("mig-layout-unplaceable", mig_layout_unplaceable),
    ("mig-fragmented", mig_fragmented),
    ("display-mode-graphics", display_mode_graphics),
    ("driver-minimum", driver_minimum),
    ("nfd-labels-missing", nfd_labels),
    ("operand-crash-loop", operand_crash_loop),
    ("operand-not-starting", operand_not_starting),
    ("pod-admission-failed", pod_admission_failed),
    ("isolation-label-invalid", isolation_unreadable),
    ("isolation-not-met", isolation_not_met),
)


def run_checks(snapshot: Snapshot) -> list[Finding]:
    """Every check's findings, errors first, then by object and check."""
    findings = [f for _, check in CHECKS for f in check(snapshot)]
    return sorted(findings, key=lambda f: (-int(f.severity), f.object, f.check))
