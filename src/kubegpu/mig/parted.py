"""mig-parted's node operations over the `nvml` seam: plan, apply, assert, export, generate.

A named config is planned against the node's GPUs once (`plan_config` -> `ConfigPlan`,
one NVML read of the GPUs and driver); `apply_plan` and `assert_plan` take that plan, so a
caller that carries it through a change plans once. `apply_config` and `assert_config`
plan and act in one call (the `mig` CLI).

`apply` holds the node's MIG lock (`kubegpu.mig.lock`) for the whole change, checks the
whole node before it touches a GPU, refuses GPUs whose instances are in use, creates
instances at explicit placements (so creation order cannot fragment the GPU), and on any
failure puts every GPU it changed back the way it was and says so.

Every read sees the GPU as it really is, including what an interrupted change leaves
behind: a GPU instance without its compute instance is no MIG device, but `show`,
`assert` and `export` report it and `apply` replaces it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from kubegpu.catalog import GpuInstanceProfile, GpuModel, find_by_pci_id, get_model
from kubegpu.mig.config import ConfigError, MigConfigEntry, MigPartedConfig
from kubegpu.mig.geometry import fits, place
from kubegpu.mig.lock import MigLock, MigLockError
from kubegpu.mig.targets import GpuTarget, NodeGpu, plan_coverage
from kubegpu.nvml import Activation, Nvml, NvmlError, errors

Report = Callable[[str], None]
DEFAULT_WRITER = "mig apply"


def _quiet(_: str) -> None:
    return None


class ApplyError(RuntimeError):
    """Applying failed; `state` describes every GPU as it is now."""

    def __init__(self, message: str, state: str = "") -> None:
        super().__init__(message + (f"\n{state}" if state else ""))


class NodeStateError(RuntimeError):
    """The node's MIG state cannot be described as a mig-parted config; the message says why."""


@dataclass(frozen=True)
class GpuMigState:
    """A GPU's MIG state as mig-parted sees it: mode plus MIG devices by profile name."""

    index: int
    model: GpuModel | None
    pci_device_id: int
    mig_capable: bool
    enabled: bool
    pending: bool
    devices: Counter[str] = field(default_factory=Counter)
    # GPU instances with no compute instance (`profile@start`): no MIG device, and never
    # part of a config; what an apply killed between the two creations leaves behind
    empty_instances: tuple[str, ...] = ()

    def describe(self) -> str:
        name = self.model.id if self.model else f"0x{self.pci_device_id:08X}"
        if not self.mig_capable:
            return f"GPU {self.index} ({name}): no MIG"
        mode = "enabled" if self.enabled else "disabled"
        if self.pending != self.enabled:
            mode += f" (pending {'enabled' if self.pending else 'disabled'} after reset)"
        devs = ", ".join(f"{k}x{v}" for k, v in sorted(self.devices.items())) or "no MIG devices"
        if self.empty_instances:
            devs += "; GPU instances without a compute instance: " + ", ".join(self.empty_instances)
        return f"GPU {self.index} ({name}): MIG {mode}, {devs}"


def read_state(nvml: Nvml, index: int) -> GpuMigState:
    dev = nvml.device(index)
    model = get_model(dev.model_id) if dev.model_id else find_by_pci_id(dev.pci_device_id)
    try:
        mode = nvml.mig_mode(index)
    except errors.NotSupported:
        return GpuMigState(index, model, dev.pci_device_id, False, False, False)
    devices: Counter[str] = Counter()
    empty: list[str] = []
    if mode.current:
        mig_devices = nvml.mig_devices(index)
        devices.update(d.profile for d in mig_devices)
        with_ci = {d.gpu_instance_id for d in mig_devices}
        for gi in nvml.gpu_instances(index):
            if gi.id not in with_ci:
                empty.append(f"{_gi_name(model, gi.profile_id)}@{gi.placement.start}")
    return GpuMigState(
        index, model, dev.pci_device_id, True, mode.current, mode.pending, devices, tuple(empty)
    )


