"""`kubegpu plan` as a user runs it: tables, JSON, --explain, files that `kubegpu mig validate`
and the device-plugin config loader accept, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from kubegpu.cli import app
from kubegpu.sharing.config import load_config

runner = CliRunner()
EXAMPLE = Path(__file__).parents[2] / "examples" / "plan" / "seeds-world.yaml"


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_worked_example_writes_valid_files(tmp_path: Path) -> None:
    code, out, err = run("plan", "-f", str(EXAMPLE), "--out", str(tmp_path))
    assert code == 0, err
    assert "Workloads" in out and "Nodes" in out
    assert "DisplayModeSelector" not in out or "gpu-rtx" in out
    names = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert "mig-parted-config.yaml" in names
    assert "clusterpolicy-values.yaml" in names
    assert "label-nodes.sh" in names
    assert any(n.startswith("device-plugin/") for n in names)
    code, out, err = run("mig", "validate", "-f", str(tmp_path / "mig-parted-config.yaml"))
    assert code == 0, err
    code, out, err = run(
        "mig", "validate", "-f", str(tmp_path / "mig-parted-config.yaml"), "-c", "plan-1",
        "--model", "h200-nvl:8",
    )  # fmt: skip
    assert code == 0, err
    for path in (tmp_path / "device-plugin").iterdir():
        load_config(path)
    cm = yaml.safe_load((tmp_path / "device-plugin-configmap.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["data"]
    values = yaml.safe_load((tmp_path / "clusterpolicy-values.yaml").read_text())
    assert values["devicePlugin"]["config"]["name"] == cm["metadata"]["name"]
    script = (tmp_path / "label-nodes.sh").read_text()
    assert "kubectl label node gpu-h200-1 --overwrite" in script
    assert "nvidia.com/device-plugin.config=" in script


def test_json_and_explain() -> None:
    code, out, _ = run("plan", "-f", str(EXAMPLE), "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["complete"] is True
    by_name = {w["name"]: w for w in plan["workloads"]}
    assert by_name["finetune"]["resources"] == {"nvidia.com/gpu": 2}
    assert by_name["ocr"]["method"] == "mig"
    code, out, _ = run("plan", "-f", str(EXAMPLE), "--explain", "--solver", "heuristic")
    assert code == 0
    assert "Why" in out
    assert "training gets whole GPUs" in out or "training: whole GPUs only" in out
    assert "time-slicing isolates nothing" in out


def test_partial_plan_exits_3_and_says_what_is_left(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(
        "fleet: [{name: n1, gpus: 'h100-80gb:2'}]\n"
        "workloads:\n"
        "  - {name: train, replicas: 3, memory: 60GiB, kind: training}\n"
        "  - {name: huge, memory: 300GiB, kind: training}\n"
    )
    code, out, err = run("plan", "-f", str(f))
    assert code == 3
    assert "train: 1 of 3 replicas left over: not enough room" in err
    assert "1 more node(s) like n1" in err
    assert "huge: 1 of 1 replicas left over: no card in the fleet can serve it" in err
    assert "Workloads" in out  # the partial plan is still printed


def test_bad_input_exits_1_with_the_field(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text("fleet: [{name: n1, gpus: 'h900:2'}]\nworkloads: []\n")
    code, _, err = run("plan", "-f", str(f))
    assert code == 1
    assert "fleet['n1'].gpus" in err and "unknown GPU model 'h900'" in err
    f.write_text("fleet: [{name: n1, gpus: 'l4:2'}]\nworkloads: [{name: w, memory: -2GiB}]\n")
    code, _, err = run("plan", "-f", str(f))
    assert code == 1
    assert "workloads['w'].memory" in err


def test_bad_option_exits_2(tmp_path: Path) -> None:
    code, _, err = run("plan", "-f", str(EXAMPLE), "--solver", "magic")
    assert code == 2
    assert "--solver" in err


def test_unconfirmed_mig_needs_the_flag(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(
        "fleet: [{name: n1, gpus: 'rtx-pro-4500:1', driver: '580.95.05'}]\n"
        "workloads: [{name: w, replicas: 2, memory: 12GiB}]\n"
    )
    code, out, _ = run("plan", "-f", str(f), "--json")
    assert code == 3
    assert json.loads(out)["workloads"][0]["method"] == "whole"
    code, out, _ = run("plan", "-f", str(f), "--json", "--allow-unconfirmed-mig")
    assert code == 0
    assert json.loads(out)["workloads"][0]["method"] == "mig"


def test_out_onto_a_file_is_refused_before_any_work(tmp_path: Path) -> None:
    target = tmp_path / "plan.txt"
    target.write_text("keep me\n")
    code, _, err = run("plan", "-f", str(EXAMPLE), "--out", str(target))
    assert code == 1
    assert f"--out {target}: is a file" in err
    assert target.read_text() == "keep me\n"
