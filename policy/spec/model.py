"""The ClusterGPUPolicy spec: pydantic models of the one file a platform team reviews."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import PydanticCustomError

from policy.hardware import dra, sizing
from policy.kube import cron, quantity, selectors
from policy.kube.scheduling import NodeTaint
from policy.vgpu import hami

API_VERSION = "gpupolicy.dev/v1alpha1"
KIND = "ClusterGPUPolicy"

SharingMode = Literal["exclusive", "time-slicing", "mps", "mig", "vgpu"]
SHARING_MODES: tuple[SharingMode, ...] = ("exclusive", "time-slicing", "mps", "mig", "vgpu")
RuleMode = Literal["enforce", "warn", "audit"]
AdmissionEngine = Literal["webhook", "vap", "both"]
#: ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from this Kubernetes minor on.
VAP_MINOR = 30

DnsLabel = Annotated[
    str,
    # Lowercase RFC 1123 label, at most 40 characters so names derived from it stay within 63.
    StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40),
]
PluginVersion = Annotated[
    str,
    StringConstraints(pattern=r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$"),
    Field(description="Device-plugin release tag, e.g. v0.14.5 or v0.17.1."),
]
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=316)]
DeviceListStrategy = Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"]
# The plugin decodes replicas into a Go int (int64) and checks only replicas >= 2 (k8s-device-plugin
# api/config/v1/replicas.go, every release); a larger number fails to decode.
MAX_REPLICAS = 2**63 - 1

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _qualified_name(value: str) -> str:
    """apimachinery IsQualifiedName, as taint keys are validated (ValidateLabelName): an optional DNS-subdomain
    prefix of at most 253 characters and '/', then a name of at most 63 alphanumerics, '-', '_' or '.'."""
    prefix, slash, name = value.rpartition("/")
    problem = None
    if slash and not (prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix)):
        problem = f"the prefix {prefix!r} must be a DNS subdomain (lowercase, at most 253 characters)"
    elif not name or len(name) > 63 or not _QUALIFIED_NAME_PART.match(name):
        problem = (f"the name {name!r} must be 1 to 63 characters, alphanumeric at both ends, with only '-', '_' and "
                   "'.' between")
    if problem:
        raise PydanticCustomError("invalid-value", "{value} is not a qualified name: {problem}",
                                  {"value": repr(value), "problem": problem,
                                   "hint": "write a key such as dedicated or nvidia.com/gpu"})
    return value


QualifiedName = Annotated[str, AfterValidator(_qualified_name),
                          Field(description="A qualified name: [DNS-subdomain prefix/]name, e.g. nvidia.com/gpu.")]
MigProfileName = Annotated[
    str,
    StringConstraints(pattern=r"^(\d+c\.)?\d+g\.\d+gb([+-][a-z][a-z0-9]*(\.[a-z0-9]+)*(,[a-z][a-z0-9]*(\.[a-z0-9]+)*)*)?$"),
    Field(description="MIG profile as nvidia-smi names it, e.g. 1g.12gb, 3g.40gb, 1g.10gb+me."),
]


def _memory(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PydanticCustomError(
            "wrong-type", "expected a memory quantity such as 4621Mi or 48Gi", {"hint": "write e.g. 4621Mi"}
        )
    try:
        return sizing.parse_memory_mib(value)
    except ValueError as err:
        raise PydanticCustomError(
            "invalid-value", "{problem}", {"problem": str(err), "hint": "write a quantity such as 4621Mi or 48Gi"}
        ) from None


MemoryMiB = Annotated[
    str | int,
    AfterValidator(_memory),
    Field(description="Memory as a Kubernetes quantity (4621Mi, 4.5Gi, 48Gi) or a bare number of MiB."),
]


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as err:
        raise PydanticCustomError(
            "invalid-value", "{problem}",
            {"problem": f"{value!r} is not a CIDR block: {err}", "hint": "write e.g. 10.0.0.0/16 or 172.31.0.10/32"},
        ) from None


Cidr = Annotated[
    str,
    AfterValidator(_cidr),
    Field(description="An IPv4 or IPv6 CIDR block with no host bits set, e.g. 10.0.0.0/16 or 172.31.0.10/32."),
]


class Model(BaseModel):
    """Base of every spec model: strict, immutable, camelCase in YAML, snake_case in Python."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


class Metadata(Model):
    name: DnsLabel
    """Cluster name; it names the compiled tree and prefixes nothing else."""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels copied onto every generated object."""


class Toleration(Model):
    key: str | None = None
    """Taint key the toleration matches; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] = "Exists"
    """Exists matches any value; Equal needs value."""
    value: str | None = None
    """Taint value, for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate; empty tolerates every effect."""


class PluginFlags(Model):
    """Device-plugin flags written into every class's config file (flags section)."""

    fail_on_init_error: StrictBool = True
    """Crash the plugin when NVML cannot start (the plugin's default). TKE ships false."""
    pass_device_specs: StrictBool = False
    """Pass /dev/nvidia* device specs to containers; needed with the CPU manager."""
    device_list_strategy: DeviceListStrategy | Annotated[tuple[DeviceListStrategy, ...], Field(min_length=1)] = \
        "envvar"
    """How devices reach containers: one strategy, or a list of them (device plugin v0.14.0+); cdi-annotations
    needs v0.14.0, cdi-cri v0.15.0."""
    device_id_strategy: Literal["uuid", "index"] = "uuid"
    """Whether devices are passed by UUID or by index."""
    nvidia_driver_root: str = "/"
    """Where the driver is installed on the host (/run/nvidia/driver with the operator's driver container)."""

    @property
    def device_list_strategies(self) -> tuple[str, ...]:
        """deviceListStrategy as a list, whichever way the spec wrote it."""
        strategy = self.device_list_strategy
        return (strategy,) if isinstance(strategy, str) else strategy


OperatorVersion = Annotated[
    str,
    StringConstraints(pattern=r"^v\d+\.\d+\.\d+$"),
    Field(description="GPU Operator release tag, e.g. v25.3.0."),
]


