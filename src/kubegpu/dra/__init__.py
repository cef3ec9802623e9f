"""The DRA kubelet plugin of driver `gpu.nvidia.com` (`kubegpu dra-plugin`).

It registers with the kubelet's plugin watcher, publishes the node's GPUs and MIG devices
as a ResourceSlice, and prepares allocated ResourceClaims into per-claim CDI specs
(reference/dcgm-dra.md sections 2 and 3; docs/dra.md says what is supported).

Modules: `slices` (devices and slices from GPU facts, pure), `partitions` (dynamic MIG's
partitionable devices and counters, pure), `facts` (the GPU facts from NVML), `classes`
(the DeviceClasses, pure), `config` (opaque config and feature gates, pure), `claims` (an
allocated claim into a prepare plan, pure), `cdi` (per-claim CDI spec, pure), `checkpoint`
(prepare state on disk), `dynamic` (creating and destroying dynamic MIG devices),
`prepare` (prepare / unprepare), `publisher` (ResourceSlices through the API server),
`server` (the two gRPC services), `exclusive` (the device plugin check), `program` (the
whole plugin as a node component).
"""
