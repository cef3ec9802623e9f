"""The CDI specs of a node, as a container runtime finds them, and CDI names resolved.

A scan reads the `*.json` and `*.yaml` files of the spec directories in order of priority
(`/etc/cdi`, then `/var/run/cdi`, which wins); a file that fails to load is recorded with
its error and defines nothing; two devices of one name at equal priority conflict and the
name resolves to neither (node-runtime.md §3.1). Resolving names applies each spec's
edits once and each device's own edits, in the order asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubegpu.catalog import nvidia
from kubegpu.cdi.spec import (
    SPEC_SUFFIXES,
    ContainerEdits,
    Device,
    Spec,
    SpecError,
    load,
    merge,
    parse_name,
)

#: The spec directories, lowest priority first (absolute paths on the node).
SPEC_DIRS = (nvidia.CDI_STATIC_SPEC_DIR, nvidia.CDI_SPEC_DIR)


@dataclass(frozen=True)
class Found:
    path: Path
    spec: Spec
    device: Device


@dataclass(frozen=True)
class Resolved:
    """CDI names resolved: the devices in the order asked, the edits a runtime applies
    (each spec's once, then each device's), and the names nothing defines."""

    devices: tuple[Found, ...] = ()
    edits: ContainerEdits = field(default_factory=ContainerEdits)
    unresolved: tuple[str, ...] = ()
    invalid: tuple[str, ...] = ()  # not of the form vendor/class=name

    def error(self, failures: Iterable[str] = ()) -> str | None:
        """The runtime's refusal, or None when every name resolved."""
        if self.invalid:
            return "; ".join(f'invalid CDI device name "{n}"' for n in self.invalid)
        if not self.unresolved:
            return None
        text = "CDI device injection failed: unresolvable CDI devices " + ", ".join(self.unresolved)
        extra = list(failures)
        return f"{text} ({'; '.join(extra)})" if extra else text


@dataclass
class Registry:
    specs: list[tuple[Path, Spec]] = field(default_factory=list)
    failures: dict[Path, str] = field(default_factory=dict)  # file -> why it did not load
    _entries: dict[str, list[tuple[int, Found]]] = field(default_factory=dict)

    @classmethod
    def scan(cls, dirs: Sequence[Path]) -> Registry:
        """Every spec in `dirs` (lowest priority first)."""
        reg = cls()
        for priority, directory in enumerate(dirs):
            if not directory.is_dir():
                continue
            for path in sorted(directory.iterdir()):
                if path.suffix not in SPEC_SUFFIXES or not path.is_file():
                    continue
                try:
                    spec = load(path)
                except SpecError as exc:
                    reg.failures[path] = f"failed to load CDI Spec {exc}"
                    continue
                except OSError as exc:
                    reg.failures[path] = f"failed to load CDI Spec {path}: {exc}"
                    continue
                reg.add(path, spec, priority)
        return reg

    def add(self, path: Path, spec: Spec, priority: int = 0) -> None:
        self.specs.append((path, spec))
        for d in spec.devices:
            self._entries.setdefault(spec.qualified(d.name), []).append(
                (priority, Found(path, spec, d))
            )

    def _top(self, name: str) -> list[Found]:
        entries = self._entries.get(name, [])
        best = max((p for p, _ in entries), default=-1)
        return [f for p, f in entries if p == best]

    def get(self, name: str) -> Found | None:
        """The device of that qualified name (None: undefined, or a conflict)."""
        top = self._top(name)
        return top[0] if len(top) == 1 else None

    @property
    def conflicts(self) -> dict[str, tuple[Path, ...]]:
        out = {}
        for name in self._entries:
            top = self._top(name)
            if len(top) > 1:
                out[name] = tuple(f.path for f in top)
        return out

    def resolve(self, names: Sequence[str]) -> Resolved:
        found: list[Found] = []
        unresolved: list[str] = []
        invalid: list[str] = []
        for name in dict.fromkeys(names):
            try:
                parse_name(name)
            except ValueError:
                invalid.append(name)
                continue
            hit = self.get(name)
            if hit is None:
                unresolved.append(name)
            else:
                found.append(hit)
        if unresolved or invalid:
            return Resolved(unresolved=tuple(unresolved), invalid=tuple(invalid))
        spec_edits: list[ContainerEdits] = []
        seen: list[Spec] = []
        for f in found:
            if not any(f.spec is s for s in seen):
                seen.append(f.spec)
                spec_edits.append(f.spec.edits)
        edits = merge([*spec_edits, *(f.device.edits for f in found)])
        return Resolved(tuple(found), edits)

    def failure_notes(self) -> list[str]:
        notes = list(self.failures.values())
        notes += [
            f'conflicting device "{n}" (specs ' + ", ".join(f'"{p}"' for p in ps) + ")"
            for n, ps in self.conflicts.items()
        ]
        return notes


def node_spec_dirs(root: Path) -> list[Path]:
    """The spec directories of a node whose host root is `root`, lowest priority first."""
    return [root / d.strip("/") for d in SPEC_DIRS]