def _gi_name(model: GpuModel | None, profile_id: int) -> str:
    if model is not None and model.mig is not None:
        try:
            return model.mig.profile_by_id(profile_id).name
        except KeyError:
            pass
    return f"profile-{profile_id}"


def read_node(nvml: Nvml) -> list[GpuMigState]:
    return [read_state(nvml, i) for i in range(nvml.device_count())]


def describe_node(nvml: Nvml) -> str:
    try:
        return "\n".join(s.describe() for s in read_node(nvml))
    except NvmlError as exc:
        return f"GPU state unavailable: {exc}"


def read_gpus(nvml: Nvml) -> tuple[list[NodeGpu], str]:
    """What planning reads from NVML: every GPU's index, PCI id and catalog model, and the
    driver version. One read per plan."""
    gpus = []
    for dev in nvml.devices():
        model = get_model(dev.model_id) if dev.model_id else find_by_pci_id(dev.pci_device_id)
        gpus.append(NodeGpu(dev.index, dev.pci_device_id, model))
    return gpus, nvml.system().driver_version


@dataclass(frozen=True)
class ConfigPlan:
    """One named mig-parted config planned for one node's GPUs, read from NVML once.

    What a change carries from step to step (validate, assert, the GPUs that change, the
    reboot pass, apply, assert again) instead of planning again at each. `uncovered` GPUs
    make the plan unusable for apply (`covered()`), but `assert` reports them.
    """

    config_name: str
    entries: tuple[MigConfigEntry, ...]
    targets: tuple[GpuTarget, ...]
    uncovered: Mapping[int, str]

    def covered(self) -> tuple[GpuTarget, ...]:
        """Every GPU's target; ConfigError when the config leaves a GPU uncovered."""
        if self.uncovered:
            raise ConfigError("\n".join(self.uncovered.values()))
        return self.targets

    def changing(self, states: Sequence[GpuMigState]) -> list[int]:
        """The GPUs whose state does not match their target (what applying would change)."""
        by_index = {s.index: s for s in states}
        return [t.index for t in self.targets if not config_matches(by_index.get(t.index), t)]


def plan_config(nvml: Nvml, config_name: str, entries: Sequence[MigConfigEntry]) -> ConfigPlan:
    """Plan `config_name` for the node's GPUs; ConfigError for a bad entry (uncovered GPUs
    are recorded in the plan, not raised)."""
    gpus, driver = read_gpus(nvml)
    plan = plan_coverage(config_name, entries, gpus, driver)
    return ConfigPlan(config_name, tuple(entries), tuple(plan.targets), dict(plan.uncovered))


def plan_for_node(
    nvml: Nvml, config_name: str, entries: Sequence[MigConfigEntry]
) -> list[GpuTarget]:
    """Every GPU's target; ConfigError for a bad entry or a GPU the config leaves uncovered."""
    return list(plan_config(nvml, config_name, entries).covered())


# -- assert -----------------------------------------------------------------------------------


def mode_matches(state: GpuMigState | None, target: GpuTarget | None) -> bool:
    if target is None or state is None:
        return False
    if not state.mig_capable:
        return not target.mig_enabled
    return state.enabled == target.mig_enabled and state.pending == target.mig_enabled


def config_matches(state: GpuMigState | None, target: GpuTarget | None) -> bool:
    if state is None or target is None or not mode_matches(state, target):
        return False
    if not state.mig_capable or not target.mig_enabled:
        return True
    return not state.empty_instances and +state.devices == +target.wanted()


def assert_config(
    nvml: Nvml, config_name: str, entries: Sequence[MigConfigEntry], *, mode_only: bool = False
) -> list[str]:
    """Mismatches between the node and the config (empty: applied). Every GPU must be covered."""
    return assert_plan(nvml, plan_config(nvml, config_name, entries), mode_only=mode_only)


