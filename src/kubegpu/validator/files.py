"""The ready files under /run/nvidia/validations that the other operands wait for.

A check deletes its file first and writes it only on success, atomically, so a reader
never sees a half-written file and a failed check never leaves a stale `*-ready` behind.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

DEFAULT_OUTPUT_DIR = Path("/run/nvidia/validations")

# component -> its status file
READY_FILES = {
    "driver": "driver-ready",
    "toolkit": "toolkit-ready",
    "cuda": "cuda-ready",
    "plugin": "plugin-ready",
    "vfio-pci": "vfio-pci-ready",
    "vgpu-manager": "vgpu-manager-ready",
    "vgpu-devices": "vgpu-devices-ready",
}


def ready_file_name(name: str) -> str:
    """`toolkit`, `toolkit-ready` -> `toolkit-ready`."""
    return READY_FILES.get(
        name, name if name.endswith("-ready") or name.startswith(".") else f"{name}-ready"
    )


class ReadyFiles:
    def __init__(self, directory: Path = DEFAULT_OUTPUT_DIR) -> None:
        self.dir = directory

    def path(self, name: str) -> Path:
        return self.dir / ready_file_name(name)

    def clear(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def write(self, name: str, env: Mapping[str, str] | None = None) -> Path:
        """Write the file (an env file of `env`, or empty) atomically."""
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self.path(name)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text("".join(f"{k}={v}\n" for k, v in (env or {}).items()))
        os.replace(tmp, target)
        return target

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def read_env(self, name: str) -> dict[str, str]:
        out = {}
        for line in self.path(name).read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    def present(self) -> list[str]:
        """The ready files that exist now."""
        if not self.dir.is_dir():
            return []
        return sorted(p.name for p in self.dir.iterdir() if p.name.endswith("-ready"))

    def clear_all(self) -> list[str]:
        removed = self.present()
        for name in removed:
            (self.dir / name).unlink(missing_ok=True)
        return removed

    async def wait(
        self, names: Iterable[str], *, interval_s: float = 1.0, timeout_s: float | None = None
    ) -> bool:
        """Wait until every file exists; False on timeout."""
        wanted = [ready_file_name(n) for n in names]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if all((self.dir / n).is_file() for n in wanted):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(interval_s)
