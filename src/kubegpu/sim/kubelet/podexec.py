"""Start a simulated pod's container: a private mount namespace with the pod's volumes
bind-mounted at their mount paths, then exec the command.

Usage: python -m kubegpu.sim.kubelet.podexec [--bind-ip IP] [--mount SRC:DST[:ro]]... -- COMMAND [ARGS...]

So components run unmodified: a device plugin inside sees its node's
`/var/lib/kubelet/device-plugins`, not the host's. Needs CAP_SYS_ADMIN (root); without
it the container fails with a message that says so.

With `--bind-ip` (the node's own address, `sim.controlplane.addr`) a Python command run as
`python -m MODULE` runs in this process with wildcard binds (`0.0.0.0`, `::`) moved to that
address, so the same port on two simulated nodes never collides; other commands are
exec'd unchanged.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import socket
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, flags: int) -> None:
    _check(
        _libc.mount(src.encode() if src else None, dst.encode(), None, ctypes.c_ulong(flags), None),
        f"mount {src} on {dst}",
    )


def enter_namespace(mounts: list[tuple[str, str, bool]]) -> None:
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", MS_REC | MS_PRIVATE)
    for src, dst, read_only in mounts:
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst) or "/", exist_ok=True)
            if not os.path.exists(dst):
                open(dst, "a").close()
        _mount(src, dst, MS_BIND | MS_REC)
        if read_only:
            _mount(None, dst, MS_BIND | MS_REMOUNT | MS_RDONLY)


def bind_to(ip: str) -> None:
    """Move wildcard binds of every socket this process makes to `ip`."""
    original = socket.socket.bind

    def bind(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address and address[0] in ("", "0.0.0.0", "::"):
            if self.family == socket.AF_INET:
                address = (ip, *address[1:])
            elif self.family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    self.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                address = (f"::ffff:{ip}", *address[1:])
        original(self, address)

    socket.socket.bind = bind  # type: ignore[method-assign,assignment]
    resolve = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, family: int = 0, *args: Any, **kw: Any) -> Any:
        # a passive lookup for "every address" (asyncio's start_server(None, port)) would
        # bind 0.0.0.0 and :: -- both moved to `ip`, the second collides: give only `ip`
        passive = (args[2] if len(args) > 2 else kw.get("flags", 0)) & socket.AI_PASSIVE
        if passive and host in (None, "", "0.0.0.0", "::"):
            host, family = ip, socket.AF_INET
        return resolve(host, port, family, *args, **kw)

    socket.getaddrinfo = getaddrinfo


def python_module(command: list[str]) -> tuple[str, list[str]] | None:
    """`python -m MODULE ARGS...` -> (MODULE, ARGS), for this same interpreter only."""
    if len(command) >= 3 and command[1] == "-m" and command[0] == sys.executable:
        return command[2], command[3:]
    return None


def main(argv: list[str]) -> int:
    mounts: list[tuple[str, str, bool]] = []
    args = list(argv)
    bind_ip = None
    if args[:1] == ["--bind-ip"] and len(args) > 1:
        bind_ip, args = args[1], args[2:]
    while args and args[0] == "--mount":
        spec = args[1]
        parts = spec.split(":")
        read_only = parts[-1] == "ro"
        if read_only:
            parts = parts[:-1]
        mounts.append((parts[0], ":".join(parts[1:]), read_only))
        args = args[2:]
    if not args or args[0] != "--":
        print(
            "usage: podexec [--bind-ip IP] [--mount SRC:DST[:ro]]... -- COMMAND [ARGS...]",
            file=sys.stderr,
        )
        return 2
    command = args[1:]
    try:
        enter_namespace(mounts)
    except OSError as exc:
        print(f"kubegpu sim: cannot set up the pod's mount namespace: {exc}", file=sys.stderr)
        return 126
    module = python_module(command) if bind_ip else None
    if bind_ip and module is not None:
        bind_to(bind_ip)
        sys.argv = [module[0], *module[1]]
        runpy.run_module(module[0], run_name="__main__", alter_sys=True)
        return 0
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"kubegpu sim: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
