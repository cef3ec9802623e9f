"""Each pod's `/dev/shm`, as a runtime gives it: a tmpfs of the pod's own, shared by its
containers, unless a container mounts a volume (a host path, as MPS does) at `/dev/shm`.

MPS needs a client and its control daemon to share both the pipe directory and `/dev/shm`
(docs/architecture.md); `shares_mps` is that check, on what the runtime recorded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SHM = "/dev/shm"
Mount = tuple[str, str, bool]  # source, container path, read-only


@dataclass(frozen=True)
class ContainerShm:
    """Where a container's /dev/shm and MPS pipe directory come from."""

    shm: Path  # the pod's own tmpfs or the mounted volume's source
    pipe: Path | None  # the source of the mount at CUDA_MPS_PIPE_DIRECTORY, if any


def container_shm(
    pod_dir: Path,
    mounts: list[Mount],
    env: Mapping[str, str],
    default_pipe: str = "/tmp/nvidia-mps",
) -> ContainerShm:
    """The container's /dev/shm source and its MPS pipe directory's source."""
    by_path = {dst.rstrip("/") or "/": Path(src) for src, dst, _ in mounts}
    shm = by_path.get(SHM, pod_dir / "shm")
    pipe_dir = str(env.get("CUDA_MPS_PIPE_DIRECTORY") or default_pipe).rstrip("/")
    return ContainerShm(_real(shm), _real(by_path[pipe_dir]) if pipe_dir in by_path else None)


def shares_mps(client: ContainerShm, daemon: ContainerShm) -> bool:
    """Whether an MPS client can reach a daemon: the same pipe directory and the same shm."""
    return client.pipe is not None and client.pipe == daemon.pipe and client.shm == daemon.shm


def _real(path: Path) -> Path:
    return path.resolve() if path.exists() else path
