"""The supported Kubernetes versions: what a binary's --version names, the gates each
version is started with (none that a version locks or does not know), and agreement with
the versions scripts/build-kubernetes builds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubegpu.kube.versions import (
    NEWEST,
    OLDEST,
    SUPPORTED,
    UnsupportedVersion,
    parse_minor,
    version,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_binarys_version_line_names_its_minor() -> None:
    assert parse_minor("Kubernetes v1.37.2\n") == 37
    assert parse_minor("v1.35.8") == 35
    with pytest.raises(UnsupportedVersion, match=r"not a Kubernetes version: 'etcd 3\.6\.6'"):
        parse_minor("etcd 3.6.6")


def test_an_unsupported_version_is_refused_by_name() -> None:
    with pytest.raises(
        UnsupportedVersion, match=r"1\.36 is not supported \(supported: 1\.37, 1\.35\)"
    ):
        version(36)


def test_the_oldest_is_135_and_turns_on_the_alpha_gate_dynamic_mig_needs() -> None:
    assert OLDEST.name == "1.35"
    assert OLDEST.feature_gates == {"DRAPartitionableDevices": True}
    assert not OLDEST.extended_resource  # alpha in 1.35: left off


def test_137_needs_no_gate_and_serves_extended_resources() -> None:
    # DRAExtendedResource is GA and locked on in 1.37: setting it is never needed
    assert NEWEST.name == "1.37"
    assert NEWEST.feature_gates == {}
    assert NEWEST.extended_resource and NEWEST.prioritized_list


def test_the_build_script_builds_exactly_the_supported_versions() -> None:
    out = subprocess.run(
        [str(ROOT / "scripts" / "build-kubernetes"), "--versions"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(parse_minor(v) for v in out) == sorted(v.minor for v in SUPPORTED)
    for v in out:
        assert (ROOT / "tools" / "k8s" / v / "go.mod").is_file()
