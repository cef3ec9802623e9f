"""The chart's image reference: repository:tag (the appVersion by default), pinned with
@digest when image.digest is set (`make release` packages the chart so), and a value that
is not a digest refused at install, naming it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from kubegpu.sim.controlplane.binaries import find_bin_dir

CHART = Path(__file__).parents[2] / "deploy" / "helm" / "kubegpu"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def _template(*sets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_bin_dir() / "helm"), "template", "kubegpu", str(CHART), "-n", "gpu-operator"]
        + [f"--set={s}" for s in sets],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _operator_images(*sets: str) -> tuple[str, str]:
    """(the operator container's image, the KUBEGPU_IMAGE it gives its operands)."""
    result = _template(*sets)
    assert result.returncode == 0, result.stderr
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(result.stdout) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    return container["image"], env["KUBEGPU_IMAGE"]


def test_the_default_image_is_the_chart_version() -> None:
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert _operator_images() == (f"ghcr.io/kubegpu/kubegpu:{version}",) * 2


def test_a_digest_pins_the_image_for_the_operator_and_its_operands() -> None:
    image = f"registry.local/kubegpu:0.1.0@{DIGEST}"
    assert _operator_images(
        "image.repository=registry.local/kubegpu", f"image.digest={DIGEST}"
    ) == (image, image)


def test_a_digest_that_is_not_one_is_refused_naming_it() -> None:
    for bad in ("latest", "sha256:abc", "md5:" + "0" * 64):
        result = _template(f"image.digest={bad}")
        assert result.returncode != 0
        assert f'values image.digest="{bad}": not an image digest' in result.stderr
