"""Builders for the operands that run the kubegpu image as `kubegpu <component>`: the
validator, device plugin, MPS control daemon, exporter, feature discovery, MIG manager, node
status exporter and sandbox validator. Each waits for the validator's ready files first."""

from __future__ import annotations

import functools

from kubegpu.catalog import nvidia
from kubegpu.kube.kubelet import (
    DEVICE_PLUGIN_PATH,
    POD_RESOURCES_PATH,
    POD_RESOURCES_SOCKET,
    REGISTRATION_SOCKET,
)
from kubegpu.kube.policy import ImageSpec
from kubegpu.operator.operands.context import (
    CDI_DIR,
    DCGM_PORT,
    DEFAULT_GPU_CLIENTS_CM,
    DEFAULT_MIG_CONFIG_CM,
    EXPORTER_PORT,
    MIG_LOCK_DIR,
    MPS_CAPABLE_LABEL,
    NODE_STATUS_EXPORTER_PORT,
    VALIDATIONS_DIR,
    Obj,
    RenderContext,
)
from kubegpu.operator.operands.objects import (
    configmap_volume,
    env_var,
    field_env_var,
    host_path_volume,
    merge_env,
    volume_mount,
)


def validator(ctx: RenderContext) -> list[Obj]:
    v = ctx.spec.validator
    image = ctx.kubegpu_image(v)
    workload_env = [
        env_var("VALIDATOR_IMAGE", image),
        env_var("VALIDATOR_IMAGE_PULL_POLICY", ctx.pull_policy(v)),
        env_var(
            "VALIDATOR_RUNTIME_CLASS",
            "" if ctx.spec.cdi.nriPluginEnabled else ctx.spec.runtime_class,
        ),
    ]
    if v.imagePullSecrets:  # the workload pods pull the same image, as upstream passes them
        workload_env.append(env_var("VALIDATOR_IMAGE_PULL_SECRETS", ",".join(v.imagePullSecrets)))
    init = [
        ctx.validation_init("driver", [env_var("WITH_WAIT", "true")]),
        # the runtime hands this check the GPUs only when the manifest asks for them
        ctx.validation_init(
            "toolkit",
            [env_var("WITH_WAIT", "false"), env_var(nvidia.NVIDIA_VISIBLE_DEVICES, "all")],
        ),
        ctx.validation_init(
            "cuda", [env_var("WITH_WAIT", "true"), env_var("WITH_WORKLOAD", "true"), *workload_env]
        ),
    ]
    if ctx.spec.devicePlugin.is_enabled(True):
        init.append(
            ctx.validation_init(
                "plugin",
                [
                    env_var("WITH_WAIT", "true"),
                    env_var("WITH_WORKLOAD", "false"),
                    env_var("MIG_STRATEGY", ctx.spec.mig_strategy or "single"),
                    *workload_env,
                ],
            )
        )
    main = ctx.kubegpu_container(
        "nvidia-operator-validator",
        "validator-hold",
        v,
        env=[env_var("OUTPUT_DIR", VALIDATIONS_DIR)],
        mounts=[
            volume_mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional")
        ],
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
        volumes=ctx.validation_volumes(),
        runtime_class=True,
        args_replace=False,
    )
    return [*ctx.rbac(), ds]


def _plugin_config(
    ctx: RenderContext, component: ImageSpec
) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """env, mounts, volumes for the device plugin's named configs (shared by the plugin,
    GFD and the MPS daemon): the ConfigMap at /available-configs, the node label selects one
    and `default` is used when the node names none."""
    config = ctx.spec.devicePlugin.config
    if not config or not config.name:
        return [], [], []
    env = [
        env_var("CONFIG_FILE_SRCDIR", "/available-configs"),
        env_var("NODE_LABEL", "nvidia.com/device-plugin.config"),
        env_var("DEFAULT_CONFIG", config.default or ""),
        env_var("FALLBACK_STRATEGIES", "empty"),
    ]
    return (
        env,
        [volume_mount("available-configs", "/available-configs", read_only=True)],
        [configmap_volume("available-configs", config.name)],
    )


