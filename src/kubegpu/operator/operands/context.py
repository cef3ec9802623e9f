"""The render context: the cluster facts, the naming constants, and `RenderContext`, which
holds what every state's builder shares (images, host paths, common env, containers, the
DaemonSet skeleton, RBAC) so that each builder only says what is particular to its operand."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubegpu import __version__
from kubegpu.catalog import nvidia
from kubegpu.kube.policy import GROUP, ClusterPolicySpec, ComponentSpec, ImageSpec
from kubegpu.mig.lock import DEFAULT_RUN_DIR
from kubegpu.operator import rbac as rbac_mod
from kubegpu.operator.operands.objects import (
    env_var,
    field_env_var,
    host_path_volume,
    int_or_string,
    merge_env,
    volume_mount,
)
from kubegpu.sharing.allocate import VOLUME_MOUNT_DIR

if TYPE_CHECKING:
    from kubegpu.operator.states import OperandState

Obj = dict[str, Any]

DEFAULT_IMAGE = f"ghcr.io/kubegpu/kubegpu:{__version__}"
DEFAULT_NAMESPACE = "gpu-operator"
HASH_ANNOTATION = nvidia.LAST_APPLIED_HASH
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubegpu-operator"
STATE_LABEL = "kubegpu.io/state"
DEPLOY_LABEL_PREFIX = nvidia.DEPLOY_PREFIX
MPS_CAPABLE_LABEL = nvidia.MPS_CAPABLE
GPU_TAINT_TOLERATION = {"key": nvidia.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

VALIDATIONS_DIR = "/run/nvidia/validations"
DEFAULT_DRIVER_INSTALL_DIR = "/run/nvidia/driver"
DEFAULT_TOOLKIT_INSTALL_DIR = "/usr/local/nvidia"
DEFAULT_MPS_ROOT = "/run/nvidia/mps"
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
CDI_DIR = nvidia.CDI_SPEC_DIR
DEFAULT_MIG_CONFIG_CM = "default-mig-parted-config"
DEFAULT_GPU_CLIENTS_CM = "default-gpu-clients"
EXPORTER_PORT = 9400
NODE_STATUS_EXPORTER_PORT = 8000
DCGM_PORT = 5555
# the node-wide MIG lock's directory (kubegpu.mig.lock): every MIG writer on the node, in a
# pod or on the host, must see the same file
MIG_LOCK_DIR = str(DEFAULT_RUN_DIR)


def unprivileged() -> dict[str, Any]:
    """The securityContext of a container that needs no privilege: no capabilities at all,
    and no way to gain one (setuid binaries)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


# `kubegpu <subcommand>` of each kubegpu operand; a test checks each exists in the CLI
KUBEGPU_COMMANDS: dict[str, tuple[str, ...]] = {
    "validator-check": ("validator", "check"),
    "validator-wait": ("validator", "wait"),
    "validator-hold": ("validator", "hold"),
    "validator-metrics": ("validator", "metrics"),
    "device-plugin": ("device-plugin",),
    "mps-control-daemon": ("mps-control-daemon",),
    "feature-discovery": ("feature-discovery",),
    "mig-manager": ("mig-manager",),
    "exporter": ("exporter",),
    "dra-plugin": ("dra-plugin",),
}

# operator env vars naming a fallback image (gpu-operator.md §1.3)
IMAGE_ENV = {
    "driver": "DRIVER_IMAGE",
    "toolkit": "CONTAINER_TOOLKIT_IMAGE",
    "dcgm": "DCGM_IMAGE",
    "driverManager": "DRIVER_MANAGER_IMAGE",
    "vgpuManager": "VGPU_MANAGER_IMAGE",
    "vgpuDeviceManager": "VGPU_DEVICE_MANAGER_IMAGE",
    "vfioManager": "VFIO_MANAGER_IMAGE",
    "sandboxDevicePlugin": "SANDBOX_DEVICE_PLUGIN_IMAGE",
    "kataSandboxDevicePlugin": "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
    "kataManager": "KATA_MANAGER_IMAGE",
    "ccManager": "CC_MANAGER_IMAGE",
}


class RenderError(ValueError):
    """A policy that cannot be rendered; the message names the field."""


