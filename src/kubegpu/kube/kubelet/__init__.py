"""The kubelet's gRPC APIs: device plugin v1beta1, pod-resources v1, plugin registration v1
and the DRA plugin API v1 / v1beta1.

Constants of those APIs live here. The message and service stubs are generated from
``protos/`` by ``scripts/gen-protos`` and are imported by module path (importing this
package does not load grpc)::

    from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2 as dp        # messages
    from kubegpu.kube.kubelet import deviceplugin_v1beta1_pb2_grpc as dp_grpc
    from kubegpu.kube.kubelet import podresources_v1_pb2 as pr
    from kubegpu.kube.kubelet import podresources_v1_pb2_grpc as pr_grpc
    from kubegpu.kube.kubelet import pluginregistration_v1_pb2 as reg       # plugin watcher
    from kubegpu.kube.kubelet import dra_v1_pb2 as dra                       # DRA v1
    from kubegpu.kube.kubelet import dra_v1beta1_pb2 as dra_beta             # DRA v1beta1

Each ``*_pb2_grpc`` module has, per service ``X``: ``XServicer`` (subclass it; methods may be
``async def``), ``add_XServicer_to_server(servicer, server)``, ``XStub`` (typed for a
``grpc.aio`` channel) and ``XSyncStub`` (the same class, typed for a blocking channel).

gRPC services as the kubelet names them on the wire:

- ``v1beta1.Registration`` (served by the kubelet on ``DEVICE_PLUGIN_PATH + KUBELET_SOCKET``)
- ``v1beta1.DevicePlugin`` (served by each plugin on its own socket in ``DEVICE_PLUGIN_PATH``)
- ``v1.PodResourcesLister`` (served by the kubelet on ``POD_RESOURCES_PATH + KUBELET_SOCKET``)
- ``pluginregistration.Registration`` (served by a kubelet plugin on a socket in
  ``PLUGINS_REGISTRY_PATH``, see ``dra_registration_socket``; the kubelet's plugin watcher
  dials it)
- ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and ``...dra.v1beta1.DRAPlugin`` (served by a
  DRA driver on the endpoint its ``PluginInfo`` names, see ``dra_endpoint``); at
  registration they are called ``v1.DRAPlugin`` / ``v1beta1.DRAPlugin``

grpc addresses unix sockets as ``unix:///abs/path`` (see ``unix_target``).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Final

__all__ = [
    "DEVICE_PLUGIN_PATH",
    "DEVICE_PLUGIN_SERVICE",
    "DEVICE_PLUGIN_VERSION",
    "DRA_PLUGIN_TYPE",
    "DRA_PREPARE_TIMEOUT_S",
    "DRA_SUPPORTED_VERSIONS",
    "DRA_V1BETA1_SERVICE",
    "DRA_V1BETA1_VERSION",
    "DRA_V1_SERVICE",
    "DRA_V1_VERSION",
    "HEALTHY",
    "KUBELET_SOCKET",
    "PLUGINS_PATH",
    "PLUGINS_REGISTRY_PATH",
    "PLUGIN_REGISTRATION_SERVICE",
    "POD_RESOURCES_PATH",
    "POD_RESOURCES_SERVICE",
    "POD_RESOURCES_SOCKET",
    "PRE_START_CONTAINER_TIMEOUT_S",
    "REGISTRATION_SERVICE",
    "REGISTRATION_SOCKET",
    "SUPPORTED_DEVICE_PLUGIN_VERSIONS",
    "UNHEALTHY",
    "dra_endpoint",
    "dra_registration_socket",
    "unix_target",
]

#: Device-plugin API version sent in RegisterRequest.version.
DEVICE_PLUGIN_VERSION: Final = "v1beta1"
#: Versions the kubelet accepts in RegisterRequest.version.
SUPPORTED_DEVICE_PLUGIN_VERSIONS: Final = ("v1beta1",)

#: Directory of the kubelet's and the plugins' device-plugin sockets.
DEVICE_PLUGIN_PATH: Final = "/var/lib/kubelet/device-plugins/"
#: Directory of the kubelet's pod-resources socket.
POD_RESOURCES_PATH: Final = "/var/lib/kubelet/pod-resources/"
#: File name of the kubelet's socket in either directory.
KUBELET_SOCKET: Final = "kubelet.sock"
#: Where the kubelet serves v1beta1.Registration.
REGISTRATION_SOCKET: Final = DEVICE_PLUGIN_PATH + KUBELET_SOCKET
#: Where the kubelet serves v1.PodResourcesLister.
POD_RESOURCES_SOCKET: Final = POD_RESOURCES_PATH + KUBELET_SOCKET

#: Values of Device.health.
HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"

#: How long the kubelet waits for PreStartContainer.
PRE_START_CONTAINER_TIMEOUT_S: Final = 30

#: Full gRPC service names (method paths are "/<service>/<Method>").
REGISTRATION_SERVICE: Final = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE: Final = "v1beta1.DevicePlugin"
POD_RESOURCES_SERVICE: Final = "v1.PodResourcesLister"

# --- plugin watcher and DRA --------------------------------------------------------------

#: Directory the kubelet's plugin watcher watches for registration sockets.
PLUGINS_REGISTRY_PATH: Final = "/var/lib/kubelet/plugins_registry/"
#: Directory under which kubelet plugins keep their service sockets and state.
PLUGINS_PATH: Final = "/var/lib/kubelet/plugins/"
#: Service a plugin serves on its registration socket.
PLUGIN_REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
#: PluginInfo.type of a DRA driver's kubelet plugin.
DRA_PLUGIN_TYPE: Final = "DRAPlugin"
#: PluginInfo.supported_versions entries; the kubelet uses the first one it knows, newest first.
DRA_V1_VERSION: Final = "v1.DRAPlugin"
DRA_V1BETA1_VERSION: Final = "v1beta1.DRAPlugin"
DRA_SUPPORTED_VERSIONS: Final = (DRA_V1_VERSION, DRA_V1BETA1_VERSION)
#: Full gRPC names of the DRA services behind those versions.
DRA_V1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
#: The kubelet's default timeout of one NodePrepareResources / NodeUnprepareResources call.
DRA_PREPARE_TIMEOUT_S: Final = 45


def dra_registration_socket(driver: str, registry: str | PurePath = PLUGINS_REGISTRY_PATH) -> str:
    """``gpu.nvidia.com`` -> ``/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock``."""
    return str(PurePath(registry) / f"{driver}-reg.sock")


def dra_endpoint(driver: str, plugins: str | PurePath = PLUGINS_PATH) -> str:
    """``gpu.nvidia.com`` -> ``/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock``."""
    return str(PurePath(plugins) / driver / "dra.sock")


def unix_target(socket: str | PurePath) -> str:
    """The grpc target of a unix socket path, e.g. ``unix:///var/lib/kubelet/...``."""
    path = str(socket)
    if not path.startswith("/"):
        raise ValueError(f"unix socket path must be absolute: {path!r}")
    return f"unix://{path}"
