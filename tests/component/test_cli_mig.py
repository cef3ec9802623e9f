"""`kubegpu mig ...` as a user runs it: exit codes, one-line errors, nothing applied on error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kubegpu.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def node(tmp_path: Path) -> str:
    return f"sim:{tmp_path / 'node.json'}"


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_models_lists_the_catalog() -> None:
    code, out, _ = run("mig", "models", "--json")
    assert code == 0
    ids = [m["id"] for m in yaml.safe_load(out)]
    assert "h200-nvl" in ids
    assert "rtx-pro-6000-ws" in ids


def test_layouts_counts_a100() -> None:
    code, out, _ = run(
        "mig", "layouts", "-m", "a100-40gb", "--profiles", "1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb"
    )
    assert code == 0
    assert out.strip().endswith("19 layouts")


def test_layouts_with_profiles_that_name_none_is_an_error_not_every_profile() -> None:
    code, out, err = run("mig", "layouts", "-m", "h200", "--profiles", " , ")
    assert (code, out) == (1, "")
    assert "--profiles ' , ': names no profile" in err


def test_generate_validate_apply_assert_export(tmp_path: Path, node: str) -> None:
    code, out, _ = run("mig", "generate", "--model", "h200")
    assert code == 0
    configs = _write(tmp_path, out)
    code, out, _ = run("mig", "validate", "-f", configs, "--model", "h200:8")
    assert code == 0
    assert "valid for h200:8" in out
    code, out, err = run(
        "mig", "apply", "-f", configs, "-c", "all-1g.18gb", "--nvml", node, "--sim-node", "h200:2"
    )
    assert code == 0, err
    assert "applied" in out
    code, _, _ = run("mig", "assert", "-f", configs, "-c", "all-1g.18gb", "--nvml", node)
    assert code == 0
    code, _, err = run("mig", "assert", "-f", configs, "-c", "all-balanced", "--nvml", node)
    assert code == 1
    assert "assertion failure: selected configuration not currently applied" in err
    code, out, _ = run("mig", "export", "--nvml", node, "-o", "json")
    assert code == 0
    assert yaml.safe_load(out)["mig-configs"]["current"][0]["mig-devices"] == {"1g.18gb": 7}


def test_environment_variables_select_backend_and_config(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs = _write(
        tmp_path,
        "version: v1\nmig-configs:\n  one:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {7g.80gb: 1}\n",
    )
    monkeypatch.setenv("KUBEGPU_NVML", node)
    monkeypatch.setenv("KUBEGPU_SIM_NODE", "h100-80gb:1")
    monkeypatch.setenv("MIG_PARTED_CONFIG_FILE", configs)
    code, _, err = run("mig", "apply")
    assert code == 0, err
    code, out, _ = run("mig", "show")
    assert "GPU 0 (h100-80gb): MIG enabled, 7g.80gbx1" in out


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.99gb: 1}}]}",
            ["--model", "h200"],
            "config 'a', entry 0 (GPU 0), field mig-devices, value '1g.99gb': no such profile on h200",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.18gb: 8}}]}",
            ["--model", "h200"],
            "does not fit one h200",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: [3], mig-enabled: false}]}",
            ["--model", "h200:2"],
            "field devices, value 3: out of range",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: [0], mig-enabled: true, mig-devices: {}}]}",
            ["--model", "l4"],
            "GPU 0 is a l4, which is not MIG-capable",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {2g.10gb: 4}}]}",
            [],
            "no MIG-capable model in the catalog offers this mix",
        ),
        ("version: v1\nmig-configs: {a: [\n", [], "malformed YAML"),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            ["-c", "b"],
            "unknown config name 'b' (known: a)",
        ),
    ],
)
def test_validate_errors_are_one_line_and_name_the_file(
    tmp_path: Path, config: str, args: list[str], message: str
) -> None:
    path = _write(tmp_path, config)
    code, _, err = run("mig", "validate", "-f", path, *args)
    assert code == 1
    assert message in err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {path}")


def test_apply_error_leaves_the_node_alone(tmp_path: Path, node: str) -> None:
    good = _write(
        tmp_path,
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {3g.71gb: 2}\n",
        "good.yaml",
    )
    bad = _write(
        tmp_path,
        "version: v1\nmig-configs:\n  b:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {4g.71gb: 2}\n",
        "bad.yaml",
    )
    assert run("mig", "apply", "-f", good, "--nvml", node, "--sim-node", "h200:1")[0] == 0
    code, _, err = run("mig", "apply", "-f", bad, "--nvml", node)
    assert code == 1
    assert "nothing was applied" in err
    assert run("mig", "assert", "-f", good, "--nvml", node)[0] == 0


def test_apply_without_reset_reports_pending_mode(tmp_path: Path, node: str) -> None:
    path = _write(
        tmp_path,
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n",
    )
    code, _, err = run(
        "mig", "apply", "-f", path, "-s", "--nvml", node, "--sim-node", "a100-40gb:1"
    )
    assert code == 3
    assert "MIG mode change pending on GPU(s) 0" in err


def test_missing_sim_node_and_bad_backend(tmp_path: Path) -> None:
    code, _, err = run("mig", "export", "--nvml", f"sim:{tmp_path / 'none.json'}")
    assert code == 1
    assert "give --sim-node" in err
    code, _, err = run("mig", "export", "--nvml", "sim:/x", "--sim-node", "v100:1")
    assert code == 1
    assert "unknown GPU model 'v100'" in err


def test_sim_lab_controls(node: str) -> None:
    assert run("sim", "gpu", "show", "--nvml", node, "--sim-node", "rtx-pro-6000-ws:1")[0] == 0
    _, out, _ = run("sim", "gpu", "show", "--nvml", node)
    assert "display graphics" in out
    assert run("sim", "gpu", "display-mode", "compute", "--nvml", node)[0] == 0
    assert run("sim", "gpu", "lose", "-i", "0", "--nvml", node)[0] == 0
    assert "LOST" in run("sim", "gpu", "show", "--nvml", node)[1]
    assert run("sim", "gpu", "reboot", "--nvml", node)[0] == 0
    assert "LOST" not in run("sim", "gpu", "show", "--nvml", node)[1]


def test_demo_runs(tmp_path: Path) -> None:
    code, out, err = run("demo", "--state", str(tmp_path / "demo.json"))
    assert code == 0, err
    assert "refusing to change GPUs that are in use" in out
    assert "assert inference-and-training: applied" in out


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("missing/out.yaml", "does not exist"),
        (".", "it is a directory; name a file"),
    ],
)
def test_generate_into_a_missing_directory_or_onto_a_directory_is_one_error(
    tmp_path: Path, where: str, why: str
) -> None:
    target = tmp_path / where
    code, out, err = run("mig", "generate", "--model", "h200", "-f", str(target))
    assert code == 1
    assert out == ""
    assert err.startswith(f"error: --file {target}: cannot write: ")
    assert why in err
    assert len(err.splitlines()) == 1


def test_generate_writes_the_file(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    code, out, _ = run("mig", "generate", "--model", "h200", "-f", str(target))
    assert (code, out) == (0, "")
    assert "all-1g.18gb" in yaml.safe_load(target.read_text())["mig-configs"]


def test_apply_of_a_config_that_covers_no_gpu_is_refused_and_assert_agrees(
    tmp_path: Path, node: str
) -> None:
    path = _write(
        tmp_path,
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      device-filter: '0x20B010DE'\n      mig-enabled: false\n",
    )
    code, out, err = run("mig", "apply", "-f", path, "--nvml", node, "--sim-node", "h200:1")
    assert code == 1
    assert "already applied" not in out
    assert "GPU 0 (h200) is selected by no entry of config 'a'" in err
    assert "nothing was applied" in err
    assert run("mig", "assert", "-f", path, "--nvml", node)[0] == 1
    assert run("mig", "validate", "-f", path, "--model", "h200:1")[0] == 1


@pytest.mark.parametrize(
    ("stdin", "code", "message"),
    [
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", 0, ""),
        ("", 1, "error: <stdin>: standard input is empty"),
        (
            "version: v1\nversion: v1\n",
            1,
            "error: <stdin>: line 2, column 1 malformed YAML: duplicate key",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: 'false'}]}\n",
            1,
            "error: <stdin>: config 'a', entry 0, field mig-enabled, value 'false'",
        ),
    ],
)
def test_validate_reads_standard_input_strictly(stdin: str, code: int, message: str) -> None:
    result = runner.invoke(app, ["mig", "validate", "-f", "-"], input=stdin)
    assert result.exit_code == code, result.stderr
    assert result.stderr.startswith(message)
