"""The per-claim CDI spec: upstream's kind, file and device names, one device per allocated
device with its nodes, UUID and its own config's edits, claim-wide settings in the spec's own
edits."""

from __future__ import annotations

from kubegpu.dra.cdi import SpecDevice, cdi_id, claim_spec, spec_file_name


def test_names_follow_upstream() -> None:
    assert spec_file_name("u-1") == "k8s.gpu.nvidia.com-claim_u-1.json"
    assert cdi_id("u-1", "gpu-0") == "k8s.gpu.nvidia.com/claim=u-1-gpu-0"


def test_claim_spec() -> None:
    spec = claim_spec(
        "u-1",
        [
            SpecDevice(
                "gpu-0", "GPU-a", ("/dev/nvidia0",), {"CUDA_MPS_PIPE_DIRECTORY": "/p"}, ("/p",)
            ),
            SpecDevice(
                "gpu-1-mig-1g18gb-19-0", "MIG-b", ("/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21")
            ),
            SpecDevice("gpu-0", "GPU-a", ("/dev/nvidia0",)),
        ],
        env={"KUBEGPU_DRA_CLAIM": "ml/c"},
        control_devices=["/dev/nvidiactl"],
        dev_root="/run/nvidia/driver",
    )
    assert spec["cdiVersion"] == "0.6.0"
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert spec["devices"] == [
        {
            "name": "u-1-gpu-0",
            "containerEdits": {
                "env": ["NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY=/p"],
                "deviceNodes": [
                    {"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}
                ],
                "mounts": [
                    {
                        "hostPath": "/p",
                        "containerPath": "/p",
                        "options": ["rw", "nosuid", "nodev", "bind"],
                    }
                ],
            },
        },
        {
            "name": "u-1-gpu-1-mig-1g18gb-19-0",
            "containerEdits": {
                "env": ["NVIDIA_VISIBLE_DEVICES=MIG-b"],
                "deviceNodes": [
                    {"path": "/dev/nvidia1", "hostPath": "/run/nvidia/driver/dev/nvidia1"},
                    {
                        "path": "/dev/nvidia-caps/nvidia-cap21",
                        "hostPath": "/run/nvidia/driver/dev/nvidia-caps/nvidia-cap21",
                    },
                ],
            },
        },
    ]
    assert spec["containerEdits"] == {
        "env": ["KUBEGPU_DRA_CLAIM=ml/c"],
        "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/run/nvidia/driver/dev/nvidiactl"}],
    }


def test_a_plain_claim_has_only_its_env() -> None:
    spec = claim_spec("u", [SpecDevice("gpu-0", "GPU-a", ("/dev/nvidia0",))])
    assert spec["containerEdits"] == {"env": []}
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"}
    ]
