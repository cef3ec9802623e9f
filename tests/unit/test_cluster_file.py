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
        # not coerced: "no" is not false, "2" is not a count
        ("nodes:\n  - name: a\n    nfd: 'no'\n", "field nodes.0.nfd, value 'no'"),
        ("nodes:\n  - name: a\n    count: '2'\n", "field nodes.0.count, value '2'"),
        # the API server would refuse the node after the control plane has started
        (
            "nodes:\n  - name: a\n    labels: {'bad key!': v}\n",
            "field nodes.0.labels: label key 'bad key!': a label key's name is 1 to 63",
        ),
        (
            f"nodes:\n  - name: a\n    labels: {{k: {'x' * 64}}}\n",
            "field nodes.0.labels: label 'k', value 'xxxx",
        ),
        # issue 29: the API server refused this Node after the control plane had started
        (
            "nodes:\n  - name: a\n    cpu: lots\n",
            "field nodes.0.cpu, value 'lots': 'lots' is not a",
        ),
        ("nodes:\n  - name: a\n    memory: 256GB\n", "field nodes.0.memory, value '256GB'"),
        ("nodes:\n  - name: a\n    memory: -1Gi\n", "'-1Gi' must be above zero"),
        ("nodes:\n  - name: a\n    cpu: '0'\n", "field nodes.0.cpu, value '0': '0' must be above"),
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
