"""What each rendered operand may do on its node: which containers are privileged, and which
host paths each DaemonSet mounts. Both lists are closed: a new privileged container or a new
hostPath fails here until it is added, with its reason (and to docs/security.md)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

import pytest

from kubegpu.kube.policy import ClusterPolicySpec, parse_policy_spec
from kubegpu.operator.gpucluster import DRA_STATE, dra_states
from kubegpu.operator.operands.context import ClusterFacts, RenderContext
from kubegpu.operator.states import STATES

# the ClusterPolicy's states and the GPUCluster's DRA plugin (its exporter is the same one)
ALL_STATES = (*STATES, *(s for s in dra_states() if s.name == DRA_STATE))

Obj = dict[str, Any]

IMAGES = {
    n: f"example.com/{n.lower()}:1"
    for n in (
        "DRIVER_IMAGE",
        "DRIVER_MANAGER_IMAGE",
        "CONTAINER_TOOLKIT_IMAGE",
        "DCGM_IMAGE",
        "VGPU_MANAGER_IMAGE",
        "VGPU_DEVICE_MANAGER_IMAGE",
        "VFIO_MANAGER_IMAGE",
        "SANDBOX_DEVICE_PLUGIN_IMAGE",
        "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
        "KATA_MANAGER_IMAGE",
        "CC_MANAGER_IMAGE",
    )
}
REBOOTS = {"migManager": {"env": [{"name": "WITH_REBOOT", "value": "true"}]}}
SPECS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "host driver": {"driver": {"enabled": False}},
    "everything": {
        "sandboxWorkloads": {"enabled": True},
        "nodeStatusExporter": {"enabled": True},
        "dcgmExporter": {"enabled": True, "enablePodLabels": True, "config": {"name": "m"}},
        "devicePlugin": {"config": {"name": "plugin-configs", "default": "a"}},
        **REBOOTS,
    },
    "custom paths": {
        "hostPaths": {
            "rootFS": "/host-root",
            "driverInstallDir": "/opt/drv",
            "kubeletRootDir": "/k/kubelet",
        },
        "toolkit": {"installDir": "/opt/tk"},
        "devicePlugin": {"mps": {"root": "/run/mps"}},
        **REBOOTS,
    },
}

# the symbolic host paths: what the policy's hostPaths settings make them
HOST_ROOT = "<host root>"
DRIVER_ROOT = "<driver root>"
KUBELET = "<kubelet root>"
TOOLKIT = "<toolkit dir>"
MPS = "<mps root>"
MPS_SHM = "<mps root>/shm"
FIRMWARE = "<driver root>/lib/firmware"

VALIDATIONS = ("/run/nvidia/validations", "the validator's ready files")
VALIDATOR_PATHS = {
    VALIDATIONS[0]: VALIDATIONS[1],
    DRIVER_ROOT: "driver libraries and nvidia-smi",
    HOST_ROOT: "chroot into the host to find a host-installed driver (read-only)",
    "/var/run/cdi": "reads the CDI specs",
}
SANDBOX = {VALIDATIONS[0]: VALIDATIONS[1], HOST_ROOT: "upstream image reads host files"}
ALL_GPUS = ("/dev/null", "asks the toolkit for every GPU by volume mount (no device is opened)")

# DaemonSet -> host path -> why it cannot be narrower
ALLOWED_HOST_PATHS: dict[str, dict[str, str]] = {
    "nvidia-driver-daemonset": {
        "/run/nvidia": "the driver's install root, shared with every operand",
        "/var/log": "the upstream installer's log",
        "/dev/log": "syslog of the driver's daemons",
        "/etc/os-release": "which driver build to load",
        VALIDATIONS[0]: VALIDATIONS[1],
        HOST_ROOT: "the driver manager finds and unloads the old driver (read-only)",
        "/sys": "the driver manager unloads the old driver",
        "/run/nvidia-fabricmanager": "the fabric manager's socket (NVSwitch systems)",
        "/run/nvidia-topologyd": "the topology daemon's socket",
        "/sys/devices/system": "memory and CPU hotplug state the driver reads (NVIDIA mounts it)",
        "/sys/module/firmware_class/parameters/path": "points the kernel at the GSP firmware",
        FIRMWARE: "the driver's GSP firmware, where the kernel is pointed",
    },
    "nvidia-container-toolkit-daemonset": {
        **VALIDATOR_PATHS,
        TOOLKIT: "installs the runtime and the CDI hook",
        "/etc/containerd": "the runtime's config",
        "/run/containerd": "the runtime's socket, to restart it",
        "/run/nvidia/toolkit": "the installer's pid file: one installer per node",
        "/etc/containerd/conf.d": "the runtime's drop-in directory, where the handlers go",
    },
    "nvidia-operator-validator": VALIDATOR_PATHS,
    "nvidia-sandbox-validator": VALIDATOR_PATHS,
    "nvidia-device-plugin-daemonset": {
        f"{KUBELET}/device-plugins": "the kubelet's device-plugin sockets",
        VALIDATIONS[0]: VALIDATIONS[1],
        MPS: "MPS pipes and logs shared with workloads",
        MPS_SHM: "the /dev/shm the MPS daemon and its clients share",
        DRIVER_ROOT: "driver libraries for the CDI specs",
        "/var/run/cdi": "writes the CDI specs",
        f"{KUBELET}/pod-resources": "which pod holds the devices it allocated (annotation)",
    },
    "nvidia-device-plugin-mps-control-daemon": {
        MPS: "MPS pipes and logs shared with workloads",
        MPS_SHM: "the /dev/shm the MPS daemon and its clients share",
        VALIDATIONS[0]: VALIDATIONS[1],
    },
    "nvidia-dcgm": {VALIDATIONS[0]: VALIDATIONS[1]},
    "nvidia-dcgm-exporter": {
        f"{KUBELET}/pod-resources": "which pod holds which GPU",
        VALIDATIONS[0]: VALIDATIONS[1],
        ALL_GPUS[0]: ALL_GPUS[1],
        "/proc": "which pod a GPU process runs in, only with KUBEGPU_EXPORTER_PROCESS_METRICS",
    },
    "gpu-feature-discovery": {
        VALIDATIONS[0]: VALIDATIONS[1],
        DRIVER_ROOT: "driver libraries",
        "/sys": "PCI class and machine type (read-only)",
        ALL_GPUS[0]: ALL_GPUS[1],
    },
    "nvidia-mig-manager": {
        VALIDATIONS[0]: VALIDATIONS[1],
        "/sys": "GPU reset and driver rebinding around a MIG mode change",
        DRIVER_ROOT: "driver libraries",
        "/var/run/cdi": "rewrites the management CDI spec",
        f"{KUBELET}/pod-resources": "which pod holds which GPU",
        "/run/kubegpu": "the node-wide MIG lock, shared with host tools",
        HOST_ROOT: "chroot /host reboot, only when WITH_REBOOT is on",
    },
    "nvidia-node-status-exporter": {VALIDATIONS[0]: VALIDATIONS[1]},
    "nvidia-dra-driver-gpu-kubelet-plugin": {
        f"{KUBELET}/plugins_registry": "its registration socket, for the kubelet's plugin watcher",
        f"{KUBELET}/plugins": "its DRA socket and checkpoint",
        "/var/run/cdi": "writes the claims' CDI specs",
        "/run/kubegpu": "the node-wide MIG lock (dynamic MIG)",
        f"{KUBELET}/device-plugins": "refuses to start next to a device plugin (read-only)",
        DRIVER_ROOT: "loads NVML from the driver's libraries",
    },
    "nvidia-vgpu-manager-daemonset": SANDBOX,
    "nvidia-vgpu-device-manager": SANDBOX,
    "nvidia-vfio-manager": SANDBOX,
    "nvidia-sandbox-device-plugin-daemonset": SANDBOX,
    "nvidia-kata-sandbox-device-plugin-daemonset": SANDBOX,
    "nvidia-kata-manager": SANDBOX,
    "nvidia-cc-manager": SANDBOX,
}

# DaemonSet -> its privileged containers (everything else drops every capability)
PRIVILEGED: dict[str, set[str]] = {
    "nvidia-driver-daemonset": {"nvidia-driver-ctr", "k8s-driver-manager"},
    "nvidia-container-toolkit-daemonset": {"nvidia-container-toolkit-ctr", "driver-validation"},
    "nvidia-operator-validator": {
        "nvidia-operator-validator",
        "driver-validation",
        "toolkit-validation",
        "cuda-validation",
        "plugin-validation",
    },
    "nvidia-sandbox-validator": {
        "nvidia-sandbox-validator",
        "vfio-pci-validation",
        "vgpu-manager-validation",
        "vgpu-devices-validation",
    },
    "nvidia-device-plugin-daemonset": {"nvidia-device-plugin"},
    "nvidia-device-plugin-mps-control-daemon": {"mps-control-daemon-ctr"},
    "nvidia-dcgm": {"nvidia-dcgm-ctr"},
    "nvidia-dcgm-exporter": set(),
    "gpu-feature-discovery": set(),
    "nvidia-mig-manager": {"nvidia-mig-manager"},
    "nvidia-node-status-exporter": set(),
    "nvidia-dra-driver-gpu-kubelet-plugin": {"gpus"},
    "nvidia-vgpu-manager-daemonset": {"nvidia-vgpu-manager-ctr"},
    "nvidia-vgpu-device-manager": {"nvidia-vgpu-device-manager"},
    "nvidia-vfio-manager": {"nvidia-vfio-manager"},
    "nvidia-sandbox-device-plugin-daemonset": {"nvidia-sandbox-device-plugin-ctr"},
    "nvidia-kata-sandbox-device-plugin-daemonset": {"nvidia-kata-sandbox-device-plugin-ctr"},
    "nvidia-kata-manager": {"nvidia-kata-manager"},
    "nvidia-cc-manager": {"nvidia-cc-manager"},
}


def daemonsets(spec: ClusterPolicySpec) -> Iterator[Obj]:
    """Every operand DaemonSet the policy can render, its state enabled or not."""
    facts = ClusterFacts(namespace="ops", gpu_nodes=1, image_env=IMAGES)
    for state in ALL_STATES:
        if state.daemonset:
            for obj in state.build(RenderContext(spec, facts, state)):
                if obj["kind"] == "DaemonSet":
                    yield obj


def symbolic(path: str, spec: ClusterPolicySpec, ctx: RenderContext) -> set[str]:
    """The names a host path may go by: itself and whichever setting it comes from."""
    names = {path}
    for name, value in (
        (HOST_ROOT, ctx.host_root),
        (DRIVER_ROOT, ctx.driver_root),
        (TOOLKIT, ctx.toolkit_dir),
        (MPS, ctx.mps_root),
    ):
        if path == value:
            names.add(name)
    if path == f"{ctx.mps_root}/shm":
        names.add(MPS_SHM)
    if path == posixpath.join(ctx.driver_root, "lib/firmware"):
        names.add(FIRMWARE)
    if path.startswith(ctx.kubelet_root + "/"):
        names.add(KUBELET + path[len(ctx.kubelet_root) :])
    return names


def containers(ds: Obj) -> list[Obj]:
    pod = ds["spec"]["template"]["spec"]
    return [*(pod.get("initContainers") or []), *pod["containers"]]


def host_paths(ds: Obj) -> dict[str, str]:
    """volume name -> host path"""
    return {
        v["name"]: v["hostPath"]["path"]
        for v in ds["spec"]["template"]["spec"]["volumes"]
        if "hostPath" in v
    }


def cases() -> Iterator[tuple[str, ClusterPolicySpec, Obj]]:
    for label, raw in SPECS.items():
        spec = parse_policy_spec(raw)
        for ds in daemonsets(spec):
            yield label, spec, ds


CASES = list(cases())
IDS = [f"{label}:{ds['metadata']['name']}" for label, _, ds in CASES]


def _ctx(spec: ClusterPolicySpec) -> RenderContext:
    return RenderContext(spec, ClusterFacts(), STATES[0])


@pytest.mark.parametrize(("label", "spec", "ds"), CASES, ids=IDS)
def test_every_host_path_is_in_the_allowlist_with_a_reason(
    label: str, spec: ClusterPolicySpec, ds: Obj
) -> None:
    name = ds["metadata"]["name"]
    allowed = ALLOWED_HOST_PATHS.get(name)
    assert allowed is not None, f"{name}: no hostPath allowlist; add one with reasons"
    for volume, path in host_paths(ds).items():
        names = symbolic(path, spec, _ctx(spec))
        assert names & set(allowed), f"{name}: hostPath {path} ({volume}) is not allowed"


@pytest.mark.parametrize(("label", "spec", "ds"), CASES, ids=IDS)
def test_every_host_path_is_used_and_the_host_root_only_read_only(
    label: str, spec: ClusterPolicySpec, ds: Obj
) -> None:
    name = ds["metadata"]["name"]
    paths = host_paths(ds)
    mounts = [m for c in containers(ds) for m in c.get("volumeMounts") or []]
    assert set(paths) <= {m["name"] for m in mounts}, f"{name}: a hostPath no container mounts"
    for m in mounts:
        path = paths.get(m["name"])
        if path is None or path not in {"/", _ctx(spec).host_root}:
            continue
        if name == "nvidia-mig-manager":
            continue  # `chroot /host reboot`, only with WITH_REBOOT (see the next tests)
        assert m.get("readOnly"), f"{name}: the host's root ({path}) mounted writable"


@pytest.mark.parametrize(("label", "spec", "ds"), CASES, ids=IDS)
def test_only_the_listed_containers_are_privileged_and_the_rest_have_no_capabilities(
    label: str, spec: ClusterPolicySpec, ds: Obj
) -> None:
    name = ds["metadata"]["name"]
    assert name in PRIVILEGED, f"{name}: say which of its containers are privileged"
    privileged = set()
    for c in containers(ds):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            privileged.add(c["name"])
        elif c["image"].startswith("ghcr.io/kubegpu/"):
            assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}, (
                name,
                c["name"],
            )
    assert privileged <= PRIVILEGED[name], f"{name}: newly privileged {privileged}"


@pytest.mark.parametrize("name", ["nvidia-dcgm-exporter", "gpu-feature-discovery"])
def test_the_nvml_readers_get_the_gpus_from_the_toolkit_not_from_privileged(name: str) -> None:
    for label, _, ds in CASES:
        if ds["metadata"]["name"] != name:
            continue
        pod = ds["spec"]["template"]["spec"]
        main = pod["containers"][0]
        assert "privileged" not in main["securityContext"]
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all", label
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility", label
        assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all", label
        assert pod["runtimeClassName"] == "nvidia", label
        assert {
            "name": "all-gpus",
            "mountPath": "/var/run/nvidia-container-devices/all",
            "readOnly": True,
        } in main["volumeMounts"]
        assert host_paths(ds)["all-gpus"] == "/dev/null"
        assert all(m.get("readOnly") for m in main["volumeMounts"]), (label, name)


def _mig_manager(raw: dict[str, Any]) -> Obj:
    (ds,) = [
        d
        for d in daemonsets(parse_policy_spec(raw))
        if d["metadata"]["name"] == "nvidia-mig-manager"
    ]
    return ds


def test_the_mig_manager_shares_the_node_wide_mig_lock_directory() -> None:
    ds = _mig_manager({})
    assert host_paths(ds)["mig-lock"] == "/run/kubegpu"
    main = ds["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "mig-lock", "mountPath": "/run/kubegpu"} in main["volumeMounts"]


def test_the_mig_manager_mounts_the_hosts_root_only_when_it_may_reboot() -> None:
    assert "host-root" not in host_paths(_mig_manager({}))
    off = {"migManager": {"env": [{"name": "WITH_REBOOT", "value": "false"}]}}
    assert "host-root" not in host_paths(_mig_manager(off))
    assert host_paths(_mig_manager(REBOOTS))["host-root"] == "/"


def test_the_driver_mounts_the_hosts_root_only_for_its_driver_manager() -> None:
    spec = parse_policy_spec({})
    facts = ClusterFacts(namespace="ops", gpu_nodes=1, image_env={"DRIVER_IMAGE": "d:1"})
    state = next(s for s in STATES if s.name == "state-driver")
    (ds,) = [o for o in state.build(RenderContext(spec, facts, state)) if o["kind"] == "DaemonSet"]
    assert {"host-root", "host-sys"}.isdisjoint(host_paths(ds))
    with_manager = next(
        d for d in daemonsets(spec) if d["metadata"]["name"] == "nvidia-driver-daemonset"
    )
    assert {"host-root", "host-sys"} <= set(host_paths(with_manager))


def test_the_lists_name_only_daemonsets_and_containers_that_exist() -> None:
    rendered = {ds["metadata"]["name"]: ds for _, _, ds in CASES}
    assert set(rendered) == set(PRIVILEGED) == set(ALLOWED_HOST_PATHS)
    seen: dict[str, set[str]] = {name: set() for name in PRIVILEGED}
    for _, _, ds in CASES:
        seen[ds["metadata"]["name"]] |= {
            c["name"] for c in containers(ds) if (c.get("securityContext") or {}).get("privileged")
        }
    assert seen == PRIVILEGED
