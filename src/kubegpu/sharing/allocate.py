"""Allocate: what the plugin tells kubelet to give a container for a set of device IDs.

`container_response(ids, devices, settings, request_id)` is a pure function: it checks the
request (unknown IDs, more than one shared replica when `failRequestsGreaterThanOne`) and
returns the env vars, mounts, device nodes, annotations and CDI device names for one
container, following the device-list strategies of NVIDIA's plugin:

- `envvar`: `NVIDIA_VISIBLE_DEVICES=<id>,<id>`;
- `volume-mounts`: `NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices` plus one
  `/dev/null` mount per device under that directory;
- `cdi-annotations`: one `cdi.k8s.io/nvidia-device-plugin_<request id>` annotation naming
  `k8s.device-plugin.nvidia.com/gpu=<id>` devices;
- `cdi-cri`: the same names as CRI CDI devices.

Replica IDs (`GPU-x::3`) become the physical ID, de-duplicated in request order; with the
`index` ID strategy the device index (`0`, `0:1`) is used instead of the UUID.

MPS replicas get their daemon's pipe directory; a replica of a MIG instance (kubegpu's
`sharing.mps.migInstances`) gets its instance's daemon and, as client variables, the
instance's per-client limits.

kubegpu addition: when every strategy is a CDI one the response also sets
`NVIDIA_VISIBLE_DEVICES=void`, so a runtime hook in legacy mode adds nothing beside the CDI
devices (an image's `NVIDIA_VISIBLE_DEVICES=all` cannot widen the allocation).
`visible_devices` models how the container runtime resolves what a container sees, which
is how the "no GPU requested, no GPU" rule is specified and tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kubegpu.catalog import nvidia
from kubegpu.sharing.config import PluginConfig
from kubegpu.sharing.devices import Device
from kubegpu.sharing.mps import daemon_key, instance_limit
from kubegpu.sharing.replicas import physical_id

CDI_VENDOR = nvidia.CDI_PLUGIN_VENDOR
CDI_CLASS = "gpu"
CDI_KIND = nvidia.CDI_PLUGIN_KIND
CDI_ANNOTATION_PLUGIN = "nvidia-device-plugin"
VISIBLE_DEVICES = nvidia.NVIDIA_VISIBLE_DEVICES
VOLUME_MOUNT_DIR = "/var/run/nvidia-container-devices"
MPS_CONTAINER_ROOT = "/mps"
MPS_PIPE_ENV = nvidia.CUDA_MPS_PIPE_DIRECTORY
MPS_THREADS_ENV = nvidia.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
MPS_MEMORY_ENV = nvidia.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
IMEX_CHANNELS_ENV = nvidia.NVIDIA_IMEX_CHANNELS


class AllocationError(ValueError):
    """The request cannot be served; the message is what kubelet reports to the pod."""


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = True


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass
class ContainerResponse:
    """One ContainerAllocateResponse, independent of the gRPC types."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    devices: list[DeviceNode] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AllocateSettings:
    """What of the config (and of the node) shapes one resource's Allocate responses."""

    resource: str
    strategies: tuple[str, ...] = ("envvar",)
    id_strategy: Literal["uuid", "index"] = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    pass_device_specs: bool = False
    dev_root: str = "/"
    control_devices: tuple[str, ...] = ()  # those of cdi.nodes.CONTROL_DEVICES the node has
    device_paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # uuid -> nodes
    fail_requests_greater_than_one: bool = False
    mps_root: str | None = None  # set when this resource's replicas are MPS clients
    gds: bool = False
    mofed: bool = False
    gdrcopy: bool = False
    imex_channels: tuple[int, ...] = ()

    @property
    def only_cdi(self) -> bool:
        return all(s.startswith("cdi-") for s in self.strategies)


