"""Facts of Kubernetes DRA and NVIDIA's DRA driver: the releases, the feature gates each has, and what they exclude.

Sources (tags named beside each fact):
- Kubernetes: k8s.io/api resource/v1/types.go at v0.34.10 (``+featureGate=`` tags on DeviceClassSpec
  .ExtendedResourceName L1692, ExactDeviceRequest.Capacity L919, the partitionable-device fields L166-L327), the
  KEPs' stage tables (KEP-5004 DRAExtendedResource, KEP-5075 DRAConsumableCapacity, KEP-4815
  DRAPartitionableDevices) and kubernetes.io/docs/reference/command-line-tools-reference/feature-gates/.
- The driver: kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go at v0.4.0 and v0.4.1 (tags),
  and at 95932046 (VERSION v0.5.0-dev, the gates v0.5.0 shipped with: ConsumableShares); the mutually exclusive
  pairs are ``ValidateFeatureGates`` in the same file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: resource.k8s.io/v1 is served from this Kubernetes minor on (types.go ``prerelease-lifecycle-gen:introduced=1.34``).
MIN_KUBERNETES_MINOR = 34
DRIVER = "gpu.nvidia.com"
"""The driver name the GPU kubelet plugin publishes ResourceSlices under, and the key of its attributes."""
OPAQUE_API_VERSION = "resource.nvidia.com/v1beta1"
"""The driver's opaque config API (api/nvidia.com/resource/v1beta1/api.go GroupName, Version)."""
CHART = "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
#: The attributes the GPU kubelet plugin publishes under its own domain (v0.4.1 cmd/gpu-kubelet-plugin/deviceinfo.go
#: GpuInfo.Attributes and VfioDeviceInfo.GetDevice, mig.go CommonAttributesMig): a constraint on another name of
#: the domain (such as index, removed before v25.12.0) matches no device.
DEVICE_ATTRIBUTES = frozenset({
    "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion",
    "cudaDriverVersion", "addressingMode", "parentUUID", "profile", "deviceID", "vendorID", "numa", "iommuFDEnabled",
})
#: The capacities a claim may request of a device consumable shares publish (v0.5.0-dev 95932046
#: cmd/gpu-kubelet-plugin/consumable_shares.go: memory with a request policy; shares in the integer mode).
CONSUMABLE_CAPACITIES = ("memory", "shares")
"""The standalone chart since v0.4.0 (site/content/docs/upgrade.md)."""


@dataclass(frozen=True)
class KubernetesGate:
    """A Kubernetes feature gate a DRA feature needs: alpha (off) from ``alpha``, on by default from ``default_on``."""

    name: str
    alpha: int
    default_on: int
    feature: str


KUBERNETES_GATES: dict[str, KubernetesGate] = {g.name: g for g in (
    # KEP-5004: DeviceClass.spec.extendedResourceName; alpha 1.34, beta (on) 1.36.
    KubernetesGate("DRAExtendedResource", 34, 36,
                   "extendedResourceName, which lets pods ask for nvidia.com/gpu"),
    # KEP-5075: allowMultipleAllocations and capacity.requests, which the driver's ConsumableShares publishes.
    KubernetesGate("DRAConsumableCapacity", 34, 36,
                   "consumable capacity, which the driver's consumable shares publish"),
    # KEP-4815: shared counters, which the driver's DynamicMIG advertises every placement with.
    KubernetesGate("DRAPartitionableDevices", 33, 36,
                   "partitionable devices, which the driver's dynamic MIG advertises"),
)}


@dataclass(frozen=True)
class DriverGate:
    """A gate of the driver's kubelet plugin (Helm value featureGates), alpha and off unless said otherwise."""

    name: str
    since: tuple[int, int, int]
    """The first driver release (SemVer) that has the gate."""
    kubernetes: tuple[str, ...] = ()
    """Kubernetes gates it needs on the API server, scheduler and kubelet."""


DRIVER_GATES: dict[str, DriverGate] = {g.name: g for g in (
    DriverGate("TimeSlicingSettings", (0, 2, 0)),
    DriverGate("MPSSupport", (0, 2, 0)),
    DriverGate("PassthroughSupport", (0, 3, 0)),
    DriverGate("NVMLDeviceHealthCheck", (0, 3, 0)),
    DriverGate("DynamicMIG", (0, 3, 0), ("DRAPartitionableDevices",)),
    DriverGate("DeviceMetadata", (0, 4, 0)),
    DriverGate("ConsumableShares", (0, 5, 0), ("DRAConsumableCapacity",)),
)}

#: Gate pairs the kubelet plugin refuses to start with (featuregates.go ValidateFeatureGates at 95932046), and
#: MPS with consumable shares, which the plugin refuses at prepare (cmd/gpu-kubelet-plugin/sharing.go).
EXCLUSIVE_GATES: tuple[tuple[str, str, str], ...] = (
    ("DynamicMIG", "MPSSupport", "the plugin refuses to start with both"),
    ("DynamicMIG", "PassthroughSupport", "the plugin refuses to start with both"),
    ("DynamicMIG", "NVMLDeviceHealthCheck", "the plugin refuses to start with both"),
    ("PassthroughSupport", "NVMLDeviceHealthCheck", "the plugin refuses to start with both"),
    ("ConsumableShares", "MPSSupport", "the plugin refuses every MPS claim while consumable shares are on"),
)

#: Driver releases gpupolicy knows, oldest first: the tags of kubernetes-sigs/dra-driver-nvidia-gpu since the move
#: to SemVer (v0.4.0), and v0.5.0, which the GPU Operator v26.7.0 pins (draDriver.version).
RELEASES: tuple[str, ...] = ("v0.4.0", "v0.4.1", "v0.5.0")
DEFAULT_RELEASE = "v0.4.1"
_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)")


def version_tuple(tag: str) -> tuple[int, int, int]:
    match = _TAG.match(tag)
    if match is None:
        raise ValueError(f"{tag!r} is not a release tag")
    return int(match[1]), int(match[2]), int(match[3])


def first_release_with(gate: str) -> str:
    """The first release gpupolicy knows that has the gate (tag)."""
    since = DRIVER_GATES[gate].since
    return next(tag for tag in RELEASES if version_tuple(tag) >= since)


def has_gate(tag: str, gate: str) -> bool:
    return version_tuple(tag) >= DRIVER_GATES[gate].since


#: The API group gpupolicy names its DeviceClasses under (metadata.name is a DNS subdomain: types.go DeviceClass).
CLASS_DOMAIN = "gpupolicy.dev"
#: The extended resource a DeviceClass without extendedResourceName is asked for by (types.go
#: ResourceDeviceClassPrefix, "deviceclass.resource.kubernetes.io/"), with DRAExtendedResource on.
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def variant(mode: str, mig_profile: str | None) -> str:
    """What tells a node class's DeviceClasses apart: the mode, or the MIG profile ('+' is no DNS character)."""
    return mig_profile.replace("+", "-") if mig_profile else mode


def device_class_name(node_class: str, mode: str, mig_profile: str | None) -> str:
    """``h100.exclusive.gpupolicy.dev``, ``a100.1g.10gb.gpupolicy.dev``: one DeviceClass per class and variant."""
    return f"{node_class}.{variant(mode, mig_profile)}.{CLASS_DOMAIN}"


def implicit_resource(device_class: str) -> str:
    return IMPLICIT_PREFIX + device_class
