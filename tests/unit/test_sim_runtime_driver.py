"""The simulated driver's binaries on the node's root: written once, never in place, since
other containers may be running them (a script open for writing fails to exec with
"Text file busy")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kubegpu.sim.runtime.driver import install_binaries


def test_a_second_install_leaves_the_running_scripts_untouched(tmp_path: Path) -> None:
    first = install_binaries(tmp_path, sys.executable)
    smi = first / "nvidia-smi"
    inode = smi.stat().st_ino
    assert os.access(smi, os.X_OK)
    again = install_binaries(tmp_path, sys.executable)
    assert again == first
    assert smi.stat().st_ino == inode  # not rewritten
    assert not [p.name for p in first.iterdir() if p.name.startswith(".")]


def test_a_changed_script_is_replaced_by_rename(tmp_path: Path) -> None:
    smi = install_binaries(tmp_path, sys.executable) / "nvidia-smi"
    inode = smi.stat().st_ino
    install_binaries(tmp_path, "/other/python")
    assert smi.stat().st_ino != inode
    assert "/other/python" in smi.read_text()
    done = subprocess.run([str(smi), "--help"], capture_output=True, check=False, timeout=30)
    assert done.returncode != 0  # /other/python does not exist: exec'd, not "Text file busy"