def settings_for(
    config: PluginConfig,
    resource: str,
    *,
    control_devices: Sequence[str] = (),
    device_paths: Mapping[str, tuple[str, ...]] | None = None,
) -> AllocateSettings:
    """The Allocate settings of `resource` under `config`."""
    plugin = config.flags.plugin
    return AllocateSettings(
        resource=resource,
        strategies=plugin.device_list_strategy,
        id_strategy=plugin.device_id_strategy,
        cdi_annotation_prefix=plugin.cdi_annotation_prefix,
        pass_device_specs=plugin.pass_device_specs,
        dev_root=config.flags.dev_root,
        control_devices=tuple(control_devices),
        device_paths=dict(device_paths or {}),
        fail_requests_greater_than_one=config.fail_requests_greater_than_one,
        mps_root=config.flags.mps_root if config.sharing_strategy == "mps" else None,
        gds=config.flags.gds_enabled,
        mofed=config.flags.mofed_enabled,
        gdrcopy=config.flags.gdrcopy_enabled,
        imex_channels=config.imex.channel_ids,
    )


def mps_pipe_dir(root: str, daemon: str) -> str:
    """`<root>/<daemon>/pipe`, e.g. `/run/nvidia/mps/nvidia.com/gpu/pipe`; a MIG instance's
    daemon is `<resource>/<MIG-uuid>` (`sharing.mps.daemon_key`)."""
    return f"{root.rstrip('/')}/{daemon}/pipe"


def _mps_daemon(resource: str, requested: Sequence[Device]) -> str:
    """The one daemon a container's MPS replicas connect to: a CUDA process reaches a single
    MPS server, so replicas of two MIG instances cannot share a container."""
    keys = {daemon_key(resource, d) for d in requested if d.is_replica}
    if len(keys) > 1:
        raise AllocationError(
            "invalid request: MPS replicas of more than one MIG instance "
            f"({', '.join(sorted(k.rsplit('/', 1)[1] for k in keys))}); a container can be a "
            "client of one MPS daemon only"
        )
    return keys.pop()


def mps_client_env(requested: Sequence[Device]) -> dict[str, str]:
    """For replicas of a MIG instance: the instance's per-client limits, which CUDA applies
    in the client. Whole GPUs get none, as upstream (the daemon-wide defaults apply)."""
    migs = [d for d in requested if d.is_replica and d.mig is not None]
    if not migs:
        return {}
    limit = instance_limit(migs[0])
    return {
        MPS_THREADS_ENV: str(limit.active_thread_percentage),
        MPS_MEMORY_ENV: f"0={limit.pinned_memory_mib}M",
    }


def validate_request(
    ids: Sequence[str], devices: Mapping[str, Device], settings: AllocateSettings
) -> list[Device]:
    """The devices behind `ids`, or AllocationError with upstream's wording."""
    out = []
    for i in ids:
        device = devices.get(i)
        if device is None:
            raise AllocationError(f"invalid request: unknown device: {i}")
        out.append(device)
    if settings.fail_requests_greater_than_one and len(ids) > 1 and any(d.is_replica for d in out):
        raise AllocationError(
            f"invalid request: maximum request size for shared resources is 1; found {len(ids)}"
        )
    return out


def _host(root: str, path: str) -> str:
    return path if root in ("", "/") else f"{root.rstrip('/')}{path}"


