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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.admission.fixes import Fix
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
#: The annotation keys some rule reads: KAI's (MPS mode included), HAMi's and NVIDIA's.
RULE_ANNOTATIONS = KNOWN_GPU_KEYS | {MPS}


@dataclass(frozen=True)
class Fraction:
    """A pod's KAI fractional-GPU request, as its annotations write it."""

    key: str
    """``gpu-fraction`` or ``gpu-memory`` (``gpu-fraction-num-devices`` where it is written without either)."""
    value: str
    container: str
    """The container that gets the GPU (its name, or ``#0`` for an unnamed first container)."""
    init: bool
    mode: str
    """The sharing mode it amounts to: ``time-slicing``, or ``mps`` with the mps annotation."""
    path: Path
    """Where the annotation is in the object."""
    problems: tuple[tuple[str, Path], ...] = ()
    """What KAI refuses in the annotations (its words, where), in the order its validator checks: such a pod is
    refused by KAI's admission webhook, or never bound."""


def annotations_of(obj: Mapping[str, Any], workload: Workload) -> tuple[Mapping[str, Any], Path]:
    """The pod's annotations (a template's own for a controller) and where they are."""
    path = (*workload.spec_path[:-1], "metadata", "annotations")
    found = descend(obj, path)
    return (found if is_mapping(found) else {}), path


def gpu_annotations(obj: Mapping[str, Any], workload: Workload) -> tuple[tuple[str, Any], ...]:
    """The pod's annotations that KAI, HAMi or NVIDIA's tools read, sorted: what an UPDATE must keep for the
    verdict to stay the one the object had (a gpu-fraction added to a template asks for a GPU)."""
    annotations, _ = annotations_of(obj, workload)
    return tuple(sorted((k, v) for k, v in annotations.items() if isinstance(k, str) and (
        k in RULE_ANNOTATIONS or k.startswith(KNOWN_GPU_PREFIXES))))


def read(obj: Mapping[str, Any], workload: Workload) -> Fraction | None:
    """The pod's KAI fractional-GPU request, or None when it asks KAI for none; what KAI would refuse in it is
    in ``problems`` (gpu_request_validator.go ValidateGpuRequests, gpu_access.go GetFractionContainerRef)."""
    annotations, path = annotations_of(obj, workload)
    key = next((k for k in (*ASKING, FRACTION_DEVICES) if k in annotations), None)
    if key is None:
        return None
    problems = [(f"annotation values are strings, and {k} is written as {type(annotations[k]).__name__} "
                 f"{annotations[k]!r} (the API server refuses the object)", (*path, k))
                for k in KAI_VALUES if k in annotations and not isinstance(annotations[k], str)]
    problems += _refused(annotations, path, _whole_gpu_limit(workload.pod_spec))
    wanted = annotations.get(FRACTION_CONTAINER)
    container, init, found = _container(workload.pod_spec, wanted if isinstance(wanted, str) else None)
    if isinstance(wanted, str) and not found:
        problems.append((f"{FRACTION_CONTAINER} names container {wanted!r}, which the pod does not have (KAI: "
                         f"\"container with name {wanted} not found for fraction request\")",
                         (*path, FRACTION_CONTAINER)))
    mode = "mps" if annotations.get(MPS) == "true" else "time-slicing"
    return Fraction(key, str(annotations[key]), container, init, mode, (*path, key), tuple(problems))


#: The annotations whose values KAI parses.
KAI_VALUES = (GPU_FRACTION, GPU_MEMORY, FRACTION_DEVICES, FRACTION_CONTAINER)


def _refused(annotations: Mapping[str, Any], path: Path, whole: bool) -> list[tuple[str, Path]]:
    """KAI's ValidateGpuRequests, check by check, each with KAI's own message."""
    found: list[tuple[str, Path]] = []
    fraction, memory = GPU_FRACTION in annotations, GPU_MEMORY in annotations
    if fraction and whole:
        found.append(("KAI refuses a pod with both a GPU fraction and a whole-GPU limit (\"cannot have both GPU "
                      "fraction request and whole GPU resource request/limit\")", (*path, GPU_FRACTION)))
    if memory and (fraction or whole):
        found.append(("KAI refuses a pod asking for GPU memory and for a GPU fraction or a whole GPU (\"cannot "
                      "request both GPU and GPU memory\")", (*path, GPU_MEMORY)))
    if FRACTION_DEVICES in annotations and not (fraction or memory):
        found.append((f"{FRACTION_DEVICES} without {GPU_FRACTION} or {GPU_MEMORY} asks for no portion (KAI: "
                      "\"cannot request multiple fractional devices without specifying fraction portion or "
                      "gpu-memory\")", (*path, FRACTION_DEVICES)))
    if memory and isinstance(annotations[GPU_MEMORY], str) and not _positive_integer(annotations[GPU_MEMORY]):
        found.append((f"{GPU_MEMORY}: {annotations[GPU_MEMORY]!r} is not a whole number of MiB above 0 (KAI: "
                      "\"gpu-memory annotation value must be a positive integer greater than 0\")",
                      (*path, GPU_MEMORY)))
    if fraction and isinstance(annotations[GPU_FRACTION], str) and not _portion(annotations[GPU_FRACTION]):
        found.append((f"{GPU_FRACTION}: {annotations[GPU_FRACTION]!r} is not a portion of one GPU, a number above 0 "
                      "and below 1 (KAI: \"gpu-fraction annotation value must be a positive number smaller than "
                      "1.0\")", (*path, GPU_FRACTION)))
    devices = annotations.get(FRACTION_DEVICES)
    if isinstance(devices, str) and not _positive_integer(devices):
        found.append((f"{FRACTION_DEVICES}: {devices!r} is not a whole number of GPUs above 0 (KAI: \"fraction "
                      "count annotation value must be a positive integer greater than 0\")",
                      (*path, FRACTION_DEVICES)))
    return found


