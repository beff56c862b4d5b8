"""GPU facts read off cluster records: GPU Feature Discovery labels, extended resources, device-plugin pods."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cluster.resources import NVIDIA_PREFIX, Container, DaemonSet, Node, NodeTaint, Pod
from policy.hardware.labels import DRIVER_VERSION_FULL, DRIVER_VERSION_PARTS
from policy.hardware.labels import MIG_CONFIG_STATE as MIG_CONFIG_STATE
from policy.vgpu import hami

PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
PRESENT = "nvidia.com/gpu.present"
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_STRATEGY = "nvidia.com/mig.strategy"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SHARED_SUFFIX = "-SHARED"
_MIG_SUFFIX = re.compile(r"-MIG-(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:[+-][A-Za-z0-9.,]+)?|INVALID)$")
# No GPU has 10 TiB, but an old GFD wrote bytes (16106127360 for a T4, fixtures/nodes): a larger figure is bytes.
_BYTES_THRESHOLD = 10**7
# Taints nodes carry for a while, set by Kubernetes (node lifecycle, cloud provider) or the cluster autoscaler, not
# by whoever keeps the pool: neither a class's taints nor a mismatch.
_TRANSIENT_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", "ToBeDeletedByClusterAutoscaler",
                     "DeletionCandidateOfClusterAutoscaler")
# Commands of containers that ship in the device-plugin image but are not the plugin itself (Helm chart, operator).
_NOT_THE_PLUGIN = ("gpu-feature-discovery", "mps-control-daemon", "config-manager")


@dataclass(frozen=True)
class Product:
    """A gpu.product label taken apart: ``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED``."""

    model: str
    """The GPU's own name, without the MIG and -SHARED suffixes GFD adds."""
    mig_profile: str | None
    shared: bool


def parse_product(label: str) -> Product:
    """Split a product label into model, MIG profile (MIG single or per-profile labels) and the -SHARED flag."""
    shared = label.endswith(SHARED_SUFFIX)
    rest = label.removesuffix(SHARED_SUFFIX)
    match = _MIG_SUFFIX.search(rest)
    if match is None:
        return Product(rest, None, shared)
    return Product(rest[: match.start()], match["profile"], shared)


def has_gfd_labels(node: Node) -> bool:
    """Whether GPU Feature Discovery has labelled the node (product or count: what every GFD version writes)."""
    return PRODUCT in node.labels or COUNT in node.labels


def lasting_taints(node: Node) -> tuple[NodeTaint, ...]:
    """The node's taints but the transient ones Kubernetes and the autoscaler set."""
    return tuple(t for t in node.taints if t.key and not t.key.startswith(_TRANSIENT_TAINTS))


def gpu_resources(counts: Mapping[str, int]) -> dict[str, int]:
    """The nvidia.com/* extended resources of a capacity or allocatable map."""
    return {k: v for k, v in counts.items() if k.startswith(NVIDIA_PREFIX)}


def is_gpu_node(node: Node) -> bool:
    """A node with GPUs: GFD's or NFD's labels say so, or it advertises any nvidia.com/* resource."""
    return (node.labels.get(PRESENT) == "true" or has_gfd_labels(node)
            or any(v > 0 for v in gpu_resources(node.capacity).values()))


def memory_mib(labels: Mapping[str, str]) -> int | None:
    """nvidia.com/gpu.memory in MiB (GFD writes MiB; a figure too large to be MiB is read as bytes)."""
    raw = labels.get(MEMORY, "")
    if not raw.isdigit():
        return None
    value = int(raw)
    return value // 2**20 if value >= _BYTES_THRESHOLD else value


def label_int(labels: Mapping[str, str], key: str) -> int | None:
    raw = labels.get(key, "")
    return int(raw) if raw.isdigit() else None


def runs_device_plugin(container: Container) -> bool:
    """Whether a container is the NVIDIA device plugin (HAMi's plugin binary has the same name).

    GFD, the MPS control daemon and the config-manager sidecar ship in the same image, so the command decides;
    a container without one runs the image's entrypoint, which is the plugin in NVIDIA's image.
    """
    words = [*container.command, *container.args]
    head = words[0].rsplit("/", 1)[-1] if words else ""
    if any(head.startswith(other) for other in _NOT_THE_PLUGIN):
        return False
    if any("nvidia-device-plugin" in word for word in words):
        return True
    return not container.command and "device-plugin" in container.image


def is_device_plugin(daemonset: DaemonSet) -> bool:
    return any(runs_device_plugin(c) for c in daemonset.containers)


def is_hami_plugin(daemonset: DaemonSet) -> bool:
    """A device plugin from HAMi's image (its chart's DaemonSet, or one gpupolicy wrote for a vgpu class)."""
    return is_device_plugin(daemonset) and any(image_repository(c.image).endswith(hami.IMAGE_NAME)
                                               for c in daemonset.containers)


def image_repository(image: str) -> str:
    """An image reference without its tag or digest: ``docker.io/projecthami/hami:v2.10.0`` -> ``.../hami``."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def image_version(image: str) -> str | None:
    """The tag of an image reference (``...:v0.14.5`` -> ``v0.14.5``), None for digests or no tag."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def requests_gpu(pod: Pod) -> bool:
    """Whether any container of the pod asks for an nvidia.com/* resource (a cheap pre-filter; the admission
    engine's reading of the request is the authoritative one)."""
    return any(key.startswith(NVIDIA_PREFIX)
               for c in (*pod.containers, *pod.init_containers) for key in (*c.requests, *c.limits))


def driver_version(labels: Mapping[str, str]) -> str | None:
    """The NVIDIA driver GFD reports: cuda.driver-version.full (plugin-repo GFD v0.15+), else the major.minor.rev
    labels every GFD writes (rev is empty for a two-part version); None where GFD does not run."""
    full = labels.get(DRIVER_VERSION_FULL)
    if full:
        return full
    parts = [labels.get(key, "") for key in DRIVER_VERSION_PARTS]
    if not parts[0] or not parts[1]:
        return None
    return ".".join(p for p in parts if p)
