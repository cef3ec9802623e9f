"""etcd's flags and readiness, as the control plane runs it: one member on loopback."""

from __future__ import annotations

from pathlib import Path

from kubegpu.sim.controlplane.addr import LOOPBACK
from kubegpu.sim.controlplane.kube import CLUSTER_NAME
from kubegpu.sim.controlplane.process import json_body, probe_get


def args(
    data_dir: Path, client_port: int, peer_port: int, quota_bytes: int, fsync: bool
) -> list[str]:
    """etcd's command line (its own flags: etcd is no Kubernetes component)."""
    client = f"http://{LOOPBACK}:{client_port}"
    peer = f"http://{LOOPBACK}:{peer_port}"
    out = [
        f"--name={CLUSTER_NAME}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={CLUSTER_NAME}={peer}",
        f"--quota-backend-bytes={quota_bytes}",
        "--log-level=warn",
    ]
    if not fsync:
        out.append("--unsafe-no-fsync")
    return out


def probe(url: str) -> str | None:
    """None when etcd's ``/health`` says healthy, else what it answered."""
    got = probe_get(f"{url}/health", None)
    if isinstance(got, str):
        return got
    status, body = got
    if status == 200 and json_body(body).get("health") == "true":
        return None
    return f"/health answered {status}: {body[:200]!r}"
