"""Each simulated node's own address, and pod processes' wildcard binds moved onto it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kubegpu.sim.controlplane import addr as netaddr
from kubegpu.sim.controlplane.addr import NodeAddress, candidates, loopback_ip, routed_ip


def test_addresses_are_spread_by_node_and_never_the_hosts_own() -> None:
    a, b = candidates("/tmp/a/nodes/n1"), candidates("/tmp/a/nodes/n2")
    assert a[0] != b[0]
    assert len(set(a)) == len(a)
    for suffix in a:
        assert routed_ip(suffix).startswith(("198.18.", "198.19."))
        assert loopback_ip(suffix).startswith("127.") and not loopback_ip(suffix).startswith(
            "127.0.0."
        )


def test_shared_mode_keeps_the_old_behaviour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(netaddr.ENV_NETWORK, "shared")
    address = netaddr.claim("/tmp/x")
    assert address == NodeAddress("127.0.0.1", "shared")
    assert not address.rewrites_binds


def test_loopback_mode_needs_no_privilege(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(netaddr.ENV_NETWORK, "loopback")
    address = netaddr.claim("/tmp/x")
    assert address.kind == "loopback" and address.rewrites_binds
    with socket.socket() as s:  # Linux routes all of 127/8 to lo
        s.bind((address.ip, 0))
    netaddr.release(address)  # nothing to remove


PROBE = """
import socket, asyncio
s = socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[0]); s.close()
async def main():
    server = await asyncio.start_server(lambda r, w: None, None, 0)
    print(sorted({sock.getsockname()[0] for sock in server.sockets}))
    server.close()
asyncio.run(main())
"""


def test_wildcard_binds_of_a_python_pod_land_on_the_node_address(tmp_path: Path) -> None:
    """podexec runs `python -m MODULE` in-process with binds moved (no mount here)."""
    (tmp_path / "probe_mod.py").write_text(PROBE)
    podexec = [sys.executable, "-m", "kubegpu.sim.kubelet.podexec", "--bind-ip", "127.9.8.7", "--"]
    result = subprocess.run(
        [*podexec, sys.executable, "-m", "probe_mod"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
        timeout=30,
        check=False,
    )
    if "cannot set up the pod's mount namespace" in result.stderr:
        pytest.skip("needs CAP_SYS_ADMIN for the pod's mount namespace")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["127.9.8.7", "['127.9.8.7']"]


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip"), reason="adding addresses to lo needs root"
)
def test_an_address_whose_claimer_died_is_swept_by_a_later_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(netaddr.ENV_NETWORK, raising=False)
    leases = tmp_path / "leases"
    address = netaddr.claim(str(tmp_path), leases)
    assert address.kind == "own"
    assert (leases / address.ip).read_text().strip() == str(os.getpid())
    dead = subprocess.Popen(["true"])
    dead.wait()
    (leases / address.ip).write_text(f"{dead.pid}\n")  # as if a killed run had claimed it
    assert netaddr.sweep(leases) == [address.ip]
    shown = subprocess.run(
        ["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True
    )
    assert f"{address.ip}/32" not in shown.stdout
    assert not (leases / address.ip).exists()