def assert_plan(nvml: Nvml, plan: ConfigPlan, *, mode_only: bool = False) -> list[str]:
    """Mismatches between the node's GPUs as they are now and a plan (empty: applied)."""
    targets = {t.index: t for t in plan.targets}
    problems = []
    for state in read_node(nvml):
        target = targets.get(state.index)
        if state.index in plan.uncovered:
            problems.append(
                f"GPU {state.index}: not selected by any entry of config {plan.config_name!r}"
            )
            continue
        if target is None:
            continue  # selected, but left alone: a GPU without MIG under `devices: all`
        ok = mode_matches(state, target) if mode_only else config_matches(state, target)
        if not ok:
            want = (
                ", ".join(f"{k}x{v}" for k, v in sorted(target.wanted().items()))
                or "no MIG devices"
                if target.mig_enabled
                else "MIG disabled"
            )
            problems.append(f"{state.describe()}; wanted {want}")
    return problems


# -- apply ------------------------------------------------------------------------------------


@dataclass
class ApplyResult:
    changed: list[int] = field(default_factory=list)
    reset_required: list[int] = field(default_factory=list)
    already_applied: bool = False


@dataclass(frozen=True)
class _Snapshot:
    index: int
    enabled: bool
    instances: tuple[
        tuple[int, int, tuple[int, ...]], ...
    ]  # (gi profile id, start, ci profile ids)


def _snapshot(nvml: Nvml, index: int) -> _Snapshot:
    mode = nvml.mig_mode(index)
    instances = []
    if mode.current:
        for gi in nvml.gpu_instances(index):
            cis = tuple(ci.profile_id for ci in nvml.compute_instances(index, gi.id))
            instances.append((gi.profile_id, gi.placement.start, cis))
    return _Snapshot(index, mode.pending, tuple(instances))


def _clear(nvml: Nvml, index: int) -> None:
    for gi in nvml.gpu_instances(index):
        for ci in nvml.compute_instances(index, gi.id):
            nvml.destroy_compute_instance(index, gi.id, ci.id)
        nvml.destroy_gpu_instance(index, gi.id)


def _ci_profile_id(nvml: Nvml, index: int, gi_id: int, slices: int) -> int:
    for p in nvml.compute_instance_profiles(index, gi_id):
        if p.slice_count == slices:
            return p.id
    raise errors.NotSupported(f"GPU {index} GI {gi_id}: no {slices}-slice compute-instance profile")


def _create(nvml: Nvml, target: GpuTarget) -> None:
    for dev in target.devices:
        gi = nvml.create_gpu_instance(target.index, dev.gi_profile.id, dev.start)
        nvml.create_compute_instance(
            target.index, gi.id, _ci_profile_id(nvml, target.index, gi.id, dev.ci_slices)
        )


def _restore(nvml: Nvml, snap: _Snapshot) -> None:
    mode = nvml.mig_mode(snap.index)
    if mode.current:
        _clear(nvml, snap.index)
    if mode.pending != snap.enabled:
        nvml.set_mig_mode(snap.index, snap.enabled)
    if nvml.mig_mode(snap.index).current:
        for profile_id, start, cis in snap.instances:
            gi = nvml.create_gpu_instance(snap.index, profile_id, start)
            for ci in cis:
                nvml.create_compute_instance(snap.index, gi.id, ci)


def apply_config(
    nvml: Nvml,
    config_name: str,
    entries: Sequence[MigConfigEntry],
    *,
    mode_only: bool = False,
    skip_reset: bool = False,
    report: Report = _quiet,
    lock: MigLock | None = None,
) -> ApplyResult:
    """Make the node match the config. Raises ConfigError (nothing touched) or ApplyError.

    The whole change, from planning against the node to the last instance, happens under
    the node's MIG lock: `lock` when the caller already holds it (or wants a component
    named in it), else one taken for this call.
    """
    with _locked(nvml, lock) as held:
        plan = plan_config(nvml, config_name, entries)
        return apply_plan(
            nvml, plan, mode_only=mode_only, skip_reset=skip_reset, report=report, lock=held
        )


