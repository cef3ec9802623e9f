"""MPS backends: what starting and stopping an MPS control daemon does on this node.

`SystemMps` runs `nvidia-smi` and `nvidia-cuda-mps-control` on a real node; `RecordingMps`
(simulated nodes) writes the limits a real daemon would set to `<dir>/limits.json`. A MIG
instance's daemon (`MpsResource.instance`) sees only that instance (CUDA_VISIBLE_DEVICES). Which
one a node uses comes with its GPU backend (`kubegpu.node.gpus`), never from a test switch.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Protocol

from kubegpu.catalog import nvidia
from kubegpu.sharing.mps import MpsResource

LIMITS_FILE = "limits.json"


def commands(resource: MpsResource) -> list[str]:
    """What is sent to nvidia-cuda-mps-control for this resource. A MIG instance's daemon
    sees only its instance (CUDA_VISIBLE_DEVICES), which is its device 0."""
    out = [
        f"set_default_device_pinned_mem_limit "
        f"{0 if resource.instance else limit.gpu} {limit.pinned_memory_mib}M"
        for limit in resource.limits
    ]
    out.append(f"set_default_active_thread_percentage {resource.active_thread_percentage}")
    return out


class MpsBackend(Protocol):
    def start(self, resource: MpsResource, directory: Path) -> None: ...

    def stop(self, resource: MpsResource, directory: Path) -> None: ...


class RecordingMps:
    """Simulated nodes: record the limits a real daemon would set (`limits.json`)."""

    def start(self, resource: MpsResource, directory: Path) -> None:
        record = {
            "resource": resource.resource,
            "computeMode": "DEFAULT" if resource.instance else "EXCLUSIVE_PROCESS",
            "pipeDirectory": str(directory / "pipe"),
            "logDirectory": str(directory / "log"),
            "migInstance": resource.instance,
            "defaultActiveThreadPercentage": resource.active_thread_percentage,
            "devices": [
                {
                    "index": limit.gpu,
                    "uuid": limit.uuid,
                    "replicas": limit.replicas,
                    "pinnedDeviceMemoryLimitMiB": limit.pinned_memory_mib,
                    "activeThreadPercentage": limit.active_thread_percentage,
                    "multiprocessors": limit.multiprocessors,
                    "clientMultiprocessors": limit.client_multiprocessors,
                    "migProfile": limit.mig_profile,
                }
                for limit in resource.limits
            ],
            "commands": commands(resource),
        }
        tmp = directory / f".{LIMITS_FILE}.tmp"
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, directory / LIMITS_FILE)

    def stop(self, resource: MpsResource, directory: Path) -> None:
        (directory / LIMITS_FILE).unlink(missing_ok=True)


class SystemMps:
    """Real nodes: nvidia-smi for the compute mode, nvidia-cuda-mps-control for the rest."""

    def __init__(self, control: str = "nvidia-cuda-mps-control", smi: str = "nvidia-smi") -> None:
        self.control = control
        self.smi = smi

    def _env(self, directory: Path, resource: MpsResource) -> dict[str, str]:
        env = {
            **os.environ,
            nvidia.CUDA_MPS_PIPE_DIRECTORY: str(directory / "pipe"),
            nvidia.CUDA_MPS_LOG_DIRECTORY: str(directory / "log"),
        }
        if resource.instance:  # the daemon of one MIG instance sees that instance only
            env[nvidia.CUDA_VISIBLE_DEVICES] = resource.instance
        return env

    def _send(self, directory: Path, resource: MpsResource, line: str) -> None:
        subprocess.run(
            [self.control],
            input=line + "\n",
            text=True,
            env=self._env(directory, resource),
            check=True,
            timeout=30,
        )

    def start(self, resource: MpsResource, directory: Path) -> None:
        # The compute mode belongs to the whole GPU: a MIG instance's daemon leaves it alone,
        # as the MIG user guide's MPS example does, so the other instances are untouched.
        for limit in () if resource.instance else resource.limits:
            subprocess.run(
                [self.smi, "-i", limit.uuid, "-c", "EXCLUSIVE_PROCESS"], check=True, timeout=60
            )
        subprocess.run(
            [self.control, "-d"], env=self._env(directory, resource), check=True, timeout=60
        )
        for line in commands(resource):
            self._send(directory, resource, line)

    def stop(self, resource: MpsResource, directory: Path) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._send(directory, resource, "quit")
        for limit in () if resource.instance else resource.limits:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run(
                    [self.smi, "-i", limit.uuid, "-c", "DEFAULT"], check=True, timeout=60
                )
