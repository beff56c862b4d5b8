"""What to watch on a GPU, by how it is shared: one entry per sharing mode, read by the rules and the dashboard.

A new sharing mode is one entry here; a class whose mode has no entry stops the compiler (KeyError naming the
mode) instead of being watched as something it is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from policy.resolved.resolve import ResolvedClass


@dataclass(frozen=True)
class Watch:
    memory_pressure: bool
    """Several pods share one device's memory: alert when it nears full (DCGM framebuffer used)."""
    pod_memory_budget: bool
    """Nothing limits a pod's memory to its slot's share: alert on a pod above its budget (per-pod metrics)."""
    compute_hog: bool
    """Nothing limits a pod's share of the SMs: alert on a pod starving the others (per-pod metrics)."""
    isolation: str
    """How far one pod can hurt the others, for panel descriptions."""


WATCHES: dict[str, Watch] = {
    "exclusive": Watch(False, False, False, "one pod per GPU"),
    # Time-slicing shares memory and SMs with no limit at all (device-plugin.md §3, seed 003).
    "time-slicing": Watch(True, True, True, "none: pods share the GPU's memory and take turns on its SMs"),
    # The MPS control daemon pins each client to total/replicas of memory and 100/replicas percent of the
    # threads (device-plugin.md §3, cmd/mps-control-daemon): a pod cannot take the others' share, but the
    # device as a whole can still run full.
    "mps": Watch(True, False, False, "memory and SM share limited per pod by the MPS daemon; faults shared"),
    "mig": Watch(False, False, False, "MIG hardware: memory, cache and faults isolated per instance"),
    # Time-sliced MIG instances: hardware between instances, nothing between the replicas of one instance;
    # per-process SM utilisation is not reported for MIG instances (dcgm-exporter process_metrics.go).
    "mig+time-slicing": Watch(True, True, False,
                              "MIG hardware between instances; none between the replicas of one instance"),
    # HAMi-core holds each container to its gpumem and, with a core policy, its gpucores (reference dra-hami.md):
    # no pod outgrows its slice, but memoryScaling above 1 lets the slices add up to more than the device.
    "vgpu": Watch(True, False, False, "HAMi-core limits each pod's memory and SM share in software; faults shared"),
}


def watch(node_class: ResolvedClass) -> Watch:
    return WATCHES[node_class.mode_name]