def container_response(
    ids: Sequence[str],
    devices: Mapping[str, Device],
    settings: AllocateSettings,
    request_id: str,
) -> ContainerResponse:
    """The response for one container that asked for `ids` (`request_id`: a fresh UUID)."""
    requested = validate_request(ids, devices, settings)
    unique: list[str] = []
    for d in requested:
        key = d.index if settings.id_strategy == "index" else physical_id(d.id)
        if key not in unique:
            unique.append(key)
    response = ContainerResponse()
    if any(s.startswith("cdi-") for s in settings.strategies):
        names = [f"{CDI_KIND}={key}" for key in unique]
        if "cdi-annotations" in settings.strategies:
            key = f"{settings.cdi_annotation_prefix}{CDI_ANNOTATION_PLUGIN}_{request_id}"
            response.annotations[key] = ",".join(names)
        if "cdi-cri" in settings.strategies:
            response.cdi_devices = list(names)
    if settings.mps_root and any(d.is_replica for d in requested):
        key = _mps_daemon(settings.resource, requested)
        pipe = f"{MPS_CONTAINER_ROOT}/{key}/pipe"
        response.envs[MPS_PIPE_ENV] = pipe
        response.mounts.append(Mount(pipe, mps_pipe_dir(settings.mps_root, key), read_only=False))
        response.envs |= mps_client_env(requested)
        response.mounts.append(
            Mount("/dev/shm", f"{settings.mps_root.rstrip('/')}/shm", read_only=False)
        )
    for enabled, env in (
        (settings.gds, "NVIDIA_GDS"),
        (settings.mofed, "NVIDIA_MOFED"),
        (settings.gdrcopy, "NVIDIA_GDRCOPY"),
    ):
        if enabled:
            response.envs[env] = "enabled"
    if settings.only_cdi:
        response.envs[VISIBLE_DEVICES] = "void"
        return response
    if "envvar" in settings.strategies:
        response.envs[VISIBLE_DEVICES] = ",".join(unique)
        if settings.imex_channels:
            response.envs[IMEX_CHANNELS_ENV] = ",".join(map(str, settings.imex_channels))
    if "volume-mounts" in settings.strategies:
        response.envs[VISIBLE_DEVICES] = VOLUME_MOUNT_DIR
        response.mounts += [Mount(f"{VOLUME_MOUNT_DIR}/{key}", "/dev/null") for key in unique]
        response.mounts += [
            Mount(f"{VOLUME_MOUNT_DIR}/imex/{ch}", "/dev/null") for ch in settings.imex_channels
        ]
    if settings.pass_device_specs:
        paths = list(settings.control_devices)
        for d in requested:
            for p in settings.device_paths.get(d.uuid, ()):
                if p not in paths:
                    paths.append(p)
        paths += [f"/dev/nvidia-caps-imex-channels/channel{ch}" for ch in settings.imex_channels]
        response.devices = [DeviceNode(p, _host(settings.dev_root, p)) for p in paths]
    return response


# -- what the container ends up seeing -----------------------------------------------------


def visible_devices(
    env: Mapping[str, str],
    mounts: Sequence[Mount] = (),
    cdi_devices: Sequence[str] = (),
    annotations: Mapping[str, str] | None = None,
    *,
    accept_envvar: bool,
) -> tuple[str, ...] | Literal["all"]:
    """The GPUs the NVIDIA container runtime gives a container, as kubegpu sets it up.

    `env` is the container's final environment (image, pod spec, then the plugin's envs
    on top), the rest is what the plugin returned (nothing for a container that requested
    no GPU). Order of precedence, as in the NVIDIA container toolkit: CDI devices (CRI
    field or annotations) of our kind; else device mounts under
    /var/run/nvidia-container-devices; else, only when the runtime accepts it
    (`accept_envvar`, the `envvar` set-up), NVIDIA_VISIBLE_DEVICES, where unset, empty,
    `void` and `none` mean no GPU. Everything else means no GPU: a container that asked for
    none gets none, whatever its image says.
    """
    named = list(cdi_devices)
    for key, value in (annotations or {}).items():
        if key.startswith("cdi.k8s.io/") or "/" in key:
            named += [v.strip() for v in value.split(",") if v.strip()]
    ours = [n.split("=", 1)[1] for n in named if n.startswith(CDI_KIND + "=")]
    if ours:
        return "all" if "all" in ours else tuple(ours)
    mounted = [
        m.container_path.removeprefix(VOLUME_MOUNT_DIR + "/")
        for m in mounts
        if m.container_path.startswith(VOLUME_MOUNT_DIR + "/") and m.host_path == "/dev/null"
    ]
    mounted = [m for m in mounted if not m.startswith("imex/")]
    if mounted:
        return "all" if "all" in mounted else tuple(mounted)
    if not accept_envvar:
        return ()
    value = env.get(VISIBLE_DEVICES, "").strip()
    if value in ("", "void", "none") or value == VOLUME_MOUNT_DIR:
        return ()
    if value == "all":
        return "all"
    return tuple(v.strip() for v in value.split(",") if v.strip())


def accepts_envvar(strategies: Sequence[str]) -> bool:
    """Whether the runtime set-up for these strategies honours NVIDIA_VISIBLE_DEVICES.

    Only the plain `envvar` set-up does; with volume-mounts or CDI, kubegpu's docs configure
    the toolkit with `accept-nvidia-visible-devices-envvar-when-unprivileged = false`.
    """
    return "envvar" in strategies
