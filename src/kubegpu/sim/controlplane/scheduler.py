"""kube-scheduler's readiness (its flags are the shared ones of `kube`): healthy and leading."""

from __future__ import annotations

import ssl

from kubegpu.sim.controlplane.binaries import SCHEDULER
from kubegpu.sim.controlplane.kube import healthz, lease_held


def args() -> list[str]:
    """kube-scheduler's own flags: none beyond `kube.secure_component_args`."""
    return []


def probe(server: str, port: int, ctx: ssl.SSLContext | None) -> str | None:
    """Ready once healthy and leading."""
    return healthz(port, ctx) or lease_held(server, ctx, SCHEDULER)