class OperatorSettings(Model):
    """Where the GPU Operator lives, which release it is and who installed it (deploy: gpu-operator only)."""

    version: OperatorVersion | None = None
    """The GPU Operator release the cluster runs. Default: the newest release whose chart ships devicePlugin.version.
    What its ClusterPolicy CRD says of the fields gpupolicy writes (policy/hardware/operator.py) is what they are
    checked against."""
    installer: Literal["helm", "olm"] = "helm"
    """helm: the operator is a Helm release (helm, an Argo CD Application or a Flux HelmRelease render the chart), which
    owns the ClusterPolicy; the tree carries Helm values for that release and never writes the ClusterPolicy.
    olm: installed by OLM with a ClusterPolicy created by hand or by the console; the tree patches that object
    server-side."""
    cluster_policy_name: str | None = None
    """Name of the operator's ClusterPolicy (installer olm). Default: gpu-cluster-policy, the name the OpenShift console
    gives it."""
    namespace: DnsLabel = "gpu-operator"
    """Namespace the operator runs in; its device-plugin and MIG ConfigMaps go there."""

    @property
    def effective_cluster_policy_name(self) -> str:
        if self.cluster_policy_name:
            return self.cluster_policy_name
        return "cluster-policy" if self.installer == "helm" else "gpu-cluster-policy"


class MigManagerSettings(Model):
    """NVIDIA's MIG manager, which the tree runs per MIG class in standalone mode (the GPU Operator runs its own)."""

    image: str | None = None
    """MIG manager image. Default: the k8s-mig-manager release the GPU Operator shipped with devicePlugin.version."""
    with_reboot: StrictBool = False
    """Reboot the node when a MIG mode change does not take effect without one (most cloud VMs, where the GPU cannot
    be reset); the node is labelled nvidia.com/mig.config.state=rebooting first."""


#: Tolerations of the node agents gpupolicy runs (device plugins), so they run on tainted GPU nodes.
NODE_AGENT_TOLERATIONS = (
    Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
    Toleration(key="CriticalAddonsOnly", operator="Exists"),
)


class DevicePlugin(Model):
    deploy: Literal["standalone", "gpu-operator"] = "standalone"
    """standalone: one device-plugin DaemonSet per node class; gpu-operator: named configs for its config-manager."""
    version: PluginVersion = "v0.17.1"
    """Device-plugin release the configs are written for; it gates MPS, flags and formats."""
    image: str | None = None
    """Plugin image; defaults to nvcr.io/nvidia/k8s-device-plugin:<version> (standalone only)."""
    namespace: DnsLabel = "kube-system"
    """Namespace of the standalone DaemonSets and their ConfigMap."""
    priority_class_name: str = "system-node-critical"
    """Priority of the device-plugin pods (the upstream manifests use system-node-critical)."""
    tolerations: tuple[Toleration, ...] = NODE_AGENT_TOLERATIONS
    """Tolerations of the device-plugin pods, so they run on tainted GPU nodes."""
    gpu_feature_discovery: StrictBool | None = None
    """Whether GPU Feature Discovery runs with each class's config and labels the nodes (nvidia.com/gpu.product
    with -SHARED, nvidia.com/gpu.replicas, ...). Default: true with the GPU Operator, which runs it; false
    standalone. Standalone and true: the tree runs GFD per class with that class's config (Node Feature Discovery
    must run in the cluster to publish its labels). Admission and verify rely on it."""
    flags: PluginFlags = PluginFlags()
    """Plugin flags written into every class's config file."""
    operator: OperatorSettings = OperatorSettings()
    """Where the GPU Operator runs, its release and its installer (deploy: gpu-operator only)."""
    mig_manager: MigManagerSettings = MigManagerSettings()
    """The MIG manager the tree runs on MIG classes' nodes (standalone only)."""

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        major, minor, patch = self.version.lstrip("v").split("-")[0].split(".")
        return int(major), int(minor), int(patch)

    @property
    def labels_nodes(self) -> bool:
        """Whether GPU Feature Discovery's labels can be expected on the nodes."""
        if self.gpu_feature_discovery is not None:
            return self.gpu_feature_discovery
        return self.deploy == "gpu-operator"

    @property
    def effective_image(self) -> str:
        return self.image or f"nvcr.io/nvidia/k8s-device-plugin:{self.version}"