@contextlib.contextmanager
def _locked(nvml: Nvml, lock: MigLock | None) -> Iterator[MigLock]:
    try:
        held = lock or MigLock.for_node(nvml, DEFAULT_WRITER)
        held.acquire()
    except MigLockError as exc:
        raise ApplyError(f"{exc}; nothing was changed") from None
    try:
        yield held
    finally:
        held.release()


def apply_plan(
    nvml: Nvml,
    plan: ConfigPlan,
    *,
    lock: MigLock,
    mode_only: bool = False,
    skip_reset: bool = False,
    report: Report = _quiet,
) -> ApplyResult:
    """Make the node match a plan made while holding `lock` (the node's MIG lock, taken
    again here: it counts its holds). ConfigError (nothing touched) or ApplyError."""
    with _locked(nvml, lock):
        return _apply_locked(nvml, plan, mode_only, skip_reset, report)


def _apply_locked(
    nvml: Nvml,
    plan: ConfigPlan,
    mode_only: bool,
    skip_reset: bool,
    report: Report,
) -> ApplyResult:
    targets = plan.covered()
    states = {s.index: s for s in read_node(nvml)}
    todo = [
        t
        for t in targets
        if not (mode_matches if mode_only else config_matches)(states[t.index], t)
    ]
    result = ApplyResult()
    if not todo:
        result.already_applied = True
        report(f"config {plan.config_name!r} is already applied")
        return result
    busy = []
    for t in todo:
        pids = [p.pid for p in nvml.processes(t.index)]
        if pids:
            busy.append(f"GPU {t.index}: processes {', '.join(map(str, pids))} are using it")
    if busy:
        raise ApplyError(
            "refusing to change GPUs that are in use; nothing was changed:\n" + "\n".join(busy)
        )
    snapshots = [_snapshot(nvml, t.index) for t in todo if states[t.index].mig_capable]
    try:
        _apply_mode(nvml, todo, states, result, skip_reset, report)
        if not mode_only:
            for t in todo:
                if not t.mig_enabled or not nvml.mig_mode(t.index).current:
                    continue
                if config_matches(read_state(nvml, t.index), t):
                    continue
                report(
                    f"GPU {t.index}: creating {', '.join(d.name + '@' + str(d.start) for d in t.devices) or 'no instances'}"
                )
                _clear(nvml, t.index)
                _create(nvml, t)
                result.changed.append(t.index)
    except NvmlError as exc:
        rolled = _roll_back(nvml, snapshots)
        raise ApplyError(
            f"applying config {plan.config_name!r} failed: {exc}; {rolled}", describe_node(nvml)
        ) from None
    result.changed = sorted(set(result.changed))
    return result


def _apply_mode(
    nvml: Nvml,
    todo: list[GpuTarget],
    states: dict[int, GpuMigState],
    result: ApplyResult,
    skip_reset: bool,
    report: Report,
) -> None:
    for t in todo:
        state = states[t.index]
        if not state.mig_capable or (
            state.enabled == t.mig_enabled and state.pending == t.mig_enabled
        ):
            continue
        if state.enabled:
            _clear(nvml, t.index)
        report(f"GPU {t.index}: {'enabling' if t.mig_enabled else 'disabling'} MIG mode")
        if nvml.set_mig_mode(t.index, t.mig_enabled) is Activation.RESET_REQUIRED:
            result.reset_required.append(t.index)
        result.changed.append(t.index)
    if result.reset_required and not skip_reset:
        for index in result.reset_required:
            report(f"GPU {index}: resetting to apply the MIG mode change")
            try:
                nvml.reset(index)
            except errors.NotSupported as exc:
                report(f"GPU {index}: {exc}")
                return
        result.reset_required = [
            i for i in result.reset_required if nvml.mig_mode(i).change_pending
        ]


def _roll_back(nvml: Nvml, snapshots: list[_Snapshot]) -> str:
    failed = []
    for snap in snapshots:
        try:
            _restore(nvml, snap)
        except NvmlError as exc:
            failed.append(f"GPU {snap.index}: {exc}")
    if failed:
        return "rolling back failed for " + "; ".join(failed)
    return "every GPU was put back as it was"


