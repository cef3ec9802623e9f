"""`render(policy, facts) -> Rendered`: the desired objects of every state, as plain dicts.

Pure: no API calls, no clock, no randomness. The same policy and facts always give the same
objects and the same hashes, which is what makes the controller level-based and lets it
skip objects whose hash has not changed (`nvidia.com/last-applied-hash`).

Our operands (validator, device plugin, GPU feature discovery, MIG manager, exporter, MPS
control daemon, node status exporter) run the kubegpu image with a `kubegpu <component>`
command; the driver, container toolkit, DCGM host engine and the sandbox operands are not
Kubernetes logic, so they run the upstream images the policy names, with upstream's
settings. Every kubegpu operand waits in an init container for the validator's ready files,
which is how the node-side order (driver -> toolkit -> the rest) is kept.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubegpu import __version__
from kubegpu.kube.crds import (
    GROUP,
    ClusterPolicySpec,
    ComponentSpec,
    DriverManagerSpec,
    EnvVar,
    ImageSpec,
    ProbeSpec,
)
from kubegpu.operator import rbac as rbac_mod
from kubegpu.operator.states import STATES, OperandState

Obj = dict[str, Any]

DEFAULT_IMAGE = f"ghcr.io/kubegpu/kubegpu:{__version__}"
DEFAULT_NAMESPACE = "gpu-operator"
HASH_ANNOTATION = "nvidia.com/last-applied-hash"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubegpu-operator"
STATE_LABEL = "kubegpu.io/state"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
GPU_TAINT_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

VALIDATIONS_DIR = "/run/nvidia/validations"
DEFAULT_DRIVER_INSTALL_DIR = "/run/nvidia/driver"
DEFAULT_TOOLKIT_INSTALL_DIR = "/usr/local/nvidia"
DEFAULT_MPS_ROOT = "/run/nvidia/mps"
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
CDI_DIR = "/var/run/cdi"
DEFAULT_MIG_CONFIG_CM = "default-mig-parted-config"
DEFAULT_GPU_CLIENTS_CM = "default-gpu-clients"
EXPORTER_PORT = 9400
NODE_STATUS_EXPORTER_PORT = 8000
DCGM_PORT = 5555

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
    """The ClusterPolicy every rendered object is owned by (garbage collection)."""

    name: str
    uid: str


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


@dataclass(frozen=True)
class StateObjects:
    name: str
    enabled: bool
    objects: tuple[Obj, ...] = ()
    daemonsets: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Rendered:
    states: tuple[StateObjects, ...]
    problems: tuple[str, ...] = ()  # the spec is invalid as a whole: apply nothing

    def objects(self) -> list[Obj]:
        return [o for s in self.states for o in s.objects]

    def state(self, name: str) -> StateObjects:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def daemonset(self, name: str) -> Obj:
        for o in self.objects():
            if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name:
                return o
        raise KeyError(name)


def object_hash(obj: Obj) -> str:
    """A stable hash of an object's content (its hash annotation left out)."""
    meta = dict(obj.get("metadata", {}))
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != HASH_ANNOTATION}
    meta["annotations"] = annotations
    data = json.dumps({**obj, "metadata": meta}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()[:20]


def validate_spec(spec: ClusterPolicySpec) -> list[str]:
    """Whole-policy rules (upstream: validateClusterPolicySpec)."""
    problems = []
    if spec.cdi.nriPluginEnabled:
        if not spec.cdi_enabled:
            problems.append("cdi.nriPluginEnabled needs cdi.enabled=true")
        if not spec.toolkit.is_enabled(True):
            problems.append("cdi.nriPluginEnabled needs toolkit.enabled=true")
    return problems


def render(spec: ClusterPolicySpec, facts: ClusterFacts) -> Rendered:
    """Every state's desired objects, in upstream order. Disabled states have none."""
    problems = validate_spec(spec)
    if problems:
        return Rendered(
            tuple(StateObjects(s.name, s.enabled(spec)) for s in STATES), tuple(problems)
        )
    out = []
    for state in STATES:
        enabled = state.enabled(spec)
        if not enabled:
            out.append(StateObjects(state.name, False))
            continue
        ctx = _Ctx(spec, facts, state)
        try:
            objects = _BUILDERS[state.name](ctx)
        except RenderError as exc:
            out.append(StateObjects(state.name, True, error=str(exc)))
            continue
        if facts.gpu_nodes == 0:
            # no GPU node yet: nothing to run (a node watch renders again when one appears)
            objects = [o for o in objects if o["kind"] != "DaemonSet"]
        finished = tuple(ctx.finish(o) for o in objects)
        daemonsets = tuple(o["metadata"]["name"] for o in finished if o["kind"] == "DaemonSet")
        out.append(StateObjects(state.name, True, finished, daemonsets))
    return Rendered(tuple(out))


# -- context and helpers -----------------------------------------------------------------------
@dataclass
class _Ctx:
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
        meta["labels"] = {**self.labels(), **(meta.get("labels") or {})}
        if self.facts.owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": f"{GROUP}/v1",
                    "kind": "ClusterPolicy",
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
    def driver_managed(self) -> bool:
        return STATES[2].enabled(self.spec)

    @property
    def driver_root(self) -> str:
        """Where the driver's files are on the host: the containerized driver's install dir,
        or the host's root when the driver is pre-installed."""
        if self.driver_managed:
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
            env.append(_env("MIG_STRATEGY", strategy))
        if strategy != "none":
            env.append(_env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
        return env

    def cdi_env(self) -> list[Obj]:
        if not self.spec.cdi_enabled:
            return []
        return [
            _env("CDI_ENABLED", "true"),
            _env("NVIDIA_CDI_HOOK_PATH", f"{self.toolkit_dir}/toolkit/nvidia-cdi-hook"),
        ]

    def driver_env(self) -> list[Obj]:
        return [
            _env("NVIDIA_DRIVER_ROOT", self.driver_root),
            _env("DRIVER_ROOT_CTR_PATH", "/driver-root"),
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
            "env": [_field_env("NODE_NAME", "spec.nodeName"), *env],
            "volumeMounts": list(mounts),
        }
        if args:
            c["args"] = list(args)
        if privileged:
            c["securityContext"] = {"privileged": True}
        return c

    def wait_init(self, spec: ImageSpec, *files: str) -> Obj:
        """An init container that waits for the validator's ready files."""
        first = files[0].removesuffix("-ready")
        return self.kubegpu_container(
            f"{first}-validation",
            "validator-wait",
            spec,
            args=list(files),
            mounts=[_mount("run-nvidia-validations", VALIDATIONS_DIR)],
        )

    def validation_init(self, component: str, env: Sequence[Obj] = ()) -> Obj:
        """A validator init container checking one component (it writes `<component>-ready`)."""
        v = self.spec.validator
        per_check = getattr(v, component, None)
        check_env = [_env(e.name, e.value) for e in (per_check.env or [])] if per_check else []
        return self.kubegpu_container(
            f"{component}-validation",
            "validator-check",
            v,
            env=_merge_env(
                [
                    _env("COMPONENT", component),
                    _field_env("OPERATOR_NAMESPACE", "metadata.namespace"),
                    _env("OUTPUT_DIR", VALIDATIONS_DIR),
                    *self.driver_env(),
                    *env,
                ],
                v.env or [],
                check_env,
            ),
            mounts=[
                _mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional"),
                _mount("driver-install-dir", "/driver-root", read_only=True),
                _mount("host-root", "/host", read_only=True),
                _mount("cdi-root", CDI_DIR, read_only=True),
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
        main["env"] = _merge_env(main.get("env") or [], component.env or [])
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
                "rollingUpdate": {"maxUnavailable": _int_or_string(max_unavailable)},
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


def _env(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _merge_env(base: Sequence[Obj], *overrides: Sequence[EnvVar | Obj]) -> list[Obj]:
    """Upsert env vars by name, keeping the order of first appearance."""
    out: dict[str, Obj] = {e["name"]: e for e in base}
    for group in overrides:
        for e in group:
            item = _env(e.name, e.value) if isinstance(e, EnvVar) else e
            out[item["name"]] = item
    return list(out.values())


def _mount(name: str, path: str, *, read_only: bool = False, propagation: str | None = None) -> Obj:
    m: Obj = {"name": name, "mountPath": path}
    if read_only:
        m["readOnly"] = True
    if propagation:
        m["mountPropagation"] = propagation
    return m


def _host_volume(name: str, path: str, kind: str = "DirectoryOrCreate") -> Obj:
    v: Obj = {"name": name, "hostPath": {"path": path}}
    if kind:
        v["hostPath"]["type"] = kind
    return v


def _cm_volume(name: str, configmap: str, items: list[Obj] | None = None) -> Obj:
    cm: Obj = {"name": configmap}
    if items:
        cm["items"] = items
    return {"name": name, "configMap": cm}


def _int_or_string(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def _probe(settings: ProbeSpec | None, command: list[str], defaults: ProbeSpec) -> Obj:
    s = settings or defaults
    probe: Obj = {"exec": {"command": command}}
    for key in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "failureThreshold"):
        value = getattr(s, key) if getattr(s, key) is not None else getattr(defaults, key)
        if value is not None:
            probe[key] = value
    return probe


def _validation_volumes(ctx: _Ctx) -> list[Obj]:
    return [
        _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
        _host_volume("driver-install-dir", ctx.driver_root, ""),
        _host_volume("host-root", ctx.host_root, ""),
        _host_volume("cdi-root", CDI_DIR),
    ]


# -- the states --------------------------------------------------------------------------------
def _pre_requisites(ctx: _Ctx) -> list[Obj]:
    names = [ctx.spec.runtime_class, "nvidia-cdi", "nvidia-legacy"]
    return [
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name},
            "handler": name,
        }
        for name in dict.fromkeys(names)
    ]


def _operator_metrics(ctx: _Ctx) -> list[Obj]:
    return []


def _driver(ctx: _Ctx) -> list[Obj]:
    d = ctx.spec.driver
    image = ctx.upstream_image("driver", d, ctx.facts.os_tag)
    manager = d.manager or DriverManagerSpec()
    init = []
    if manager.image or "DRIVER_MANAGER_IMAGE" in ctx.facts.image_env:
        init.append(
            {
                "name": "k8s-driver-manager",
                "image": ctx.upstream_image("driverManager", manager),
                "imagePullPolicy": ctx.pull_policy(manager),
                "command": ["driver-manager"],
                "args": ["uninstall_driver"],
                "env": _merge_env(
                    [
                        _field_env("NODE_NAME", "spec.nodeName"),
                        _env("NVIDIA_VISIBLE_DEVICES", "void"),
                        _env("ENABLE_GPU_POD_EVICTION", "true"),
                        _env("ENABLE_AUTO_DRAIN", "false"),
                        _env("DRAIN_USE_FORCE", "false"),
                        _env("DRAIN_POD_SELECTOR_LABEL", ""),
                        _env("DRAIN_TIMEOUT_SECONDS", "0s"),
                        _env("DRAIN_DELETE_EMPTYDIR_DATA", "false"),
                        _env("OPERATOR_NAMESPACE", ctx.ns),
                    ],
                    manager.env or [],
                ),
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    _mount("run-nvidia", "/run/nvidia", propagation="Bidirectional"),
                    _mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
                    _mount("host-sys", "/sys"),
                ],
            }
        )
    env = [_field_env("NODE_NAME", "spec.nodeName")]
    if d.kernelModuleType:
        env.append(_env("KERNEL_MODULE_TYPE", d.kernelModuleType))
    if d.rdma and d.rdma.enabled:
        env.append(_env("GPU_DIRECT_RDMA_ENABLED", "true"))
        if d.rdma.useHostMofed:
            env.append(_env("USE_HOST_MOFED", "true"))
    main: Obj = {
        "name": "nvidia-driver-ctr",
        "image": image,
        "imagePullPolicy": ctx.pull_policy(d),
        "command": ["nvidia-driver"],
        "args": ["init"],
        "env": env,
        "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
        "volumeMounts": [
            _mount("run-nvidia", "/run/nvidia", propagation="Bidirectional"),
            _mount("var-log", "/var/log"),
            _mount("dev-log", "/dev/log"),
            _mount("host-os-release", "/host-etc/os-release", read_only=True),
            _mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional"),
        ],
        "startupProbe": _probe(
            d.startupProbe,
            ["sh", "-c", "nvidia-smi && touch /run/nvidia/validations/.driver-ctr-ready"],
            ProbeSpec(
                initialDelaySeconds=60, timeoutSeconds=60, periodSeconds=10, failureThreshold=120
            ),
        ),
        "lifecycle": {
            "preStop": {
                "exec": {
                    "command": [
                        "sh",
                        "-c",
                        "rm -f /run/nvidia/validations/.driver-ctr-ready /run/nvidia/validations/.driver-daemons-status",
                    ]
                }
            }
        },
    }
    for probe in ("livenessProbe", "readinessProbe"):
        if getattr(d, probe) is not None:
            main[probe] = _probe(getattr(d, probe), ["nvidia-smi"], ProbeSpec())
    config_volumes = []
    for section, ref, mount in (
        (
            "repoConfig",
            d.repoConfig.configMapName if d.repoConfig else None,
            "/etc/apt/sources.list.d",
        ),
        ("certConfig", d.certConfig.name if d.certConfig else None, "/etc/ssl/certs/custom"),
        (
            "kernelModuleConfig",
            d.kernelModuleConfig.name if d.kernelModuleConfig else None,
            "/drivers",
        ),
    ):
        if ref:
            config_volumes.append(_cm_volume(section.lower(), ref))
            main["volumeMounts"].append(_mount(section.lower(), mount, read_only=True))
    if d.licensingConfig and (d.licensingConfig.secretName or d.licensingConfig.configMapName):
        lic = d.licensingConfig
        vol: Obj = (
            {"name": "licensing-config", "secret": {"secretName": lic.secretName}}
            if lic.secretName
            else _cm_volume("licensing-config", str(lic.configMapName))
        )
        config_volumes.append(vol)
        main["volumeMounts"].append(
            _mount("licensing-config", "/drivers/gridd.conf.d", read_only=True)
        )
    if d.secretEnv:
        main["envFrom"] = [{"secretRef": {"name": d.secretEnv}}]
    ds = ctx.daemonset(
        d,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=init,
        volumes=[
            _host_volume("run-nvidia", "/run/nvidia"),
            _host_volume("var-log", "/var/log"),
            _host_volume("dev-log", "/dev/log", ""),
            _host_volume("host-os-release", "/etc/os-release", ""),
            _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
            _host_volume("host-root", ctx.host_root, ""),
            _host_volume("host-sys", "/sys", "Directory"),
            *config_volumes,
        ],
        host_pid=True,
        on_delete=True,
    )
    return [*ctx.rbac(), ds]


def _toolkit(ctx: _Ctx) -> list[Obj]:
    t = ctx.spec.toolkit
    image = ctx.upstream_image("toolkit", t)
    env = [
        _env("RUNTIME", ctx.facts.runtime),
        _env("NVIDIA_DRIVER_ROOT", ctx.driver_root),
        _env("DRIVER_ROOT_CTR_PATH", "/driver-root"),
        _env("TOOLKIT_PID_FILE", f"{ctx.toolkit_dir}/toolkit.pid"),
        _env("RUNTIME_CLASS", ctx.spec.runtime_class),
        _env("CDI_ENABLED", "true" if ctx.spec.cdi_enabled else "false"),
        _env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false"),
    ]
    main: Obj = {
        "name": "nvidia-container-toolkit-ctr",
        "image": image,
        "imagePullPolicy": ctx.pull_policy(t),
        "command": ["/bin/bash", "-c"],
        "args": [
            f"[[ -f {VALIDATIONS_DIR}/driver-ready ]] && . {VALIDATIONS_DIR}/driver-ready; exec nvidia-toolkit"
        ],
        "env": env,
        "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
        "volumeMounts": [
            _mount("toolkit-install-dir", ctx.toolkit_dir),
            _mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional"),
            _mount("driver-install-dir", "/driver-root", read_only=True),
            _mount("host-root", "/host", read_only=True),
            _mount("cdi-root", CDI_DIR),
            _mount("containerd-config", "/runtime/config-dir/"),
            _mount("containerd-socket", "/runtime/sock-dir/"),
        ],
    }
    init = ctx.validation_init("driver", [_env("WITH_WAIT", "true")])
    ds = ctx.daemonset(
        t,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[init],
        volumes=[
            *_validation_volumes(ctx),
            _host_volume("toolkit-install-dir", ctx.toolkit_dir),
            _host_volume("containerd-config", "/etc/containerd"),
            _host_volume("containerd-socket", "/run/containerd"),
        ],
        host_pid=True,
    )
    return [*ctx.rbac(), ds]


def _validator(ctx: _Ctx) -> list[Obj]:
    v = ctx.spec.validator
    image = ctx.kubegpu_image(v)
    workload_env = [
        _env("VALIDATOR_IMAGE", image),
        _env("VALIDATOR_IMAGE_PULL_POLICY", ctx.pull_policy(v)),
        _env(
            "VALIDATOR_RUNTIME_CLASS",
            "" if ctx.spec.cdi.nriPluginEnabled else ctx.spec.runtime_class,
        ),
    ]
    init = [
        ctx.validation_init("driver", [_env("WITH_WAIT", "true")]),
        ctx.validation_init("toolkit", [_env("WITH_WAIT", "false")]),
        ctx.validation_init(
            "cuda", [_env("WITH_WAIT", "true"), _env("WITH_WORKLOAD", "true"), *workload_env]
        ),
    ]
    if ctx.spec.devicePlugin.is_enabled(True):
        init.append(
            ctx.validation_init(
                "plugin",
                [
                    _env("WITH_WAIT", "true"),
                    _env("WITH_WORKLOAD", "false"),
                    _env("MIG_STRATEGY", ctx.spec.mig_strategy or "single"),
                    *workload_env,
                ],
            )
        )
    main = ctx.kubegpu_container(
        "nvidia-operator-validator",
        "validator-hold",
        v,
        env=[_env("OUTPUT_DIR", VALIDATIONS_DIR)],
        mounts=[_mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional")],
        privileged=True,
    )
    main["lifecycle"] = {
        "preStop": {"exec": {"command": ["sh", "-c", f"rm -f {VALIDATIONS_DIR}/*-ready"]}}
    }
    ds = ctx.daemonset(
        v,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=init,
        volumes=_validation_volumes(ctx),
        runtime_class=True,
        args_replace=False,
    )
    return [*ctx.rbac(), ds]


def _plugin_config(ctx: _Ctx, component: ImageSpec) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """env, mounts, volumes for the device plugin's named configs (shared by the plugin,
    GFD and the MPS daemon): the ConfigMap at /available-configs, the node label selects one
    and `default` is used when the node names none."""
    config = ctx.spec.devicePlugin.config
    if not config or not config.name:
        return [], [], []
    env = [
        _env("CONFIG_FILE_SRCDIR", "/available-configs"),
        _env("NODE_LABEL", "nvidia.com/device-plugin.config"),
        _env("DEFAULT_CONFIG", config.default or ""),
        _env("FALLBACK_STRATEGIES", "empty"),
    ]
    return (
        env,
        [_mount("available-configs", "/available-configs", read_only=True)],
        [_cm_volume("available-configs", config.name)],
    )


def _device_plugin(ctx: _Ctx) -> list[Obj]:
    p = ctx.spec.devicePlugin
    config_env, config_mounts, config_volumes = _plugin_config(ctx, p)
    main = ctx.kubegpu_container(
        "nvidia-device-plugin",
        "device-plugin",
        p,
        env=[
            *ctx.mig_env(),
            _env("MPS_ROOT", ctx.mps_root),
            _env("KUBELET_SOCKET", "/var/lib/kubelet/device-plugins/kubelet.sock"),
            *ctx.driver_env(),
            *ctx.cdi_env(),
            *config_env,
        ],
        mounts=[
            _mount("device-plugin", "/var/lib/kubelet/device-plugins"),
            _mount("run-nvidia-validations", VALIDATIONS_DIR),
            _mount("mps-root", ctx.mps_root),
            _mount("driver-install-dir", "/driver-root", read_only=True),
            _mount("cdi-root", CDI_DIR),
            *config_mounts,
        ],
        privileged=True,
    )
    ds = ctx.daemonset(
        p,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(p, "toolkit-ready")],
        volumes=[
            _host_volume("device-plugin", f"{ctx.kubelet_root}/device-plugins", ""),
            _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
            _host_volume("mps-root", ctx.mps_root),
            _host_volume("driver-install-dir", ctx.driver_root, ""),
            _host_volume("cdi-root", CDI_DIR),
            *config_volumes,
        ],
        runtime_class=True,
    )
    return [*ctx.rbac(), ds]


def _mps_control_daemon(ctx: _Ctx) -> list[Obj]:
    p = ctx.spec.devicePlugin
    config_env, config_mounts, config_volumes = _plugin_config(ctx, p)
    main = ctx.kubegpu_container(
        "mps-control-daemon-ctr",
        "mps-control-daemon",
        p,
        env=[*ctx.mig_env(), _env("MPS_ROOT", ctx.mps_root), *ctx.driver_env(), *config_env],
        mounts=[
            _mount("mps-root", ctx.mps_root),
            _mount("run-nvidia-validations", VALIDATIONS_DIR),
            *config_mounts,
        ],
        privileged=True,
    )
    ds = ctx.daemonset(
        p,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(p, "toolkit-ready")],
        volumes=[
            _host_volume("mps-root", ctx.mps_root),
            _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
            *config_volumes,
        ],
        host_pid=True,
        runtime_class=True,
        extra_selector={MPS_CAPABLE_LABEL: "true"},
        args_replace=False,
    )
    return [*ctx.rbac(), ds]


def _dcgm(ctx: _Ctx) -> list[Obj]:
    d = ctx.spec.dcgm
    main: Obj = {
        "name": "nvidia-dcgm-ctr",
        "image": ctx.upstream_image("dcgm", d),
        "imagePullPolicy": ctx.pull_policy(d),
        "command": ["nv-hostengine"],
        "args": ["-n", "-b", "ALL"],
        "env": [_field_env("NODE_NAME", "spec.nodeName")],
        "ports": [{"name": "dcgm", "containerPort": DCGM_PORT}],
        "securityContext": {"privileged": True},
    }
    ds = ctx.daemonset(
        d,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(ctx.spec.validator, "toolkit-ready")],
        volumes=[_host_volume("run-nvidia-validations", VALIDATIONS_DIR)],
        runtime_class=True,
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nvidia-dcgm", "namespace": ctx.ns, "labels": {"app": "nvidia-dcgm"}},
        "spec": {
            "selector": {"app": "nvidia-dcgm"},
            "internalTrafficPolicy": "Local",
            "ports": [
                {"name": "dcgm", "port": DCGM_PORT, "targetPort": DCGM_PORT, "protocol": "TCP"}
            ],
        },
    }
    return [*ctx.rbac(), ds, service]