HamiVersion = Annotated[
    str,
    StringConstraints(pattern=r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$"),
    Field(description="HAMi release tag, e.g. v2.10.0."),
]
HamiResource = Annotated[
    str,
    # gpupolicy's webhook is sent only objects asking for nvidia.com/ resources (its matchConditions), and the
    # name after the slash is a Kubernetes qualified name (at most 63 characters).
    StringConstraints(pattern=r"^nvidia\.com/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"),
    Field(description="An extended resource name under nvidia.com/, e.g. nvidia.com/gpumem."),
]


DraGate = Literal[tuple(dra.DRIVER_GATES)]  # type: ignore[valid-type]
KubernetesDraGate = Literal[tuple(dra.KUBERNETES_GATES)]  # type: ignore[valid-type]


class Dra(Model):
    """NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) on the classes with allocation: dra: one Helm
    release, whose values the tree writes (dra/values.yaml), and the cluster's DRA feature gates."""

    version: Annotated[str, StringConstraints(pattern=r"^v\d+\.\d+\.\d+$")] = dra.DEFAULT_RELEASE
    """The driver release (and chart version) the output is written for; its feature gates decide which sharing
    modes a DRA class can use (docs/dra.md lists them)."""
    namespace: DnsLabel = "dra-driver-nvidia-gpu"
    """Namespace of the driver's Helm release (the chart refuses default)."""
    feature_gates: dict[DraGate, StrictBool] = Field(default_factory=dict)
    """Driver gates beyond those the classes' sharing needs (which the tree enables itself), e.g.
    {NVMLDeviceHealthCheck: true}; checked against the release and against each other."""
    kubernetes_feature_gates: tuple[KubernetesDraGate, ...] = ()
    """Alpha Kubernetes DRA gates the cluster's API server, scheduler and kubelets run with, below the release that
    turns them on by default (DRAExtendedResource and DRAConsumableCapacity: 1.36)."""


class HamiResourceNames(Model):
    """HAMi's five NVIDIA resource names (chart values resourceName, resourceMem, ...): one set per install."""

    count: HamiResource = hami.DEFAULT_COUNT
    """vGPUs per container, each on a different GPU; the only name the device plugin advertises. Rename it
    (e.g. nvidia.com/vgpu) to run HAMi beside NVIDIA-plugin classes for tenants that use both."""
    memory: HamiResource = hami.DEFAULT_MEMORY
    """MiB of GPU memory per vGPU."""
    memory_percentage: HamiResource = hami.DEFAULT_MEMORY_PERCENTAGE
    """Percent of the GPU's registered memory per vGPU."""
    cores: HamiResource = hami.DEFAULT_CORES
    """Percent of the GPU's SMs per vGPU."""
    priority: HamiResource = hami.DEFAULT_PRIORITY
    """Task priority: 0 high, 1 low."""

    @model_validator(mode="after")
    def _distinct(self) -> HamiResourceNames:
        names = [self.count, self.memory, self.memory_percentage, self.cores, self.priority]
        if len(set(names)) != len(names):
            raise PydanticCustomError("invalid-value", "HAMi's five resource names must differ (got {names})",
                                      {"names": ", ".join(names), "hint": "give each resource its own name"})
        return self

    @property
    def attributes(self) -> tuple[str, ...]:
        """The per-vGPU resources no node advertises: memory, memory percentage, cores, priority."""
        return (self.memory, self.memory_percentage, self.cores, self.priority)


class Hami(Model):
    """The HAMi install the vgpu classes run on: one scheduler, one webhook and one set of names per cluster.

    gpupolicy writes HAMi's device plugin (one DaemonSet per vgpu class) into the tree and a values file for
    HAMi's Helm chart, which installs the scheduler and webhook with its own device plugin switched off."""

    version: HamiVersion = hami.DEFAULT_VERSION
    """HAMi release (and Helm chart version) the output is written for; gpupolicy targets v2.10."""
    namespace: DnsLabel = "kube-system"
    """Namespace of the HAMi release, and of the device-plugin DaemonSets gpupolicy writes."""
    release_name: DnsLabel = "hami"
    """Helm release name of HAMi's chart: it names the scheduler's objects (hami-scheduler-device, ...)."""
    scheduler_name: DnsLabel = hami.DEFAULT_SCHEDULER_NAME
    """schedulerName HAMi's webhook writes into vGPU pods."""
    image: str | None = None
    """Device-plugin and vGPUmonitor image; defaults to docker.io/projecthami/hami:<version>."""
    resource_names: HamiResourceNames = HamiResourceNames()
    """HAMi's resource names (cluster-wide)."""
    memory_factor: StrictInt = Field(default=1, ge=1, le=1024)
    """nvidia.com/gpumem is multiplied by this before accounting (cluster-wide memoryFactor)."""
    default_memory: MemoryMiB | None = None
    """Memory a vGPU gets when the pod asks for neither gpumem nor a percentage (cluster-wide defaultMemory);
    unset: the whole GPU's memory."""
    default_cores: StrictInt = Field(default=0, ge=0, le=100)
    """Percent of SMs a vGPU gets when the pod does not say (cluster-wide defaultCores); 0: no SM limit."""
    default_gpu_num: StrictInt = Field(default=1, ge=0, le=64)
    """vGPUs HAMi's webhook adds to a container that asks only for memory or cores (cluster-wide defaultGPUNum);
    0 adds none, and such pods then stay Pending."""
    core_policy: hami.CorePolicy = "default"
    """How HAMi-core enforces gpucores (cluster-wide gpuCorePolicy): default (throttle only while the GPU is
    contended), force (always) or disable (never)."""
    priority_class_name: str = "system-node-critical"
    """Priority of the device-plugin pods (HAMi's chart uses system-node-critical)."""
    tolerations: tuple[Toleration, ...] = NODE_AGENT_TOLERATIONS
    """Tolerations of the device-plugin pods."""

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return hami.parse_version(self.version)

    @property
    def effective_image(self) -> str:
        return self.image or f"{hami.IMAGE_REPOSITORY}:{self.version}"

    @property
    def chart_version(self) -> str:
        """The chart's version: HAMi's chart is versioned with the release (charts/hami/Chart.yaml)."""
        return self.version.lstrip("v")

    @property
    def fullname(self) -> str:
        """The chart's object-name prefix: the release name if it contains hami, else <release>-hami
        (charts/hami/templates/_helpers.tpl hami-vgpu.fullname)."""
        return self.release_name if "hami" in self.release_name else f"{self.release_name}-hami"


class Gpu(Model):
    model: str = Field(min_length=1)
    """GPU model: the nvidia.com/gpu.product label (NVIDIA-L20, Tesla-T4) or an alias (L20, T4, H20)."""
    count: StrictInt = Field(ge=1, le=64)
    """Physical GPUs per node."""
    memory: MemoryMiB | None = None
    """Memory per GPU as the node reports it (nvidia.com/gpu.memory). Needed for models missing from the catalog."""
    driver_version: Annotated[str, StringConstraints(pattern=r"^\d{3}(\.\d+){0,2}$")] | None = None
    """NVIDIA driver on the class's nodes (nvidia.com/cuda.driver-version.full, e.g. 550.54.15, or a branch such as
    535): checked against what MIG profiles and sharing need."""


class Sizing(Model):
    memory_per_replica: MemoryMiB
    """Memory one replica's workload needs, measured (e.g. 4621Mi)."""
    reserve: Annotated[str, StringConstraints(pattern=r"^(\d+(\.\d+)?%|\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)?)$")] = "0%"
    """Memory kept free per GPU: a percentage of the total (10%) or a quantity (2Gi)."""


def _count_or_sizing(count: int | None, sizing_: Sizing | None, field: str) -> None:
    """A shared class gives its replicas (or vGPUs) per GPU, or sizing to derive them, never both or neither."""
    if (count is None) == (sizing_ is None):
        raise PydanticCustomError(
            "replicas-or-sizing",
            "give exactly one of {field} or sizing (got {got})",
            {"field": field, "got": "both" if count is not None else "neither",
             "hint": f"write {field}: N, or sizing: {{memoryPerReplica: ..., reserve: ...}}"},
        )


class ReplicatedSharing(Model):
    """Shared replicas per GPU: give replicas, or let sizing derive them from memory."""

    replicas: StrictInt | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """Replicas per GPU (at least 2 to share anything)."""
    sizing: Sizing | None = None
    """Derive replicas from memory: floor((GPU memory - reserve) / memoryPerReplica)."""
    rename_by_default: StrictBool = False
    """Advertise nvidia.com/gpu.shared instead of nvidia.com/gpu (the product label then keeps no -SHARED)."""
    fail_requests_greater_than_one: StrictBool = True
    """Reject a container that asks for more than one replica (kubelet UnexpectedAdmissionError)."""

    @model_validator(mode="after")
    def _replicas_or_sizing(self) -> ReplicatedSharing:
        _count_or_sizing(self.replicas, self.sizing, "replicas")
        return self


class TimeSlicing(ReplicatedSharing):
    pass


class Mps(ReplicatedSharing):
    pass


class Vgpu(Model):
    """HAMi vGPU: up to splitCount pods per GPU, each with a memory and SM limit HAMi-core enforces in software."""

    split_count: StrictInt | None = Field(default=None, ge=1, le=1024)
    """vGPUs per GPU: how many containers may share one GPU (HAMi deviceSplitCount)."""
    sizing: Sizing | None = None
    """Derive splitCount from memory, as for time-slicing: floor((GPU memory - reserve) / memoryPerReplica)."""
    memory_scaling: StrictFloat = Field(default=1.0, gt=0, le=100)
    """Registered memory per GPU = physical memory x this (HAMi deviceMemoryScaling); above 1 over-commits
    memory in HAMi's accounting only: allocations beyond the physical memory still fail."""
    core_scaling: StrictFloat = Field(default=1.0, gt=0, le=100)
    """Registered SM share per GPU = 100% x this (HAMi deviceCoreScaling); above 1 lets gpucores add up past 100."""
    core_policy: hami.CorePolicy | None = None
    """How gpucores is enforced on this class; default: spec.hami.corePolicy. Only disable can differ from the
    cluster's default policy (it is set per class in the device plugin's config)."""

    @model_validator(mode="after")
    def _split_count_or_sizing(self) -> Vgpu:
        _count_or_sizing(self.split_count, self.sizing, "splitCount")
        return self


class MigGroup(Model):
    gpus: tuple[Annotated[StrictInt, Field(ge=0)], ...] | Literal["all"]
    """GPU indices this layout applies to, or all."""
    layout: dict[MigProfileName, Annotated[StrictInt, Field(ge=1, le=7)]] = Field(min_length=1)
    """Profile counts per GPU of this group."""


class Mig(Model):
    strategy: Literal["single", "mixed"] = "mixed"
    """single: every MIG device is nvidia.com/gpu; mixed: one nvidia.com/mig-<profile> resource per profile."""
    layout: dict[MigProfileName, Annotated[StrictInt, Field(ge=1, le=7)]] | None = None
    """Profile counts per GPU, applied to every GPU of the node."""
    groups: tuple[MigGroup, ...] | None = None
    """Per-GPU-group layouts, instead of one layout for all GPUs."""
    time_slicing: dict[MigProfileName, Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)]] = Field(default_factory=dict)
    """Time-slicing replicas on top of MIG profiles, e.g. {1g.12gb: 2}."""
    fail_requests_greater_than_one: StrictBool = True
    """Reject a container that asks for more than one replica of a time-sliced MIG profile."""

    @model_validator(mode="after")
    def _layout_or_groups(self) -> Mig:
        if (self.layout is None) == (self.groups is None):
            raise PydanticCustomError(
                "layout-or-groups",
                "give exactly one of layout or groups (got {got})",
                {"got": "both" if self.layout is not None else "neither"},
            )
        return self

    def layouts(self, gpu_count: int) -> tuple[tuple[tuple[int, ...], dict[str, int]], ...]:
        """(GPU indices, profile counts) for every group; a plain layout covers all GPUs."""
        if self.layout is not None:
            return ((tuple(range(gpu_count)), dict(self.layout)),)
        assert self.groups is not None
        return tuple(
            (tuple(range(gpu_count)) if g.gpus == "all" else tuple(g.gpus), dict(g.layout)) for g in self.groups
        )


