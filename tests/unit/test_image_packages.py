"""The Dockerfile (for users with Docker) and scripts/build-image (the release image) install
the same package set: requirements/runtime.lock, hash-checked and with nothing resolved
beyond it, then kubegpu itself without extras. Read from the two files' pip commands, so
nothing is built here."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class PipInstalls:
    lock_files: set[str] = field(default_factory=set)
    projects: list[str] = field(default_factory=list)
    unlocked: list[str] = field(default_factory=list)  # installs that may resolve more


def _pip_commands(text: str) -> list[list[str]]:
    """Every `pip install ...` command, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    commands = []
    for raw in joined.splitlines():
        line = raw.split(" #", 1)[0]
        if not re.search(r"\bpip\b.*\binstall\b", line):
            continue
        for part in re.split(r"&&|;|\|\|", line):
            words = shlex.split(part.replace('"', "").replace("${pyplat[@]}", ""))
            if "pip" in words and "install" in words[words.index("pip") :]:
                commands.append(words[words.index("install", words.index("pip")) + 1 :])
    return commands


def pip_installs(text: str) -> PipInstalls:
    found = PipInstalls()
    for words in _pip_commands(text):
        locks = [words[i + 1] for i, w in enumerate(words) if w in ("-r", "--requirement")]
        found.lock_files.update(locks)
        values = {"-r", "--requirement", "--target", "--find-links", "-d", "--platform"}
        values |= {"--python-version", "--implementation", "--abi"}
        positional = [
            w
            for i, w in enumerate(words)
            if not w.startswith("-") and (i == 0 or words[i - 1] not in values)
        ]
        found.projects += positional
        if "--no-deps" not in words or (locks and "--require-hashes" not in words):
            found.unlocked.append(" ".join(words))
    return found


def test_the_dockerfile_and_the_image_script_install_the_same_lock_and_project() -> None:
    docker = pip_installs((ROOT / "Dockerfile").read_text())
    script = pip_installs((ROOT / "scripts" / "build-image").read_text())
    assert docker.lock_files == script.lock_files == {"requirements/runtime.lock"}
    assert docker.unlocked == script.unlocked == []
    # the project itself, with no extras: `.` there, the wheel built from the tree here
    assert docker.projects == ["."]
    assert script.projects == ["$KUBEGPU_WHEEL"]
    build = (ROOT / "scripts" / "build-image").read_text()
    assert re.search(r"pip wheel [^\n]*--no-deps[^\n]*\$ROOT", build)


def test_an_install_outside_the_lock_is_seen() -> None:
    text = (
        "RUN pip install --require-hashes --no-deps -r requirements/runtime.lock\n"
        "RUN pip install '.[planner]' && rm -rf /src\n"
        "RUN pip install --no-deps -r requirements/dev.lock\n"
    )
    found = pip_installs(text)
    assert found.lock_files == {"requirements/runtime.lock", "requirements/dev.lock"}
    assert found.projects == [".[planner]"]
    assert found.unlocked == [".[planner]", "--no-deps -r requirements/dev.lock"]
