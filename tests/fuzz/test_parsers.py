"""Every parser of user input, fed random bytes, YAML-ish text, near-valid documents and deep
or aliased documents: the outcome is a value or the parser's own error, never another
exception, and the error message stays short whatever the input held.

Bounded for CI: a fixed number of examples (KUBEGPU_FUZZ_EXAMPLES, default 40), each with a
deadline, derandomized unless KUBEGPU_FUZZ_SEED_RANDOM=1 asks for fresh examples.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kubegpu.base.loader import DEFAULT_LIMITS, InputError, parse_yaml
from kubegpu.cdi.spec import SpecError as CdiSpecError
from kubegpu.cdi.spec import loads as load_cdi
from kubegpu.doctor.checks import run_checks
from kubegpu.doctor.snapshot import Snapshot, SnapshotError
from kubegpu.exporter.counters import CountersError, load_counters, parse_counters
from kubegpu.kube.policy import GPUClusterSpec, parse_policy_spec, unknown_fields
from kubegpu.mig.config import ConfigError
from kubegpu.mig.config import load_config as load_mig
from kubegpu.mig.config import parse_config as parse_mig
from kubegpu.nvml.sim.spec import SpecError, parse_spec
from kubegpu.plan.inputs import LIMITS as PLAN_LIMITS
from kubegpu.plan.inputs import PlanInputError, load_input, parse_input
from kubegpu.sharing.config import SharingConfigError
from kubegpu.sharing.config import load_config as load_sharing
from kubegpu.sharing.config import parse_config as parse_sharing
from kubegpu.sharing.dra_config import DraConfigError, parse_parameters
from kubegpu.sim.cluster import ClusterFileError, load_cluster
from kubegpu.sim.kubelet.podchecks import container_refusal
from kubegpu.whatif.change import ChangeError, load_policy_patch
from kubegpu.whatif.twin_spec import TwinSpecError, twin_spec

FUZZ = settings(
    max_examples=int(os.environ.get("KUBEGPU_FUZZ_EXAMPLES", "40")),
    deadline=timedelta(seconds=5),
    derandomize=os.environ.get("KUBEGPU_FUZZ_SEED_RANDOM") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_MESSAGE = 4000  # counters errors list up to 20 lines; the others are one clipped line

# --- what each parser is, from text and from a file ---------------------------------------


def _policy(text: str, source: str) -> object:
    doc = parse_yaml(text, source, InputError)
    unknown_fields(doc)
    spec = parse_policy_spec(doc if isinstance(doc, dict) else {"x": doc})
    GPUClusterSpec.model_validate(doc if isinstance(doc, dict) else {})
    return spec


def _dra(text: str, source: str) -> object:
    return parse_parameters(parse_yaml(text, source, DraConfigError), source)


def _pod_container(text: str, source: str) -> object:
    """A container as the simulated kubelet meets it: judged, never a crash."""
    doc = parse_yaml(text, source, InputError)
    container = doc if isinstance(doc, dict) else {"image": doc}
    pod = {"metadata": {"name": "p"}, "spec": {"securityContext": container.get("pod")}}
    return container_refusal(pod, container) if isinstance(pod["spec"], dict) else None


Parse = Callable[[str, str], object]
PARSERS: dict[str, tuple[Parse, tuple[type[Exception], ...]]] = {
    "mig": (parse_mig, (ConfigError,)),
    "sharing": (parse_sharing, (SharingConfigError,)),
    "plan": (parse_input, (PlanInputError,)),
    "counters": (parse_counters, (CountersError,)),
    "policy": (_policy, (InputError, ValidationError)),
    "dra": (_dra, (DraConfigError,)),
    "sim-spec": (lambda text, _: parse_spec(text), (SpecError,)),
    "cdi": (lambda text, source: load_cdi(text, source, ".yaml"), (CdiSpecError,)),
    "cdi-json": (lambda text, source: load_cdi(text, source, ".json"), (CdiSpecError,)),
    "pod-container": (_pod_container, (InputError,)),
}
LOADERS: dict[str, tuple[Callable[[Path], object], type[Exception]]] = {
    "mig": (load_mig, ConfigError),
    "sharing": (load_sharing, SharingConfigError),
    "plan": (lambda p: load_input([p]), PlanInputError),
    "cluster": (load_cluster, ClusterFileError),
    "counters": (load_counters, CountersError),
    "policy-patch": (load_policy_patch, ChangeError),
}


def outcome(call: Callable[[], object], errors: tuple[type[Exception], ...]) -> None:
    """A value, or one of `errors` with a bounded message; anything else fails the test."""
    try:
        call()
    except errors as exc:
        assert len(str(exc)) <= MAX_MESSAGE, str(exc)[:200]
        assert "Traceback" not in str(exc)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# --- valid documents the structure-aware strategies start from ----------------------------

BASES: dict[str, dict[str, Any]] = {
    "mig": {
        "version": "v1",
        "mig-configs": {
            "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
            "mixed": [
                {
                    "devices": [0, 1],
                    "device-filter": ["0x20B010DE"],
                    "mig-enabled": True,
                    "mig-devices": {"3g.40gb": 1, "1g.10gb+me": 1},
                },
                {"devices": [2], "mig-enabled": False},
            ],
        },
    },
    "sharing": {
        "version": "v1",
        "flags": {
            "migStrategy": "mixed",
            "failOnInitError": True,
            "plugin": {"deviceListStrategy": ["envvar", "cdi-cri"], "deviceIDStrategy": "uuid"},
            "gfd": {"sleepInterval": "60s"},
        },
        "resources": {"mig": [{"pattern": "1g.10gb", "name": "mig-small"}]},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "resources": [
                    {"name": "nvidia.com/gpu", "replicas": 4, "devices": [0, "1:0", "GPU-a"]},
                    {"name": "mig-small", "replicas": 2},
                ],
            }
        },
        "imex": {"channelIDs": [0]},
    },
    "plan": {
        "fleet": [
            {
                "name": "n1",
                "gpus": "h100-80gb:2",
                "driver": "575.51.03",
                "current": {"sharing": "time-slicing", "replicas": 4, "gpus": {0: {"busy": 2}}},
            },
            {"name": "pool", "gpus": "l4:4", "count": 3},
        ],
        "buy": [{"name": "box", "model": "l4", "card_price": 3000, "max_cards": 8}],
        "workloads": [
            {"name": "chat", "replicas": 3, "memory": "12GiB", "compute": "25%"},
            {"name": "train", "memory": 40, "gpus": 2, "isolation": "hardware", "nvlink": False},
        ],
        "options": {"solver": "heuristic", "time_limit": 5},
    },
    "cluster": {
        "name": "demo",
        "nodes": [
            {"name": "gpu-a", "gpus": "h100-80gb:2", "labels": {"team": "x"}},
            {"name": "cpu-1", "cpu": "8", "memory": "64Gi"},
        ],
    },
    "dra": {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"},
            },
        },
    },
    "cdi": {
        "cdiVersion": "0.5.0",
        "kind": "k8s.device-plugin.nvidia.com/gpu",
        "devices": [
            {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
            {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "mounts": [
                {
                    "hostPath": "/run/nvidia/driver/usr/bin/nvidia-smi",
                    "containerPath": "/usr/bin/nvidia-smi",
                    "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
                }
            ],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
                    "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"],
                }
            ],
        },
    },
    "pod-container": {
        "name": "main",
        "image": "ghcr.io/kubegpu/kubegpu:0.1.0",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "pod": {"runAsUser": 0},
    },
    "policy-patch": {
        "spec": {
            "mig": {"strategy": "mixed"},
            "devicePlugin": {"config": {"name": "plugin-config", "default": None}},
            "migManager": {"enabled": True, "env": [{"name": "X", "value": "1"}]},
        }
    },
    "policy": {
        "mig": {"strategy": "mixed"},
        "devicePlugin": {"enabled": True, "config": {"name": "plugin-config", "default": "any"}},
        "migManager": {"enabled": True, "config": {"name": "custom-mig-parted-config"}},
        "daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
        "dcgmExporter": {"enabled": True, "env": [{"name": "X", "value": "1"}]},
    },
}

COUNTERS_BASE = (
    "# DCGM FIELD, Prometheus metric type, help message\n"
    "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
    "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error.\n"
    "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
)

# Values that sit on the edges the validators care about: numbers as text, booleans as text,
# floats for counts, names in the wrong case, huge and empty strings.
EDGES = st.sampled_from(
    [
        "all", "7", "7.0", "true", "false", "True", "v1", "v2", "mixed", "single", "none",
        "1g.10gb", "1g.10gb+me", "7g.80gb", "1c.2g.20gb", "nvidia.com/gpu", "mig-1g.10gb",
        "nvidia.com/mig-1g.10gb", "gpu.shared", "12GiB", "0GiB", "-1", "25%", "16sm",
        "0x20B010DE", "h100-80gb:2", "l4:99", "", " ", "x" * 300, "é", "0:1", "GPU-1",
    ]
)  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | EDGES
)
KEYS = st.sampled_from(
    [
        "version", "mig-configs", "mig_enabled", "mig-enabled", "mig-devices", "devices",
        "device-filter", "flags", "migStrategy", "mig_strategy", "sharing", "timeSlicing",
        "mps", "resources", "name", "replicas", "rename", "fleet", "workloads", "buy",
        "gpus", "memory", "compute", "count", "current", "nodes", "labels", "enabled",
    ]
) | st.text(max_size=10)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with one to three random edits: a value replaced, a key removed or added."""
    doc: dict[str, Any] = yaml.safe_load(yaml.safe_dump(base))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        node: Any = doc
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if not isinstance(child, dict | list) or draw(st.booleans()):
                action = draw(st.sampled_from(["replace", "remove", "add"]))
                if action == "replace":
                    node[key] = draw(VALUES)
                elif action == "remove" and isinstance(node, dict):
                    del node[key]
                elif isinstance(node, dict):
                    node[draw(KEYS)] = draw(VALUES)
                else:
                    node.append(draw(VALUES))
                break
            node = child
    return doc


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