def _exclusive_schema(schema: dict[str, Any]) -> None:
    original = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"const": "exclusive", "type": "string"}, original]
    schema["description"] = "exclusive (whole GPUs), or exactly one of timeSlicing, mps, mig, vgpu."


class Sharing(Model):
    """How a class's GPUs are shared: `exclusive`, or one of timeSlicing, mps, mig, vgpu."""

    model_config = ConfigDict(json_schema_extra=_exclusive_schema)

    time_slicing: TimeSlicing | None = None
    """Time-slicing: several pods take turns on each GPU (no memory or fault isolation)."""
    mps: Mps | None = None
    """MPS: pods run concurrently on each GPU with a memory limit per client (device plugin v0.15+)."""
    mig: Mig | None = None
    """MIG: each GPU is cut into hardware-isolated instances (Ampere and Hopper data-center GPUs)."""
    vgpu: Vgpu | None = None
    """vGPU (Project-HAMi): several pods per GPU, each with a software memory and SM limit."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if value == "exclusive":
            return {}
        if isinstance(value, str):
            raise PydanticCustomError(
                "invalid-value",
                "sharing must be exclusive or a mapping with one of timeSlicing, mps, mig, vgpu (got '{got}')",
                {"got": value, "hint": "write sharing: exclusive, or sharing: {timeSlicing: {replicas: 4}}"},
            )
        return value

    @model_validator(mode="after")
    def _one_mode(self) -> Sharing:
        given = [name for name in ("timeSlicing", "mps", "mig", "vgpu") if getattr(self, to_snake(name)) is not None]
        if {"mps", "mig"} <= set(given):
            raise PydanticCustomError(
                "sharing-modes-conflict",
                "MPS cannot share MIG devices (the device plugin refuses: sharing using MPS is not supported "
                "for MIG devices)",
            )
        if len(given) > 1:
            raise PydanticCustomError(
                "sharing-modes-conflict",
                "give one sharing mode per class, not {given}",
                {"given": " and ".join(given)},
            )
        return self

    @property
    def mode(self) -> SharingMode:
        if self.time_slicing is not None:
            return "time-slicing"
        if self.mps is not None:
            return "mps"
        if self.mig is not None:
            return "mig"
        if self.vgpu is not None:
            return "vgpu"
        return "exclusive"


class Taint(Model):
    """A taint every node of the class carries (kubectl taint nodes ... key=value:effect)."""

    key: QualifiedName
    """Taint key, e.g. dedicated or nvidia.com/gpu."""
    value: LabelValue = ""
    """Taint value; may be empty."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    """NoSchedule and NoExecute keep pods that do not tolerate the taint off the nodes; PreferNoSchedule only
    discourages the scheduler, so admission does not count it."""

    def describe(self) -> str:
        """``dedicated=train:NoSchedule``, as kubectl writes a taint."""
        return NodeTaint(self.key, self.value, self.effect).describe()


def _unique_taints(taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
    seen: set[tuple[str, str]] = set()
    for taint in taints:
        if (taint.key, taint.effect) in seen:
            # pkg/apis/core/validation validateNodeTaints refuses the node otherwise.
            raise PydanticCustomError("invalid-value", "taints must be unique by key and effect pair (got {taint} "
                                      "twice)", {"taint": f"{taint.key}:{taint.effect}",
                                                 "hint": "keep one taint per key and effect"})
        seen.add((taint.key, taint.effect))
    return taints


class NodeClass(Model):
    name: DnsLabel
    """Class name; it names the device-plugin config key and the DaemonSet."""
    node_selector: dict[LabelKey, LabelValue] = Field(min_length=1)
    """Labels the class's nodes already carry (instance type, pool); classes must not overlap."""
    nodes: StrictInt | None = Field(default=None, ge=0)
    """Number of nodes in the class, for the capacity report only."""
    gpu: Gpu
    """The GPUs every node of the class has: one model, a count per node."""
    sharing: Sharing = Sharing()
    """How the class's GPUs are shared; exclusive when left out."""
    description: str = ""
    """Free text shown in the capacity report."""
    taints: Annotated[tuple[Taint, ...], AfterValidator(_unique_taints)] = ()
    """Taints the class's nodes carry. Admission counts the class as a place a pod may land only if the pod
    tolerates every NoSchedule and NoExecute taint of it; the class's device-plugin pods tolerate them."""
    allocation: Literal["device-plugin", "dra"] = "device-plugin"
    """How pods get the class's GPUs: device-plugin (extended resources such as nvidia.com/gpu, served by the device
    plugin or HAMi), or dra (Dynamic Resource Allocation through NVIDIA's DRA driver, spec.dra: pods ask with
    ResourceClaims for the DeviceClasses the tree compiles, Kubernetes 1.34+; docs/dra.md)."""

    @property
    def mig_strategy(self) -> Literal["none", "single", "mixed"]:
        """The device plugin's migStrategy for this class's nodes."""
        return self.sharing.mig.strategy if self.sharing.mig is not None else "none"


