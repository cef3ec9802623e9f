"""The driver's files a CDI spec mounts, and the hooks that go with them, as nvcdi finds them.

Everything is looked up under the driver root as this process sees it (`/driver-root` in
an operand's container, `/` on the host) and written with host paths under the driver
root on the host (`/` for a pre-installed driver, `/run/nvidia/driver` for a containerized
one) — nvcdi's root transform (node-runtime.md §3.2). Only files that exist are listed:

- the version: the suffix of `libcuda.so.<v>` or `libnvidia-ml.so.<v>` in the library
  directories nvcdi searches;
- libraries: every `*.so.<v>` in the directories that hold them (and their `vdpau/`), and
  `libnvidia-nvvm70.so.*`;
- GSP firmware `lib/firmware/nvidia/<v>/gsp*.bin`;
- binaries: nvidia-smi, nvidia-debugdump, nvidia-persistenced, the MPS control and server,
  nvidia-imex and nvidia-imex-ctl;
- IPC sockets of the persistence and fabric manager daemons, and the MPS pipe directory;
- the `createContainer` hooks: `create-symlinks` (libcuda.so), `enable-cuda-compat`,
  `update-ldcache` with the library directories, `disable-device-node-modification`; and
  the env `NVIDIA_CTK_LIBCUDA_DIR`.

Not done (kubegpu's nodes have no display): graphics files (EGL, Vulkan, GLX), DRM nodes,
and the version found only in `etc/ld.so.cache`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubegpu.cdi.nodes import host_path
from kubegpu.cdi.spec import ContainerEdits, Hook, Mount

#: Where nvcdi looks for the driver's libraries, relative to the driver root.
LIBRARY_DIRS = (
    "",
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/nvidia/current",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/aarch64-linux-gnu/nvidia/current",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu/nvidia/current",
    "lib/aarch64-linux-gnu",
    "lib/aarch64-linux-gnu/nvidia/current",
)
#: Where binaries are looked up, relative to the driver root.
BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "opt/bin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
IPC = (
    "run/nvidia-persistenced/socket",
    "var/run/nvidia-persistenced/socket",
    "run/nvidia-fabricmanager/socket",
    "var/run/nvidia-fabricmanager/socket",
    "tmp/nvidia-mps",
)
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_OPTIONS = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
#: The hook binary GPU operator's toolkit installs (`<ROOT>/toolkit`, ROOT /usr/local/nvidia).
DEFAULT_HOOK_PATH = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
#: Env var naming the hook binary instead (GPU operator sets it for its operands).
HOOK_PATH_ENV = "NVIDIA_CDI_HOOK_PATH"
HOOK_ENV = ("NVIDIA_CTK_DEBUG=false",)
ENV_LIBCUDA_DIR = "NVIDIA_CTK_LIBCUDA_DIR"

_VERSIONED = re.compile(r"^lib(cuda|nvidia-ml)\.so\.(\d+(\.\d+)+)$")


@dataclass(frozen=True)
class DriverFiles:
    """What was found: paths relative to the driver root (`usr/bin/nvidia-smi`)."""

    version: str | None = None
    library_dirs: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    ipc: tuple[str, ...] = ()
    libcuda_dir: str | None = None


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def find_version(root: Path) -> tuple[str, tuple[str, ...]] | None:
    """The driver version and the library directories that hold its versioned libraries."""
    version = None
    dirs: list[str] = []
    for d in LIBRARY_DIRS:
        folder = root / d
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            m = _VERSIONED.match(entry.name)
            if m and entry.is_file() and (version is None or m.group(2) == version):
                version = m.group(2)
                if d not in dirs:
                    dirs.append(d)
    return (version, tuple(dirs)) if version else None


def find_driver_files(root: Path) -> DriverFiles:
    """The driver's files under `root` (nothing when no driver library is there)."""
    found = find_version(root)
    if found is None:
        return DriverFiles()
    version, dirs = found
    suffix = f".so.{version}"
    libraries: list[str] = []
    libcuda_dir = None
    for d in dirs:
        for folder in (root / d, root / d / "vdpau"):
            if not folder.is_dir():
                continue
            for entry in sorted(folder.iterdir()):
                name = entry.name
                if entry.is_file() and (
                    name.endswith(suffix) or name.startswith("libnvidia-nvvm70.so.")
                ):
                    libraries.append(_rel(entry, root))
                    if name == f"libcuda{suffix}" and libcuda_dir is None:
                        libcuda_dir = d
    firmware_dir = root / "lib/firmware/nvidia" / version
    firmware = (
        tuple(_rel(p, root) for p in sorted(firmware_dir.glob("gsp*.bin")) if p.is_file())
        if firmware_dir.is_dir()
        else ()
    )
    binaries = []
    for name in BINARIES:
        for d in BINARY_DIRS:
            path = root / d / name
            if path.is_file():
                binaries.append(_rel(path, root))
                break
    ipc = tuple(p for p in IPC if (root / p).exists())
    return DriverFiles(
        version=version,
        library_dirs=dirs,
        libraries=tuple(dict.fromkeys(libraries)),
        firmware=firmware,
        binaries=tuple(binaries),
        ipc=ipc,
        libcuda_dir=libcuda_dir,
    )


