"""Fractional GPUs asked of NVIDIA KAI Scheduler (Run:ai) by pod annotations, and GPU-looking annotations no one reads.

KAI's pods ask for no ``nvidia.com/`` resource: the annotation ``gpu-fraction`` (a portion of one GPU's memory, in
(0, 1)) or ``gpu-memory`` (MiB of one GPU), optionally ``gpu-fraction-num-devices`` (that much on several GPUs),
``gpu-fraction-container-name`` (the container, init or regular, that gets the GPU; the first regular one by
default) and ``mps: "true"`` (processes share the GPU through MPS). KAI reserves a whole GPU and lets several such
pods use it at once, with no memory isolation (docs/gpu-sharing/README.md): that is GPU sharing, time-slicing, or MPS
with the mps annotation, and a tenant that may not share GPUs may not use it.

Source: NVIDIA/KAI-Scheduler @72de64fc (v0.13.0-rc1 and 142 commits): pkg/common/constants/constants.go (the
annotation keys), pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go (what KAI accepts),
pkg/binder/common/gpu_access.go (GetFractionContainerRef: init containers first, then regular ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policy.admission.rules import Access
from policy.admission.workloads import Workload
from policy.kube.fields import Path, descend, is_mapping
from policy.spec.diagnostics import Diagnostic
from policy.vgpu import hami

GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
FRACTION_DEVICES = "gpu-fraction-num-devices"
FRACTION_CONTAINER = "gpu-fraction-container-name"
MPS = "mps"
#: Annotations KAI reads for a fractional GPU: any one of the first two makes the pod a KAI sharing pod.
ASKING = (GPU_FRACTION, GPU_MEMORY)
KAI_KEYS = frozenset({GPU_FRACTION, GPU_MEMORY, FRACTION_DEVICES, FRACTION_CONTAINER, "received-resource-type",
                      "runai/shared-gpu-configmap", "runai-gpu-group"})
#: GPU annotations other tools read (HAMi's, NVIDIA's runtime), so a GPU pod's annotation naming "gpu" is not
#: reported as unknown for them.
KNOWN_GPU_KEYS = KAI_KEYS | {hami.USE_GPUTYPE, hami.NOUSE_GPUTYPE, hami.VGPU_MODE, hami.GPU_SCHEDULER_POLICY,
                             hami.NODE_SCHEDULER_POLICY, "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"}
KNOWN_GPU_PREFIXES = ("hami.io/", "cdi.k8s.io/", "kai.scheduler/")


@dataclass(frozen=True)
class Fraction:
    """A pod's KAI fractional-GPU request, as its annotations write it."""

    key: str
    """``gpu-fraction`` or ``gpu-memory``."""
    value: str
    container: str
    """The container that gets the GPU (its name, or ``#0`` for an unnamed first container)."""
    init: bool
    mode: str
    """The sharing mode it amounts to: ``time-slicing``, or ``mps`` with the mps annotation."""
    path: Path
    """Where the annotation is in the object."""


def annotations_of(obj: Mapping[str, Any], workload: Workload) -> tuple[Mapping[str, Any], Path]:
    """The pod's annotations (a template's own for a controller) and where they are."""
    path = (*workload.spec_path[:-1], "metadata", "annotations")
    found = descend(obj, path)
    return (found if is_mapping(found) else {}), path


def read(obj: Mapping[str, Any], workload: Workload) -> Fraction | None:
    """The pod's KAI fractional-GPU request, or None when it asks KAI for none."""
    annotations, path = annotations_of(obj, workload)
    key = next((k for k in ASKING if isinstance(annotations.get(k), str)), None)
    if key is None:
        return None
    wanted = annotations.get(FRACTION_CONTAINER)
    container, init = _container(workload.pod_spec, wanted if isinstance(wanted, str) else None)
    mode = "mps" if annotations.get(MPS) == "true" else "time-slicing"
    return Fraction(key, annotations[key], container, init, mode, (*path, key))


def _container(spec: Mapping[str, Any], wanted: str | None) -> tuple[str, bool]:
    """The container KAI gives the GPU: the named one (init containers first, as KAI looks), else the first."""
    for section, init in (("initContainers", True), ("containers", False)):
        items = spec.get(section)
        for item in items if isinstance(items, list) else ():
            if wanted is not None and is_mapping(item) and item.get("name") == wanted:
                return wanted, init
    items = spec.get("containers")
    first = items[0] if isinstance(items, list) and items and is_mapping(items[0]) else {}
    return (wanted or str(first.get("name") or "#0")), False


def finding(fraction: Fraction, access: Access, severity: str) -> Diagnostic | None:
    """tenant-sharing-mode-denied where the namespace's tenant may not use the mode KAI's sharing amounts to."""
    if fraction.mode in access.modes:
        return None
    allowed = ", ".join(sorted(access.modes)) or "no sharing mode"
    where = f"{'init ' if fraction.init else ''}container {fraction.container!r}"
    whole = (f", or remove the annotation and request whole GPUs (nvidia.com/gpu) in {where}, on a class "
             f"{access.who} may use" if "exclusive" in access.modes else "")
    return Diagnostic(
        "tenant-sharing-mode-denied",
        f"the pod asks KAI Scheduler for a fractional GPU ({fraction.key}: {fraction.value!r}, for {where}): KAI "
        f"shares one GPU among such pods by {fraction.mode}, with no memory isolation, and {access.who} may use "
        f"{allowed} only",
        fraction.path,
        # No typed fix: the annotation is the pod's whole GPU request, and no edit keeps it and admits the pod.
        f"no change to this object within the policy admits it as a KAI fractional-GPU pod: ask the platform team "
        f"to allow {fraction.mode} for {access.who}{whole}",
        severity=severity)  # type: ignore[arg-type]


def unknown_gpu_annotations(obj: Mapping[str, Any], workload: Workload) -> tuple[tuple[str, Path], ...]:
    """Annotation keys that name a GPU and that neither KAI, HAMi nor NVIDIA's tools read, with their paths."""
    annotations, path = annotations_of(obj, workload)
    return tuple((key, (*path, key)) for key in sorted(k for k in annotations if isinstance(k, str))
                 if "gpu" in key.lower() and key not in KNOWN_GPU_KEYS and not key.startswith(KNOWN_GPU_PREFIXES))
