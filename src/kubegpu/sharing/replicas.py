"""The replica device-ID format: `<id>::<n>`, the n-th time-slicing or MPS replica of a
device kubelet allocates. One owner, so the plugin that writes these IDs and the exporter,
MIG manager, what-if and simulator that read them agree on one format."""

from __future__ import annotations

__all__ = ["REPLICA_SEPARATOR", "is_replica", "physical_id", "replica_id", "split_replica"]

REPLICA_SEPARATOR = "::"


def replica_id(device_id: str, n: int | str) -> str:
    """`GPU-x`, 3 -> `GPU-x::3`."""
    return f"{device_id}{REPLICA_SEPARATOR}{n}"


def split_replica(device_id: str) -> tuple[str, str | None]:
    """`GPU-x::3` -> (`GPU-x`, `3`); `GPU-x` -> (`GPU-x`, None)."""
    base, sep, replica = device_id.partition(REPLICA_SEPARATOR)
    return base, (replica if sep else None)


def physical_id(device_id: str) -> str:
    """`GPU-x::3` -> `GPU-x`; an ID that is not a replica is returned as it is."""
    return split_replica(device_id)[0]


def is_replica(device_id: str) -> bool:
    return REPLICA_SEPARATOR in device_id