class LabelSelectorRequirement(Model):
    key: LabelKey
    """Label key the requirement is about."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the label's value relates to values."""
    values: tuple[str, ...] = ()
    """Values for In and NotIn; empty for Exists and DoesNotExist."""


class LabelSelector(Model):
    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels that must all be present with these values."""
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()
    """Further requirements, all of which must hold."""

    def requirements(self) -> tuple[selectors.Requirement, ...]:
        """The selector as one conjunction of requirements (matchLabels first)."""
        return selectors.requirements_from(self.match_labels,
                                           [(e.key, e.operator, e.values) for e in self.match_expressions])


class Tenant(Model):
    name: DnsLabel
    """Tenant name; it names the tenant's webhook entry and appears in denial messages."""
    namespace_selector: LabelSelector
    """Namespaces that belong to this tenant, by their labels (kubernetes.io/metadata.name works)."""
    allow: tuple[SharingMode, ...] = Field(min_length=1)
    """Sharing modes this tenant's pods may land on."""
    classes: tuple[DnsLabel, ...] = ()
    """If set, the only node classes this tenant may use."""
    production: StrictBool = False
    """Marks latency-sensitive production tenants (explain advises on isolation)."""


RuleId = Literal[
    "gpu-request-invalid",
    "gpu-request-unsatisfiable",
    "shared-gpu-request-above-one",
    "tenant-sharing-mode-denied",
    "mig-strategy-mismatch",
    "hami-scheduler-bypassed",
    "vgpu-memory-unsatisfiable",
    "vgpu-count-above-gpus",
    "hami-resource-out-of-range",
    "hami-privileged-container",
    "hami-annotation-invalid",
    "kai-annotation-invalid",
]


class Certificates(Model):
    source: Literal["cert-manager", "secret"] = "cert-manager"
    """cert-manager issues and rotates the serving certificate and injects the CA; secret uses an existing Secret."""
    secret_name: str = "gpupolicy-webhook-tls"
    """The Secret holding tls.crt and tls.key (written by cert-manager, or by you)."""
    ca_bundle: str | None = None
    """Base64 PEM CA bundle for source: secret (kept out of Git if empty: patch it in your overlay)."""


GitOpsTool = Literal["argocd", "flux", "none"]
# Kubernetes puts no limit on user and group names beyond their being strings; a bound keeps the compiled CEL
# literals and the cost estimate finite. Field managers are at most 128 characters (apimachinery
# ValidateFieldManager).
Identity = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^\S(.*\S)?$")]
FieldManager = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# A namespace name (RFC 1123 label, 63 characters) and a service account name (an RFC 1123 subdomain).
NamespaceName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
SubdomainName = Annotated[str, StringConstraints(
    pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253)]


class ServiceAccountRef(Model):
    """A service account, whose requests the API server attributes to system:serviceaccount:<namespace>:<name>."""

    namespace: NamespaceName
    """The service account's namespace. Whoever may run pods or mint tokens there acts as it: name only service
    accounts of namespaces tenants can neither create nor write to (docs/security.md)."""
    name: SubdomainName
    """The service account's name."""


class TenancyManagers(Model):
    """Who may add, change or remove the namespace labels that select tenants, beside system:masters (always) and
    the GitOps tool's controller (admission.tenancy.gitOps)."""

    users: tuple[Identity, ...] = ()
    """Usernames as the API server authenticates them (request.userInfo.username), e.g. a platform engineer's
    OIDC subject or system:serviceaccount:<namespace>:<name>."""
    groups: tuple[Identity, ...] = ()
    """Groups as the API server authenticates them (request.userInfo.groups), e.g. platform-admins. system:masters
    is always a manager: its members may delete the guard itself."""
    service_accounts: tuple[ServiceAccountRef, ...] = ()
    """Service accounts that apply namespaces: a GitOps controller installed elsewhere than where gitOps expects it
    (OpenShift GitOps: openshift-gitops/openshift-gitops-argocd-application-controller), or the service account a
    Flux Kustomization or an Argo CD project impersonates."""
    field_managers: tuple[FieldManager, ...] = ()
    """Field managers the managers write namespace labels as (metadata.managedFields[].manager: a server-side
    apply's fieldManager, else the writer's user agent such as kubectl-label), beside the GitOps tool's.
    gpupolicy admit reports a tenant label some other field manager set."""


class Tenancy(Model):
    """Who may move a namespace between tenants. Tenants select namespaces by their labels, so whoever may set
    those labels chooses a namespace's tenant: the tree holds a ValidatingAdmissionPolicy (Kubernetes 1.30+) that
    lets only the managers add, change or remove them (docs/security.md)."""

    git_ops: GitOpsTool | None = None
    """The GitOps tool that applies the cluster's namespaces; its controller becomes a manager. argocd: the service
    account argocd/argocd-application-controller, writing as field managers argocd-controller and
    argocd-application-controller; flux: flux-system/kustomize-controller, writing as kustomize-controller; none:
    no GitOps tool labels namespaces, only the managers listed. Unset is a warning where the guard is compiled,
    since a GitOps tool left out could not apply a namespace's tenant labels."""
    managers: TenancyManagers = TenancyManagers()
    """Further users, groups and service accounts that may set the tenant labels."""


