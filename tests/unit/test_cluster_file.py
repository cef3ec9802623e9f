"""The `kubegpu sim up` cluster file: what it accepts and how it says no."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.sim.cluster import ClusterFileError, load_cluster

EXAMPLE = Path(__file__).parents[2] / "examples" / "cluster.yaml"


def test_the_example_cluster_file_loads() -> None:
    spec = load_cluster(EXAMPLE)
    assert [(n.name, n.gpus) for n in spec.nodes] == [
        ("gpu-h200", "h200-nvl:8"),
        ("gpu-rtx", "rtx-pro-6000-ws:2;display=compute"),
        ("gpu-l4", "l4:4"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: []", "field nodes"),
        ("nodes:\n  - name: Bad_Name\n", "field nodes.0.name, value 'Bad_Name'"),
        (
            "nodes:\n  - name: a\n    gpus: v100:2\n",
            "field nodes.0.gpus, value 'v100:2': sim node spec 'v100:2': unknown GPU model 'v100'",
        ),
        ("nodes:\n  - name: a\n  - name: a\n", "node name 'a' appears twice"),
        ("nodes:\n  - name: a\n    colour: red\n", "field nodes.0.colour, value 'red'"),
        ("nodes: [\n", "malformed YAML"),
    ],
)
def test_bad_cluster_files_name_field_and_value(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError) as err:
        load_cluster(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="cannot read"):
        load_cluster(tmp_path / "nope.yaml")
