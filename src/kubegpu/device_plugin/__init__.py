"""The kubelet device plugin: whole GPUs, MIG devices, time-slicing and MPS replicas.

`DevicePlugin(nvml, PluginOptions(...)).run()` runs it in-process; `kubegpu device-plugin`
runs it as a program. `MpsControlDaemon` is the MPS side (`kubegpu mps-control-daemon`).
"""

from kubegpu.device_plugin.mps import MpsControlDaemon, MpsOptions, RecordingMps, SystemMps
from kubegpu.device_plugin.plugin import DevicePlugin, PluginOptions
from kubegpu.device_plugin.server import socket_name
from kubegpu.sharing.config_source import CONFIG_LABEL, ConfigChoice, ConfigSource

__all__ = [
    "CONFIG_LABEL",
    "ConfigChoice",
    "ConfigSource",
    "DevicePlugin",
    "MpsControlDaemon",
    "MpsOptions",
    "PluginOptions",
    "RecordingMps",
    "SystemMps",
    "socket_name",
]
