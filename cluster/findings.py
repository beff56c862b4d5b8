"""What `cluster verify` reports: one finding per difference between the cluster and the policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]
#: Every code a finding of `cluster verify` can carry (docs/operations.md explains each).
FindingCode = Literal[
    "allocatable-mismatch",
    "class-selects-non-gpu-node",
    "class-without-nodes",
    "cloud-vgpu-node",
    "cloud-vgpu-node-in-class",
    "configmap-missing",
    "configmap-modified",
    "daemonset-config-mismatch",
    "daemonset-image-mismatch",
    "daemonset-missing",
    "daemonset-rollout-incomplete",
    "deployment-config-mismatch",
    "deployment-image-mismatch",
    "deployment-missing",
    "deployment-not-ready",
    "device-plugin-not-ready",
    "device-plugin-not-running",
    "driver-too-old",
    "driver-version-mismatch",
    "driver-version-unreadable",
    "dra-device-class-mismatch",
    "dra-device-count-mismatch",
    "dra-device-mismatch",
    "dra-devices-missing",
    "dra-devices-not-verified",
    "dra-devices-unexpected",
    "dra-mig-layout-mismatch",
    "gfd-label-mismatch",
    "gfd-labels-missing",
    "gpu-memory-below-sizing",
    "gpu-model-mismatch",
    "hami-gpu-unhealthy",
    "hami-node-not-registered",
    "hami-registration-mismatch",
    "hami-scheduler-config-drift",
    "hami-scheduler-not-installed",
    "mig-config-in-progress",
    "mig-config-not-applied",
    "multiple-device-plugins",
    "node-count-mismatch",
    "node-in-several-classes",
    "node-label-conflict",
    "node-label-missing",
    "node-label-stale",
    "node-taint-missing",
    "node-taint-undeclared",
    "pending-pod-capacity-not-applied",
    "pending-pod-cluster-full",
    "pending-pod-unsatisfiable",
    "rollout-stuck",
    "unclassified-gpu-node",
    "unexpected-gpu-resource",
    "unmanaged-device-plugin",
]


@dataclass(frozen=True)
class Finding:
    """One difference between the cluster and the policy: what, where, and the fix."""

    code: FindingCode
    message: str
    hint: str = ""
    severity: Severity = "error"
    node_class: str = ""
    """The class it concerns; empty for cluster-wide findings and workloads."""
    subject: str = ""
    """``node/<name>``, ``daemonset/<ns>/<name>``, ``configmap/<ns>/<name>``, ``pod/<ns>/<name>``, ..."""
    details: tuple[str, ...] = ()
    """Evidence lines: scheduler events, owner chains, conditions."""
