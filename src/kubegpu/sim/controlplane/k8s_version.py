"""Which Kubernetes version a directory of control-plane binaries is, and so which feature
gates the simulated control plane starts it with (`kubegpu.kube.versions`)."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from pathlib import Path

from kubegpu.kube.versions import KubernetesVersion, UnsupportedVersion, parse_minor, version


@functools.cache
def binary_version(binary: Path) -> KubernetesVersion:
    """`<binary> --version` (e.g. `Kubernetes v1.37.2`) as a supported version, or
    UnsupportedVersion naming the binary and what it said."""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or exc.stdout or "").strip()[-2000:]
        raise UnsupportedVersion(
            f"{binary} --version exited with status {exc.returncode}: {said or 'nothing printed'}"
        ) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise UnsupportedVersion(f"{binary} --version failed: {exc}") from None
    try:
        return version(parse_minor(out))
    except UnsupportedVersion as exc:
        raise UnsupportedVersion(f"{binary}: {exc}") from None


def version_gates(binary: Path) -> Mapping[str, bool]:
    """The feature gates kubegpu's simulated control plane sets for this binary's version."""
    return binary_version(binary).feature_gates
