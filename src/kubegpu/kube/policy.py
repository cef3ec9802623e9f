"""The operator's custom resources as pydantic models: ClusterPolicy, GPUCluster and
NVIDIADriver.

`ClusterPolicy` (`nvidia.com/v1`, cluster-scoped) has the field names and meanings of
NVIDIA's GPU Operator, so a ClusterPolicy written for the upstream operator (its sample, or
what its Helm chart renders) is accepted unchanged. `GPUCluster` (`nvidia.com/v1alpha1`) is
the DRA-oriented alternative; a cluster has one or the other. `NVIDIADriver`
(`nvidia.com/v1alpha1`) is accepted with every upstream field so NVIDIA's samples apply, and
reported as not supported in its status.

Attribute names are the wire names (camelCase) on purpose: these models *are* the schema
(`kubegpu.kube.crds` generates the CRDs from them), and `spec.devicePlugin.config.name`
reads the same in Python, YAML and kubectl. Parsing is lenient (`extra="ignore"`): the API
server has already pruned the object to its schema, and an operator that meets a newer CRD
must not crash on a field it does not know.
"""

from __future__ import annotations

from typing import Any, Literal

from lightkube.generic_resource import create_global_resource
from pydantic import BaseModel, ConfigDict, Field

from kubegpu.base import loader
from kubegpu.kube import schema
from kubegpu.kube.schema import FreeForm, ImageName, Int32, Int64, IntOrString, ProbeCount

GROUP = "nvidia.com"
CLUSTER_POLICY_VERSION = "v1"
GPU_CLUSTER_VERSION = "v1alpha1"