def _gpudirect_env(ctx: RenderContext) -> list[Obj]:
    """`gds.enabled` and `gdrcopy.enabled` as upstream hands them to the device plugin, which
    then sets NVIDIA_GDS / NVIDIA_MOFED / NVIDIA_GDRCOPY in Allocate."""
    env = []
    if ctx.spec.gds is not None and ctx.spec.gds.is_enabled(False):
        env += [env_var("GDS_ENABLED", "true"), env_var("MOFED_ENABLED", "true")]
    if ctx.spec.gdrcopy is not None and ctx.spec.gdrcopy.is_enabled(False):
        env.append(env_var("GDRCOPY_ENABLED", "true"))
    return env


def _cdi_device_list(ctx: RenderContext) -> list[Obj]:
    """With CDI on, the plugin names its devices to the runtime through CDI (annotations and
    the CRI field) instead of the env-var list, as NVIDIA's operator sets it."""
    if not ctx.spec.cdi_enabled:
        return []
    return [
        env_var("DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri"),
        env_var("CDI_ANNOTATION_PREFIX", "cdi.k8s.io/"),
    ]


def device_plugin(ctx: RenderContext) -> list[Obj]:
    p = ctx.spec.devicePlugin
    config_env, config_mounts, config_volumes = _plugin_config(ctx, p)
    main = ctx.kubegpu_container(
        "nvidia-device-plugin",
        "device-plugin",
        p,
        env=[
            # in the manifest, not only in chart values a user replaces: the runtime hands
            # the plugin every GPU and the driver's files only when the env asks for them
            env_var(nvidia.NVIDIA_VISIBLE_DEVICES, "all"),
            env_var(nvidia.NVIDIA_DRIVER_CAPABILITIES, "all"),
            *ctx.mig_env(),
            env_var("MPS_ROOT", ctx.mps_root),
            env_var("KUBELET_SOCKET", REGISTRATION_SOCKET),
            *ctx.driver_env(),
            *ctx.cdi_env(),
            *_cdi_device_list(ctx),
            *_gpudirect_env(ctx),
            *config_env,
        ],
        mounts=[
            volume_mount("device-plugin", DEVICE_PLUGIN_PATH.rstrip("/")),
            volume_mount("run-nvidia-validations", VALIDATIONS_DIR),
            volume_mount("mps-root", ctx.mps_root),
            # the MPS daemon's shm, for the plugin's health check of the daemon
            volume_mount("mps-shm", "/dev/shm"),
            volume_mount(
                "driver-install-dir", "/driver-root", read_only=True, propagation="HostToContainer"
            ),
            volume_mount("cdi-root", CDI_DIR),
            # which pod holds an allocated device: its isolation annotation (docs/exporter.md)
            volume_mount("pod-resources", POD_RESOURCES_PATH.rstrip("/"), read_only=True),
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
            host_path_volume("device-plugin", f"{ctx.kubelet_root}/device-plugins", ""),
            host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
            host_path_volume("mps-root", ctx.mps_root),
            host_path_volume("mps-shm", f"{ctx.mps_root}/shm"),
            host_path_volume("driver-install-dir", ctx.driver_root, ""),
            host_path_volume("cdi-root", CDI_DIR),
            host_path_volume("pod-resources", f"{ctx.kubelet_root}/pod-resources", ""),
            *config_volumes,
        ],
        runtime_class=True,
    )
    return [*ctx.rbac(), ds]


def mps_control_daemon(ctx: RenderContext) -> list[Obj]:
    p = ctx.spec.devicePlugin
    config_env, config_mounts, config_volumes = _plugin_config(ctx, p)
    main = ctx.kubegpu_container(
        "mps-control-daemon-ctr",
        "mps-control-daemon",
        p,
        env=[
            env_var(nvidia.NVIDIA_VISIBLE_DEVICES, "all"),
            env_var(nvidia.NVIDIA_DRIVER_CAPABILITIES, "compute,utility"),
            *ctx.mig_env(),
            env_var("MPS_ROOT", ctx.mps_root),
            *ctx.driver_env(),
            *config_env,
        ],
        mounts=[
            volume_mount("mps-root", ctx.mps_root),
            # the shm every MPS client gets at /dev/shm (the device plugin's Allocate): the
            # daemon must use the same one, or no client can connect
            volume_mount("mps-shm", "/dev/shm"),
            volume_mount("run-nvidia-validations", VALIDATIONS_DIR),
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
            host_path_volume("mps-root", ctx.mps_root),
            host_path_volume("mps-shm", f"{ctx.mps_root}/shm"),
            host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
            *config_volumes,
        ],
        host_pid=True,
        runtime_class=True,
        extra_selector={MPS_CAPABLE_LABEL: "true"},
        args_replace=False,
    )
    return [*ctx.rbac(), ds]