_FIELD_PATH = r"[A-Za-z_][A-Za-z0-9_-]*(\[\*\])?|\*"
_PATH_PATTERN = rf"^({_FIELD_PATH})(\.({_FIELD_PATH}))*$"
_RELATIVE_PATTERN = rf"^(\.|({_FIELD_PATH})(\.({_FIELD_PATH}))*)$"


def _field_pattern(pattern: str, relative: bool) -> Any:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if len(value) > 512 or not compiled.match(value):
            raise PydanticCustomError(
                "invalid-value", "{value} is not a field path: dotted field names, where name[*] walks every item of "
                "a list and * every value of a map{dot}",
                {"value": repr(value[:80]), "dot": "; . is the template itself" if relative else "",
                 "hint": "write e.g. spec.workerGroupSpecs[*].template.spec or spec.pytorchReplicaSpecs.*.template"
                         ".spec" + (" (relative to the template: container, containerSet.containers[*])"
                                    if relative else "")})
        return value
    return AfterValidator(check)


FieldPattern = Annotated[
    str, _field_pattern(_PATH_PATTERN, relative=False),
    Field(description="A dotted field path; name[*] walks every item of a list, * every value of a map, e.g. "
                      "spec.workerGroupSpecs[*].template.spec or spec.pytorchReplicaSpecs.*.template.spec.",
          json_schema_extra={"pattern": _PATH_PATTERN}),
]
RelativePattern = Annotated[
    str, _field_pattern(_RELATIVE_PATTERN, relative=True),
    Field(description="A field path relative to the pod template, as FieldPattern; . is the template itself.",
          json_schema_extra={"pattern": _RELATIVE_PATTERN}),
]


class ContainerRef(Model):
    """A single container a workload kind writes outside the pod spec's containers list (KServe's
    predictor.model, Argo's template.container), read as one more container of the pod."""

    path: RelativePattern
    """Where the container is, relative to the template (. for the template itself)."""
    name: str = ""
    """The name its controller gives the container when it has none (Argo: main)."""
    resources: str = "resources"
    """The field holding its limits and requests (Kubeflow TrainJob: resourcesPerNode)."""
    init: StrictBool = False
    """An init container (it runs before the others)."""


class GpuKey(Model):
    """A custom field that asks for GPUs (NVIDIA Dynamo's resources.limits.gpu: "4")."""

    path: RelativePattern
    """Where the amount is, relative to the template."""
    resource: QualifiedName = "nvidia.com/gpu"
    """The extended resource the controller turns the amount into."""
    field: Literal["limits", "requests"] = "limits"
    """Whether the controller writes the amount as a limit or a request of the pod's container."""
    meaning: str = ""
    """What the key means, in the project's words (shown in docs and messages)."""


class PodTemplateRef(Model):
    """One place a workload kind carries a pod template."""

    path: FieldPattern
    """Where the template is in the object."""
    pod_spec: RelativePattern = "."
    """Where the pod spec fields (containers, nodeSelector, affinity, tolerations, nodeName) are, relative to the
    template."""
    containers: tuple[ContainerRef, ...] = ()
    """Containers written outside the pod spec's containers and initContainers lists."""
    pod_spec_patch: RelativePattern | None = None
    """A string field holding a patch of the pod spec as JSON or YAML (Argo's podSpecPatch), merged in: its
    containers by name, its nodeSelector by key, its tolerations replacing the pod's (core/v1 PodSpec.tolerations
    has no patch strategy)."""
    gpu_keys: tuple[GpuKey, ...] = ()
    """Custom fields that ask for GPUs."""
    spec_fields: tuple[Annotated[str, StringConstraints(pattern=r"^[a-z][A-Za-z]*$")], ...] | None = None
    """The pod spec fields written at podSpec itself (Argo's template: nodeSelector, affinity, tolerations,
    ...), where it is not a whole pod spec; omit for a whole PodSpec. The Pod judged is built from these alone, and
    a fix is given as a JSON Patch only where the fields it edits are among them."""


class WorkloadKind(Model):
    """A custom resource whose objects carry pod templates inline: checked at apply time, template by template."""

    group: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)]
    """The API group, e.g. serving.kserve.io."""
    kind: Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=63)]
    """The kind, e.g. InferenceService."""
    resource: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
    """The plural resource name the webhook and the ValidatingAdmissionPolicy match, e.g. inferenceservices."""
    versions: tuple[Annotated[str, StringConstraints(pattern=r"^v[0-9]+((alpha|beta)[0-9]+)?$")], ...] = \
        Field(min_length=1)
    """The API versions to match."""
    templates: tuple[PodTemplateRef, ...] = Field(min_length=1)
    """Every place the kind carries a pod template."""
    source: str = ""
    """Where the kind's API is defined (repository, path, tag)."""


class Admission(Model):
    enabled: StrictBool = True
    """Compile the webhook's manifests into the tree."""
    enforcement: RuleMode = "enforce"
    """Default mode of every rule: enforce denies, warn returns warnings, audit adds audit annotations."""
    rules: dict[RuleId, RuleMode] = Field(default_factory=dict)
    """Per-rule mode overrides."""
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    """What the API server does when the webhook cannot answer: Fail rejects (GPU objects only, thanks to
    matchConditions), Ignore admits unchecked."""
    timeout_seconds: StrictInt = Field(default=3, ge=1, le=30)
    """How long the API server waits for a verdict."""
    replicas: StrictInt = Field(default=3, ge=1, le=20)
    """Webhook pods, spread over nodes and zones."""
    namespace: DnsLabel = "gpupolicy-system"
    """Namespace of the webhook; it is never sent to the webhook itself."""
    image: str = "ghcr.io/gpupolicy/gpupolicy-webhook:0.1.0"
    """The webhook image (built from the repository's Dockerfile)."""
    certificates: Certificates = Certificates()
    """Where the webhook's serving certificate comes from."""
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    """Namespaces never sent to the webhook (its own namespace is always added)."""
    default_allow: tuple[SharingMode, ...] = SHARING_MODES
    """Sharing modes for namespaces no tenant selects."""
    node_cache: StrictBool = True
    """Give the webhook a node cache (get, list and watch on nodes, egress to the API server), so a pod naming its
    node (spec.nodeName) is judged on exactly that node's classes; false: no RBAC, no egress, and such a pod is
    judged on every class it may reach (docs/admission.md §5)."""
    api_server_cidrs: tuple[Cidr, ...] = ()
    """Where the API server's calls come from. When set, the NetworkPolicy admits only these blocks to the
    serving port (probes from the node are always allowed); empty admits any source. docs/operations.md
    shows how to find them on EKS, GKE, AKS, kubeadm, kind and TKE."""
    engine: AdmissionEngine | None = None
    """Who enforces the rules: webhook (the server), vap (ValidatingAdmissionPolicy: CEL inside the API server,
    nothing to run, a subset of the checks), or both (the VAP holds the core rules even while the webhook is down).
    Default: both from Kubernetes 1.30 (VAP GA), webhook below."""
    tenancy: Tenancy = Tenancy()
    """Who may set the namespace labels the tenants' selectors read, and so move a namespace between tenants."""
    workload_kinds: tuple[WorkloadKind, ...] = ()
    """Custom resources that carry pod templates, beyond the built-in table (docs/admission.md): each is checked
    template by template at apply time, and the webhook and the ValidatingAdmissionPolicy match it. An entry with
    the group and kind of a built-in one replaces it."""


