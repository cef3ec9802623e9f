"""The DRA stack's operand: `kubegpu dra-plugin` as a DaemonSet, with its RBAC and the
DeviceClasses of driver `gpu.nvidia.com` (a GPUCluster renders it; docs/dra.md).

The plugin is privileged like upstream's: it creates and destroys MIG devices at prepare
and writes CDI specs for the container runtime. Its host paths are the kubelet's plugin
registry and plugins directory (its sockets and checkpoint), the CDI root, the node-wide
MIG lock's directory, and the device-plugin directory, read-only, so that it can refuse to
start next to a device plugin.
"""

from __future__ import annotations

from kubegpu.dra.classes import device_classes
from kubegpu.kube.policy import (
    ComponentSpec,
    DraDriverSpec,
    DraGpusSpec,
    DraKubeletPluginSpec,
    ImageSpec,
)
from kubegpu.operator.operands.context import (
    CDI_DIR,
    MIG_LOCK_DIR,
    Obj,
    RenderContext,
)
from kubegpu.operator.operands.objects import (
    env_var,
    field_env_var,
    host_path_volume,
    volume_mount,
)

CONTAINER = "gpus"


def feature_gates(dra: DraDriverSpec) -> str:
    """`featureGates: {DynamicMIG: true}` as FEATURE_GATES (`DynamicMIG=true`), sorted."""
    gates = dra.featureGates or {}
    return ",".join(f"{name}={'true' if on else 'false'}" for name, on in sorted(gates.items()))


def dra_plugin(ctx: RenderContext, dra: DraDriverSpec) -> list[Obj]:
    plugin = (dra.gpus.kubeletPlugin if dra.gpus else None) or DraKubeletPluginSpec()
    kubelet = ctx.kubelet_root
    registry = f"{kubelet}/plugins_registry"
    plugins = f"{kubelet}/plugins"
    device_plugins = f"{kubelet}/device-plugins"
    env = [
        field_env_var("NAMESPACE", "metadata.namespace"),
        env_var("KUBELET_REGISTRAR_DIRECTORY_PATH", registry),
        env_var("KUBELET_PLUGINS_DIRECTORY_PATH", plugins),
        env_var("KUBEGPU_DEVICE_PLUGIN_DIR", device_plugins),
        env_var("CDI_ROOT", CDI_DIR),
        # the plugin opens the GPUs itself (privileged); the runtime must not add any
        env_var("NVIDIA_VISIBLE_DEVICES", "void"),
        env_var("NVIDIA_MIG_CONFIG_DEVICES", "all"),
        # no runtime injection: the plugin finds the driver (NVML) under the driver root,
        # mounted at /driver-root as NVIDIA's DRA chart does
        env_var("NVIDIA_DRIVER_ROOT", ctx.driver_root),
        env_var("DRIVER_ROOT_CTR_PATH", "/driver-root"),
        # where the plugin's NVML is loaded from (kubegpu.nvml.real)
        env_var("KUBEGPU_DRIVER_LIBRARY_ROOT", "/driver-root"),
    ]
    gates = feature_gates(dra)
    if gates:
        env.append(env_var("FEATURE_GATES", gates))
    mounts = [
        volume_mount("plugins-registry", registry),
        volume_mount("plugins", plugins),
        volume_mount("cdi-root", CDI_DIR),
        volume_mount("mig-lock", MIG_LOCK_DIR),
        volume_mount("device-plugins", device_plugins, read_only=True),
        volume_mount("driver-root", "/driver-root", read_only=True, propagation="HostToContainer"),
    ]
    volumes = [
        host_path_volume("plugins-registry", registry),
        host_path_volume("plugins", plugins),
        host_path_volume("cdi-root", CDI_DIR),
        host_path_volume("mig-lock", MIG_LOCK_DIR),
        host_path_volume("device-plugins", device_plugins),
        host_path_volume("driver-root", ctx.driver_root, ""),
    ]
    # image and pull secrets from draDriver, env and resources from gpus.kubeletPlugin
    component = ComponentSpec(
        **dra.model_dump(include=set(ImageSpec.model_fields)),
        env=plugin.env,
        resources=plugin.resources,
    )
    main = ctx.kubegpu_container(
        CONTAINER, "dra-plugin", component, env=env, mounts=mounts, privileged=True
    )
    ds = ctx.daemonset(
        component, service_account=ctx.service_account, containers=[main], volumes=volumes
    )
    extended = bool(plugin_gpus(dra).extendedResourceName)
    return [*ctx.rbac(), ds, *device_classes(extended_resource=extended)]


def plugin_gpus(dra: DraDriverSpec) -> DraGpusSpec:
    return dra.gpus or DraGpusSpec()