HOST_PROC = "/host/proc"


def dcgm_exporter(ctx: RenderContext) -> list[Obj]:
    e = ctx.spec.dcgmExporter
    env = [
        env_var("DCGM_EXPORTER_LISTEN", f":{EXPORTER_PORT}"),
        env_var("DCGM_EXPORTER_KUBERNETES", "true"),
        env_var("DCGM_POD_RESOURCES_KUBELET_SOCKET", POD_RESOURCES_SOCKET),
    ]
    if ctx.spec.dcgm.is_enabled(True):
        env.append(env_var("DCGM_REMOTE_HOSTENGINE_INFO", f"nvidia-dcgm:{DCGM_PORT}"))
    if e.enablePodLabels:
        env.append(env_var("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true"))
    if e.enablePodUID:
        env.append(env_var("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", "true"))
    gpu_env, gpu_mounts, gpu_volumes = ctx.nvml_reader()
    env += gpu_env
    mounts = [
        volume_mount("pod-gpu-resources", POD_RESOURCES_PATH.rstrip("/"), read_only=True),
        volume_mount("run-nvidia-validations", VALIDATIONS_DIR, read_only=True),
        *gpu_mounts,
    ]
    volumes = [
        host_path_volume("pod-gpu-resources", f"{ctx.kubelet_root}/pod-resources", ""),
        host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
        *gpu_volumes,
    ]
    if e.process_metrics():
        # which pod a GPU process runs in: its cgroup, in the host's /proc (docs/exporter.md)
        env.append(env_var("KUBEGPU_EXPORTER_PROC_ROOT", HOST_PROC))
        mounts.append(volume_mount("host-proc", HOST_PROC, read_only=True))
        volumes.append(host_path_volume("host-proc", "/proc", ""))
    objects: list[Obj] = []
    if e.config and e.config.name:
        env.append(env_var("DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/dcgm-metrics.csv"))
        mounts.append(
            volume_mount("metrics-config", "/etc/dcgm-exporter/dcgm-metrics.csv", read_only=True)
        )
        mounts[-1]["subPath"] = "dcgm-metrics.csv"
        volumes.append(configmap_volume("metrics-config", e.config.name))
    # reads NVML only: the GPUs come from the toolkit (nvml_reader), not `privileged`
    main = ctx.kubegpu_container("nvidia-dcgm-exporter", "exporter", e, env=env, mounts=mounts)
    main["ports"] = [{"name": "metrics", "containerPort": EXPORTER_PORT}]
    # as NVIDIA's: restarted when /health stops answering, out of the Service until it does
    health = {"httpGet": {"path": "/health", "port": EXPORTER_PORT}}
    main["livenessProbe"] = {**health, "initialDelaySeconds": 45, "periodSeconds": 5}
    main["readinessProbe"] = {**health, "initialDelaySeconds": 45}
    ds = ctx.daemonset(
        e,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(e, "toolkit-ready")],
        volumes=volumes,
        host_pid=bool(e.hostPID),
        runtime_class=True,
    )
    if e.annotations:
        ds["spec"]["template"]["metadata"]["annotations"].update(e.annotations)
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
        if sm.scrapeTimeout:
            endpoint["scrapeTimeout"] = sm.scrapeTimeout
        if sm.honorLabels is not None:
            endpoint["honorLabels"] = sm.honorLabels
        if sm.relabelings:
            endpoint["relabelings"] = [r.model_dump(exclude_none=True) for r in sm.relabelings]
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