ClusterPolicyResource = create_global_resource(
    GROUP, CLUSTER_POLICY_VERSION, "ClusterPolicy", "clusterpolicies"
)
GPUClusterResource = create_global_resource(GROUP, GPU_CLUSTER_VERSION, "GPUCluster", "gpuclusters")
NVIDIA_DRIVER_VERSION = "v1alpha1"
NVIDIADriverResource = create_global_resource(
    GROUP, NVIDIA_DRIVER_VERSION, "NVIDIADriver", "nvidiadrivers"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# -- shared pieces ----------------------------------------------------------------------------
class EnvVar(_Model):
    """An environment variable for an operand's main container (a plain value only)."""

    name: str
    value: str = ""


class ResourceRequirements(_Model):
    """Compute resources for every container of an operand."""

    limits: dict[str, IntOrString] | None = None
    requests: dict[str, IntOrString] | None = None


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: Int64 | None = None


class ImageSpec(_Model):
    """Where an operand's image comes from: `repository/image:version`, or `image` alone."""

    repository: str | None = Field(None, description="Image repository, e.g. nvcr.io/nvidia.")
    image: ImageName | None = Field(None, description="Image name.")
    version: str | None = Field(None, description="Image tag, or a sha256: digest.")
    imagePullPolicy: str | None = Field(None, description="Always, Never or IfNotPresent.")
    imagePullSecrets: list[str] | None = Field(None, description="Image pull secret names.")


class ComponentSpec(ImageSpec):
    """Fields every operand shares."""

    enabled: bool | None = Field(None, description="Deploy this operand.")
    resources: ResourceRequirements | None = None
    args: list[str] | None = Field(None, description="Replaces the main container's args.")
    env: list[EnvVar] | None = Field(None, description="Set on the main container.")
    hostNetwork: bool | None = Field(
        None, description="Run the operand's pods on the host network."
    )

    def is_enabled(self, default: bool) -> bool:
        return default if self.enabled is None else self.enabled

    def env_pairs(self) -> list[tuple[str, str]]:
        return [(e.name, e.value) for e in self.env or []]


class ConfigMapRef(_Model):
    name: str | None = Field(None, description="ConfigMap name.")


class NamedConfig(_Model):
    name: str | None = Field(None, description="ConfigMap name.")
    default: str | None = Field(None, description="Config used when a node names none.")


class EnvOnly(_Model):
    env: list[EnvVar] | None = None


# -- operator, daemonsets, host paths -------------------------------------------------------------
class InitContainerSpec(ImageSpec):
    pass


RelabelAction = Literal[
    "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
    "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep",
    "lowercase", "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual",
    "dropequal", "DropEqual",
]  # fmt: skip


class RelabelConfig(_Model):
    """One Prometheus relabeling rule, as the prometheus-operator's ServiceMonitor has it."""

    action: RelabelAction | None = None
    modulus: Int64 | None = None
    regex: str | None = None
    replacement: str | None = None
    separator: str | None = None
    sourceLabels: list[str] | None = None
    targetLabel: str | None = None


class ServiceMonitorConfig(_Model):
    enabled: bool | None = Field(None, description="Create a Prometheus ServiceMonitor.")
    interval: str | None = Field(None, description="Scrape interval, e.g. 15s.")
    scrapeTimeout: str | None = Field(None, description="Scrape timeout, e.g. 10s.")
    honorLabels: bool | None = None
    additionalLabels: dict[str, str] | None = None
    relabelings: list[RelabelConfig] | None = None


class OperatorMetrics(_Model):
    serviceMonitor: ServiceMonitorConfig | None = None


class OperatorSpec(_Model):
    defaultRuntime: Literal["docker", "crio", "containerd"] | None = Field(
        None, description="Deprecated: the container runtime is detected."
    )
    runtimeClass: str | None = Field(None, description="RuntimeClass for GPU pods (nvidia).")
    initContainer: InitContainerSpec | None = Field(None, description="Deprecated.")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    use_ocp_driver_toolkit: bool | None = None
    metrics: OperatorMetrics | None = None


class RollingUpdateSpec(_Model):
    maxUnavailable: str | None = Field(None, description='Nodes updated at once: "1" or "10%".')


class DaemonsetsSpec(_Model):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    priorityClassName: str | None = None
    updateStrategy: Literal["RollingUpdate", "OnDelete"] | None = None
    rollingUpdate: RollingUpdateSpec | None = None
    podSecurityContext: FreeForm | None = None


class HostPathsSpec(_Model):
    rootFS: str | None = Field(None, description="The host's root filesystem (chroot-able).")
    driverInstallDir: str | None = Field(None, description="Where the driver's files are.")
    kubeletRootDir: str | None = Field(None, description="kubelet's root directory.")


# -- driver ----------------------------------------------------------------------------------------
class ProbeSpec(_Model):
    initialDelaySeconds: Int32 | None = None
    timeoutSeconds: ProbeCount | None = None
    periodSeconds: ProbeCount | None = None
    successThreshold: ProbeCount | None = None
    failureThreshold: ProbeCount | None = None


class RdmaSpec(_Model):
    enabled: bool | None = None
    useHostMofed: bool | None = None


class WaitForCompletionSpec(_Model):
    podSelector: str | None = None
    timeoutSeconds: Int32 | None = None


class PodDeletionSpec(_Model):
    force: bool | None = None
    timeoutSeconds: Int32 | None = None
    deleteEmptyDir: bool | None = None


class DrainSpec(_Model):
    enable: bool | None = None
    force: bool | None = None
    podSelector: str | None = None
    timeoutSeconds: Int32 | None = None
    deleteEmptyDir: bool | None = None


class DriverUpgradePolicySpec(_Model):
    autoUpgrade: bool | None = None
    maxParallelUpgrades: Int32 | None = None
    maxUnavailable: IntOrString | None = None
    waitForCompletion: WaitForCompletionSpec | None = None
    podDeletion: PodDeletionSpec | None = None
    drain: DrainSpec | None = None


class DriverManagerSpec(ImageSpec):
    env: list[EnvVar] | None = None


class RepoConfigSpec(_Model):
    configMapName: str | None = None
    destinationDir: str | None = None


class LicensingConfigSpec(_Model):
    configMapName: str | None = None
    secretName: str | None = None
    nlsEnabled: bool | None = None


class VirtualTopologySpec(_Model):
    config: str | None = None


class DriverSpec(ComponentSpec):
    useNvidiaDriverCRD: bool | None = None
    usePrecompiled: bool | None = None
    useOpenKernelModules: bool | None = Field(None, description="Deprecated: kernelModuleType.")
    kernelModuleType: Literal["auto", "open", "proprietary"] | None = None
    use_ocp_driver_toolkit: bool | None = None
    startupProbe: ProbeSpec | None = None
    livenessProbe: ProbeSpec | None = None
    readinessProbe: ProbeSpec | None = None
    rdma: RdmaSpec | None = None
    upgradePolicy: DriverUpgradePolicySpec | None = None
    manager: DriverManagerSpec | None = None
    repoConfig: RepoConfigSpec | None = None
    certConfig: ConfigMapRef | None = None
    licensingConfig: LicensingConfigSpec | None = None
    virtualTopology: VirtualTopologySpec | None = None
    kernelModuleConfig: ConfigMapRef | None = None
    secretEnv: str | None = None


# -- node operands -----------------------------------------------------------------------------------
class ToolkitSpec(ComponentSpec):
    installDir: str | None = Field(None, description="Toolkit install directory on the host.")


class MpsSpec(_Model):
    root: str | None = Field(None, description="MPS root on the host (/run/nvidia/mps).")


class DevicePluginSpec(ComponentSpec):
    config: NamedConfig | None = Field(
        None, description="ConfigMap of named plugin configs; `default` when a node names none."
    )
    mps: MpsSpec | None = None


class DCGMSpec(ComponentSpec):
    hostPort: Int32 | None = Field(None, description="Deprecated.")


class ServiceSpec(_Model):
    type: str | None = None
    internalTrafficPolicy: str | None = None


class HpcJobMappingSpec(_Model):
    enabled: bool | None = None
    directory: str | None = None


PROCESS_METRICS_ENV = "KUBEGPU_EXPORTER_PROCESS_METRICS"
TRUE_WORDS = ("1", "true", "t", "yes", "y", "on")


class DCGMExporterSpec(ComponentSpec):
    annotations: dict[str, str] | None = Field(None, description="Added to the exporter's pods.")
    config: ConfigMapRef | None = Field(None, description="ConfigMap with dcgm-metrics.csv.")
    serviceMonitor: ServiceMonitorConfig | None = None
    service: ServiceSpec | None = None
    hostPID: bool | None = None
    hpcJobMapping: HpcJobMappingSpec | None = None
    enablePodLabels: bool | None = None
    enablePodUID: bool | None = None
    podLabelAllowlistRegex: list[str] | None = None

    def process_metrics(self) -> bool:
        """kubegpu's per-pod process attribution, asked for through the exporter's env
        (`KUBEGPU_EXPORTER_PROCESS_METRICS=true`): the operand then reads the host's /proc
        and the node's pods (docs/exporter.md)."""
        return any(
            name == PROCESS_METRICS_ENV and value.strip().lower() in TRUE_WORDS
            for name, value in self.env_pairs()
        )


class GPUFeatureDiscoverySpec(ComponentSpec):
    pass


class MIGSpec(_Model):
    strategy: Literal["none", "single", "mixed"] | None = Field(
        None, description="How the device plugin and GFD expose MIG devices."
    )


class MIGPartedConfigSpec(_Model):
    name: str | None = Field(None, description="ConfigMap with config.yaml (mig-parted format).")
    default: Literal["all-disabled", ""] | None = Field(
        None, description="all-disabled: label MIG-capable nodes with nvidia.com/mig.config."
    )


class MIGManagerSpec(ComponentSpec):
    config: MIGPartedConfigSpec | None = None
    gpuClientsConfig: ConfigMapRef | None = None


class NodeStatusExporterSpec(ComponentSpec):
    pass


class PSPSpec(_Model):
    enabled: bool | None = None


class PSASpec(_Model):
    enabled: bool | None = None


class ValidatorSpec(ComponentSpec):
    plugin: EnvOnly | None = None
    toolkit: EnvOnly | None = None
    driver: EnvOnly | None = None
    cuda: EnvOnly | None = None
    vfioPCI: EnvOnly | None = None
    vgpuManager: EnvOnly | None = None
    vgpuDevices: EnvOnly | None = None


class GDSSpec(ComponentSpec):
    pass


class GDRCopySpec(ComponentSpec):
    pass


class SandboxWorkloadsSpec(_Model):
    enabled: bool | None = None
    defaultWorkload: Literal["container", "vm-passthrough", "vm-vgpu"] | None = None
    mode: Literal["kubevirt", "kata"] | None = None


class VFIOManagerSpec(ComponentSpec):
    driverManager: DriverManagerSpec | None = None


class SandboxDevicePluginSpec(ComponentSpec):
    pass


class KataDevicePluginSpec(ComponentSpec):
    pass


class VGPUManagerSpec(ComponentSpec):
    driverManager: DriverManagerSpec | None = None
    kernelModuleConfig: ConfigMapRef | None = None


class VGPUDeviceManagerSpec(ComponentSpec):
    config: NamedConfig | None = None


class CDIConfigSpec(_Model):
    enabled: bool | None = Field(None, description="Make GPUs available to containers via CDI.")
    default: bool | None = Field(None, description="Deprecated.")
    nriPluginEnabled: bool | None = None


class KataManagerSpec(ComponentSpec):
    config: FreeForm | None = None


class CCManagerSpec(ComponentSpec):
    defaultMode: Literal["on", "off", "devtools"] | None = None


class ClusterPolicySpec(_Model):
    """What the operator deploys. Every section is optional; absent means the default."""

    operator: OperatorSpec = OperatorSpec()
    daemonsets: DaemonsetsSpec = DaemonsetsSpec()
    driver: DriverSpec = DriverSpec()
    toolkit: ToolkitSpec = ToolkitSpec()
    devicePlugin: DevicePluginSpec = DevicePluginSpec()
    dcgmExporter: DCGMExporterSpec = DCGMExporterSpec()
    dcgm: DCGMSpec = DCGMSpec()
    nodeStatusExporter: NodeStatusExporterSpec = NodeStatusExporterSpec()
    gfd: GPUFeatureDiscoverySpec = GPUFeatureDiscoverySpec()
    mig: MIGSpec = MIGSpec()
    migManager: MIGManagerSpec = MIGManagerSpec()
    psp: PSPSpec = PSPSpec()
    psa: PSASpec = PSASpec()
    validator: ValidatorSpec = ValidatorSpec()
    gds: GDSSpec | None = None
    gdrcopy: GDRCopySpec | None = None
    sandboxWorkloads: SandboxWorkloadsSpec = SandboxWorkloadsSpec()
    vfioManager: VFIOManagerSpec = VFIOManagerSpec()
    sandboxDevicePlugin: SandboxDevicePluginSpec = SandboxDevicePluginSpec()
    kataSandboxDevicePlugin: KataDevicePluginSpec = KataDevicePluginSpec()
    vgpuManager: VGPUManagerSpec = VGPUManagerSpec()
    vgpuDeviceManager: VGPUDeviceManagerSpec = VGPUDeviceManagerSpec()
    cdi: CDIConfigSpec = CDIConfigSpec()
    kataManager: KataManagerSpec = KataManagerSpec()
    ccManager: CCManagerSpec = CCManagerSpec()
    hostPaths: HostPathsSpec = HostPathsSpec()

    # -- derived settings, with upstream's defaults ------------------------------------------
    @property
    def sandbox_enabled(self) -> bool:
        return bool(self.sandboxWorkloads.enabled)

    @property
    def sandbox_mode(self) -> str:
        return self.sandboxWorkloads.mode or "kubevirt"

    @property
    def default_workload(self) -> str:
        return self.sandboxWorkloads.defaultWorkload or "container"

    @property
    def cdi_enabled(self) -> bool:
        return self.cdi.enabled is not False

    @property
    def runtime_class(self) -> str:
        return self.operator.runtimeClass or "nvidia"

    @property
    def driver_managed(self) -> bool:
        """The operator runs the driver (enabled, and not left to NVIDIADriver resources)."""
        return self.driver.is_enabled(True) and not self.driver.useNvidiaDriverCRD

    @property
    def mig_strategy(self) -> str:
        """The strategy as written (empty: the device plugin decides, i.e. none)."""
        return self.mig.strategy or ""


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    observedGeneration: Int64 | None = None
    lastTransitionTime: str
    reason: str
    message: str = ""


class ClusterPolicyStatus(_Model):
    state: Literal["ignored", "ready", "notReady"] | None = Field(
        None, description="ready, notReady, or ignored (not the oldest ClusterPolicy)."
    )
    namespace: str | None = Field(None, description="Where the operands run.")
    conditions: list[Condition] | None = None


class DraHealthcheckSpec(_Model):
    enabled: bool | None = None
    port: Int32 | None = None


class DraKubeletPluginSpec(_Model):
    env: list[EnvVar] | None = Field(None, description="Set on the kubelet plugin's container.")
    resources: ResourceRequirements | None = None
    healthcheck: DraHealthcheckSpec | None = None


class DraControllerSpec(_Model):
    env: list[EnvVar] | None = None
    resources: ResourceRequirements | None = None


class DraGpusSpec(_Model):
    kubeletPlugin: DraKubeletPluginSpec | None = None
    extendedResourceName: Literal["nvidia.com/gpu", ""] | None = Field(
        None,
        description="nvidia.com/gpu: the gpu.nvidia.com DeviceClass serves pods that ask "
        "for nvidia.com/gpu (DRA extended resources, Kubernetes 1.36+); empty or unset: off "
        "(the default). Only on nodes no device plugin serves.",
    )


class DraComputeDomainsSpec(_Model):
    enabled: bool | None = Field(None, description="ComputeDomains (IMEX): not supported.")
    controller: DraControllerSpec | None = None
    kubeletPlugin: DraKubeletPluginSpec | None = None


class DraDriverSpec(ImageSpec):
    """The DRA driver for GPUs (kubegpu runs its own `kubegpu dra-plugin` in its image)."""

    featureGates: dict[str, bool] | None = Field(
        None, description="Feature gates of the DRA driver (FEATURE_GATES), e.g. DynamicMIG."
    )
    gpus: DraGpusSpec | None = None
    computeDomains: DraComputeDomainsSpec | None = None


class GPUClusterHostPathsSpec(_Model):
    rootFS: str | None = Field(
        None, description="The host's root filesystem (chroot-able); NVIDIA's sample sets it."
    )
    driverInstallDir: str | None = Field(None, description="Where the driver's files are.")
    kubeletRootDir: str | None = Field(None, description="kubelet's root directory.")


class GPUClusterSpec(_Model):
    """The DRA-based alternative to ClusterPolicy (a singleton named `gpu-cluster`): the DRA
    plugin, the DeviceClasses and the exporter. It manages neither the driver nor the
    device plugin."""

    draDriver: DraDriverSpec = DraDriverSpec()
    dcgm: DCGMSpec = DCGMSpec()
    dcgmExporter: DCGMExporterSpec = DCGMExporterSpec()
    hostPaths: GPUClusterHostPathsSpec = GPUClusterHostPathsSpec()
    daemonsets: DaemonsetsSpec = DaemonsetsSpec()


class GPUClusterStatus(_Model):
    state: Literal["ready", "notReady", "disabled", "ignored"] | None = Field(
        None,
        description="ready, notReady, or ignored (a ClusterPolicy is active, or the "
        "name is not gpu-cluster).",
    )
    namespace: str | None = Field(None, description="Where the operands run.")
    conditions: list[Condition] | None = None


# -- NVIDIADriver ----------------------------------------------------------------------------------
class NamedConfigMapRef(_Model):
    name: str | None = Field(None, description="ConfigMap (or Secret) name.")


class NVIDIADriverLicensingConfig(_Model):
    name: str | None = Field(None, description="ConfigMap name (deprecated: secretName).")
    secretName: str | None = None
    nlsEnabled: bool | None = None


class NVIDIADriverSpec(_Model):
    """One driver configuration for a set of GPU nodes (upstream's NVIDIADriver). kubegpu
    accepts it but does not install drivers from it: the operator marks it not supported."""

    driverType: Literal["gpu", "vgpu", "vgpu-host-manager"] | None = None
    default: bool | None = Field(None, description="For GPU nodes no other NVIDIADriver selects.")
    usePrecompiled: bool | None = None
    useOpenKernelModules: bool | None = Field(None, description="Deprecated: kernelModuleType.")
    kernelModuleType: Literal["auto", "open", "proprietary"] | None = None
    repository: str | None = None
    image: str | None = None
    version: str | None = None
    imagePullPolicy: str | None = None
    imagePullSecrets: list[str] | None = None
    manager: DriverManagerSpec | None = None
    resources: ResourceRequirements | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    startupProbe: ProbeSpec | None = None
    livenessProbe: ProbeSpec | None = None
    readinessProbe: ProbeSpec | None = None
    rdma: RdmaSpec | None = None
    gds: GDSSpec | None = None
    gdrcopy: GDRCopySpec | None = None
    repoConfig: NamedConfigMapRef | None = None
    certConfig: NamedConfigMapRef | None = None
    licensingConfig: NVIDIADriverLicensingConfig | None = None
    virtualTopologyConfig: NamedConfigMapRef | None = None
    kernelModuleConfig: NamedConfigMapRef | None = None
    secretEnv: str | None = None
    upgradePolicy: DriverUpgradePolicySpec | None = None
    nodeSelector: dict[str, str] | None = None
    nodeAffinity: FreeForm | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    priorityClassName: str | None = None
    podSecurityContext: FreeForm | None = None
    hostNetwork: bool | None = None


class NVIDIADriverStatus(_Model):
    state: Literal["ignored", "ready", "notReady", "disabled"] | None = None
    namespace: str | None = None
    conditions: list[Condition] | None = None


def parse_policy_spec(spec: dict[str, Any] | None) -> ClusterPolicySpec:
    """A ClusterPolicy's `.spec` (as the API server returns it) as a typed model."""
    return ClusterPolicySpec.model_validate(spec or {})


class PolicyFileError(loader.InputError):
    """A ClusterPolicy file the API server would refuse or prune: file, field, value, why."""


POLICY_API_VERSION = f"{GROUP}/{CLUSTER_POLICY_VERSION}"
_OBJECT_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")


def unknown_field_problem(spec: Any) -> str | None:
    """`field spec.X: why` for the first field of a `.spec` the schema lacks, or None."""
    unknown = unknown_fields(spec)
    if not unknown:
        return None
    more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
    return (
        f"field spec.{_bare(unknown[0])}: not a ClusterPolicy field; the API server would "
        f"refuse or drop it{more}"
    )


def _bare(text: str) -> str:
    return loader.excerpt(text)[1:-1]  # cut like a value, without its quotes


def policy_from_file(doc: Any, source: str) -> ClusterPolicySpec:
    """A ClusterPolicy read from a user's file, judged as the API server judges a create
    (kubectl validates strictly by default): a key outside the object's (`sepc:`), a field
    the schema does not define (`spec.migg`), or a value of the wrong type (`"yes"` for a
    boolean, `"3"` for an integer) is the file's error, never coerced or dropped."""
    obj = loader.require_mapping(doc, source, PolicyFileError, "a ClusterPolicy object")
    kind = obj.get("kind")
    if kind != "ClusterPolicy":
        raise PolicyFileError(
            f"{source}: field kind, value {loader.excerpt(kind)}: not a ClusterPolicy"
        )
    version = obj.get("apiVersion", POLICY_API_VERSION)
    if version != POLICY_API_VERSION:
        raise PolicyFileError(
            f"{source}: field apiVersion, value {loader.excerpt(version)}: "
            f"a ClusterPolicy is {POLICY_API_VERSION}"
        )
    for key in obj:
        if key not in _OBJECT_KEYS:
            raise PolicyFileError(
                f"{source}: field {_bare(str(key))}: not a field of a Kubernetes object "
                f"({', '.join(_OBJECT_KEYS)})"
            )
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise PolicyFileError(
            f"{source}: field spec, value {loader.excerpt(spec)}: expected a mapping"
        )
    if (problem := unknown_field_problem(spec)) is not None:
        raise PolicyFileError(f"{source}: {problem}")
    return loader.validate(
        ClusterPolicySpec,
        spec,
        source,
        PolicyFileError,
        lambda loc, data: loader.dotted(("spec", *loc)),
        strict=True,
    )


def parse_gpu_cluster_spec(spec: dict[str, Any] | None) -> GPUClusterSpec:
    """A GPUCluster's `.spec` (as the API server returns it) as a typed model."""
    return GPUClusterSpec.model_validate(spec or {})


def unknown_fields(data: Any) -> list[str]:
    """Paths in a ClusterPolicy's `.spec` that the schema does not define (the API server
    would prune them)."""
    return schema.unknown_fields(data, ClusterPolicySpec)
