"""What the Kubernetes components of the control plane share.

The cluster's name and Service range; the flags every component gets (klog verbosity,
feature gates); and for kube-controller-manager and kube-scheduler, which run alike, the
kubeconfig-authenticated secure serving, leader election and client rates, and their
readiness (``/healthz`` on the secure port, the leader lease held).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kubegpu.sim.controlplane.addr import LOOPBACK
from kubegpu.sim.controlplane.process import json_body, probe_get

SERVICE_CIDR: Final = "10.96.0.0/12"
SERVICE_IP: Final = "10.96.0.1"  # the `kubernetes` Service: first address of SERVICE_CIDR
CLUSTER_NAME: Final = "kubegpu"

LEADER_LEASE_S = 120
LEADER_RENEW_DEADLINE_S = 100


def common_args(verbosity: int, feature_gates: Mapping[str, bool]) -> list[str]:
    """The flags of kube-apiserver, kube-controller-manager and kube-scheduler alike."""
    args = [f"--v={verbosity}"]
    if feature_gates:
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(feature_gates.items()))
        args.append(f"--feature-gates={gates}")
    return args


def secure_component_args(name: str, kubeconfig: Path, pki: Path, port: int) -> list[str]:
    """kube-controller-manager's and kube-scheduler's shared flags: their kubeconfig for
    the API and for delegated authn/authz, secure serving on loopback, leader election."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={pki / f'{name}-serving.crt'}",
        f"--tls-private-key-file={pki / f'{name}-serving.key'}",
        "--leader-elect=true",
        # one instance of each, so no failover to be quick about: with the defaults
        # (15 s lease, 10 s renew deadline) an API server slowed by load (300 nodes on
        # 2 cores) made both lose their lease and exit, and nothing scheduled again
        f"--leader-elect-lease-duration={LEADER_LEASE_S}s",
        f"--leader-elect-renew-deadline={LEADER_RENEW_DEADLINE_S}s",
        "--profiling=false",
    ]


def api_get(server: str, ctx: ssl.SSLContext | None, path: str) -> tuple[int, dict[str, Any]] | str:
    """GET an API path as the admin: (status, JSON object), or why it could not."""
    got = probe_get(f"{server}{path}", ctx)
    if isinstance(got, str):
        return got
    return got[0], json_body(got[1])


def healthz(port: int, ctx: ssl.SSLContext | None) -> str | None:
    """None when the component's secure ``/healthz`` passes, else what it answered."""
    got = probe_get(f"https://{LOOPBACK}:{port}/healthz", ctx)
    if isinstance(got, str):
        return got
    status, body = got
    return None if status == 200 else f"/healthz answered {status}: {body[:200]!r}"


def lease_held(server: str, ctx: ssl.SSLContext | None, name: str) -> str | None:
    """None when the component's leader lease in kube-system has a holder."""
    got = api_get(server, ctx, f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}")
    if isinstance(got, str):
        return got
    status, lease = got
    if status == 200 and lease.get("spec", {}).get("holderIdentity"):
        return None
    return f"its leader lease kube-system/{name} (lookup answered {status})"