YAMLISH = st.text(
    alphabet="abcmigv1:-[]{}&*!|>'\"#%@,?. \n\t0x7gé\ufeff",
    max_size=200,
)


# --- the properties -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(text=YAMLISH | st.text(max_size=200))
def test_yamlish_text_gives_a_value_or_the_parsers_error(name: str, text: str) -> None:
    parse, errors = PARSERS[name]
    outcome(lambda: parse(text, "fuzz.yaml"), errors)


@pytest.mark.parametrize("name", sorted(LOADERS))
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_in_a_file_give_a_value_or_the_parsers_error(
    workdir: Path, name: str, data: bytes
) -> None:
    load, error = LOADERS[name]
    path = workdir / f"{name}.input"
    path.write_bytes(data)
    outcome(lambda: load(path), (error,))


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_fuzzing_bases_are_valid(workdir: Path, name: str) -> None:
    path = workdir / f"{name}-base.yaml"
    path.write_text(dump(BASES[name]))
    if name in LOADERS:
        LOADERS[name][0](path)
    if name in PARSERS:
        PARSERS[name][0](path.read_text(), str(path))


@pytest.mark.parametrize("name", sorted(BASES))
@FUZZ
@given(data=st.data())
def test_near_valid_documents_give_a_value_or_the_parsers_error(
    workdir: Path, name: str, data: st.DataObject
) -> None:
    text = dump(data.draw(mutated(BASES[name])))
    if name in PARSERS:
        parse, errors = PARSERS[name]
        outcome(lambda: parse(text, "fuzz.yaml"), errors)
    else:
        load, error = LOADERS[name]
        path = workdir / f"{name}-near.yaml"
        path.write_text(text)
        outcome(lambda: load(path), (error,))


