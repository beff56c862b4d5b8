"""The cloud vGPU products gpupolicy recognises but does not configure: Tencent TKE qGPU and Alibaba ACK cGPU.

Both split GPUs below the container with the cloud's own kernel or driver module, device plugin and scheduler
extender, switched on per node pool in the cloud console, not by a manifest. gpupolicy therefore writes nothing
for their nodes and does not judge their pods (its webhook is sent only objects asking for nvidia.com/
resources); it recognises their resource names and node labels so that `admit`, `cluster verify` and `discover`
say so instead of mistaking their nodes for unconfigured NVIDIA nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CloudVgpu:
    name: str
    """``Tencent TKE qGPU``."""
    resources: tuple[str, ...]
    """Extended resources its device plugin advertises and pods ask for."""
    node_labels: tuple[tuple[str, frozenset[str]], ...]
    """Labels (key, values) the cloud puts on the product's nodes."""
    managed_by: str
    """What configures it, for messages."""
    source: str

    def on_node(self, labels: Mapping[str, str], capacity: Iterable[str]) -> bool:
        """Whether a node serves this product: one of its labels, or one of its resources in the node's capacity."""
        names = set(capacity)
        return any(labels.get(key) in values for key, values in self.node_labels) or \
            any(r in names for r in self.resources)


QGPU = CloudVgpu(
    name="Tencent TKE qGPU",
    # qgpu-core: percent of one GPU (whole GPUs as N x 100); qgpu-memory: GiB (tencentcloud.com/document/product/
    # 457/59103 "Using qGPU").
    resources=("tke.cloud.tencent.com/qgpu-core", "tke.cloud.tencent.com/qgpu-memory"),
    # TKE labels nodes created from the qGPU image; its qgpu-manager DaemonSet selects on it (same page).
    node_labels=(("qgpu-device-enable", frozenset({"enable"})),),
    managed_by="TKE's qGPU add-on (qgpu-manager and qgpu-scheduler)",
    source="tencentcloud.com/document/product/457/59103",
)
CGPU = CloudVgpu(
    name="Alibaba ACK cGPU",
    # gpu-mem in GiB, gpu-core.percentage 0-100 per GPU (alibabacloud.com/help/en/ack, "Use cGPU").
    resources=("aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage", "aliyun.com/gpu-count"),
    # ack.node.gpu.schedule names the node's sharing mode; default is exclusive GPUs (ACK "enable scheduling");
    # gpushare and cgpu are the older labels kubeflow/arena still lists (pkg/apis/types/const.go).
    node_labels=(("ack.node.gpu.schedule", frozenset({"cgpu", "core_mem", "share", "mps"})),
                 ("gpushare", frozenset({"true"})), ("cgpu", frozenset({"true"}))),
    managed_by="ACK's cGPU component (ack-ai-installer)",
    source="alibabacloud.com/help/doc-detail/191140.html",
)
PRODUCTS = (QGPU, CGPU)


def product_of_node(labels: Mapping[str, str], capacity: Iterable[str]) -> CloudVgpu | None:
    names = tuple(capacity)
    return next((p for p in PRODUCTS if p.on_node(labels, names)), None)


def products_requested(resources: Iterable[str]) -> tuple[CloudVgpu, ...]:
    """The products whose resources appear among these resource names."""
    names = set(resources)
    return tuple(p for p in PRODUCTS if names.intersection(p.resources))
