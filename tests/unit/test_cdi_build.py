"""The CDI specs kubegpu writes, as NVIDIA generates them: per-device nodes, the control
nodes and the driver's files (found under the driver root) spec-wide with nvcdi's hooks,
and each claim config's edits only in the devices of the requests it applies to."""

from __future__ import annotations

from pathlib import Path

from kubegpu.cdi.build import (
    ClaimDevice,
    ConfigEdits,
    claim_cdi_id,
    claim_file_name,
    claim_spec,
    common_edits,
    gpu_devices,
    node_spec,
    write_spec,
)
from kubegpu.cdi.driver import driver_edits, find_driver_files, hook_path
from kubegpu.cdi.nodes import CONTROL_DEVICES, present_control_devices
from kubegpu.cdi.spec import Hook, load, to_json
from kubegpu.sharing.devices import GpuFacts, MigFacts

VERSION = "550.54.15"
LIBDIR = "usr/lib/x86_64-linux-gnu"


def _gpu(i: int, mig: int = 0) -> GpuFacts:
    return GpuFacts(
        index=i,
        uuid=f"GPU-{i}",
        product="NVIDIA A100",
        memory_mib=40960,
        compute_capability=(8, 0),
        mig_capable=bool(mig),
        mig_enabled=bool(mig),
        mig_devices=tuple(
            MigFacts(m, f"MIG-{i}-{m}", "1g.5gb", m + 7, 0, True, 4864, 14, 1, 1)
            for m in range(mig)
        ),
    )


def fake_driver(root: Path) -> Path:
    """A driver as it lies on a host: versioned libraries, a vdpau library, binaries,
    firmware, the persistence daemon's socket, and files that are not the driver's."""
    lib = root / LIBDIR
    (lib / "vdpau").mkdir(parents=True)
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        (lib / f"{name}.{VERSION}").write_text("elf")
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{VERSION}")  # a link, not a file to mount
    (lib / "vdpau" / f"libvdpau_nvidia.so.{VERSION}").write_text("elf")
    (lib / "libz.so.1.2.13").write_text("not the driver's")
    (root / "usr/bin").mkdir(parents=True)
    for name in ("nvidia-smi", "nvidia-debugdump", "ls"):
        (root / "usr/bin" / name).write_text("#!")
    firmware = root / "lib/firmware/nvidia" / VERSION
    firmware.mkdir(parents=True)
    (firmware / "gsp_ga10x.bin").write_text("fw")
    (root / "run/nvidia-persistenced").mkdir(parents=True)
    (root / "run/nvidia-persistenced/socket").write_text("")
    return root


def test_a_whole_gpu_has_its_node_and_the_control_nodes_are_spec_wide() -> None:
    devices = gpu_devices([_gpu(0), _gpu(1)], minors={0: 4, 1: 5})
    spec = to_json(
        node_spec(
            "k8s.device-plugin.nvidia.com/gpu",
            devices,
            common_edits(["/dev/nvidiactl"], "/run/nvidia/driver"),
            "/run/nvidia/driver",
        )
    )
    # a device named `0` and host paths need CDI 0.5.0; nvcdi writes the lowest that fits
    assert spec["cdiVersion"] == "0.5.0"
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert list(by_name) == ["GPU-0", "0", "GPU-1", "1", "all"]
    assert by_name["0"] == [{"path": "/dev/nvidia4", "hostPath": "/run/nvidia/driver/dev/nvidia4"}]
    assert [n["path"] for n in by_name["all"]] == ["/dev/nvidia4", "/dev/nvidia5"]
    assert spec["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/run/nvidia/driver/dev/nvidiactl"}],
    }


def test_a_mig_device_has_its_parents_node_and_its_gi_and_ci_capability_nodes() -> None:
    table = {"gpu4/gi8/access": 21, "gpu4/gi8/ci0/access": 22}
    devices = {d.names[1]: d for d in gpu_devices([_gpu(0, mig=2)], {0: 4}, table)}
    assert devices["0:1"].names == ("MIG-0-1", "0:1")
    assert devices["0:1"].nodes == (
        "/dev/nvidia4",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    )
    assert devices["0:0"].nodes == ("/dev/nvidia4",)  # the table has no entry for gi7


