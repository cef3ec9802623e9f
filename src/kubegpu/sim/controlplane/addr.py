"""Addresses: the control plane's free loopback ports, and each simulated node's own network
address, so host-network pods on two nodes never collide.

Real nodes each have their own network; simulated nodes share the host's. A node claims an
address of its own and every pod process on it binds its wildcard listens (`0.0.0.0`,
`::`, `:9400`) to that address instead (`podexec --bind-ip`); the address is the node's
InternalIP, so the API server reaches the node's kubelet (logs) and its pods there.

- As root with `ip`: a /32 from 198.18.0.0/15 (RFC 2544's benchmarking range, never routed)
  added to `lo` with the label `lo:kgsim`, removed when the node stops; the claiming
  process's pid is kept in /run/kubegpu-sim/addresses/<ip>, and the next claim removes
  addresses whose claimer is gone (`ip -4 addr show label lo:kgsim` lists them). The API
  server's node and pod proxies accept them (they refuse loopback addresses).
- Otherwise (no root, no `ip`, or KUBEGPU_SIM_NETWORK=loopback): an address of 127.0.0.0/8,
  which Linux routes to `lo` without configuration. Ports no longer collide, but the API
  server's proxy refuses loopback addresses (`kubectl logs` still works: it goes through
  the kubelet connection, not the proxy).
- KUBEGPU_SIM_NETWORK=shared: every node on 127.0.0.1, binds untouched (the old behaviour).

A network namespace per node would isolate more, but its pods could not reach the control
plane, which listens on the host's 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kubegpu.base.process import pid_alive

log = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"  # where the control plane listens

ENV_NETWORK = "KUBEGPU_SIM_NETWORK"  # own (default) | loopback | shared
LABEL = "lo:kgsim"
ROUTED_BASE = (198, 18)  # 198.18.0.0/15
ATTEMPTS = 64
LEASES = Path("/run/kubegpu-sim/addresses")  # one file per claimed address: the claimer's pid


@dataclass(frozen=True)
class NodeAddress:
    ip: str
    kind: str  # "own" (added to lo), "loopback" (127/8) or "shared" (127.0.0.1)

    @property
    def rewrites_binds(self) -> bool:
        return self.kind != "shared"


def candidates(seed: str, n: int = ATTEMPTS) -> list[tuple[int, int]]:
    """Address suffixes to try for a node, spread by a hash of `seed` (its root directory),
    so concurrent simulated clusters rarely pick the same first."""
    start = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big")
    out = []
    for i in range(n):
        v = (start + i * 7919) % (2 * 256 * 254)
        out.append((v // 254, v % 254 + 1))  # (0..511, 1..254)
    return out


def routed_ip(suffix: tuple[int, int]) -> str:
    hi, lo = suffix
    return f"{ROUTED_BASE[0]}.{ROUTED_BASE[1] + hi // 256}.{hi % 256}.{lo}"


def loopback_ip(suffix: tuple[int, int]) -> str:
    hi, lo = suffix
    return f"127.{1 + hi // 256}.{hi % 256}.{lo}"  # never 127.0.0.x, the host's own


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)


def sweep(leases: Path = LEASES) -> list[str]:
    """Remove addresses whose claiming process is gone (a simulator killed before it could
    stop its nodes); returns them."""
    removed = []
    for lease in sorted(leases.glob("*")) if leases.is_dir() else []:
        try:
            pid = int(lease.read_text().strip() or "0")
        except (OSError, ValueError):
            continue
        if pid and not pid_alive(pid):
            _ip("addr", "del", f"{lease.name}/32", "dev", "lo")
            lease.unlink(missing_ok=True)
            removed.append(lease.name)
    return removed


# what `ip addr add` says of an address some node already has (iproute2 old and new)
TAKEN = ("File exists", "Address already assigned")
_swept: set[Path] = set()


def claim(seed: str, leases: Path = LEASES) -> NodeAddress:
    """An address for a node, by the rules above."""
    mode = os.environ.get(ENV_NETWORK, "own")
    if mode == "shared":
        return NodeAddress("127.0.0.1", "shared")
    suffixes = candidates(seed)
    if mode == "own" and os.geteuid() == 0 and shutil.which("ip"):
        if leases not in _swept:  # once per process: a thousand nodes need not sweep each
            _swept.add(leases)
            sweep(leases)
        for suffix in suffixes:
            ip = routed_ip(suffix)
            result = _ip("addr", "add", f"{ip}/32", "dev", "lo", "label", LABEL)
            if result.returncode == 0:
                leases.mkdir(parents=True, exist_ok=True)
                (leases / ip).write_text(f"{os.getpid()}\n")  # who to ask if it is still used
                return NodeAddress(ip, "own")
            if not any(taken in result.stderr for taken in TAKEN):
                log.warning(
                    "cannot add a node address to lo (%s); using loopback addresses",
                    result.stderr.strip(),
                )
                break
    return NodeAddress(loopback_ip(suffixes[0]), "loopback")


def release(address: NodeAddress, leases: Path = LEASES) -> None:
    """Remove an address `claim` added (nothing to do for the others)."""
    if address.kind != "own":
        return
    (leases / address.ip).unlink(missing_ok=True)
    result = _ip("addr", "del", f"{address.ip}/32", "dev", "lo")
    if result.returncode != 0:
        log.warning("cannot remove node address %s from lo: %s", address.ip, result.stderr)


def free_port(taken: set[int], host: str = LOOPBACK) -> int | None:
    """A port on `host` that the kernel says is free and that is not in `taken` (added to
    it); None after 100 tries. Another process may still take it before it is bound: a
    launch that loses the race tries another (see `plane`)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port
    return None