def _percent(value: str) -> str:
    try:
        sizing.parse_percent(value)
    except ValueError as err:
        raise PydanticCustomError("invalid-value", "{problem}",
                                  {"problem": str(err), "hint": "write e.g. 90%"}) from None
    return value


Percent = Annotated[
    str,
    StringConstraints(pattern=r"^\d+(\.\d+)?%$"),
    AfterValidator(_percent),
]
"""A percentage from 0% to below 100%, e.g. 90% (each field's own docstring describes it)."""


class Dashboard(Model):
    enabled: StrictBool = True
    """Compile the Grafana dashboard (a ConfigMap the Grafana sidecar loads)."""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=lambda: {"grafana_dashboard": "1"})
    """Labels the Grafana sidecar selects dashboard ConfigMaps by (kube-prometheus-stack: grafana_dashboard=1)."""
    annotations: dict[LabelKey, str] = Field(default_factory=dict)
    """Annotations of the dashboard ConfigMap, e.g. the sidecar's folder annotation."""


class DcgmExporter(Model):
    enabled: StrictBool = True
    """dcgm-exporter runs on the GPU nodes: compile the GPU memory and SM activity alerts and panels."""
    per_pod_metrics: StrictBool = False
    """dcgm-exporter 4.5.3-4.8.2 or newer runs with KUBERNETES_VIRTUAL_GPUS=true and hostPID, so it reports
    memory and SM utilization per pod on shared GPUs: compile the per-pod alerts (a pod over its slot's memory
    budget, a pod starving the others)."""


class Thresholds(Model):
    memory_pressure: Percent = "90%"
    """Device memory in use, of a shared GPU or MIG instance, above which its pods risk running out; for classes
    whose sizing gives a reserve the threshold is 100% minus the reserve instead."""
    pod_compute_share: Percent = "80%"
    """SM utilization of one pod on a GPU it shares with others above which it starves them (per-pod metrics)."""
    idle_memory: Percent = "50%"
    """Device memory in use above which an idle GPU counts as wasted (busy memory, idle SMs)."""
    idle_sm_activity: Percent = "5%"
    """Average SM activity over an hour below which a GPU holding memory counts as idle."""
    webhook_latency: Annotated[str, StringConstraints(pattern=r"^[1-9]\d*(ms|s)$")] = "500ms"
    """p99 admission latency, as the API server measures it, above which the webhook counts as slow."""


class Monitoring(Model):
    enabled: StrictBool = False
    """Compile recording rules, alerts and a Grafana dashboard for this policy into monitoring/ (needs the
    Prometheus Operator's CRDs)."""
    namespace: DnsLabel | None = None
    """Namespace of the PrometheusRule and the dashboard ConfigMap; default: the webhook's namespace."""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=lambda: {"release": "kube-prometheus-stack"})
    """Labels the Prometheus Operator selects PrometheusRules and ServiceMonitors by (kube-prometheus-stack:
    release=<Helm release>); a rule Prometheus does not select applies cleanly and is never loaded."""
    runbook_url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s#]+$")] = (
        "https://github.com/gpupolicy/gpupolicy/blob/main/docs/runbooks.md")
    """Where the alerts' runbook_url annotations point; each alert links to #<alert name in lowercase>."""
    dashboard: Dashboard = Dashboard()
    """The Grafana dashboard: one row per node class."""
    dcgm_exporter: DcgmExporter = DcgmExporter()
    """What NVIDIA's dcgm-exporter reports on this cluster's GPU nodes."""
    thresholds: Thresholds = Thresholds()
    """Alert thresholds the spec's own figures (sizing, reserve, replicas) do not decide."""


def _schedule(value: str) -> str:
    problem = cron.schedule_problem(value)
    if problem:
        raise PydanticCustomError("invalid-value", "{value} is not a CronJob schedule: {problem}",
                                  {"value": repr(value), "problem": problem,
                                   "hint": "write five fields, minute hour day-of-month month day-of-week, e.g. "
                                           "'17 * * * *' (hourly at :17), or @hourly"})
    return value


#: A CronJob schedule as the API server accepts it: five cron fields or a descriptor (@hourly).
CronSchedule = Annotated[str, AfterValidator(_schedule)]


