"""The control plane's binaries: which components there are and where their builds are.

The binaries are built from Go modules by ``scripts/build-kubernetes`` (cached in
``~/.cache/kubegpu``); :func:`find_bin_dir` finds them, :func:`check_binaries` checks them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

from kubegpu.sim.controlplane.process import ControlPlaneError

ETCD: Final = "etcd"
APISERVER: Final = "kube-apiserver"
CONTROLLER_MANAGER: Final = "kube-controller-manager"
SCHEDULER: Final = "kube-scheduler"
#: The processes of a control plane, in start order (they stop in reverse).
COMPONENTS: Final = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)

#: What to tell a user whose binaries are missing.
BUILD_HINT: Final = "build them with scripts/build-kubernetes (or `make kubernetes`)"
BIN_DIR_ENV: Final = "KUBEGPU_K8S_BIN"


# --- binaries ----------------------------------------------------------------------------


def _repo_root() -> Path | None:
    """The source checkout this package runs from (editable install), if any."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "scripts" / "build-kubernetes").is_file():
            return parent
    return None


def find_bin_dir(bin_dir: Path | None = None) -> Path:
    """Find the directory holding the control plane binaries.

    In order: ``bin_dir``; ``$KUBEGPU_K8S_BIN``; what ``scripts/build-kubernetes
    --print-bin-dir`` prints in the checkout this package runs from; the directory of
    ``kube-apiserver`` on ``PATH``. It does not check that the binaries are there: see
    :func:`check_binaries`.
    """
    if bin_dir is not None:
        return Path(bin_dir)
    env = os.environ.get(BIN_DIR_ENV)
    if env:
        return Path(env)
    root = _repo_root()
    if root is not None:
        script = root / "scripts" / "build-kubernetes"
        try:
            out = subprocess.run(
                [str(script), "--print-bin-dir"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ControlPlaneError(
                "control plane", f"`{script} --print-bin-dir` failed: {exc}"
            ) from exc
        printed = out.stdout.strip()
        if printed:
            return Path(printed)
    found = shutil.which(APISERVER)
    if found:
        return Path(found).resolve().parent
    raise ControlPlaneError(
        APISERVER,
        f"cannot find the Kubernetes binaries (no ${BIN_DIR_ENV}, no source checkout with "
        f"scripts/build-kubernetes, nothing on PATH); {BUILD_HINT}",
    )


def check_binaries(bin_dir: Path) -> dict[str, Path]:
    """Return each component's binary in ``bin_dir``; raise naming the first one missing."""
    binaries: dict[str, Path] = {}
    for name in COMPONENTS:
        path = bin_dir / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ControlPlaneError(
                name, f"binary not found or not executable: {path}; {BUILD_HINT}"
            )
        binaries[name] = path
    return binaries