def _dcgm_exporter(ctx: _Ctx) -> list[Obj]:
    e = ctx.spec.dcgmExporter
    env = [
        _env("DCGM_EXPORTER_LISTEN", f":{EXPORTER_PORT}"),
        _env("DCGM_EXPORTER_KUBERNETES", "true"),
        _env("DCGM_POD_RESOURCES_KUBELET_SOCKET", "/var/lib/kubelet/pod-resources/kubelet.sock"),
    ]
    if ctx.spec.dcgm.is_enabled(True):
        env.append(_env("DCGM_REMOTE_HOSTENGINE_INFO", f"nvidia-dcgm:{DCGM_PORT}"))
    if e.enablePodLabels:
        env.append(_env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"))
    if e.enablePodUID:
        env.append(_env("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", "true"))
    mounts = [
        _mount("pod-gpu-resources", "/var/lib/kubelet/pod-resources", read_only=True),
        _mount("run-nvidia-validations", VALIDATIONS_DIR),
    ]
    volumes = [
        _host_volume("pod-gpu-resources", f"{ctx.kubelet_root}/pod-resources", ""),
        _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
    ]
    objects: list[Obj] = []
    if e.config and e.config.name:
        env.append(_env("DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/dcgm-metrics.csv"))
        mounts.append(
            _mount("metrics-config", "/etc/dcgm-exporter/dcgm-metrics.csv", read_only=True)
        )
        mounts[-1]["subPath"] = "dcgm-metrics.csv"
        volumes.append(_cm_volume("metrics-config", e.config.name))
    main = ctx.kubegpu_container(
        "nvidia-dcgm-exporter", "exporter", e, env=env, mounts=mounts, privileged=True
    )
    main["ports"] = [{"name": "metrics", "containerPort": EXPORTER_PORT}]
    ds = ctx.daemonset(
        e,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(e, "toolkit-ready")],
        volumes=volumes,
        host_pid=bool(e.hostPID),
        runtime_class=True,
    )
    service_spec: Obj = {
        "selector": {"app": "nvidia-dcgm-exporter"},
        "ports": [
            {
                "name": "gpu-metrics",
                "port": EXPORTER_PORT,
                "targetPort": EXPORTER_PORT,
                "protocol": "TCP",
            }
        ],
    }
    if e.service and e.service.type:
        service_spec["type"] = e.service.type
    if e.service and e.service.internalTrafficPolicy:
        service_spec["internalTrafficPolicy"] = e.service.internalTrafficPolicy
    objects += [
        *ctx.rbac(),
        ds,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "nvidia-dcgm-exporter",
                "namespace": ctx.ns,
                "labels": {"app": "nvidia-dcgm-exporter"},
                "annotations": {"prometheus.io/scrape": "true"},
            },
            "spec": service_spec,
        },
    ]
    sm = e.serviceMonitor
    if sm and sm.enabled and ctx.facts.service_monitor_crd:
        endpoint: Obj = {"port": "gpu-metrics", "path": "/metrics"}
        if sm.interval:
            endpoint["interval"] = sm.interval
        if sm.honorLabels is not None:
            endpoint["honorLabels"] = sm.honorLabels
        if sm.relabelings:
            endpoint["relabelings"] = [dict(r) for r in sm.relabelings]
        objects.append(
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": {
                    "name": "nvidia-dcgm-exporter",
                    "namespace": ctx.ns,
                    "labels": {"app": "nvidia-dcgm-exporter", **(sm.additionalLabels or {})},
                },
                "spec": {
                    "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                    "namespaceSelector": {"matchNames": [ctx.ns]},
                    "endpoints": [endpoint],
                },
            }
        )
    return objects


