"""The lock files say what pyproject.toml says: every dependency it names is pinned at a
version its specifier allows, with hashes, and nothing is pinned that no requirement pulls in.
requirements/runtime.lock is what the image installs; requirements/dev.lock is what
`make install` (and so `make test` and CI) installs. `make lock` rewrites both."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "requirements" / "runtime.lock"
DEV = ROOT / "requirements" / "dev.lock"
PROJECT = "kubegpu (pyproject.toml)"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


@dataclass
class Pin:
    version: str
    hashes: int = 0
    via: set[str] = field(default_factory=set)


def parse_lock(path: Path) -> dict[str, Pin]:
    """name -> its pin, hash count and the `# via` parents uv wrote for it."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    for line in path.read_text().splitlines():
        if m := _PIN.match(line):
            current = pins.setdefault(canonicalize_name(m[1]), Pin(m[2]))
        elif current is None:
            continue
        current.hashes += len(_HASH.findall(line))
        text = line.strip().removeprefix("#").strip()
        if line.lstrip().startswith("#") and text != "via" and not text.startswith("-c "):
            current.via.add(text.removeprefix("via ").strip())
    return pins


def project_requirements(*extras: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = list(project["dependencies"])
    for extra in extras:
        named += project["optional-dependencies"][extra]
    return [Requirement(r) for r in named]


def _unexplained(pins: dict[str, Pin], direct: Iterable[Requirement]) -> list[str]:
    """Pins not reachable from the project's direct requirements through `# via` parents."""
    roots = {canonicalize_name(r.name) for r in direct}
    return sorted(
        f"{name} (via {sorted(pin.via) or 'nothing'})"
        for name, pin in pins.items()
        if name not in roots
        and not any(canonicalize_name(v) in pins and v != PROJECT for v in pin.via)
    )


def _disagreements(pins: dict[str, Pin], requirements: Iterable[Requirement]) -> list[str]:
    wrong = []
    for req in requirements:
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            wrong.append(f"{req}: not pinned")
        elif not req.specifier.contains(pin.version, prereleases=True):
            wrong.append(f"{req}: pinned at {pin.version}")
    return wrong


LOCKS = [
    pytest.param(RUNTIME, (), id="runtime.lock"),
    pytest.param(DEV, ("planner", "dev"), id="dev.lock"),
]


@pytest.mark.parametrize(("lock", "extras"), LOCKS)
def test_every_project_requirement_is_pinned_at_an_allowed_version(
    lock: Path, extras: tuple[str, ...]
) -> None:
    wrong = _disagreements(parse_lock(lock), project_requirements(*extras))
    assert not wrong, f"pyproject.toml and {lock.name} disagree (run `make lock`): {wrong}"


@pytest.mark.parametrize(("lock", "extras"), LOCKS)
def test_the_lock_pins_nothing_that_no_requirement_pulls_in(
    lock: Path, extras: tuple[str, ...]
) -> None:
    pins = parse_lock(lock)
    direct = project_requirements(*extras)
    from_project = {name for name, pin in pins.items() if PROJECT in pin.via}
    assert from_project == {canonicalize_name(r.name) for r in direct}, (
        f"{lock.name} was resolved from other requirements than pyproject.toml's (run `make lock`)"
    )
    assert not _unexplained(pins, direct), f"{lock.name} pins what nothing requires"


@pytest.mark.parametrize(("lock", "extras"), LOCKS)
def test_every_pin_is_hash_checked(lock: Path, extras: tuple[str, ...]) -> None:
    unhashed = sorted(name for name, pin in parse_lock(lock).items() if pin.hashes == 0)
    assert not unhashed, f"{lock.name}: pins without --hash: {unhashed}"


def test_the_dev_lock_pins_the_runtime_packages_at_the_runtime_versions() -> None:
    runtime, dev = parse_lock(RUNTIME), parse_lock(DEV)
    differ = {n: (p.version, dev[n].version if n in dev else None) for n, p in runtime.items()}
    assert {n: v for n, v in differ.items() if v[0] != v[1]} == {}


def test_the_runtime_lock_is_the_closure_of_the_runtime_requirements() -> None:
    """Read from the installed packages' own metadata (the test environment is installed
    from dev.lock, which pins the runtime packages at runtime.lock's versions): the
    packages the runtime requirements pull in on Linux are exactly runtime.lock's."""
    pins = parse_lock(RUNTIME)
    seen: set[str] = set()
    todo = [(r, "") for r in project_requirements()]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        extras = sorted(req.extras) or [""]
        key = f"{name}[{','.join(extras)}]"
        if key in seen:
            continue
        seen.add(key)
        installed = metadata.version(name)
        assert installed == pins[name].version if name in pins else True, (
            f"{name} {installed} is installed, runtime.lock pins {pins[name].version}: "
            "the environment is not the lock's (run `make install`)"
        )
        for sub in metadata.requires(name) or []:
            for e in extras:
                todo.append((Requirement(sub), e))
    pulled = {key.partition("[")[0] for key in seen}
    assert pulled == set(pins), (
        f"missing from runtime.lock: {sorted(pulled - set(pins))}; "
        f"pinned but not required: {sorted(set(pins) - pulled)}"
    )


def test_a_lock_with_a_stray_or_missing_package_is_caught() -> None:
    """The checks above can fail: a pin nothing requires, and a requirement left unpinned."""
    pins = parse_lock(RUNTIME)
    before = set(_unexplained(pins, project_requirements()))
    pins["left-pad"] = Pin("1.0", 1, {"nothing-here"})
    after = set(_unexplained(pins, project_requirements()))
    assert after - before == {"left-pad (via ['nothing-here'])"}
    pinned = pins["typer"].version
    assert _disagreements(pins, [Requirement(f"typer>{pinned}"), Requirement("left-pad>=2")]) == [
        f"typer>{pinned}: pinned at {pinned}",
        "left-pad>=2: pinned at 1.0",
    ]
    del pins["typer"]
    assert _disagreements(pins, [Requirement("typer")]) == ["typer: not pinned"]
