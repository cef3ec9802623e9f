"""The image carries no planner (numpy, highspy: kubegpu[planner]): every operand's
entrypoint imports without them, and `kubegpu plan` without the extra refuses, naming it.
Each check runs in a fresh interpreter in which the planner's modules cannot be imported,
as in the image (scripts/check-image-rootfs runs the same inside the built image)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from kubegpu.cli.app import COMMANDS

# What the image runs: the operator and every operand it deploys.
OPERANDS = [
    "operator",
    "validator",
    "device-plugin",
    "dra-plugin",
    "feature-discovery",
    "node-labeller",
    "mig-manager",
    "exporter",
    "mps-control-daemon",
]

_WITHOUT_PLANNER = textwrap.dedent(
    """
    import sys

    class NoPlanner:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("numpy", "highspy"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, NoPlanner())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_PLANNER + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_operand_entrypoint_imports_without_the_planner() -> None:
    modules = [COMMANDS[name][0] for name in OPERANDS]
    done = _run(
        f"""
        import importlib
        for module in {modules!r}:
            importlib.import_module(module)
        print(sorted(m for m in sys.modules if m.partition(".")[0] in ("numpy", "highspy")))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_plan_without_the_extra_fails_naming_it() -> None:
    for argv in (["plan", "--help"], ["plan", "--input", "mix.yaml"]):
        done = _run(f"from kubegpu.cli import app\napp({argv!r}, prog_name='kubegpu')")
        assert done.returncode == 1, done.stderr
        assert "kubegpu[planner]" in done.stderr
        assert "pip install 'kubegpu[planner]'" in done.stderr
        assert "Traceback" not in done.stderr


def test_the_root_help_still_lists_plan_without_the_extra() -> None:
    done = _run("from kubegpu.cli import app\napp(['--help'], prog_name='kubegpu')")
    assert done.returncode == 0, done.stderr
    assert "needs kubegpu[planner]" in done.stdout


def test_plan_with_the_extra_installed_is_the_planner() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kubegpu", "plan", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "kubegpu[planner]" not in done.stdout + done.stderr