def hook_path(environ: Mapping[str, str]) -> str:
    """The hook binary the specs name: `NVIDIA_CDI_HOOK_PATH`, else the toolkit's."""
    return environ.get(HOOK_PATH_ENV) or DEFAULT_HOOK_PATH


def _container(rel: str) -> str:
    return "/" + rel if rel else "/"


def driver_edits(
    files: DriverFiles, host_root: str = "/", hook_path: str = DEFAULT_HOOK_PATH
) -> ContainerEdits:
    """The spec-wide edits for the driver's files: bind mounts from the host driver root
    to the same paths in the container, nvcdi's hooks and env. None found: no edits."""
    if files.version is None:
        return ContainerEdits()
    mounts = [
        Mount(host_path(host_root, _container(p)), _container(p), MOUNT_OPTIONS)
        for p in (*files.libraries, *files.firmware, *files.binaries)
    ]
    mounts += [
        Mount(host_path(host_root, _container(p)), _container(p), IPC_OPTIONS) for p in files.ipc
    ]
    hook = "nvidia-cdi-hook"
    hooks = []
    env = []
    if files.libcuda_dir is not None:
        libcuda = _container(files.libcuda_dir)
        env.append(f"{ENV_LIBCUDA_DIR}={libcuda}")
        hooks.append(
            Hook(
                "createContainer",
                hook_path,
                (
                    hook,
                    "create-symlinks",
                    "--link",
                    f"libcuda.so.1::{libcuda.rstrip('/')}/libcuda.so",
                ),
                HOOK_ENV,
            )
        )
    hooks.append(
        Hook(
            "createContainer",
            hook_path,
            (hook, "enable-cuda-compat", f"--host-driver-version={files.version}"),
            HOOK_ENV,
        )
    )
    folders = [a for d in files.library_dirs for a in ("--folder", _container(d))]
    hooks.append(Hook("createContainer", hook_path, (hook, "update-ldcache", *folders), HOOK_ENV))
    hooks.append(
        Hook("createContainer", hook_path, (hook, "disable-device-node-modification"), HOOK_ENV)
    )
    return ContainerEdits(env=tuple(env), mounts=tuple(mounts), hooks=tuple(hooks))


def mounted_binaries(edits: ContainerEdits) -> set[str]:
    """The driver binaries (by name) the edits mount into a container."""
    return {
        m.container_path.rsplit("/", 1)[-1]
        for m in edits.mounts
        if m.container_path.rsplit("/", 1)[-1] in BINARIES
    }


def mounts_libcuda(edits: ContainerEdits) -> bool:
    return any(m.container_path.rsplit("/", 1)[-1].startswith("libcuda.so.") for m in edits.mounts)