SNAPSHOT_BASE: dict[str, Any] = {
    "version": 1,
    "operator_namespace": "gpu-operator",
    "nodes": [
        {
            "name": "gpu-1",
            "labels": {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "2",
                "nvidia.com/mig.config": "all-disabled",
            },
            "capacity": {"nvidia.com/gpu": "2"},
        }
    ],
    "cluster_policies": [
        {
            "kind": "ClusterPolicy",
            "name": "cluster-policy",
            "spec": {
                "mig": {"strategy": "single"},
                "devicePlugin": {"config": {"name": "dp", "default": "ts"}},
                "migManager": {"config": {"name": "layouts"}},
            },
        }
    ],
    "config_maps": [
        {"namespace": "gpu-operator", "name": "dp", "data": {"ts": "version: v1\n"}},
        {
            "namespace": "gpu-operator",
            "name": "layouts",
            "data": {
                "config.yaml": "version: v1\nmig-configs: {all-disabled: [{devices: all, mig-enabled: false}]}\n"
            },
        },
    ],
}


def test_the_snapshot_base_is_valid() -> None:
    snapshot = Snapshot.from_json(json.dumps(SNAPSHOT_BASE), "base.json")
    run_checks(snapshot)
    assert twin_spec(snapshot).nodes[0].gpus == "h100-80gb:2"