def _positive_integer(text: str) -> bool:
    # Go's strconv.ParseUint(text, 10, 64): decimal digits only (no sign, no space), within 64 bits
    return text.isascii() and text.isdigit() and 0 < int(text) < 2**64


def _portion(text: str) -> bool:
    # strconv.ParseFloat accepts more spellings than float() (hex floats, underscores), none a KAI user writes
    try:
        value = float(text)
    except ValueError:
        return False
    return 0 < value < 1


def _whole_gpu_limit(spec: Mapping[str, Any]) -> bool:
    """Whether a container or init container limits nvidia.com/gpu (KAI's getFirstGPULimit)."""
    for section in ("containers", "initContainers"):
        items = spec.get(section)
        for item in items if isinstance(items, list) else ():
            resources = item.get("resources") if is_mapping(item) else None
            limits = resources.get("limits") if is_mapping(resources) else None
            if is_mapping(limits) and WHOLE_GPU in limits:
                return True
    return False


WHOLE_GPU = "nvidia.com/gpu"


def _container(spec: Mapping[str, Any], wanted: str | None) -> tuple[str, bool, bool]:
    """The container KAI gives the GPU: the named one (init containers first, as KAI looks), else the first; and
    whether a name given was found."""
    for section, init in (("initContainers", True), ("containers", False)):
        items = spec.get(section)
        for item in items if isinstance(items, list) else ():
            if wanted is not None and is_mapping(item) and item.get("name") == wanted:
                return wanted, init, True
    items = spec.get("containers")
    first = items[0] if isinstance(items, list) and items and is_mapping(items[0]) else {}
    return (wanted or str(first.get("name") or "#0")), False, wanted is None


def invalid(fraction: Fraction, severity: str) -> tuple[Diagnostic, ...]:
    """kai-annotation-invalid for each thing KAI refuses in the annotations. No typed fix: the value meant is the
    user's to say."""
    return tuple(Diagnostic(
        "kai-annotation-invalid", f"the pod's KAI Scheduler annotations ask for a GPU KAI refuses: {message}", path,
        "write gpu-fraction as a portion of one GPU (\"0.5\"), gpu-memory as MiB (\"2000\"), "
        "gpu-fraction-num-devices as a count (\"2\"), as quoted strings, gpu-fraction-container-name as one of the "
        "pod's containers, and whole GPUs as resources.limits nvidia.com/gpu without these annotations",
        severity=severity) for message, path in fraction.problems)  # type: ignore[arg-type]


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


#: What one fractional-GPU pod takes from a node: KAI reserves a whole GPU (nvidia.com/gpu) and shares it.
RESERVED = ((WHOLE_GPU, 1),)


def class_finding(fraction: Fraction, access: Access, outside: Sequence[str], fix: Fix | None,
                  severity: str) -> Diagnostic:
    """tenant-sharing-mode-denied where KAI may place the pod on classes outside the tenant's: KAI shares a GPU of
    any node with whole GPUs the pod's placement allows, so the pod must be pinned to one of the tenant's."""
    mine = ", ".join(sorted(access.classes or ())) or "none"
    listed = ", ".join(outside[:4]) + (f" and {len(outside) - 4} more" if len(outside) > 4 else "")
    hint = fix.describe() if fix is not None else (
        f"no change to this object within the policy admits it: no pin to one of {access.who}'s classes ({mine}) "
        f"keeps KAI off the others; ask the platform team to allow another class for {access.who}")
    return Diagnostic(
        "tenant-sharing-mode-denied",
        f"the pod asks KAI Scheduler for a fractional GPU ({fraction.key}: {fraction.value!r}), and KAI may share a "
        f"GPU of any node whose whole GPUs the pod's placement allows: class {listed}, which {access.who} may not "
        f"use ({access.who} may use class {mine} only)",
        fraction.path, hint, severity=severity, fix=fix)  # type: ignore[arg-type]


def unknown_gpu_annotations(obj: Mapping[str, Any], workload: Workload) -> tuple[tuple[str, Path], ...]:
    """Annotation keys that name a GPU and that neither KAI, HAMi nor NVIDIA's tools read, with their paths."""
    annotations, path = annotations_of(obj, workload)
    return tuple((key, (*path, key)) for key in sorted(k for k in annotations if isinstance(k, str))
                 if "gpu" in key.lower() and key not in KNOWN_GPU_KEYS and not key.startswith(KNOWN_GPU_PREFIXES))
