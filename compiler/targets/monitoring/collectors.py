"""What the exporters must be configured with for the rules to see anything: kube-state-metrics' node-label
allow-list and dcgm-exporter's counters and settings. Documented in REPORT.md for every tree; written as
objects only where the spec's deployment mode owns the exporter (the GPU Operator runs dcgm-exporter)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import objects
from compiler.targets.monitoring import rules
from policy.hardware import labels as node_labels
from policy.resolved.resolve import ResolvedPolicy

DCGM_CSV_KEY = "dcgm-metrics.csv"  # the key the GPU Operator mounts (gpu-operator controllers/object_controls.go)
DCGM_CONFIG_MAP = "gpupolicy-dcgm-metrics"
#: dcgm-exporter's per-pod attribution on shared GPUs (pkg/cmd/app.go, --kubernetes-virtual-gpus).
VIRTUAL_GPUS_ENV = "KUBERNETES_VIRTUAL_GPUS"
#: Prometheus' target label for the node a scraped pod runs on; every DCGM rule joins on `node`.
NODE_RELABELING = {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
#: The chart's own tolerations (deployment/values.yaml, 4.8.2); a `tolerations` value replaces them.
CHART_TOLERATIONS = ({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},)


def ksm_allowlist(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """Node label keys kube-state-metrics must export on kube_node_labels: every class's selector keys,
    the labels whose drift the alerts watch, and mig-manager's state label."""
    keys: set[str] = set()
    for c in resolved.classes:
        keys |= set(c.node_selector) | set(rules.drift_labels(c)) | set(c.required_labels)
        if c.mig_config is not None:
            keys |= {node_labels.MIG_CONFIG, node_labels.MIG_CONFIG_STATE}
    return tuple(sorted(keys))


def ksm_argument(resolved: ResolvedPolicy) -> str:
    """kube-state-metrics' command-line flag (explicit keys: wildcards need v2.20.0)."""
    return f"--metric-labels-allowlist=nodes=[{','.join(ksm_allowlist(resolved))}]"


@dataclass(frozen=True)
class Counter:
    field: str
    kind: str
    help: str
    used: bool
    """Read by the rules or the dashboard; the others are dcgm-exporter's defaults, kept so that replacing its
    list removes nothing a team already watches."""


# dcgm-exporter's etc/dcp-metrics-included.csv (the GPU Operator's default list, 4.5.3-4.8.2), plus the SM
# activity and occupancy fields it leaves commented out. Help texts are ours.
DCGM_COUNTERS: tuple[Counter, ...] = (
    Counter("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (MiB).", True),
    Counter("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB).", True),
    Counter("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved by the driver (MiB).", False),
    Counter("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (%); per pod with virtual GPUs.", True),
    Counter("DCGM_FI_PROF_SM_ACTIVE", "gauge", "Ratio of cycles an SM has at least one warp assigned.", True),
    Counter("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "Ratio of resident warps to the SMs' maximum.", True),
    Counter("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", True),
    Counter("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor pipe is active.", True),
    Counter("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the memory interface is active.", True),
    Counter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Last XID error seen.", True),
    Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz).", False),
    Counter("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock (MHz).", False),
    Counter("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (C).", False),
    Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C).", False),
    Counter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W).", False),
    Counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy used since boot (mJ).", False),
    Counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe retries.", False),
    Counter("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory copy utilization (%).", False),
    Counter("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (%).", False),
    Counter("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (%).", False),
    Counter("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink bandwidth counters over all lanes.", False),
    Counter("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU license status.", False),
    Counter("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors.", False),
    Counter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors.", False),
    Counter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether row remapping failed.", False),
    Counter("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe transmit rate (bytes/s).", False),
    Counter("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe receive rate (bytes/s).", False),
    Counter("DCGM_FI_DRIVER_VERSION", "label", "Driver version.", False),
)


def dcgm_csv() -> str:
    """The counters file in dcgm-exporter's format: `field, type, help`, `#` comments."""
    lines = ["# Written by gpupolicy: the fields its rules and dashboard read, plus dcgm-exporter's defaults.",
             "# DCGM field, Prometheus metric type, help message"]
    # dcgm-exporter reads exactly three comma-separated fields a line (counters/counter_config.go).
    assert not any("," in c.help for c in DCGM_COUNTERS), "a help text with a comma breaks the file"
    lines += [f"{c.field}, {c.kind}, {c.help}" for c in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"


def _service_monitor(resolved: ResolvedPolicy) -> dict[str, object]:
    """dcgm-exporter's ServiceMonitor, as both its chart and the GPU Operator spell it: selected by Prometheus,
    the exporter's pod and namespace labels kept (not renamed exported_*), the node's name added."""
    return {"enabled": True, "honorLabels": True, "additionalLabels": dict(resolved.spec.monitoring.labels),
            "relabelings": [dict(NODE_RELABELING)]}


def _per_pod(resolved: ResolvedPolicy, env_field: str) -> dict[str, object]:
    """Per-pod series on shared GPUs: virtual GPUs on, and the host's PID namespace, where dcgm-exporter maps
    GPU processes to pods through /proc/<pid>/cgroup (transformation/pidmapper.go)."""
    if not resolved.spec.monitoring.dcgm_exporter.per_pod_metrics:
        return {}
    return {"hostPID": True, env_field: [{"name": VIRTUAL_GPUS_ENV, "value": "true"}]}


def kube_prometheus_stack_values(resolved: ResolvedPolicy) -> dict[str, object]:
    """kube-prometheus-stack's Helm values for the allow-list (its kube-state-metrics subchart)."""
    return {"kube-state-metrics": {"metricLabelsAllowlist": [f"nodes=[{','.join(ksm_allowlist(resolved))}]"]}}


def dcgm_exporter_chart_values(resolved: ResolvedPolicy) -> dict[str, object]:
    """dcgm-exporter's Helm values (deployment/values.yaml, chart 4.8.2) for what the rules read: the counters
    (customMetrics replaces the whole default list), a ServiceMonitor Prometheus selects that keeps the pod
    labels and adds the node's name, and with per-pod metrics the virtual GPUs and the host's PIDs."""
    return {"customMetrics": dcgm_csv(), "serviceMonitor": _service_monitor(resolved),
            **_tolerations(resolved), **_per_pod(resolved, "extraEnv")}


def _tolerations(resolved: ResolvedPolicy) -> dict[str, object]:
    """With tainted classes, the chart's tolerations plus one per taint: one DaemonSet runs on every GPU node,
    and a node whose taint it does not tolerate has no DCGM series (GPUPolicyDCGMMetricsMissing)."""
    found = [t for c in resolved.classes for t in objects.class_tolerations((), c)]
    if not found:
        return {}
    unique = [t for i, t in enumerate(found) if t not in found[:i]]
    return {"tolerations": [dict(t) for t in CHART_TOLERATIONS] + unique}


def cluster_policy_fields(resolved: ResolvedPolicy, config_map: str) -> dict[str, object]:
    """The ClusterPolicy's `dcgmExporter` fields gpupolicy owns (gpu-operator api/nvidia/v1 DCGMExporterSpec):
    our counters, and a ServiceMonitor Prometheus selects, with pod labels kept and the node's name."""
    # hostPID is a ClusterPolicy field since gpu-operator v25.10.0; env is a plain list its chart leaves empty.
    return {"config": {"name": config_map}, "serviceMonitor": _service_monitor(resolved), **_per_pod(resolved, "env")}
