"""A strict simulated node hands out GPUs through CDI as a CRI runtime does: a pod naming a
CDI device (annotation `cdi.k8s.io/...`, no RuntimeClass) gets exactly that spec's edits —
its GPU, and `nvidia-smi` only because the spec, written by `kubegpu.cdi` from the driver
pre-installed on the node's host root, mounts it; a spec without the driver's files gives
the GPU and no `nvidia-smi`; a name only an invalid spec defines fails the container with
the spec's file, field and value."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from kubegpu.cdi.build import common_edits, gpu_devices, node_spec, write_spec
from kubegpu.cdi.driver import driver_edits, find_driver_files
from kubegpu.cdi.spec import file_name
from kubegpu.sharing.facts import read_gpus
from kubegpu.sim.kubelet.node import SimNode
from kubegpu.sim.runtime.config import RuntimeOptions

from .helpers import eventually
from .simnodes import SimNodes

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NODE = "sim-cdi"
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
SHELL = "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"
PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"


@pytest.fixture
async def node(sim_nodes: SimNodes) -> SimNode:
    return await sim_nodes.start(
        NODE,
        gpus="h100-80gb:2",
        labels={"pool": "cdi"},
        runtime=RuntimeOptions("containerd", "2.0.5", strict=True),
    )


def cdi_pod(name: str, device: str) -> Pod:
    return cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {"name": name, "annotations": {"cdi.k8s.io/test_gpu": device}},
                "spec": {
                    "nodeSelector": {"pool": "cdi"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "main", "image": CUDA_IMAGE, "command": ["bash", "-c", SHELL]}
                    ],
                },
            }
        ),
    )


async def logged(akube: AsyncClient, namespace: str, name: str, text: str) -> str:
    async def has() -> str | None:
        out = "".join([line async for line in akube.log(name, namespace=namespace)])
        return out if text in out else None

    return cast(str, await eventually(has, timeout=60))


async def test_a_cdi_device_brings_the_driver_only_when_its_spec_mounts_it(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    assert node.nvml is not None
    first, second = (d.uuid for d in node.nvml.devices())
    # the driver pre-installed on the host: what nvcdi finds under the driver root `/`
    lib = node.root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True, exist_ok=True)
    for name in ("libcuda.so.570.86.15", "libnvidia-ml.so.570.86.15"):
        (lib / name).write_text("simulated")
    (node.root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (node.root / "usr/bin/nvidia-smi").write_text("simulated")
    devices = gpu_devices(read_gpus(node.nvml))
    run = node.root / "var/run/cdi"
    driver = driver_edits(find_driver_files(node.root), "/")
    assert [m.container_path for m in driver.mounts][-1] == "/usr/bin/nvidia-smi"
    write_spec(
        run, file_name(PLUGIN_KIND), node_spec(PLUGIN_KIND, devices, common_edits(driver=driver))
    )
    bare = "example.com/gpu"
    write_spec(run, file_name(bare), node_spec(bare, devices, common_edits()))

    await akube.create(cdi_pod("with-driver", f"{PLUGIN_KIND}=1"), namespace=namespace)  # type: ignore[call-overload]
    await akube.create(cdi_pod("no-driver", f"{bare}=1"), namespace=namespace)  # type: ignore[call-overload]
    out = await logged(akube, namespace, "with-driver", "UUID:")
    assert second in out and first not in out
    out = await logged(akube, namespace, "no-driver", "nvidia-smi")
    assert "command not found" in out and "UUID" not in out


async def test_a_name_only_an_invalid_spec_defines_fails_naming_file_field_and_value(
    node: SimNode, akube: AsyncClient, namespace: str
) -> None:
    etc = node.root / "etc/cdi"
    etc.mkdir(parents=True, exist_ok=True)
    device = {"name": "x", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}
    doc: dict[str, Any] = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/bad",
        "devices": [device, device],
    }
    (etc / "bad.json").write_text(json.dumps(doc))
    await akube.create(cdi_pod("bad", "example.com/bad=x"), namespace=namespace)  # type: ignore[call-overload]

    async def refused() -> str | None:
        p = await akube.get(Pod, "bad", namespace=namespace)
        for s in (p.status.containerStatuses or []) if p.status else []:
            w = s.state.waiting if s.state else None
            if w is not None and w.reason == "CreateContainerError" and w.message:
                return w.message
        return None

    message = cast(str, await eventually(refused, timeout=60))
    assert "unresolvable CDI devices example.com/bad=x" in message
    assert f"{etc / 'bad.json'}: devices[1].name: 'x': duplicate device" in message
