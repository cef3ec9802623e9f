"""Device health: which XIDs count, and when a GPU is healthy again (pure, time passed in).

Which XIDs mark a device unhealthy follows NVIDIA's plugin: every XID except the
application errors 13, 31, 43, 45, 68 and 109, adjusted by two environment variables:

- `DP_DISABLE_HEALTHCHECKS`: comma list; `all` or `xids` turns XID checks off, numbers
  are added to the ignore list;
- `DP_ENABLE_HEALTHCHECKS`: comma list of XIDs that always count, overriding both the
  ignore list and a disable; `all` makes every XID count.

What an XID marks (kubegpu, fixing upstream's single-replica bug): every device of that
GPU under every resource — all its replicas and all its MIG devices; an event scoped to
one GPU instance (and compute instance) marks only the MIG devices inside it.

Recovery (kubegpu; upstream never recovers): a marked GPU (or GPU instance) is healthy
again once `recovery_s` seconds have passed since its last counted XID and NVML answers
for the GPU. `recovery_s = 0` keeps upstream's behaviour: unhealthy until restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubegpu.sharing.devices import Device

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
ENV_DISABLE = "DP_DISABLE_HEALTHCHECKS"
ENV_ENABLE = "DP_ENABLE_HEALTHCHECKS"
# Bounds on the two variables (docs/limits.md): an XID is an unsigned 32-bit number, and a
# list holds at most MAX_XID_ITEMS entries; anything beyond is reported as not understood.
MAX_XID = 2**32 - 1
MAX_XID_ITEMS = 1024


@dataclass(frozen=True)
class XidPolicy:
    checks_enabled: bool = True
    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    forced: frozenset[int] = frozenset()
    force_all: bool = False
    invalid: tuple[str, ...] = ()  # entries of the env vars that were not understood

    def counts(self, xid: int) -> bool:
        """Whether this XID marks devices unhealthy."""
        if self.force_all or xid in self.forced:
            return True
        if not self.checks_enabled:
            return False
        return xid not in self.ignored

    @property
    def active(self) -> bool:
        """Whether any XID can count (else the plugin need not wait for events)."""
        return self.checks_enabled or self.force_all or bool(self.forced)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> XidPolicy:
        checks, ignored, forced, force_all = True, set(DEFAULT_IGNORED_XIDS), set(), False
        invalid: list[str] = []
        for name, item in _items(environ, ENV_DISABLE, invalid):
            if item.lower() in ("all", "xids"):
                checks = False
            elif (xid := parse_xid(item)) is not None:
                ignored.add(xid)
            else:
                invalid.append(f"{name}={_short(item)}")
        for name, item in _items(environ, ENV_ENABLE, invalid):
            if item.lower() in ("all", "xids"):
                force_all = True
            elif (xid := parse_xid(item)) is not None:
                forced.add(xid)
            else:
                invalid.append(f"{name}={_short(item)}")
        return cls(checks, frozenset(ignored), frozenset(forced), force_all, tuple(invalid))


def _short(text: str, limit: int = 20) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_xid(text: str) -> int | None:
    """An XID as the variables write it (decimal, 0..MAX_XID); None when it is not one."""
    if not text.isascii() or not text.isdigit() or len(text) > len(str(MAX_XID)):
        return None
    value = int(text)
    return value if value <= MAX_XID else None


def _items(environ: Mapping[str, str], name: str, invalid: list[str]) -> list[tuple[str, str]]:
    """The entries of one comma list, at most MAX_XID_ITEMS (the rest counted as invalid)."""
    items = [p.strip() for p in environ.get(name, "").split(",") if p.strip()]
    if len(items) > MAX_XID_ITEMS:
        invalid.append(
            f"{name}: {len(items) - MAX_XID_ITEMS} entries past the first {MAX_XID_ITEMS}"
        )
    return [(name, item) for item in items[:MAX_XID_ITEMS]]


# A fault's scope: (gpu index, gpu instance id, compute instance id); None = the whole GPU
# (or the whole GPU instance).
Scope = tuple[int, int | None, int | None]


def affected(device: Device, scope: Scope) -> bool:
    """Whether a fault with this scope hits this device."""
    gpu, gi, ci = scope
    if device.gpu != gpu:
        return False
    if gi is None or device.mig is None:
        return True
    return device.mig.gi == gi and (ci is None or device.mig.ci == ci)


@dataclass
class HealthBook:
    """Faults seen per scope and when; answers which devices are unhealthy now."""

    recovery_s: float = 0.0
    faults: dict[Scope, float] = field(default_factory=dict)  # scope -> time of last XID

    def record(self, scope: Scope, now: float) -> None:
        self.faults[scope] = now

    def unhealthy(self, devices: Iterable[Device]) -> set[str]:
        scopes = list(self.faults)
        return {d.id for d in devices if any(affected(d, s) for s in scopes)}

    def due(self, now: float) -> list[Scope]:
        """Scopes whose quiet period is over (the caller probes NVML, then `recover`s)."""
        if self.recovery_s <= 0:
            return []
        return [s for s, t in self.faults.items() if now - t >= self.recovery_s]

    def recover(self, scope: Scope) -> None:
        self.faults.pop(scope, None)