def _gfd(ctx: _Ctx) -> list[Obj]:
    g = ctx.spec.gfd
    config_env, config_mounts, config_volumes = _plugin_config(ctx, ctx.spec.devicePlugin)
    main = ctx.kubegpu_container(
        "gpu-feature-discovery",
        "feature-discovery",
        g,
        env=[*ctx.mig_env(), _env("MPS_ROOT", ctx.mps_root), *ctx.driver_env(), *config_env],
        mounts=[
            _mount("run-nvidia-validations", VALIDATIONS_DIR),
            _mount("driver-install-dir", "/driver-root", read_only=True),
            _mount("host-sys", "/sys", read_only=True),
            *config_mounts,
        ],
        privileged=True,
    )
    ds = ctx.daemonset(
        g,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(g, "toolkit-ready")],
        volumes=[
            _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
            _host_volume("driver-install-dir", ctx.driver_root, ""),
            _host_volume("host-sys", "/sys", ""),
            *config_volumes,
        ],
        runtime_class=True,
    )
    return [*ctx.rbac(), ds]


DEFAULT_GPU_CLIENTS = """version: v1
systemd-services:
  - nvsm.service
  - nvsm-mqtt.service
  - nvsm-core.service
  - nvsm-api-gateway.service
  - nvsm-notifier.service
  - nv_peer_mem.service
  - nvidia-dcgm.service
  - dcgm.service
  - dcgm-exporter.service
"""