# -- export and generate ------------------------------------------------------------------------


def export_config(nvml: Nvml, label: str = "current") -> MigPartedConfig:
    """The node's current MIG state as a one-config mig-parted file (identical GPUs merged).

    NodeStateError when a GPU holds instances no config can describe (left by an
    interrupted change): exporting without them would claim a state the node is not in.
    """
    states = read_node(nvml)
    leftovers = [s for s in states if s.empty_instances]
    if leftovers:
        raise NodeStateError(
            "cannot export: "
            + "; ".join(
                f"GPU {s.index} has GPU instances without a compute instance "
                f"({', '.join(s.empty_instances)})"
                for s in leftovers
            )
            + " (left by an interrupted change; `kubegpu mig apply` replaces them)"
        )
    groups: dict[tuple[int, bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for s in states:
        enabled = s.enabled and s.mig_capable
        key = (s.pci_device_id, enabled, tuple(sorted(s.devices.items())) if enabled else ())
        groups.setdefault(key, []).append(s.index)
    one_kind = len({k[0] for k in groups}) == 1
    entries = []
    for (pci, enabled, devices), indexes in groups.items():
        everything = len(groups) == 1
        raw: dict[str, object] = {
            "devices": "all" if everything else indexes,
            "mig-enabled": enabled,
        }
        if not one_kind and not everything:
            raw["device-filter"] = [f"0x{pci:08X}"]
        if enabled:
            raw["mig-devices"] = dict(devices)
        entries.append(MigConfigEntry.model_validate(raw))
    return MigPartedConfig.model_validate({"version": "v1", "mig-configs": {label: entries}})


def _max_count_placeable(model: GpuModel, name: str) -> int:
    assert model.mig
    n = model.mig.profile(name).max_count
    while n > 0 and place(model, {name: n}) is None:
        n -= 1
    return n


def generate_config(models: Sequence[GpuModel]) -> MigPartedConfig:
    """The standard config set for these GPU models, as the MIG manager builds it from hardware:
    all-disabled, all-enabled, all-balanced and one all-<profile> per profile."""
    mig_models = list(dict.fromkeys(m for m in models if m.mig))
    if not mig_models:
        raise ConfigError("none of these GPUs is MIG-capable: " + ", ".join(m.id for m in models))
    many = len(mig_models) > 1

    def entry(model: GpuModel, devices: dict[str, int]) -> dict[str, object]:
        raw: dict[str, object] = {"devices": "all", "mig-enabled": True, "mig-devices": devices}
        if many:
            raw = {"device-filter": [f"0x{pci:08X}" for pci in model.pci_device_ids], **raw}
        return raw

    configs: dict[str, list[dict[str, object]]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    balanced = []
    for m in mig_models:
        assert m.mig
        base: dict[int, GpuInstanceProfile] = {}
        for p in m.mig.gpu_instance_profiles:
            if p.variant in {"", "REV2"}:
                best = base.get(p.compute_slices)
                if best is None or p.max_count > best.max_count:
                    base[p.compute_slices] = p
        recipe = {1: 2, 2: 1, 3: 1} if m.mig.compute_slices == 7 else {1: 2, 2: 1}
        if all(g in base for g in recipe):
            devices = {base[g].name: n for g, n in recipe.items()}
            if fits(m, devices):
                balanced.append(entry(m, devices))
    if balanced:
        configs["all-balanced"] = balanced
    per_profile: dict[str, list[dict[str, object]]] = {}
    for m in mig_models:
        assert m.mig
        for p in m.mig.gpu_instance_profiles:
            name = "all-" + p.name.replace("+", ".")
            per_profile.setdefault(name, []).append(
                entry(m, {p.name: _max_count_placeable(m, p.name)})
            )
    configs.update(per_profile)
    return MigPartedConfig.model_validate({"version": "v1", "mig-configs": configs})
