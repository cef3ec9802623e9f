"""Start a simulated pod's container: a private mount namespace with the pod's volumes
bind-mounted at their mount paths, then exec the command.

Usage: python -m kubegpu.sim.podexec [--mount SRC:DST[:ro]]... -- COMMAND [ARGS...]

So components run unmodified: a device plugin inside sees its node's
`/var/lib/kubelet/device-plugins`, not the host's. Needs CAP_SYS_ADMIN (root); without
it the container fails with a message that says so.
"""

from __future__ import annotations

import ctypes
import os
import sys

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


def main(argv: list[str]) -> int:
    mounts: list[tuple[str, str, bool]] = []
    args = list(argv)
    while args and args[0] == "--mount":
        spec = args[1]
        parts = spec.split(":")
        read_only = parts[-1] == "ro"
        if read_only:
            parts = parts[:-1]
        mounts.append((parts[0], ":".join(parts[1:]), read_only))
        args = args[2:]
    if not args or args[0] != "--":
        print("usage: podexec [--mount SRC:DST[:ro]]... -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = args[1:]
    try:
        enter_namespace(mounts)
    except OSError as exc:
        print(f"kubegpu sim: cannot set up the pod's mount namespace: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"kubegpu sim: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
