"""The static MIG checks and the simulated GPU accept and refuse exactly the same things.

`mig validate`, `mig apply`'s plan and the planner decide with kubegpu.mig.geometry; the
simulated GPU decides when instances are created through NVML. Both use the rules of
kubegpu.catalog.placement, and these properties hold them to it, for every MIG model and a
range of drivers: a mix of profiles fits one GPU by the static check exactly when the GPU
lets every instance of it be created, and a concrete layout built one instance at a time is
refused at the same step, with the same error kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.catalog import GpuInstanceProfile, GpuModel, all_models
from kubegpu.catalog.placement import PlacedInstance, Refusal, layout_problem
from kubegpu.mig.geometry import fits, misfit_reason
from kubegpu.nvml import errors
from kubegpu.nvml.sim import SimControls, SimNvml

MIG_MODELS = [m for m in all_models() if m.mig]
# driver branches around every gate in the catalog (model minimums, R470/R510/R525 rules)
DRIVERS = [
    "450.80.02",
    "470.82.01",
    "510.47.03",
    "525.60.13",
    "550.90.07",
    "570.133.20",
    "575.51.03",
    "580.95.05",
]
REFUSALS = (errors.InsufficientResources, errors.InvalidArgument, errors.NotSupported)
ERROR_KIND = {
    errors.NotSupported: Refusal.DRIVER,
    errors.InsufficientResources: Refusal.CAPACITY,
    errors.InvalidArgument: Refusal.PLACEMENT,
}


@pytest.fixture(scope="module")
def gpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SimNvml]:
    """One simulated GPU per MIG model, MIG on; every example leaves it empty again."""
    root: Path = tmp_path_factory.mktemp("agree")
    return {
        m.id: SimNvml.create(root / f"{m.id}.json", f"{m.id}:1;mig=on;display=compute")
        for m in MIG_MODELS
    }


def sim_creates(gpu: SimNvml, profiles: list[GpuInstanceProfile]) -> bool:
    """Whether the simulated GPU lets every instance be created, trying every placement
    through NVML alone (largest first; identical profiles in increasing start order).
    Leaves the GPU as it found it."""
    todo = sorted(profiles, key=lambda p: (-p.slices, p.id))

    def go(k: int, min_start: int) -> bool:
        if k == len(todo):
            return True
        p = todo[k]
        lo = min_start if k and todo[k - 1] == p else 0
        try:
            starts = [pl.start for pl in gpu.gpu_instance_possible_placements(0, p.id)]
        except REFUSALS:
            return False
        for start in starts:
            if start < lo:
                continue
            try:
                gi = gpu.create_gpu_instance(0, p.id, start)
            except REFUSALS:
                continue
            try:
                if go(k + 1, start + 1):
                    return True
            finally:
                gpu.destroy_gpu_instance(0, gi.id)
        return False

    return go(0, 0)


def _mixes(model: GpuModel) -> st.SearchStrategy[dict[str, int]]:
    assert model.mig
    names = [p.name for p in model.mig.gpu_instance_profiles]
    return st.dictionaries(st.sampled_from(names), st.integers(1, 3), min_size=1, max_size=4)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_mix_fits_statically_exactly_when_the_gpu_creates_it(
    gpus: dict[str, SimNvml], model: GpuModel, data: st.DataObject
) -> None:
    assert model.mig
    mix = data.draw(_mixes(model), label="mix")
    driver = data.draw(st.sampled_from(DRIVERS), label="driver")
    profiles = [model.mig.profile(name) for name, n in mix.items() for _ in range(n)]
    gpu = gpus[model.id]
    SimControls.of(gpu).set_driver_version(driver)
    static = fits(model, mix, driver=driver)
    assert sim_creates(gpu, profiles) == static, (
        f"{model.id} driver {driver} {mix}: static says "
        + ("fits" if static else misfit_reason(model, mix, driver=driver))
    )
    if static:
        assert _empty(gpu)


def _empty(gpu: SimNvml) -> bool:
    try:
        return gpu.gpu_instances(0) == []
    except errors.NotSupported:
        return True


def _steps(model: GpuModel) -> st.SearchStrategy[list[PlacedInstance]]:
    assert model.mig
    cands = [PlacedInstance(s, p) for p in model.mig.gpu_instance_profiles for s in range(-1, 13)]
    return st.lists(st.sampled_from(cands), min_size=1, max_size=9)


def _clear(gpu: SimNvml) -> None:
    try:
        for gi in gpu.gpu_instances(0):
            gpu.destroy_gpu_instance(0, gi.id)
    except errors.NotSupported:
        pass


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_instances_added_one_by_one_are_refused_at_the_same_step_with_the_same_kind(
    gpus: dict[str, SimNvml], model: GpuModel, data: st.DataObject
) -> None:
    assert model.mig
    steps = data.draw(_steps(model), label="steps")
    driver = data.draw(st.sampled_from(DRIVERS), label="driver")
    gpu = gpus[model.id]
    SimControls.of(gpu).set_driver_version(driver)
    placed: list[PlacedInstance] = []
    try:
        for pi in steps:
            problem = layout_problem(model.mig, [*placed, pi], driver)
            try:
                gpu.create_gpu_instance(0, pi.profile.id, pi.start)
            except REFUSALS as exc:
                assert problem is not None, f"{model.id} {driver}: GPU refused {pi}: {exc}"
                assert ERROR_KIND[type(exc)] is problem.kind, f"{pi}: {exc} vs {problem}"
                continue
            assert problem is None, f"{model.id} {driver}: GPU created {pi}, static: {problem}"
            placed.append(pi)
    finally:
        _clear(gpu)


# -- the user's tools ---------------------------------------------------------------------------

ENGINE_BOUND = """version: v1
mig-configs:
  two-media:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.6gb+me": 1, "2g.12gb+me": 1}
"""


def test_validate_apply_and_the_gpu_refuse_a_mix_the_engines_cannot_serve(tmp_path: Path) -> None:
    """An A30 has one JPEG decoder and one OFA; each +me profile wants both."""
    from typer.testing import CliRunner

    from kubegpu.cli import app

    config = tmp_path / "c.yaml"
    config.write_text(ENGINE_BOUND)
    runner = CliRunner()
    validate = runner.invoke(app, ["mig", "validate", "-f", str(config), "--model", "a30:1"])
    assert validate.exit_code != 0
    assert "NVJPG 2 > 1" in validate.stderr
    node = tmp_path / "node.json"
    gpu = SimNvml.create(node, "a30:1")
    apply = runner.invoke(
        app, ["mig", "apply", "-f", str(config), "-c", "two-media", "--nvml", f"sim:{node}"]
    )
    assert apply.exit_code != 0
    assert "NVJPG 2 > 1" in apply.stderr
    assert not gpu.mig_mode(0).current  # refused before any GPU was touched
    assert gpu.set_mig_mode(0, True) is not None
    gpu.reset(0)
    assert sim_creates(gpu, _profiles_named("a30", "1g.6gb+me", "2g.12gb+me")) is False


def _profiles_named(model_id: str, *names: str) -> list[GpuInstanceProfile]:
    model = next(m for m in MIG_MODELS if m.id == model_id)
    assert model.mig
    return [model.mig.profile(n) for n in names]