@dataclass(frozen=True)
class Owner:
    """The ClusterPolicy (or GPUCluster) every rendered object is owned by (garbage
    collection)."""

    name: str
    uid: str
    kind: str = "ClusterPolicy"
    api_version: str = f"{GROUP}/v1"


@dataclass(frozen=True)
class ClusterFacts:
    """What render needs to know about the cluster besides the policy."""

    namespace: str = DEFAULT_NAMESPACE
    kubegpu_image: str = DEFAULT_IMAGE
    owner: Owner | None = None
    gpu_nodes: int = 0
    os_tag: str | None = None  # "ubuntu24.04", from the first GPU node's NFD labels
    runtime: str = "containerd"
    service_monitor_crd: bool = False
    image_env: Mapping[str, str] = field(default_factory=dict)


def object_hash(obj: Obj) -> str:
    """A stable hash of an object's content (its hash annotation left out)."""
    meta = dict(obj.get("metadata", {}))
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != HASH_ANNOTATION}
    meta["annotations"] = annotations
    data = json.dumps({**obj, "metadata": meta}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()[:20]


@dataclass
class RenderContext:
    """What a builder renders from: the policy, the cluster facts and its own state."""

    spec: ClusterPolicySpec
    facts: ClusterFacts
    state: OperandState

    @property
    def ns(self) -> str:
        return self.facts.namespace

    def labels(self) -> dict[str, str]:
        return {MANAGED_BY_LABEL: MANAGED_BY, STATE_LABEL: self.state.name}

    def finish(self, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **self.labels()}  # ours win
        if self.facts.owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": self.facts.owner.api_version,
                    "kind": self.facts.owner.kind,
                    "name": self.facts.owner.name,
                    "uid": self.facts.owner.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        meta.setdefault("annotations", {})[HASH_ANNOTATION] = object_hash(obj)
        return obj

    # -- images ---------------------------------------------------------------------------------
    def upstream_image(self, section: str, spec: ImageSpec, suffix: str | None = None) -> str:
        """repository/image:version (or @digest), `image` alone, or the operator's env var."""
        if not spec.repository and not spec.version and spec.image:
            return spec.image
        if spec.repository and spec.image and spec.version:
            version = spec.version
            if version.startswith("sha256:"):
                return f"{spec.repository}/{spec.image}@{version}"
            if suffix:
                version = f"{version}-{suffix}"
            return f"{spec.repository}/{spec.image}:{version}"
        env = IMAGE_ENV.get(section)
        if env and env in self.facts.image_env:
            return self.facts.image_env[env]
        missing = [f for f in ("repository", "image", "version") if not getattr(spec, f)]
        hint = f" (or set {env} on the operator)" if env else ""
        raise RenderError(
            f"{section}: no image: set {', '.join(section + '.' + m for m in missing)}{hint}"
        )

    def kubegpu_image(self, spec: ImageSpec) -> str:
        """A kubegpu operand runs a kubegpu image: the one the policy names if it is one,
        otherwise the operator's own."""
        try:
            image = self.upstream_image("kubegpu", spec)
        except RenderError:
            return self.facts.kubegpu_image
        name = image.split("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]
        return image if "kubegpu" in name else self.facts.kubegpu_image

    @staticmethod
    def pull_policy(spec: ImageSpec) -> str:
        p = spec.imagePullPolicy
        return p if p in {"Always", "Never", "IfNotPresent"} else "IfNotPresent"

    # -- paths -------------------------------------------------------------------------------------
    @property
    def driver_root(self) -> str:
        """Where the driver's files are on the host: the containerized driver's install dir,
        or the host's root when the driver is pre-installed."""
        if self.spec.driver_managed:
            return self.spec.hostPaths.driverInstallDir or DEFAULT_DRIVER_INSTALL_DIR
        return "/"

    @property
    def host_root(self) -> str:
        return self.spec.hostPaths.rootFS or "/"

    @property
    def kubelet_root(self) -> str:
        return self.spec.hostPaths.kubeletRootDir or DEFAULT_KUBELET_ROOT

    @property
    def toolkit_dir(self) -> str:
        return self.spec.toolkit.installDir or DEFAULT_TOOLKIT_INSTALL_DIR

    @property
    def mps_root(self) -> str:
        mps = self.spec.devicePlugin.mps
        return (mps.root if mps and mps.root else None) or DEFAULT_MPS_ROOT

    # -- common env ---------------------------------------------------------------------------------
    def mig_env(self) -> list[Obj]:
        strategy = self.spec.mig_strategy
        env = []
        if strategy:
            env.append(env_var("MIG_STRATEGY", strategy))
        if strategy != "none":
            env.append(env_var("NVIDIA_MIG_MONITOR_DEVICES", "all"))
        return env

    def cdi_env(self) -> list[Obj]:
        if not self.spec.cdi_enabled:
            return []
        return [
            env_var("CDI_ENABLED", "true"),
            env_var("NVIDIA_CDI_HOOK_PATH", f"{self.toolkit_dir}/toolkit/nvidia-cdi-hook"),
        ]

    @staticmethod
    def nvml_reader() -> tuple[list[Obj], list[Obj], list[Obj]]:
        """env, mounts, volumes by which an unprivileged NVML reader gets every GPU: the
        container toolkit (the runtime class, or CDI) injects the GPUs' device nodes, the
        driver's `utility` libraries and the MIG monitor capability (so that every MIG
        device is seen), as it does for a GPU workload, instead of `privileged` (which hands
        over every device of the node and every capability). The GPUs are asked for both
        ways the toolkit accepts from an unprivileged container: the env var, and a
        `/dev/null` mount under the volume-mounts directory, which a toolkit configured not
        to trust the env var of unprivileged containers still accepts."""
        env = [
            env_var(nvidia.NVIDIA_VISIBLE_DEVICES, "all"),
            env_var(nvidia.NVIDIA_DRIVER_CAPABILITIES, "utility"),
            env_var(nvidia.NVIDIA_MIG_MONITOR_DEVICES, "all"),
        ]
        mounts = [volume_mount("all-gpus", f"{VOLUME_MOUNT_DIR}/all", read_only=True)]
        volumes = [host_path_volume("all-gpus", "/dev/null", "CharDevice")]
        return env, mounts, volumes

    def driver_env(self) -> list[Obj]:
        return [
            env_var("NVIDIA_DRIVER_ROOT", self.driver_root),
            env_var("DRIVER_ROOT_CTR_PATH", "/driver-root"),
        ]

    # -- containers -------------------------------------------------------------------------------
    def kubegpu_container(
        self,
        name: str,
        command: str,
        spec: ImageSpec,
        *,
        args: Sequence[str] = (),
        env: Sequence[Obj] = (),
        mounts: Sequence[Obj] = (),
        privileged: bool = False,
    ) -> Obj:
        c: Obj = {
            "name": name,
            "image": self.kubegpu_image(spec),
            "imagePullPolicy": self.pull_policy(spec),
            "command": ["kubegpu", *KUBEGPU_COMMANDS[command]],
            "env": [field_env_var("NODE_NAME", "spec.nodeName"), *env],
            "volumeMounts": list(mounts),
        }
        if args:
            c["args"] = list(args)
        c["securityContext"] = {"privileged": True} if privileged else unprivileged()
        return c

    def wait_init(self, spec: ImageSpec, *files: str) -> Obj:
        """An init container that waits for the validator's ready files."""
        first = files[0].removesuffix("-ready")
        return self.kubegpu_container(
            f"{first}-validation",
            "validator-wait",
            spec,
            args=list(files),
            mounts=[volume_mount("run-nvidia-validations", VALIDATIONS_DIR)],
        )

    def validation_init(self, component: str, env: Sequence[Obj] = ()) -> Obj:
        """A validator init container checking one component (it writes `<component>-ready`)."""
        v = self.spec.validator
        per_check = getattr(v, component, None)
        check_env = [env_var(e.name, e.value) for e in (per_check.env or [])] if per_check else []
        return self.kubegpu_container(
            f"{component}-validation",
            "validator-check",
            v,
            env=merge_env(
                [
                    env_var("COMPONENT", component),
                    field_env_var("OPERATOR_NAMESPACE", "metadata.namespace"),
                    env_var("OUTPUT_DIR", VALIDATIONS_DIR),
                    *self.driver_env(),
                    # a pre-installed driver is checked through the host's root
                    env_var("HOST_ROOT_MOUNT", "/host"),
                    *env,
                ],
                v.env or [],
                check_env,
            ),
            mounts=[
                volume_mount(
                    "run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional"
                ),
                # a driver the driver container mounts later is seen (node-runtime.md §5)
                volume_mount(
                    "driver-install-dir",
                    "/driver-root",
                    read_only=True,
                    propagation="HostToContainer",
                ),
                volume_mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
                volume_mount("cdi-root", CDI_DIR, read_only=True),
            ],
            privileged=True,
        )

    def daemonset(
        self,
        component: ComponentSpec,
        *,
        service_account: str,
        containers: list[Obj],
        init_containers: Sequence[Obj] = (),
        volumes: Sequence[Obj] = (),
        host_pid: bool = False,
        host_ipc: bool = False,
        runtime_class: bool = False,
        extra_selector: Mapping[str, str] | None = None,
        on_delete: bool = False,
        args_replace: bool = True,
        share_process_namespace: bool = False,
    ) -> Obj:
        name = self.state.daemonset
        assert name is not None and self.state.deploy_label is not None
        ds_spec = self.spec.daemonsets
        main = containers[0]
        main["env"] = merge_env(main.get("env") or [], component.env or [])
        if args_replace and component.args:
            main["args"] = list(component.args)
        if component.resources is not None:
            res = component.resources.model_dump(exclude_none=True)
            for c in [*init_containers, *containers]:
                c["resources"] = res
        pod_labels = {
            **(ds_spec.labels or {}),
            "app": name,
            "app.kubernetes.io/part-of": "kubegpu",
            MANAGED_BY_LABEL: MANAGED_BY,
        }
        tolerations = (
            [t.model_dump(exclude_none=True) for t in ds_spec.tolerations]
            if ds_spec.tolerations
            else [dict(GPU_TAINT_TOLERATION)]
        )
        pod: Obj = {
            "serviceAccountName": service_account,
            "priorityClassName": ds_spec.priorityClassName or "system-node-critical",
            "tolerations": tolerations,
            "nodeSelector": {
                DEPLOY_LABEL_PREFIX + self.state.deploy_label: "true",
                **(extra_selector or {}),
            },
            "initContainers": list(init_containers),
            "containers": containers,
            "volumes": list(volumes),
        }
        if not init_containers:
            del pod["initContainers"]
        if host_pid:
            pod["hostPID"] = True
        if host_ipc:
            pod["hostIPC"] = True
        if share_process_namespace:
            pod["shareProcessNamespace"] = True
        if runtime_class and not self.spec.cdi.nriPluginEnabled:
            pod["runtimeClassName"] = self.spec.runtime_class
        if component.hostNetwork:
            pod["hostNetwork"] = True
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        if ds_spec.podSecurityContext:
            pod["securityContext"] = dict(ds_spec.podSecurityContext)
        if component.imagePullSecrets:
            pod["imagePullSecrets"] = [{"name": s} for s in component.imagePullSecrets]
        strategy: Obj
        if on_delete or ds_spec.updateStrategy == "OnDelete":
            strategy = {"type": "OnDelete"}
        else:
            max_unavailable = (
                ds_spec.rollingUpdate.maxUnavailable
                if ds_spec.rollingUpdate and ds_spec.rollingUpdate.maxUnavailable
                else "1"
            )
            strategy = {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": int_or_string(max_unavailable)},
            }
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "labels": {**(ds_spec.labels or {}), "app": name},
                "annotations": dict(ds_spec.annotations or {}),
            },
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "updateStrategy": strategy,
                "template": {
                    "metadata": {
                        "labels": pod_labels,
                        "annotations": dict(ds_spec.annotations or {}),
                    },
                    "spec": pod,
                },
            },
        }

    def rbac(self) -> list[Obj]:
        r = rbac_mod.operand_rbac(self.state.name, self.spec)
        return rbac_mod.rbac_objects(r, self.ns, {})

    @property
    def service_account(self) -> str:
        return rbac_mod.operand_rbac(self.state.name, self.spec).service_account

    def configmap(self, name: str, data: dict[str, str]) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.ns},
            "data": data,
        }

    def validation_volumes(self) -> list[Obj]:
        """The host paths a validator check mounts."""
        return [
            host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
            host_path_volume("driver-install-dir", self.driver_root, ""),
            host_path_volume("host-root", self.host_root, ""),
            host_path_volume("cdi-root", CDI_DIR),
        ]


Builder = Callable[[RenderContext], list[Obj]]
"""One state's builder: its desired objects, before labels, owner and hash are added."""
