"""kube-apiserver's flags and readiness: secure serving on loopback with the PKI of
``plane``, Node and RBAC authorization, service accounts, the front proxy."""

from __future__ import annotations

import ssl
from pathlib import Path

from kubegpu.sim.controlplane.addr import LOOPBACK
from kubegpu.sim.controlplane.kube import SERVICE_CIDR
from kubegpu.sim.controlplane.process import probe_get


def args(etcd_url: str, port: int, pki: Path) -> list[str]:
    """kube-apiserver's own flags (the size's and the common ones come on top)."""

    def p(name: str) -> str:
        return str(pki / name)

    return [
        f"--etcd-servers={etcd_url}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--tls-cert-file={p('apiserver.crt')}",
        f"--tls-private-key-file={p('apiserver.key')}",
        f"--client-ca-file={p('ca.crt')}",
        f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
        f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
        # as kubeadm sets it: a simulated node's name resolves nowhere, its
        # InternalIP is where its kubelet (logs) and host-network pods listen
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={p('sa.pub')}",
        f"--service-account-signing-key-file={p('sa.key')}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # Endpoints may not hold a loopback address, so the `kubernetes` Service gets
        # none; in-cluster clients of the simulator are given the URL directly.
        "--endpoint-reconciler-type=none",
        f"--requestheader-client-ca-file={p('front-proxy-ca.crt')}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={p('front-proxy-client.crt')}",
        f"--proxy-client-key-file={p('front-proxy-client.key')}",
        "--enable-aggregator-routing=true",
        "--profiling=false",
    ]


def probe(server: str, ctx: ssl.SSLContext | None) -> str | None:
    """None when ``/readyz`` passes, else the checks that fail."""
    got = probe_get(f"{server}/readyz", ctx)
    if isinstance(got, str):
        return got
    status, body = got
    if status == 200:
        return None
    failing = [line.strip() for line in body.decode(errors="replace").splitlines() if "[-]" in line]
    return f"/readyz answered {status}: {'; '.join(failing) or body[:200]!r}"
