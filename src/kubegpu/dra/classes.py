"""The DeviceClasses of driver `gpu.nvidia.com` (pure), as upstream's chart installs them
(reference/dcgm-dra.md section 2.2). Defined in `kubegpu.catalog.dra`, one source for the
plugin's deployment and the planner's DRA output.

`deploy/dra/deviceclasses.yaml` is `device_classes()`'s output; a unit test keeps the two equal.
"""

from __future__ import annotations

from kubegpu.catalog.dra import API_VERSION, Json, device_classes, selector

__all__ = ["API_VERSION", "Json", "device_classes", "selector"]
