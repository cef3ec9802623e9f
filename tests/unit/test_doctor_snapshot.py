"""The doctor's snapshot file, its report and its command line: a snapshot round-trips
through JSON, a bad file is refused naming file, field and value, and the exit code says
clean / warnings / errors (3: nothing could be checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kubegpu.catalog import nvidia
from kubegpu.cli.app import app
from kubegpu.doctor.checks import CHECKS, run_checks
from kubegpu.doctor.report import render_table, report_json, summary_line
from kubegpu.doctor.snapshot import (
    SNAPSHOT_LIMITS,
    NodeInfo,
    Snapshot,
    SnapshotError,
    load_snapshot,
)
from kubegpu.nvml.sim import SimControls, SimNvml
from kubegpu.sim.kubelet.node import write_pci_devices

DEMO = Path(__file__).resolve().parents[1] / "data" / "doctor" / "demo.json"
runner = CliRunner()


def test_a_snapshot_round_trips_through_json() -> None:
    snap = load_snapshot(DEMO)
    again = Snapshot.from_json(snap.to_json(), "again")
    assert again == snap
    assert len(snap.nodes) == 3 and snap.cluster_policy is not None
    assert snap.gpu_cluster is None
    assert {p.key for p in snap.workload_pods} == {
        f"default/demo-{n}-{i}"
        for n, count in (("gpu-h200", 3), ("gpu-l4", 3), ("gpu-rtx", 2))
        for i in range(count)
    }
    assert all(p.owner_kind == "DaemonSet" for p in snap.operand_pods)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"nodes": [{"name": "a", "colour": 1}]}', "f.json: field nodes['a'].colour, value 1"),
        ('{"nodes": [{"name": "a", "labels": {"k": 3}}]}', "field nodes['a'].labels.k, value 3"),
        ('{"version": 2}', "field version, value 2"),
        ('{"nodes": [], "nodes": []}', "duplicate key 'nodes'"),
        ("[]", "expected a snapshot object, got list"),
        ('{"nodes": [', "malformed JSON"),
        # counts and flags are not coerced: a hand-edited "yes" is not read as true
        ('{"version": true}', "field version, value True: expected the integer 1"),
        (
            '{"nodes": [{"name": "a", "unschedulable": "yes"}]}',
            "field nodes['a'].unschedulable, value 'yes': Input should be a valid boolean",
        ),
        (
            '{"daemon_sets": [{"namespace": "n", "name": "d", "desired": "3"}]}',
            "field daemon_sets['d'].desired, value '3': Input should be a valid integer",
        ),
        (
            '{"pods": [{"namespace": "n", "name": "p", "containers": '
            '[{"name": "c", "ready": 1, "restart_count": 2}]}]}',
            "field pods['p'].containers['c'].ready, value 1: Input should be a valid boolean",
        ),
        (
            '{"events": [{"namespace": "n", "kind": "Node", "name": "a", "count": 2.0}]}',
            "field events['a'].count, value 2.0: Input should be a valid integer",
        ),
        # issue 29: a spec of the wrong shape was a traceback in the check that read it
        (
            '{"cluster_policies": [{"kind": "ClusterPolicy", "name": "cp", "spec": '
            '{"devicePlugin": {"config": {"default": ["a"]}}}}]}',
            "field cluster_policies['cp'].spec.devicePlugin.config.default: Input should be a "
            "valid string",
        ),
        (
            '{"cluster_policies": [{"kind": "ClusterPolicy", "name": "cp", "spec": '
            '{"migManager": "on"}}]}',
            "field cluster_policies['cp'].spec.migManager, value 'on': Input should be",
        ),
        (
            '{"cluster_policies": [{"kind": "ClusterPolicy", "name": "cp", "spec": '
            '{"mig": {"strategy": 5}}}]}',
            "field cluster_policies['cp'].spec.mig.strategy, value 5",
        ),
        (
            '{"gpu_clusters": [{"kind": "GPUCluster", "name": "g", "spec": "x"}]}',
            "field gpu_clusters['g'].spec, value 'x': Input should be a valid dictionary",
        ),
        (
            '{"cluster_policies": [{"kind": "GPUCluster", "name": "cp"}]}',
            "field cluster_policies['cp'].kind, value 'GPUCluster': expected 'ClusterPolicy'",
        ),
    ],
)
def test_a_bad_snapshot_is_refused_naming_file_field_and_value(text: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=r"^f\.json: ") as info:
        Snapshot.from_json(text, "f.json")
    assert message in str(info.value)


def test_a_snapshot_is_bounded_in_size(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(" " * (SNAPSHOT_LIMITS.max_bytes + 1))
    with pytest.raises(SnapshotError, match="larger than"):
        load_snapshot(big)


def test_the_json_report_lists_every_check_and_each_finding() -> None:
    snap = load_snapshot(DEMO).model_copy(
        update={"nodes": (NodeInfo(name="lonely", labels={nvidia.GPU_PRESENT: "true"}),)}
    )
    findings = run_checks(snap)
    doc = json.loads(report_json(findings, snap))
    assert doc["checks"] == [name for name, _ in CHECKS]
    assert doc["exit_code"] == 2 and doc["errors"] == 1 and doc["warnings"] == 0
    (finding,) = doc["findings"]
    assert finding["check"] == "nfd-labels-missing" and finding["severity"] == "error"
    assert set(finding) == {"check", "severity", "object", "summary", "evidence", "fix"}
    assert render_table(findings).row_count == 1
    assert summary_line(findings, snap).startswith("1 error(s), 0 warning(s)")


def test_the_command_exits_0_on_a_clean_snapshot() -> None:
    result = runner.invoke(app, ["doctor", "--snapshot", str(DEMO)])
    assert result.exit_code == 0, result.output
    assert "no problems found" in result.output


def test_a_namespace_the_snapshot_was_not_taken_of_is_refused_not_ignored() -> None:
    taken_of = load_snapshot(DEMO).operator_namespace
    result = runner.invoke(app, ["doctor", "--snapshot", str(DEMO), "-n", "elsewhere"])
    assert result.exit_code == 3, result.output
    assert f"--namespace elsewhere: {DEMO} was taken of the operator namespace {taken_of}" in (
        " ".join(result.stderr.split())
    )
    same = runner.invoke(app, ["doctor", "--snapshot", str(DEMO), "-n", taken_of])
    assert same.exit_code == 0, same.output


def test_the_command_exits_2_on_errors_and_prints_json(tmp_path: Path) -> None:
    snap = load_snapshot(DEMO)
    nodes = tuple(
        n.model_copy(update={"labels": {**n.labels, nvidia.DEVICE_PLUGIN_CONFIG: "nope"}})
        if n.name == "gpu-l4"
        else n
        for n in snap.nodes
    )
    path = tmp_path / "broken.json"
    path.write_text(snap.model_copy(update={"nodes": nodes}).to_json())
    result = runner.invoke(app, ["doctor", "--snapshot", str(path), "--json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert [(f["check"], f["object"]) for f in doc["findings"]] == [
        ("plugin-config-missing", "node/gpu-l4")
    ]


def test_the_command_warns_and_exits_1_on_a_cluster_without_a_gpu_node(tmp_path: Path) -> None:
    """Checks that all pass because they saw no GPU are no clean bill of health."""
    path = tmp_path / "cpu-only.json"
    cpu_only = Snapshot(source="kubeconfig other", nodes=(NodeInfo(name="worker-1"),))
    path.write_text(cpu_only.to_json())
    result = runner.invoke(app, ["doctor", "--snapshot", str(path)])
    assert result.exit_code == 1, result.output
    assert "no problems found" not in result.output
    assert "no-gpu-nodes" in result.output
    assert "on 1 node(s), none of them a GPU node" in result.output
    as_json = runner.invoke(app, ["doctor", "--snapshot", str(path), "--json"])
    doc = json.loads(as_json.stdout)
    assert (as_json.exit_code, doc["exit_code"], doc["warnings"]) == (1, 1, 1)
    assert [f["check"] for f in doc["findings"]] == ["no-gpu-nodes"]


def test_the_command_exits_3_when_there_is_nothing_to_check(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": 3}')
    result = runner.invoke(app, ["doctor", "--snapshot", str(bad)])
    assert result.exit_code == 3
    assert "bad.json: field nodes" in result.output
    missing = runner.invoke(app, ["doctor", "--snapshot", str(tmp_path / "none.json")])
    assert missing.exit_code == 3


def test_a_simulated_card_in_graphics_mode_is_a_vga_controller(tmp_path: Path) -> None:
    """What the doctor's display-mode check reads (gpu.mode) starts at the PCI class."""
    nvml = SimNvml.create(tmp_path / "gpus.json", "rtx-pro-6000-ws:2")
    SimControls.of(nvml).set_display_mode(1, "compute")
    write_pci_devices(tmp_path / "sys", nvml)
    classes = sorted(p.read_text() for p in (tmp_path / "sys").glob("bus/pci/devices/*/class"))
    assert classes == ["0x030000\n", "0x030200\n"]  # GPU 0 ships in graphics mode