@functools.lru_cache(maxsize=1)
def default_mig_config() -> str:
    """The fallback mig-parted config for every MIG-capable GPU in the catalog (the MIG
    manager generates one from the node's own GPUs and uses this only when it cannot)."""
    from kubegpu.catalog import all_models
    from kubegpu.mig.parted import generate_config

    config = generate_config(all_models())
    header = "# generated by kubegpu from its GPU catalog: all-disabled, all-enabled, all-balanced, all-<profile>\n"
    return header + config.to_yaml()


def _mig_manager(ctx: _Ctx) -> list[Obj]:
    m = ctx.spec.migManager
    objects: list[Obj] = list(ctx.rbac())
    config_name = m.config.name if m.config and m.config.name else None
    clients_name = (
        m.gpuClientsConfig.name if m.gpuClientsConfig and m.gpuClientsConfig.name else None
    )
    env = [
        _env("HOST_ROOT_MOUNT", "/host"),
        _env("HOST_NVIDIA_DIR", ctx.toolkit_dir),
        _env(
            "HOST_MIG_MANAGER_STATE_FILE",
            "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf",
        ),
        _env("HOST_KUBELET_SYSTEMD_SERVICE", "kubelet.service"),
        _field_env("DEFAULT_GPU_CLIENTS_NAMESPACE", "metadata.namespace"),
        _field_env("OPERATOR_NAMESPACE", "metadata.namespace"),
        _field_env("POD_NAME", "metadata.name"),
        _env("POD_RESOURCES_SOCKET", "/var/lib/kubelet/pod-resources/kubelet.sock"),
        *ctx.driver_env(),
        *ctx.cdi_env(),
        _env("WITH_REBOOT", "false"),
    ]
    if config_name and config_name != DEFAULT_MIG_CONFIG_CM:
        env.append(_env("CONFIG_FILE", "/mig-parted-config/config.yaml"))
        mig_volume = _cm_volume("mig-parted-config", config_name)
    else:
        objects.append(ctx.configmap(DEFAULT_MIG_CONFIG_CM, {"config.yaml": default_mig_config()}))
        env.append(_env("DEFAULT_CONFIG_FILE", "/mig-parted-config/config-default.yaml"))
        mig_volume = _cm_volume(
            "mig-parted-config",
            DEFAULT_MIG_CONFIG_CM,
            [{"key": "config.yaml", "path": "config-default.yaml"}],
        )
    if not clients_name:
        objects.append(ctx.configmap(DEFAULT_GPU_CLIENTS_CM, {"clients.yaml": DEFAULT_GPU_CLIENTS}))
    main = ctx.kubegpu_container(
        "nvidia-mig-manager",
        "mig-manager",
        m,
        env=env,
        mounts=[
            _mount("run-nvidia-validations", VALIDATIONS_DIR),
            _mount("host-sys", "/sys"),
            _mount("mig-parted-config", "/mig-parted-config", read_only=True),
            _mount("gpu-clients", "/gpu-clients", read_only=True),
            _mount("host-root", "/host", propagation="HostToContainer"),
            _mount("driver-install-dir", "/driver-root", read_only=True),
            _mount("cdi-root", CDI_DIR),
            _mount("pod-resources", "/var/lib/kubelet/pod-resources", read_only=True),
        ],
        privileged=True,
    )
    ds = ctx.daemonset(
        m,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(m, "toolkit-ready")],
        volumes=[
            _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
            _host_volume("host-sys", "/sys", "Directory"),
            mig_volume,
            _cm_volume("gpu-clients", clients_name or DEFAULT_GPU_CLIENTS_CM),
            _host_volume("host-root", ctx.host_root, ""),
            _host_volume("driver-install-dir", ctx.driver_root, ""),
            _host_volume("cdi-root", CDI_DIR),
            _host_volume("pod-resources", f"{ctx.kubelet_root}/pod-resources", ""),
        ],
        host_pid=True,
        host_ipc=True,
        runtime_class=True,
    )
    objects.append(ds)
    return objects


