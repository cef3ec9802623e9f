"""Parse and print MIG profile names: `1g.18gb`, `1g.10gb+me`, `1g.24gb+me.all`, `1c.2g.20gb`."""

from __future__ import annotations

import re
from dataclasses import dataclass

SUFFIXES = ("", "+me", "+me.all", "+gfx", "-me")

_NAME = re.compile(
    r"^(?:(?P<c>[1-9]\d*)c\.)?(?P<g>[1-9]\d*)g\.(?P<gb>[1-9]\d*)gb(?P<suffix>[+-].*)?$"
)


class ProfileNameError(ValueError):
    """A string that is not a MIG profile name."""


@dataclass(frozen=True, order=True)
class ProfileName:
    """The parts of a MIG profile name. `compute_slices` is set only for `<c>c.<g>g...` names."""

    gpu_slices: int
    memory_gb: int
    suffix: str = ""
    compute_slices: int | None = None

    @classmethod
    def parse(cls, text: str) -> ProfileName:
        m = _NAME.match(text.strip())
        if not m:
            raise ProfileNameError(
                f"{text!r} is not a MIG profile name (expected like 1g.18gb, 1g.10gb+me, "
                f"1g.24gb-me, 1g.24gb+gfx, 1g.24gb+me.all or 1c.2g.20gb)"
            )
        suffix = m.group("suffix") or ""
        if suffix not in SUFFIXES:
            raise ProfileNameError(
                f"{text!r}: unknown suffix {suffix!r} (known: +me, +me.all, +gfx, -me)"
            )
        c = int(m.group("c")) if m.group("c") else None
        g = int(m.group("g"))
        if c is not None and c >= g:
            raise ProfileNameError(
                f"{text!r}: a compute instance must be smaller than its GPU instance"
            )
        return cls(gpu_slices=g, memory_gb=int(m.group("gb")), suffix=suffix, compute_slices=c)

    @property
    def gpu_instance(self) -> str:
        """The GPU-instance part (`1c.2g.20gb` -> `2g.20gb`)."""
        return f"{self.gpu_slices}g.{self.memory_gb}gb{self.suffix}"

    def __str__(self) -> str:
        prefix = f"{self.compute_slices}c." if self.compute_slices is not None else ""
        return prefix + self.gpu_instance

    @property
    def resource_suffix(self) -> str:
        """The device plugin's resource-name form: `+` becomes `.` (`mig-1g.10gb.me`)."""
        return str(self).replace("+", ".")