# Snapshots captured by tests/integration/test_doctor.py from the demo cluster broken on
# purpose, step after step (each keeps what the steps before it broke).
CAPTURED = {
    "mps.json": {("mps-on-mig", "node/gpu-h200")},
    "mig-failed.json": {
        ("mig-layout-unplaceable", "node/gpu-h200"),
        ("mig-config-state", "node/gpu-h200"),
    },
    "dra.json": {
        ("mig-single-invalid", "node/gpu-h200"),
        ("display-mode-graphics", "node/gpu-rtx"),
        ("clusterpolicy-and-gpucluster", "gpucluster/gpu-cluster"),
        ("dra-and-device-plugin", "node/gpu-rtx"),
        ("driver-minimum", "node/gpu-rtx"),
    },
}


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_broken_clusters_give_their_findings(name: str) -> None:
    snap = load_snapshot(DEMO.parent / name)
    assert {(f.check, f.object) for f in run_checks(snap)} == CAPTURED[name]


def test_a_captured_crash_loop_names_the_operand_and_its_last_words() -> None:
    snap = load_snapshot(DEMO.parent / "crash-loop.json")
    loops = [f for f in run_checks(snap) if f.check == "operand-crash-loop"]
    owners = {f"pod/{p.key}": p.owner_name for p in snap.operand_pods}
    assert loops and {owners[f.object] for f in loops} == {"nvidia-dcgm-exporter"}
    assert any("DCGM_EXPORTER_INTERVAL" in f.evidence for f in loops)


def test_a_kubeconfig_or_save_path_that_cannot_be_used_is_exit_3_before_any_read(
    tmp_path: Path,
) -> None:
    # a malformed kubeconfig was a YAML traceback; a --save-snapshot directory was found only
    # after the whole cluster had been read
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: [\n")
    result = runner.invoke(app, ["doctor", "--kubeconfig", str(bad)])
    assert result.exit_code == 3
    assert f"{bad}: not a usable kubeconfig (ParserError" in result.stderr
    bad.write_text("apiVersion: v1\nkind: Config\n")
    assert (
        "not a usable kubeconfig (KeyError"
        in runner.invoke(app, ["doctor", "--kubeconfig", str(bad)]).stderr
    )
    result = runner.invoke(
        app, ["doctor", "--kubeconfig", str(bad), "--save-snapshot", str(tmp_path)]
    )
    assert result.exit_code == 3
    assert f"--save-snapshot {tmp_path}: is a directory" in result.stderr
