"""CDI specs parsed as a container runtime parses them: what kubegpu writes reads back
the same, an invalid spec is refused naming file, field and value, and a node's spec
directories resolve names with `/var/run/cdi` winning and conflicts resolving to nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubegpu.cdi.registry import Registry, node_spec_dirs
from kubegpu.cdi.spec import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    Mount,
    Spec,
    SpecError,
    dumps,
    loads,
    parse_spec,
    to_json,
)

_name = st.from_regex(r"\A[a-z0-9]([a-z0-9_.:-]{0,8}[a-z0-9])?\Z")
_path = st.from_regex(r"\A(/[a-z0-9_.-]{1,6}){1,3}\Z")
_env = st.from_regex(r"\A[A-Z_]{1,8}=[a-z0-9/,=]{0,8}\Z")
_nodes = st.builds(
    DeviceNode,
    path=_path,
    host_path=st.none() | _path,
    type=st.none() | st.sampled_from(["c", "b"]),
    major=st.none() | st.integers(0, 300),
    minor=st.none() | st.integers(0, 300),
    permissions=st.none() | st.sampled_from(["rw", "rwm", "r"]),
)
_mounts = st.builds(
    Mount,
    host_path=_path,
    container_path=_path,
    options=st.lists(st.sampled_from(["ro", "nosuid", "nodev", "rbind"]), max_size=3).map(tuple),
    type=st.none() | st.just("bind"),
)
_hooks = st.builds(
    Hook,
    hook_name=st.sampled_from(["createContainer", "startContainer", "prestart"]),
    path=_path,
    args=st.lists(st.text("abc-=:/", max_size=6), max_size=3).map(tuple),
    env=st.lists(_env, max_size=2).map(tuple),
)
_edits = st.builds(
    ContainerEdits,
    env=st.lists(_env, max_size=3).map(tuple),
    device_nodes=st.lists(_nodes, max_size=3).map(tuple),
    mounts=st.lists(_mounts, max_size=2).map(tuple),
    hooks=st.lists(_hooks, max_size=2).map(tuple),
    additional_gids=st.lists(st.integers(0, 5000), max_size=2).map(tuple),
)
_specs = st.builds(
    Spec,
    kind=st.sampled_from(
        ["nvidia.com/gpu", "k8s.gpu.nvidia.com/claim", "management.nvidia.com/gpu", "a.b/c.d"]
    ),
    devices=st.lists(st.builds(Device, _name, _edits), max_size=4, unique_by=lambda d: d.name).map(
        tuple
    ),
    edits=_edits,
    annotations=st.dictionaries(st.from_regex(r"\A[a-z]{1,5}\Z"), st.text(max_size=5), max_size=2),
)


@given(_specs, st.sampled_from([".json", ".yaml"]))
def test_a_spec_reads_back_as_written(spec: Spec, suffix: str) -> None:
    text = dumps(spec, suffix)
    again = loads(text, f"x{suffix}", suffix)
    assert to_json(again) == to_json(spec)
    # the version written is the one the content needs, and it is accepted
    assert again.version == to_json(spec)["cdiVersion"]


GOOD = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
}


@pytest.mark.parametrize(
    ("change", "field", "value", "reason"),
    [
        ({"kind": "gpu"}, "kind", "gpu", "not vendor/class"),
        ({"kind": None}, "kind", None, "not vendor/class"),
        ({"cdiVersion": "0.2.0"}, "cdiVersion", "0.2.0", "not one of"),
        ({"cdiVersion": "0.4.0"}, "cdiVersion", "0.4.0", "must be at least v0.5.0"),
        (
            {"devices": [GOOD["devices"][0], GOOD["devices"][0]]},
            "devices[1].name",
            "0",
            "duplicate device",
        ),
        ({"devices": [{"name": "-x"}]}, "devices[0].name", "-x", "not a valid CDI device name"),
        (
            {"devices": [{"name": "a", "containerEdits": {"env": ["NOEQUALS"]}}]},
            "devices[0].containerEdits.env[0]",
            "NOEQUALS",
            "not KEY=VALUE",
        ),
        (
            {"containerEdits": {"deviceNodes": [{"path": "dev/nvidia0"}]}},
            "containerEdits.deviceNodes[0].path",
            "dev/nvidia0",
            "not an absolute path",
        ),
        (
            {"containerEdits": {"hooks": [{"hookName": "later", "path": "/h"}]}},
            "containerEdits.hooks[0].hookName",
            "later",
            "not one of",
        ),
        ({"extra": 1}, "extra", 1, "unknown field"),
    ],
)
def test_an_invalid_spec_is_refused_naming_file_field_and_value(
    change: dict[str, object], field: str, value: object, reason: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**GOOD, **change}, "/etc/cdi/x.json")
    err = info.value
    assert (err.source, err.field, err.value) == ("/etc/cdi/x.json", field, value)
    assert reason in err.reason
    assert str(err).startswith(f"CDI spec /etc/cdi/x.json: {field}: {value!r}: ")


def test_bad_json_is_refused_naming_the_file() -> None:
    with pytest.raises(SpecError, match=r"CDI spec /var/run/cdi/a.json: \(document\): .*not JSON"):
        loads("{not json", "/var/run/cdi/a.json", ".json")


def _write(directory: Path, name: str, doc: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(doc))


def _spec(kind: str, device: str, node: str) -> dict[str, object]:
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": device, "containerEdits": {"deviceNodes": [{"path": node}]}}],
        "containerEdits": {"env": [f"FROM={node}"]},
    }


def test_var_run_beats_etc_and_conflicts_resolve_to_nothing(tmp_path: Path) -> None:
    etc, run = node_spec_dirs(tmp_path)
    _write(etc, "a.json", _spec("nvidia.com/gpu", "0", "/dev/nvidia7"))
    _write(run, "a.json", _spec("nvidia.com/gpu", "0", "/dev/nvidia0"))
    _write(run, "b.json", _spec("example.com/x", "d", "/dev/b"))
    _write(run, "c.json", _spec("example.com/x", "d", "/dev/c"))
    (run / "notes.txt").write_text("not a spec")
    (run / "broken.yaml").write_text("kind: [")
    reg = Registry.scan([etc, run])
    got = reg.resolve(["nvidia.com/gpu=0"])
    assert [n.path for n in got.edits.device_nodes] == ["/dev/nvidia0"]
    assert got.edits.env_map() == {"FROM": "/dev/nvidia0"}
    conflict = reg.resolve(["example.com/x=d"])
    assert conflict.unresolved == ("example.com/x=d",)
    notes = reg.failure_notes()
    assert any(
        n.startswith(f"failed to load CDI Spec CDI spec {run / 'broken.yaml'}") for n in notes
    )
    assert any(n.startswith('conflicting device "example.com/x=d"') for n in notes)
    assert len(reg.specs) == 4  # the text file is not read, the broken one defines nothing


def test_resolving_applies_each_specs_edits_once_then_each_devices() -> None:
    reg = Registry()
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void", "A=1"]},
        "devices": [
            {"name": "u-gpu-0", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-a"]}},
            {"name": "u-gpu-1", "containerEdits": {"env": ["B=2"]}},
        ],
    }
    reg.add(Path("/var/run/cdi/c.json"), parse_spec(doc, "c.json"))
    got = reg.resolve(["k8s.gpu.nvidia.com/claim=u-gpu-0", "k8s.gpu.nvidia.com/claim=u-gpu-1"])
    assert got.edits.env_map() == {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "A": "1", "B": "2"}
    missing = reg.resolve(["k8s.gpu.nvidia.com/claim=u-gpu-9"])
    assert missing.error() == (
        "CDI device injection failed: unresolvable CDI devices k8s.gpu.nvidia.com/claim=u-gpu-9"
    )
