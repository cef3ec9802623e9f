"""Spec values the operator accepts (upstream's schema, so upstream's files apply unchanged)
but does not render into any operand. Pure: the controller logs them once per change, so a
value set in a ClusterPolicy or GPUCluster is never mistaken for one that took effect.

Deprecated fields the CRD already describes as such (`operator.defaultRuntime`,
`operator.initContainer`, `cdi.default`, `dcgm.hostPort`) are not listed.
"""

from __future__ import annotations

from kubegpu.kube.policy import ClusterPolicySpec, DCGMExporterSpec, GPUClusterSpec


def _exporter(e: DCGMExporterSpec) -> list[str]:
    out = []
    if e.hpcJobMapping and e.hpcJobMapping.enabled:
        out.append("dcgmExporter.hpcJobMapping.enabled: the exporter has no HPC job mapping")
    if e.podLabelAllowlistRegex:
        out.append(
            "dcgmExporter.podLabelAllowlistRegex: the exporter adds no pod-label labels "
            "(enablePodLabels is accepted and ignored too, docs/exporter.md)"
        )
    return out


def ignored_policy_fields(spec: ClusterPolicySpec) -> tuple[str, ...]:
    """`field: why` for each ClusterPolicy value set that no rendered object carries."""
    out: list[str] = []
    op = spec.operator
    if op.use_ocp_driver_toolkit:
        out.append("operator.use_ocp_driver_toolkit: OpenShift's driver toolkit is not rendered")
    sm = op.metrics.serviceMonitor if op.metrics else None
    if sm and sm.enabled:
        out.append(
            "operator.metrics.serviceMonitor.enabled: no ServiceMonitor is rendered for the "
            "operator's own metrics (state-operator-metrics is empty)"
        )
    if spec.psp.enabled:
        out.append("psp.enabled: PodSecurityPolicies were removed in Kubernetes 1.25; use psa")
    d = spec.driver
    if spec.driver_managed:
        if d.usePrecompiled:
            out.append(
                "driver.usePrecompiled: one driver DaemonSet runs <version>-<os> on every "
                "kernel; precompiled per-kernel images are not rendered"
            )
        if d.useOpenKernelModules and d.kernelModuleType != "open":
            out.append(
                "driver.useOpenKernelModules: deprecated and not passed on; set "
                "driver.kernelModuleType: open"
            )
        for section, sidecar in (("gds", "nvidia-fs"), ("gdrcopy", "gdrcopy")):
            component = getattr(spec, section)
            if component is not None and component.is_enabled(False):
                out.append(
                    f"{section}.enabled: the driver DaemonSet gets no {sidecar} sidecar (the "
                    "device plugin is told, and passes the devices on)"
                )
        if d.virtualTopology and d.virtualTopology.config:
            out.append("driver.virtualTopology.config: no vGPU topology daemon config is mounted")
    if spec.validator.args:
        out.append("validator.args: the validator's containers run fixed kubegpu commands")
    if spec.dcgmExporter.is_enabled(True):
        out += _exporter(spec.dcgmExporter)
    m = spec.migManager
    if m.is_enabled(True) and m.gpuClientsConfig and m.gpuClientsConfig.name:
        out.append(
            "migManager.gpuClientsConfig.name: the MIG manager stops no host GPU clients; "
            "it pauses operands through their deploy labels (docs/mig-manager.md)"
        )
    return tuple(out)


def ignored_cluster_fields(gc: GPUClusterSpec) -> tuple[str, ...]:
    """`field: why` for each GPUCluster value set that no rendered object carries."""
    out: list[str] = []
    driver_dir = gc.hostPaths.driverInstallDir
    if driver_dir and driver_dir != "/":
        out.append(
            "hostPaths.driverInstallDir: the DRA stack uses the host's driver at / "
            "(no driver container)"
        )
    dra = gc.draDriver
    if dra.computeDomains and dra.computeDomains.enabled:
        out.append("draDriver.computeDomains.enabled: ComputeDomains (IMEX) are not supported")
    plugin = dra.gpus.kubeletPlugin if dra.gpus else None
    if plugin and plugin.healthcheck and plugin.healthcheck.enabled:
        out.append(
            "draDriver.gpus.kubeletPlugin.healthcheck.enabled: the kubelet plugin serves no "
            "gRPC health endpoint"
        )
    if gc.dcgmExporter.is_enabled(True):
        out += _exporter(gc.dcgmExporter)
    return tuple(out)
