"""The driver's binaries as the runtime injects them: `nvidia-smi` and the CUDA samples
the walkthrough runs, each a script that runs the simulated program (`sim.smi`). They sit
in one directory on the node's root; a container finds them on its PATH only when the
runtime injected the driver's files (`injection.Injection.driver`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

DRIVER_BIN = "var/lib/kubegpu-sim/driver/bin"
PROGRAMS = ("nvidia-smi", "vectorAdd", "deviceQuery")


def install_binaries(root: Path, python: str, programs: tuple[str, ...] = PROGRAMS) -> Path:
    """Write the simulated driver binaries `programs` in a directory of their own under the
    node's root (one per set, so a container sees only its own); returns the directory."""
    bin_dir = root / DRIVER_BIN / ("-".join(sorted(programs)) or "none")
    bin_dir.mkdir(parents=True, exist_ok=True)
    for program in programs:
        path = bin_dir / program
        script = f'#!/bin/sh\nexec {shlex.quote(python)} -m kubegpu.sim.smi {program} "$@"\n'
        try:
            if path.read_text() == script:
                continue  # another container may be running it: never write it again
        except OSError:
            pass
        # replaced by rename, never rewritten in place: a script open for writing cannot be
        # executed (ETXTBSY, "Text file busy"), and another container may exec it right now
        part = path.with_name(f".{program}.{os.getpid()}.part")
        part.write_text(script)
        part.chmod(0o755)
        os.replace(part, path)
    return bin_dir


def with_driver(path_var: str, bin_dir: Path) -> str:
    """A PATH on which the driver's binaries come first."""
    return f"{bin_dir}:{path_var}" if path_var else str(bin_dir)
