"""Builders for the states that are not Kubernetes logic and run upstream's images with
upstream's settings: the runtime classes, driver, container toolkit, DCGM host engine and
the sandbox operands (vGPU, VFIO, sandbox device plugins, CC manager)."""

from __future__ import annotations

import posixpath

from kubegpu.kube.policy import ComponentSpec, DriverManagerSpec, ProbeSpec
from kubegpu.operator.operands.context import (
    CDI_DIR,
    DCGM_PORT,
    VALIDATIONS_DIR,
    Builder,
    Obj,
    RenderContext,
    RenderError,
)
from kubegpu.operator.operands.objects import (
    configmap_volume,
    env_var,
    exec_probe,
    field_env_var,
    host_path_volume,
    merge_env,
    volume_mount,
)


def pre_requisites(ctx: RenderContext) -> list[Obj]:
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


def operator_metrics(ctx: RenderContext) -> list[Obj]:
    return []


def driver(ctx: RenderContext) -> list[Obj]:
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
                "env": merge_env(
                    [
                        field_env_var("NODE_NAME", "spec.nodeName"),
                        env_var("NVIDIA_VISIBLE_DEVICES", "void"),
                        env_var("ENABLE_GPU_POD_EVICTION", "true"),
                        env_var("ENABLE_AUTO_DRAIN", "false"),
                        env_var("DRAIN_USE_FORCE", "false"),
                        env_var("DRAIN_POD_SELECTOR_LABEL", ""),
                        env_var("DRAIN_TIMEOUT_SECONDS", "0s"),
                        env_var("DRAIN_DELETE_EMPTYDIR_DATA", "false"),
                        env_var("OPERATOR_NAMESPACE", ctx.ns),
                    ],
                    manager.env or [],
                ),
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    volume_mount("run-nvidia", "/run/nvidia", propagation="Bidirectional"),
                    volume_mount(
                        "host-root", "/host", read_only=True, propagation="HostToContainer"
                    ),
                    volume_mount("host-sys", "/sys"),
                ],
            }
        )
    env = [field_env_var("NODE_NAME", "spec.nodeName")]
    if d.kernelModuleType:
        env.append(env_var("KERNEL_MODULE_TYPE", d.kernelModuleType))
    if d.rdma and d.rdma.enabled:
        env.append(env_var("GPU_DIRECT_RDMA_ENABLED", "true"))
        if d.rdma.useHostMofed:
            env.append(env_var("USE_HOST_MOFED", "true"))
    main: Obj = {
        "name": "nvidia-driver-ctr",
        "image": image,
        "imagePullPolicy": ctx.pull_policy(d),
        "command": ["nvidia-driver"],
        "args": ["init"],
        "env": env,
        "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
        "volumeMounts": [
            volume_mount("run-nvidia", "/run/nvidia", propagation="Bidirectional"),
            volume_mount("var-log", "/var/log"),
            volume_mount("dev-log", "/dev/log"),
            volume_mount("host-os-release", "/host-etc/os-release", read_only=True),
            volume_mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional"),
            # what NVIDIA's driver container needs of the host (node-runtime.md §4)
            volume_mount("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager"),
            volume_mount("run-nvidia-topologyd", "/run/nvidia-topologyd"),
            volume_mount("host-sys-devices-system", "/sys/devices/system"),
            volume_mount("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
            volume_mount("nv-firmware", "/lib/firmware"),
        ],
        "startupProbe": exec_probe(
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
            main[probe] = exec_probe(getattr(d, probe), ["nvidia-smi"], ProbeSpec())
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
            config_volumes.append(configmap_volume(section.lower(), ref))
            main["volumeMounts"].append(volume_mount(section.lower(), mount, read_only=True))
    if d.licensingConfig and (d.licensingConfig.secretName or d.licensingConfig.configMapName):
        lic = d.licensingConfig
        vol: Obj = (
            {"name": "licensing-config", "secret": {"secretName": lic.secretName}}
            if lic.secretName
            else configmap_volume("licensing-config", str(lic.configMapName))
        )
        config_volumes.append(vol)
        main["volumeMounts"].append(
            volume_mount("licensing-config", "/drivers/gridd.conf.d", read_only=True)
        )
    if d.secretEnv:
        main["envFrom"] = [{"secretRef": {"name": d.secretEnv}}]
    ds = ctx.daemonset(
        d,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=init,
        volumes=[
            host_path_volume("run-nvidia", "/run/nvidia"),
            host_path_volume("var-log", "/var/log"),
            host_path_volume("dev-log", "/dev/log", ""),
            host_path_volume("host-os-release", "/etc/os-release", ""),
            host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
            host_path_volume("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager"),
            host_path_volume("run-nvidia-topologyd", "/run/nvidia-topologyd"),
            host_path_volume("host-sys-devices-system", "/sys/devices/system", ""),
            host_path_volume(
                "firmware-search-path", "/sys/module/firmware_class/parameters/path", ""
            ),
            # the driver's firmware, where the driver container installs it
            host_path_volume("nv-firmware", posixpath.join(ctx.driver_root, "lib/firmware")),
            # only the driver manager (evicting GPU pods, unloading the old driver) needs
            # the host's root and sysfs
            *(
                [
                    host_path_volume("host-root", ctx.host_root, ""),
                    host_path_volume("host-sys", "/sys", "Directory"),
                ]
                if init
                else []
            ),
            *config_volumes,
        ],
        host_pid=True,
        on_delete=True,
    )
    return [*ctx.rbac(), ds]


# the host paths of each runtime's config, drop-in and socket, as NVIDIA's operator
# resolves them (node-runtime.md §1.8): the env names a user may set them with, in order,
# then the default; CRI-O has no socket the installer needs (it restarts through systemd)
RUNTIME_PATHS: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "containerd": {
        "config": (("CONTAINERD_CONFIG", "RUNTIME_CONFIG"), "/etc/containerd/config.toml"),
        "drop-in": (("RUNTIME_DROP_IN_CONFIG",), "/etc/containerd/conf.d/99-nvidia.toml"),
        "socket": (("CONTAINERD_SOCKET", "RUNTIME_SOCKET"), "/run/containerd/containerd.sock"),
    },
    "crio": {
        "config": (("CRIO_CONFIG", "RUNTIME_CONFIG"), "/etc/crio/config.toml"),
        "drop-in": (("RUNTIME_DROP_IN_CONFIG",), "/etc/crio/crio.conf.d/99-nvidia.conf"),
    },
    "docker": {
        "config": (("DOCKER_CONFIG", "RUNTIME_CONFIG"), "/etc/docker/daemon.json"),
        "socket": (("DOCKER_SOCKET", "RUNTIME_SOCKET"), "/var/run/docker.sock"),
    },
}
# where the toolkit container sees each of them, and the env that names it there
RUNTIME_MOUNTS = {
    "config": "/runtime/config-dir",
    "drop-in": "/runtime/config-dir.d",
    "socket": "/runtime/sock-dir",
}
CONFIG_ENV = {"containerd": "CONTAINERD_CONFIG", "crio": "CRIO_CONFIG", "docker": "DOCKER_CONFIG"}
SOCKET_ENV = {"containerd": "CONTAINERD_SOCKET", "docker": "DOCKER_SOCKET"}
TOOLKIT_PID_DIR = "/run/nvidia/toolkit"
CRIO_HOOKS_DIR = "/usr/share/containers/oci/hooks.d"


def runtime_host_paths(runtime: str, user_env: dict[str, str]) -> dict[str, str]:
    """config / drop-in / socket -> host path for this runtime, the user's env first."""
    out = {}
    for what, (names, default) in RUNTIME_PATHS[runtime].items():
        out[what] = next((user_env[n] for n in names if user_env.get(n)), default)
    return out


def runtime_env_and_mounts(
    runtime: str, user_env: dict[str, str]
) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """The env, mounts and volumes that tell the toolkit installer where the node's runtime
    config, drop-in and socket are: each host path's directory mounted at a fixed place,
    and the env naming the file there (the installer never sees the host's own paths)."""
    env: list[Obj] = [env_var("RUNTIME", runtime)]
    mounts: list[Obj] = []
    volumes: list[Obj] = []
    for what, host_path in runtime_host_paths(runtime, user_env).items():
        host_dir, _, base = host_path.rstrip("/").rpartition("/")
        inside = f"{RUNTIME_MOUNTS[what]}/{base}"
        name = f"{runtime}-{what}" if what != "config" else f"{runtime}-config"
        volumes.append(host_path_volume(name, host_dir or "/"))
        mounts.append(volume_mount(name, RUNTIME_MOUNTS[what] + "/"))
        if what == "config":
            env += [env_var("RUNTIME_CONFIG", inside), env_var(CONFIG_ENV[runtime], inside)]
        elif what == "drop-in":
            env += [
                env_var("RUNTIME_DROP_IN_CONFIG", inside),
                env_var("RUNTIME_DROP_IN_CONFIG_HOST_PATH", host_path),
            ]
        else:
            env += [env_var("RUNTIME_SOCKET", inside), env_var(SOCKET_ENV[runtime], inside)]
    return env, mounts, volumes


def toolkit(ctx: RenderContext) -> list[Obj]:
    """NVIDIA's toolkit installer, told (as NVIDIA's operator tells it) which runtime the
    nodes run and where its config, drop-in and socket are, so that it writes the `nvidia`
    handlers the operands' runtime class names (node-runtime.md §1.8)."""
    t = ctx.spec.toolkit
    image = ctx.upstream_image("toolkit", t)
    runtime = ctx.facts.runtime
    if runtime not in RUNTIME_PATHS:
        raise RenderError(
            f"cluster facts: container runtime {runtime!r}: use one of {', '.join(RUNTIME_PATHS)}"
        )
    user_env = dict(t.env_pairs())
    env = [
        env_var("ROOT", ctx.toolkit_dir),
        env_var("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu"),
        env_var("NVIDIA_VISIBLE_DEVICES", "void"),
        env_var("TOOLKIT_PID_FILE", f"{TOOLKIT_PID_DIR}/toolkit.pid"),
        env_var("NVIDIA_DRIVER_ROOT", ctx.driver_root),
        env_var("DRIVER_ROOT_CTR_PATH", "/driver-root"),
    ]
    if ctx.spec.cdi_enabled:
        env += [
            env_var("CDI_ENABLED", "true"),
            env_var("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false"),
            env_var("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"),
            env_var("CRIO_CONFIG_MODE", "config"),
        ]
    elif runtime == "crio":
        env.append(env_var("CRIO_CONFIG_MODE", "hook"))
    runtime_env, runtime_mounts, runtime_volumes = runtime_env_and_mounts(runtime, user_env)
    if runtime == "containerd":
        runtime_env.append(env_var("CONTAINERD_RUNTIME_CLASS", ctx.spec.runtime_class))
    # the user's env applies before the runtime's, which it only steers (the paths above)
    env = merge_env(env, t.env or [], runtime_env)
    mounts = [
        volume_mount("toolkit-install-dir", ctx.toolkit_dir),
        volume_mount("toolkit-pid-dir", TOOLKIT_PID_DIR),
        volume_mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional"),
        volume_mount(
            "driver-install-dir", "/driver-root", read_only=True, propagation="HostToContainer"
        ),
        volume_mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
        volume_mount("cdi-root", CDI_DIR),
        *runtime_mounts,
    ]
    volumes = [
        *ctx.validation_volumes(),
        host_path_volume("toolkit-install-dir", ctx.toolkit_dir),
        host_path_volume("toolkit-pid-dir", TOOLKIT_PID_DIR),
        *runtime_volumes,
    ]
    if runtime == "crio":
        mounts.append(volume_mount("crio-hooks", CRIO_HOOKS_DIR))
        volumes.append(host_path_volume("crio-hooks", CRIO_HOOKS_DIR))
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
        "volumeMounts": mounts,
    }
    init = ctx.validation_init("driver", [env_var("WITH_WAIT", "true")])
    ds = ctx.daemonset(
        t.model_copy(update={"env": None}),  # already merged, before the runtime's paths
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[init],
        volumes=volumes,
        host_pid=True,
    )
    return [*ctx.rbac(), ds]


def dcgm(ctx: RenderContext) -> list[Obj]:
    d = ctx.spec.dcgm
    main: Obj = {
        "name": "nvidia-dcgm-ctr",
        "image": ctx.upstream_image("dcgm", d),
        "imagePullPolicy": ctx.pull_policy(d),
        "command": ["nv-hostengine"],
        "args": ["-n", "-b", "ALL"],
        "env": [field_env_var("NODE_NAME", "spec.nodeName")],
        "ports": [{"name": "dcgm", "containerPort": DCGM_PORT}],
        "securityContext": {"privileged": True},
    }
    ds = ctx.daemonset(
        d,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(ctx.spec.validator, "toolkit-ready")],
        volumes=[host_path_volume("run-nvidia-validations", VALIDATIONS_DIR)],
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


def sandbox_operand(section: str, container: str, wait_for: str | None = None) -> Builder:
    """A sandbox operand: the upstream image the policy names, privileged, host root."""

    def build(ctx: RenderContext) -> list[Obj]:
        component: ComponentSpec = getattr(ctx.spec, section)
        main: Obj = {
            "name": container,
            "image": ctx.upstream_image(section, component),
            "imagePullPolicy": ctx.pull_policy(component),
            "env": [field_env_var("NODE_NAME", "spec.nodeName")],
            "securityContext": {"privileged": True},
            "volumeMounts": [
                volume_mount("run-nvidia-validations", VALIDATIONS_DIR),
                volume_mount("host-root", "/host", read_only=True),
            ],
        }
        init = [ctx.wait_init(ctx.spec.validator, wait_for)] if wait_for else []
        ds = ctx.daemonset(
            component,
            service_account=ctx.service_account,
            containers=[main],
            init_containers=init,
            volumes=[
                host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
                host_path_volume("host-root", ctx.host_root, ""),
            ],
            host_pid=True,
        )
        return [*ctx.rbac(), ds]

    return build


def cc_manager(ctx: RenderContext) -> list[Obj]:
    """The CC manager; `ccManager.defaultMode` is its `DEFAULT_CC_MODE`, as upstream sets it."""
    objects: list[Obj] = sandbox_operand("ccManager", "nvidia-cc-manager")(ctx)
    mode = ctx.spec.ccManager.defaultMode
    if mode:
        main = objects[-1]["spec"]["template"]["spec"]["containers"][0]
        # the policy's own env for the container still wins, as for every operand
        if "DEFAULT_CC_MODE" not in dict(ctx.spec.ccManager.env_pairs()):
            main["env"] = merge_env(main["env"], [env_var("DEFAULT_CC_MODE", mode)])
    return objects


def vgpu_device_manager(ctx: RenderContext) -> list[Obj]:
    objects: list[Obj] = sandbox_operand(
        "vgpuDeviceManager", "nvidia-vgpu-device-manager", "vgpu-manager-ready"
    )(ctx)
    cfg = ctx.spec.vgpuDeviceManager.config
    ds = objects[-1]
    main = ds["spec"]["template"]["spec"]["containers"][0]
    main["env"] = merge_env(
        main["env"], [env_var("DEFAULT_VGPU_CONFIG", (cfg.default if cfg else None) or "default")]
    )
    if cfg and cfg.name:
        ds["spec"]["template"]["spec"]["volumes"].append(configmap_volume("vgpu-config", cfg.name))
        main["volumeMounts"].append(volume_mount("vgpu-config", "/vgpu-config", read_only=True))
        main["env"] = merge_env(main["env"], [env_var("CONFIG_FILE", "/vgpu-config/config.yaml")])
    return objects
