"""kube-controller-manager's flags and readiness: every controller, signing with the
cluster CA, service-account tokens with the plane's signing key."""

from __future__ import annotations

import ssl
from pathlib import Path

from kubegpu.sim.controlplane.binaries import CONTROLLER_MANAGER
from kubegpu.sim.controlplane.kube import (
    CLUSTER_NAME,
    SERVICE_CIDR,
    api_get,
    healthz,
    lease_held,
)


def args(pki: Path) -> list[str]:
    """kube-controller-manager's own flags (after `kube.secure_component_args`)."""
    return [
        "--controllers=*",
        f"--cluster-name={CLUSTER_NAME}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def probe(server: str, port: int, ctx: ssl.SSLContext | None) -> str | None:
    """Ready once healthy, leading, and its controllers work: the `default`
    ServiceAccount exists."""
    waiting = healthz(port, ctx) or lease_held(server, ctx, CONTROLLER_MANAGER)
    if waiting:
        return waiting
    got = api_get(server, ctx, "/api/v1/namespaces/default/serviceaccounts/default")
    if isinstance(got, str):
        return got
    if got[0] != 200:
        return f"the default ServiceAccount (lookup answered {got[0]})"
    return None