def _resource_quantity(value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PydanticCustomError("wrong-type", "expected a quantity such as 100m or 256Mi",
                                  {"hint": "write e.g. 500m (CPU) or 512Mi (memory)"})
    found = quantity.read_quantity(value)
    if isinstance(found, quantity.Unreadable) or found <= 0:
        raise PydanticCustomError("invalid-value", "{value} is not a positive quantity",
                                  {"value": repr(value), "hint": "write e.g. 500m (CPU) or 512Mi (memory)"})
    return value


ResourceQuantity = Annotated[
    str | int, AfterValidator(_resource_quantity),
    Field(description="A positive Kubernetes quantity, e.g. 100m (CPU) or 256Mi (memory)."),
]
ComputeResource = Literal["cpu", "memory"]


class AuditResources(Model):
    """The audit container's requests and limits; the defaults are sized from bench/audit_bench.py's run on 5,000
    pods (docs/audit.md#sizing-the-cronjob)."""

    requests: dict[ComputeResource, ResourceQuantity] = {"cpu": "100m", "memory": "256Mi"}
    """What the scheduler reserves for the audit pod."""
    limits: dict[ComputeResource, ResourceQuantity] = {"memory": "512Mi"}
    """The most it may use: past the memory limit the kernel kills it (OOMKilled); no CPU limit by default, so a
    large cluster's audit runs longer instead of being throttled."""

    @model_validator(mode="after")
    def _limits_above_requests(self) -> AuditResources:
        for name, limit in self.limits.items():
            request = self.requests.get(name)
            if request is not None and quantity.read_quantity(limit) < quantity.read_quantity(request):  # type: ignore[operator]
                raise PydanticCustomError(
                    "invalid-value", "the {name} limit {limit} is below its request {request} (the API server "
                    "refuses such a pod)", {"name": name, "limit": str(limit), "request": str(request),
                                            "hint": f"raise limits.{name} to at least {request}, or lower the request"})
        return self


AuditFormat = Literal["policy-report", "openreports"]


class ClusterAudit(Model):
    """An in-cluster audit: a CronJob that runs `gpupolicy cluster audit --write-reports` on a schedule."""

    enabled: StrictBool = False
    """Compile the audit's CronJob, its RBAC and the spec it reads into audit/ (needs the report CRDs: wg-policy's
    or OpenReports', e.g. from Policy Reporter or Kyverno)."""
    schedule: CronSchedule = "17 * * * *"
    """When it runs: a CronJob schedule (five cron fields, or a descriptor such as @hourly), in the controller
    manager's time zone; hourly by default, at a minute off the hour, when other CronJobs crowd the API server."""
    format: AuditFormat = "policy-report"
    """The reports it writes: wgpolicyk8s.io/v1alpha2 PolicyReports (policy-report) or openreports.io/v1alpha1
    Reports (openreports)."""
    fail_only: StrictBool = False
    """Leave passing workloads out of the reports' results (the summaries still count them)."""
    max_results: StrictInt = Field(default=500, ge=0, le=1000)
    """Results per report; the rest are counted in the summary. At about 1 KiB a result, 1,000 keep a report below
    kube-apiserver's 1.5 MiB request limit, which a larger report would fail to be written past."""
    resources: AuditResources = AuditResources()
    """The audit container's requests and limits."""
    image: str | None = None
    """The image with the gpupolicy command line; default: the webhook's (admission.image)."""
    namespace: DnsLabel | None = None
    """Where the CronJob, its ServiceAccount and the spec's ConfigMap live; default: the webhook's namespace."""
    active_deadline_seconds: StrictInt = Field(default=900, ge=60, le=86400)
    """A run still going after this long is stopped (a hung API connection must not hold the next runs off)."""


class Spec(Model):
    kubernetes_version: Annotated[str, StringConstraints(pattern=r"^1\.\d+$")] = "1.30"
    """Oldest Kubernetes minor version the output must run on (manifests are validated against it)."""
    device_plugin: DevicePlugin = DevicePlugin()
    """How the NVIDIA device plugin is deployed, and which release."""
    node_classes: tuple[NodeClass, ...] = Field(min_length=1)
    """Every kind of GPU node, each selected by labels its nodes already carry."""
    tenants: tuple[Tenant, ...] = ()
    """Who may use which sharing modes, by namespace."""
    admission: Admission = Admission()
    """The validating webhook that enforces this policy at pod admission."""
    hami: Hami = Hami()
    """The HAMi install vgpu classes run on (read only when a class uses vgpu)."""
    dra: Dra = Dra()
    """NVIDIA's DRA driver, which serves the classes with allocation: dra (read only when a class uses it)."""
    monitoring: Monitoring = Monitoring()
    """Prometheus rules and a Grafana dashboard that watch the cluster against this policy."""
    audit: ClusterAudit = ClusterAudit()
    """An in-cluster audit on a schedule: every running GPU workload judged by this policy, written as
    PolicyReports (opt-in)."""
    create_namespaces: StrictBool = True
    """Write a Namespace for every namespace the tree's objects live in but Kubernetes' own and the GPU Operator's
    (the device plugin's, the webhook's, HAMi's), with the Pod Security level its pods need, never pruned. false where
    namespaces are managed elsewhere: each must then exist with that level before the tree is applied (REPORT.md
    lists them)."""

    @property
    def kubernetes_minor(self) -> int:
        """The minor of kubernetesVersion (30 for "1.30")."""
        return int(self.kubernetes_version.split(".")[1])

    @property
    def admission_engine(self) -> AdmissionEngine:
        """admission.engine, or its default for kubernetesVersion: both where VAP is GA, webhook below."""
        if self.admission.engine is not None:
            return self.admission.engine
        return "both" if self.vap_available else "webhook"

    @property
    def vap_available(self) -> bool:
        """The API server has ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA from 1.30): the one
        version gate of gpupolicy's policies and of the node-label reconciler's."""
        return self.kubernetes_minor >= VAP_MINOR

    @property
    def audit_namespace(self) -> str:
        """audit.namespace, or the webhook's namespace."""
        return self.audit.namespace or self.admission.namespace

    @property
    def audit_image(self) -> str:
        """audit.image, or the webhook's image (the same command line runs the audit)."""
        return self.audit.image or self.admission.image

    @property
    def runs_webhook(self) -> bool:
        """The webhook server runs: admission on, and not compiled to ValidatingAdmissionPolicies alone."""
        return self.admission.enabled and self.admission_engine != "vap"

    @property
    def operator_mig_strategy(self) -> Literal["none", "single", "mixed"]:
        """The GPU Operator's one cluster-wide mig.strategy: the MIG classes' strategy (mixed if they differ).

        It reaches every plugin pod as MIG_STRATEGY env, and env beats the config file (device-plugin.md §7);
        single and mixed both leave full GPUs as nvidia.com/gpu, so only the MIG classes decide it."""
        strategies = sorted({nc.mig_strategy for nc in self.node_classes} - {"none"})
        if not strategies:
            return "none"
        return strategies[0] if len(strategies) == 1 else "mixed"  # type: ignore[return-value]


class ClusterGPUPolicy(Model):
    """A cluster's GPU-sharing policy: node classes, sharing modes, tenants and admission."""

    api_version: Literal["gpupolicy.dev/v1alpha1"]
    """Always gpupolicy.dev/v1alpha1."""
    kind: Literal["ClusterGPUPolicy"]
    """Always ClusterGPUPolicy."""
    metadata: Metadata
    """The cluster's name and labels."""
    spec: Spec
    """Node classes, device plugin, tenants and admission."""