def test_one_list_of_control_nodes_only_those_the_node_has(tmp_path: Path) -> None:
    assert set(CONTROL_DEVICES) == {
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    }
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidiactl").write_text("")
    (tmp_path / "dev/nvidia-uvm").write_text("")
    assert present_control_devices(tmp_path) == ("/dev/nvidiactl", "/dev/nvidia-uvm")


def test_the_drivers_files_are_found_under_the_driver_root(tmp_path: Path) -> None:
    files = find_driver_files(fake_driver(tmp_path))
    assert files.version == VERSION
    assert files.library_dirs == (LIBDIR,)
    assert files.libraries == (
        f"{LIBDIR}/libcuda.so.{VERSION}",
        f"{LIBDIR}/libnvidia-ml.so.{VERSION}",
        f"{LIBDIR}/libnvidia-ptxjitcompiler.so.{VERSION}",
        f"{LIBDIR}/vdpau/libvdpau_nvidia.so.{VERSION}",
    )
    assert files.binaries == ("usr/bin/nvidia-smi", "usr/bin/nvidia-debugdump")
    assert files.firmware == (f"lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",)
    assert files.ipc == ("run/nvidia-persistenced/socket",)


def test_no_driver_library_means_no_driver_files_and_no_hooks(tmp_path: Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-smi").write_text("#!")
    assert not driver_edits(find_driver_files(tmp_path))  # nvidia-smi alone is no driver
    assert not driver_edits(find_driver_files(tmp_path / "missing"))


def test_driver_files_are_bind_mounted_from_the_host_driver_root(tmp_path: Path) -> None:
    """Found in the container's view (/driver-root), mounted from the host's
    /run/nvidia/driver at their own paths, read-only; the IPC socket without exec."""
    edits = driver_edits(find_driver_files(fake_driver(tmp_path)), "/run/nvidia/driver")
    mounts = {m.container_path: m for m in edits.mounts}
    smi = mounts["/usr/bin/nvidia-smi"]
    assert smi.host_path == "/run/nvidia/driver/usr/bin/nvidia-smi"
    assert smi.options == ("ro", "nosuid", "nodev", "rbind", "rprivate")
    lib = mounts[f"/{LIBDIR}/libcuda.so.{VERSION}"]
    assert lib.host_path == f"/run/nvidia/driver/{LIBDIR}/libcuda.so.{VERSION}"
    assert "/usr/bin/ls" not in mounts and f"/{LIBDIR}/libz.so.1.2.13" not in mounts
    socket = mounts["/run/nvidia-persistenced/socket"]
    assert socket.options == ("nosuid", "nodev", "rbind", "rprivate", "noexec")
    assert edits.env == (f"NVIDIA_CTK_LIBCUDA_DIR=/{LIBDIR}",)


def test_nvcdis_hooks_come_with_the_driver(tmp_path: Path) -> None:
    edits = driver_edits(find_driver_files(fake_driver(tmp_path)), "/", "/opt/hook")
    env = ("NVIDIA_CTK_DEBUG=false",)
    h = "nvidia-cdi-hook"
    assert edits.hooks == (
        Hook(
            "createContainer",
            "/opt/hook",
            (h, "create-symlinks", "--link", f"libcuda.so.1::/{LIBDIR}/libcuda.so"),
            env,
        ),
        Hook(
            "createContainer",
            "/opt/hook",
            (h, "enable-cuda-compat", f"--host-driver-version={VERSION}"),
            env,
        ),
        Hook("createContainer", "/opt/hook", (h, "update-ldcache", "--folder", f"/{LIBDIR}"), env),
        Hook("createContainer", "/opt/hook", (h, "disable-device-node-modification"), env),
    )
    # a pre-installed driver (host root /): host paths are the paths themselves
    assert all(m.host_path == m.container_path for m in edits.mounts)


def test_the_driver_goes_into_the_spec_wide_edits_never_a_devices(tmp_path: Path) -> None:
    driver = driver_edits(find_driver_files(fake_driver(tmp_path)))
    spec = node_spec("nvidia.com/gpu", gpu_devices([_gpu(0)]), common_edits(driver=driver))
    assert spec.edits.mounts == driver.mounts and spec.edits.hooks == driver.hooks
    assert spec.edits.env == ("NVIDIA_VISIBLE_DEVICES=void", f"NVIDIA_CTK_LIBCUDA_DIR=/{LIBDIR}")
    assert all(not d.edits.mounts and not d.edits.hooks for d in spec.devices)


def test_claim_names_follow_upstream() -> None:
    assert claim_file_name("u-1") == "k8s.gpu.nvidia.com-claim_u-1.json"
    assert claim_cdi_id("u-1", "gpu-0") == "k8s.gpu.nvidia.com/claim=u-1-gpu-0"


def test_a_claim_configs_edits_go_only_into_the_devices_of_its_requests() -> None:
    devices = [
        ClaimDevice("gpu-0", "mps", "GPU-a", ("/dev/nvidia0",)),
        ClaimDevice("gpu-1", "ts", "GPU-b", ("/dev/nvidia1",)),
        ClaimDevice("gpu-2", "plain", "GPU-c", ("/dev/nvidia2",)),
        ClaimDevice("gpu-0", "mps", "GPU-a", ("/dev/nvidia0",)),  # a second request's result
    ]
    configs = [
        ConfigEdits(frozenset({"mps"}), {"CUDA_MPS_PIPE_DIRECTORY": "/p"}, ("/p",)),
        ConfigEdits(frozenset({"ts"}), {"KUBEGPU_DRA_TIMESLICE_INTERVAL": "Long"}),
    ]
    spec = claim_spec("u", devices, configs, common_edits(env={"KUBEGPU_DRA_CLAIM": "ml/c"}))
    entries = {d.name: d.edits for d in spec.devices}
    assert list(entries) == ["u-gpu-0", "u-gpu-1", "u-gpu-2"]
    assert entries["u-gpu-0"].env == ("NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY=/p")
    assert [(m.host_path, m.container_path, m.options) for m in entries["u-gpu-0"].mounts] == [
        ("/p", "/p", ("rw", "nosuid", "nodev", "bind"))
    ]
    assert entries["u-gpu-1"].env == (
        "NVIDIA_VISIBLE_DEVICES=GPU-b",
        "KUBEGPU_DRA_TIMESLICE_INTERVAL=Long",
    )
    assert not entries["u-gpu-1"].mounts
    assert entries["u-gpu-2"].env == ("NVIDIA_VISIBLE_DEVICES=GPU-c",)
    # the spec-wide edits stay generic: no config's edits there
    assert spec.edits.env == ("NVIDIA_VISIBLE_DEVICES=void", "KUBEGPU_DRA_CLAIM=ml/c")
    assert not spec.edits.mounts


def test_a_spec_is_written_atomically_and_reads_back_the_same(tmp_path: Path) -> None:
    driver = driver_edits(find_driver_files(fake_driver(tmp_path / "root")), "/run/nvidia/driver")
    spec = node_spec(
        "management.nvidia.com/gpu",
        gpu_devices([_gpu(0, mig=1)]),
        common_edits(["/dev/nvidiactl"], "/", driver),
    )
    for name in ("management.nvidia.com-gpu.yaml", "k8s.device-plugin.nvidia.com-gpu.json"):
        path = write_spec(tmp_path / "cdi", name, spec)
        assert to_json(load(path)) == to_json(spec)
        assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == [
        "k8s.device-plugin.nvidia.com-gpu.json",
        "management.nvidia.com-gpu.yaml",
    ]


def test_the_hook_binary_is_the_toolkits_unless_the_operator_names_another() -> None:
    assert hook_path({}) == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    assert hook_path({"NVIDIA_CDI_HOOK_PATH": "/opt/t/nvidia-cdi-hook"}) == "/opt/t/nvidia-cdi-hook"