def _node_status_exporter(ctx: _Ctx) -> list[Obj]:
    n = ctx.spec.nodeStatusExporter
    main = ctx.kubegpu_container(
        "nvidia-node-status-exporter",
        "validator-metrics",
        n,
        env=[
            _env("METRICS_PORT", str(NODE_STATUS_EXPORTER_PORT)),
            _env("OUTPUT_DIR", VALIDATIONS_DIR),
        ],
        mounts=[_mount("run-nvidia-validations", VALIDATIONS_DIR, read_only=True)],
    )
    main["ports"] = [{"name": "node-status", "containerPort": NODE_STATUS_EXPORTER_PORT}]
    ds = ctx.daemonset(
        n,
        service_account=ctx.service_account,
        containers=[main],
        volumes=[_host_volume("run-nvidia-validations", VALIDATIONS_DIR)],
    )
    return [*ctx.rbac(), ds]


def _sandbox_operand(section: str, container: str, wait_for: str | None = None) -> Any:
    """A sandbox operand: the upstream image the policy names, privileged, host root."""

    def build(ctx: _Ctx) -> list[Obj]:
        component: ComponentSpec = getattr(ctx.spec, section)
        main: Obj = {
            "name": container,
            "image": ctx.upstream_image(section, component),
            "imagePullPolicy": ctx.pull_policy(component),
            "env": [_field_env("NODE_NAME", "spec.nodeName")],
            "securityContext": {"privileged": True},
            "volumeMounts": [
                _mount("run-nvidia-validations", VALIDATIONS_DIR),
                _mount("host-root", "/host", read_only=True),
            ],
        }
        init = [ctx.wait_init(ctx.spec.validator, wait_for)] if wait_for else []
        ds = ctx.daemonset(
            component,
            service_account=ctx.service_account,
            containers=[main],
            init_containers=init,
            volumes=[
                _host_volume("run-nvidia-validations", VALIDATIONS_DIR),
                _host_volume("host-root", ctx.host_root, ""),
            ],
            host_pid=True,
        )
        return [*ctx.rbac(), ds]

    return build