@FUZZ
@given(data=st.data())
def test_near_valid_snapshots_give_findings_a_twin_or_the_snapshots_error(
    data: st.DataObject,
) -> None:
    # the doctor and what-if read the same snapshot: neither may crash on it (issue 29: a
    # devicePlugin.config.default list, a migManager string)
    text = json.dumps(data.draw(mutated(SNAPSHOT_BASE)), default=str)

    def read() -> None:
        snapshot = Snapshot.from_json(text, "fuzz.json")
        run_checks(snapshot)
        twin_spec(snapshot)

    outcome(read, (SnapshotError, TwinSpecError))


COUNTER_LINE = st.tuples(
    st.sampled_from(["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "NOPE"])
    | st.text(max_size=20),
    st.sampled_from(["gauge", "counter", "label", "histogram", "bogus", ""]),
    st.text(max_size=30),
).map(", ".join)  # fmt: skip


@FUZZ
@given(
    lines=st.lists(
        COUNTER_LINE | st.text(max_size=40) | st.just('"unclosed, gauge, x'), max_size=30
    )
)
def test_counters_lines_give_a_counter_set_or_a_counters_error(lines: list[str]) -> None:
    outcome(lambda: parse_counters(COUNTERS_BASE + "\n".join(lines)), (CountersError,))


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(
    depth=st.integers(min_value=1, max_value=1000),
    shape=st.sampled_from(["flow-list", "flow-map", "block-map", "block-list"]),
)
def test_deep_documents_are_refused_not_a_recursion_error(
    name: str, depth: int, shape: str
) -> None:
    if shape == "flow-list":
        text = "[" * depth + "]" * depth
    elif shape == "flow-map":
        text = "{a: " * depth + "1" + "}" * depth
    elif shape == "block-map":
        text = "".join(f"{'  ' * i}a:\n" for i in range(min(depth, 400))) + "  " * depth + "1\n"
    else:
        text = "".join(f"{'  ' * i}-\n" for i in range(min(depth, 400)))
    parse, errors = PARSERS[name]
    outcome(lambda: parse(text, "deep.yaml"), errors)


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize(("fan", "levels"), [(2, 3), (9, 9), (30, 6)])
def test_alias_bombs_are_refused_quickly(name: str, fan: int, levels: int) -> None:
    lines = ["l0: &l0 [x]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]")
    parse, errors = PARSERS[name]
    outcome(lambda: parse("\n".join(lines) + "\n", "bomb.yaml"), errors)


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("size", [61, 5_000, 200_000, -1])
def test_huge_values_give_short_errors(name: str, size: int) -> None:
    """-1: one byte more than the parser's bound, refused before it is parsed."""
    parse, errors = PARSERS[name]
    size = size if size > 0 else (PLAN_LIMITS if name == "plan" else DEFAULT_LIMITS).max_bytes
    for key in ("version", "name", "nodes"):

        def huge(k: str = key) -> object:
            return parse(f"{k}: {'v' * size}\n", "huge.yaml")

        outcome(huge, errors)