def gfd(ctx: RenderContext) -> list[Obj]:
    g = ctx.spec.gfd
    config_env, config_mounts, config_volumes = _plugin_config(ctx, ctx.spec.devicePlugin)
    gpu_env, gpu_mounts, gpu_volumes = ctx.nvml_reader()
    main = ctx.kubegpu_container(
        "gpu-feature-discovery",
        "feature-discovery",
        g,
        env=merge_env(
            [*ctx.mig_env(), env_var("MPS_ROOT", ctx.mps_root), *ctx.driver_env(), *config_env],
            gpu_env,
        ),
        mounts=[
            volume_mount("run-nvidia-validations", VALIDATIONS_DIR, read_only=True),
            volume_mount(
                "driver-install-dir", "/driver-root", read_only=True, propagation="HostToContainer"
            ),
            volume_mount("host-sys", "/sys", read_only=True),
            *config_mounts,
            *gpu_mounts,
        ],
    )  # reads NVML and sysfs only: no `privileged` (nvml_reader)
    ds = ctx.daemonset(
        g,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(g, "toolkit-ready")],
        volumes=[
            host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
            host_path_volume("driver-install-dir", ctx.driver_root, ""),
            host_path_volume("host-sys", "/sys", ""),
            *config_volumes,
            *gpu_volumes,
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


def _reboots(env: list[tuple[str, str]]) -> bool:
    """Whether the policy's env lets the MIG manager reboot the node (off unless it says so)."""
    value = dict(env).get("WITH_REBOOT", "false")
    return value.strip().lower() in {"1", "t", "true", "y", "yes", "on"}


def mig_manager(ctx: RenderContext) -> list[Obj]:
    m = ctx.spec.migManager
    objects: list[Obj] = list(ctx.rbac())
    config_name = m.config.name if m.config and m.config.name else None
    clients_name = (
        m.gpuClientsConfig.name if m.gpuClientsConfig and m.gpuClientsConfig.name else None
    )
    env = [
        # the runtime hands the manager every GPU (MIG changes, NVML) only when asked
        env_var(nvidia.NVIDIA_VISIBLE_DEVICES, "all"),
        env_var(nvidia.NVIDIA_DRIVER_CAPABILITIES, "compute,utility"),
        # as NVIDIA's mig-parted image sets it: the MIG config capability, for a legacy runtime
        env_var("NVIDIA_MIG_CONFIG_DEVICES", "all"),
        env_var("HOST_ROOT_MOUNT", "/host"),
        env_var("HOST_NVIDIA_DIR", ctx.toolkit_dir),
        env_var(
            "HOST_MIG_MANAGER_STATE_FILE",
            "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf",
        ),
        env_var("HOST_KUBELET_SYSTEMD_SERVICE", "kubelet.service"),
        field_env_var("DEFAULT_GPU_CLIENTS_NAMESPACE", "metadata.namespace"),
        field_env_var("OPERATOR_NAMESPACE", "metadata.namespace"),
        field_env_var("POD_NAME", "metadata.name"),
        env_var("POD_RESOURCES_SOCKET", POD_RESOURCES_SOCKET),
        *ctx.driver_env(),
        *ctx.cdi_env(),
        env_var("WITH_REBOOT", "false"),
    ]
    if config_name and config_name != DEFAULT_MIG_CONFIG_CM:
        env.append(env_var("CONFIG_FILE", "/mig-parted-config/config.yaml"))
        mig_volume = configmap_volume("mig-parted-config", config_name)
    else:
        objects.append(ctx.configmap(DEFAULT_MIG_CONFIG_CM, {"config.yaml": default_mig_config()}))
        env.append(env_var("DEFAULT_CONFIG_FILE", "/mig-parted-config/config-default.yaml"))
        mig_volume = configmap_volume(
            "mig-parted-config",
            DEFAULT_MIG_CONFIG_CM,
            [{"key": "config.yaml", "path": "config-default.yaml"}],
        )
    if not clients_name:
        objects.append(ctx.configmap(DEFAULT_GPU_CLIENTS_CM, {"clients.yaml": DEFAULT_GPU_CLIENTS}))
    mounts = [
        volume_mount("run-nvidia-validations", VALIDATIONS_DIR),
        volume_mount("host-sys", "/sys"),
        volume_mount("mig-parted-config", "/mig-parted-config", read_only=True),
        volume_mount("gpu-clients", "/gpu-clients", read_only=True),
        volume_mount(
            "driver-install-dir", "/driver-root", read_only=True, propagation="HostToContainer"
        ),
        volume_mount("cdi-root", CDI_DIR),
        volume_mount("pod-resources", POD_RESOURCES_PATH.rstrip("/"), read_only=True),
        volume_mount("mig-lock", MIG_LOCK_DIR),
    ]
    volumes = [
        host_path_volume("run-nvidia-validations", VALIDATIONS_DIR),
        host_path_volume("host-sys", "/sys", "Directory"),
        mig_volume,
        configmap_volume("gpu-clients", clients_name or DEFAULT_GPU_CLIENTS_CM),
        host_path_volume("driver-install-dir", ctx.driver_root, ""),
        host_path_volume("cdi-root", CDI_DIR),
        host_path_volume("pod-resources", f"{ctx.kubelet_root}/pod-resources", ""),
        host_path_volume("mig-lock", MIG_LOCK_DIR),
    ]
    if _reboots(m.env_pairs()):
        # the host's root only to run `chroot /host reboot`; without reboots, no host root
        mounts.append(volume_mount("host-root", "/host", propagation="HostToContainer"))
        volumes.append(host_path_volume("host-root", ctx.host_root, ""))
    main = ctx.kubegpu_container(
        "nvidia-mig-manager",
        "mig-manager",
        m,
        env=env,
        mounts=mounts,
        privileged=True,
    )
    ds = ctx.daemonset(
        m,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=[ctx.wait_init(m, "toolkit-ready")],
        volumes=volumes,
        host_pid=True,
        host_ipc=True,
        runtime_class=True,
    )
    objects.append(ds)
    return objects


def node_status_exporter(ctx: RenderContext) -> list[Obj]:
    n = ctx.spec.nodeStatusExporter
    main = ctx.kubegpu_container(
        "nvidia-node-status-exporter",
        "validator-metrics",
        n,
        env=[
            env_var("METRICS_PORT", str(NODE_STATUS_EXPORTER_PORT)),
            env_var("OUTPUT_DIR", VALIDATIONS_DIR),
        ],
        mounts=[volume_mount("run-nvidia-validations", VALIDATIONS_DIR, read_only=True)],
    )
    main["ports"] = [{"name": "node-status", "containerPort": NODE_STATUS_EXPORTER_PORT}]
    ds = ctx.daemonset(
        n,
        service_account=ctx.service_account,
        containers=[main],
        volumes=[host_path_volume("run-nvidia-validations", VALIDATIONS_DIR)],
    )
    return [*ctx.rbac(), ds]


def sandbox_validator(ctx: RenderContext) -> list[Obj]:
    v = ctx.spec.validator
    init = [
        ctx.validation_init("vfioPCI"),
        ctx.validation_init("vgpuManager"),
        ctx.validation_init("vgpuDevices"),
    ]
    for c, component in zip(init, ("vfio-pci", "vgpu-manager", "vgpu-devices"), strict=True):
        c["name"] = f"{component}-validation"
        c["env"] = merge_env(
            c["env"], [env_var("COMPONENT", component), env_var("WITH_WAIT", "true")]
        )
    main = ctx.kubegpu_container(
        "nvidia-sandbox-validator",
        "validator-hold",
        v,
        env=[env_var("OUTPUT_DIR", VALIDATIONS_DIR)],
        mounts=[
            volume_mount("run-nvidia-validations", VALIDATIONS_DIR, propagation="Bidirectional")
        ],
        privileged=True,
    )
    ds = ctx.daemonset(
        v,
        service_account=ctx.service_account,
        containers=[main],
        init_containers=init,
        volumes=ctx.validation_volumes(),
        args_replace=False,
    )
    return [*ctx.rbac(), ds]