def _sandbox_validator(ctx: _Ctx) -> list[Obj]:
    v = ctx.spec.validator
    init = [
        ctx.validation_init("vfioPCI"),
        ctx.validation_init("vgpuManager"),
        ctx.validation_init("vgpuDevices"),
    ]
    for c, component in zip(init, ("vfio-pci", "vgpu-manager", "vgpu-devices"), strict=True):
        c["name"] = f"{component}-validation"
        c["env"] = _merge_env(c["env"], [_env("COMPONENT", component), _env("WITH_WAIT", "true")])
    main = ctx.kubegpu_container(
        "nvidia-sandbox-validator",
        "validator-hold",
        v,
        env=[_env("OUTPUT_DIR", VALIDATIONS_DIR)],
        mounts=[_mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional")],
        privileged=True,
    )
    ds = ctx.daemonset(
        v,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=init,
        volumes=_validation_volumes(ctx),
        args_replace=False,
    )
    return [*ctx.rbac(), ds]


def _vgpu_device_manager(ctx: _Ctx) -> list[Obj]:
    objects: list[Obj] = _sandbox_operand(
        "vgpuDeviceManager", "nvidia-vgpu-device-manager", "vgpu-manager-ready"
    )(ctx)
    cfg = ctx.spec.vgpuDeviceManager.config
    ds = objects[-1]
    main = ds["spec"]["template"]["spec"]["containers"][0]
    main["env"] = _merge_env(
        main["env"], [_env("DEFAULT_VGPU_CONFIG", (cfg.default if cfg else None) or "default")]
    )
    if cfg and cfg.name:
        ds["spec"]["template"]["spec"]["volumes"].append(_cm_volume("vgpu-config", cfg.name))
        main["volumeMounts"].append(_mount("vgpu-config", "/vgpu-config", read_only=True))
        main["env"] = _merge_env(main["env"], [_env("CONFIG_FILE", "/vgpu-config/config.yaml")])
    return objects


_BUILDERS: dict[str, Any] = {
    "pre-requisites": _pre_requisites,
    "state-operator-metrics": _operator_metrics,
    "state-driver": _driver,
    "state-container-toolkit": _toolkit,
    "state-operator-validation": _validator,
    "state-device-plugin": _device_plugin,
    "state-mps-control-daemon": _mps_control_daemon,
    "state-dcgm": _dcgm,
    "state-dcgm-exporter": _dcgm_exporter,
    "gpu-feature-discovery": _gfd,
    "state-mig-manager": _mig_manager,
    "state-node-status-exporter": _node_status_exporter,
    "state-vgpu-manager": _sandbox_operand("vgpuManager", "nvidia-vgpu-manager-ctr"),
    "state-vgpu-device-manager": _vgpu_device_manager,
    "state-sandbox-validation": _sandbox_validator,
    "state-vfio-manager": _sandbox_operand("vfioManager", "nvidia-vfio-manager"),
    "state-sandbox-device-plugin": _sandbox_operand(
        "sandboxDevicePlugin", "nvidia-sandbox-device-plugin-ctr", "vfio-pci-ready"
    ),
    "state-kata-device-plugin": _sandbox_operand(
        "kataSandboxDevicePlugin", "nvidia-kata-sandbox-device-plugin-ctr", "vfio-pci-ready"
    ),
    "state-kata-manager": _sandbox_operand("kataManager", "nvidia-kata-manager"),
    "state-cc-manager": _sandbox_operand("ccManager", "nvidia-cc-manager"),
}


def dump_yaml(objects: Sequence[Obj]) -> str:
    """Objects as a multi-document YAML stream (for `kubegpu operator render`)."""
    text: str = yaml.safe_dump_all(list(objects), sort_keys=False)
    return text
