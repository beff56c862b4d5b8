"""Admission of HAMi vGPU pods: which classes such a pod can reach, and the rules for what HAMi leaves Pending.

gpupolicy's webhook is a validating webhook, so the API server calls it after every mutating webhook, HAMi's
included: a Pod it sees has already been rerouted (schedulerName hami-scheduler) and given the vGPU count HAMi adds
to memory-only containers (pkg/scheduler/webhook.go:53-123; pkg/device/nvidia/device.go MutateAdmission). Pod
controllers and offline manifests are never mutated by HAMi, so for them this module predicts the mutation
their Pods will get. Either way the engine then sees the pod as HAMi's scheduler will:

* a pod HAMi takes (it asks for a per-vGPU resource, or for HAMi's count resource where HAMi's webhook reaches)
  can only be placed on vgpu classes, so the engine's classes and candidates are narrowed to them, and the
  per-vGPU resources, which no node advertises, leave the totals it fits;
* the rules below deny what HAMi would leave Pending forever, answer with an internal error, or run past its
  limits, each with the reason HAMi's scheduler events would give.

The engine calls :meth:`HamiAdmission.narrow` once per evaluation; the rules read the :class:`HamiPod` it attaches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from policy.admission.fixes import Fix, RemoveField, RemoveResource, SetAmount, SetField, SetNodeSelector
from policy.admission.workloads import Amount, ContainerRequest, GpuRequest, Workload
from policy.kube.fields import descend
from policy.kube.quantity import parse_count
from policy.resolved.offers import AdmissionPolicy, HamiDoc, VgpuClassDoc
from policy.spec.diagnostics import Diagnostic, Path, did_you_mean
from policy.spec.model import RuleId, RuleMode
from policy.vgpu import hami

DEFAULT_SCHEDULER = "default-scheduler"  # what the API server defaults an empty schedulerName to
HOSTNAME = "kubernetes.io/hostname"
_MAX_LISTED = 6
_DEFAULT_MEMORY = "spec.hami.defaultMemory, or else the whole GPU's memory"


class ClassLike(Protocol):
    """The parts of a rule-engine class view these rules read (policy.admission.rules.ClassView)."""

    name: str

    def fits(self, totals: Sequence[tuple[str, int]]) -> bool: ...

    def pin(self) -> str: ...


class FactsLike(Protocol):
    """The parts of the engine's facts these rules read (policy.admission.rules.Facts)."""

    request: GpuRequest
    classes: tuple[Any, ...]
    conflicts: tuple[Any, ...]
    candidates: tuple[Any, ...]
    access: Any
    hami: HamiPod | None


# --- one pod as HAMi sees it --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HamiValue:
    """One HAMi resource a container gives (or HAMi's webhook adds)."""

    resource: str
    raw: Any
    count: int | None
    """The whole number HAMi reads; None when it is none (the API server refuses those)."""
    path: Path
    injected: bool = False
    """Added by HAMi's webhook (or predicted to be), not written by the user."""


@dataclass(frozen=True)
class HamiContainer:
    name: str
    path: Path
    values: Mapping[str, HamiValue]
    """HAMi resource name -> value, read from limits, else requests, as HAMi reads them."""
    in_limits: frozenset[str]
    """The names given under limits: the only ones HAMi's webhook looks at."""
    privileged: bool

    def value(self, resource: str) -> int | None:
        found = self.values.get(resource)
        return found.count if found is not None else None


@dataclass(frozen=True)
class HamiPod:
    """A pod HAMi takes, with what the rules need: its containers' vGPU asks, scheduler, annotations, classes."""

    hami: HamiDoc
    kind: str
    scheduler_name: str
    scheduler_path: Path
    node_name: str
    annotations: Mapping[str, str]
    annotations_path: Path
    containers: tuple[HamiContainer, ...]
    in_reach: bool
    """HAMi's webhook matches the pod's namespace (as gpupolicy scopes it)."""
    vgpu: Mapping[str, VgpuClassDoc]

    @property
    def live_pod(self) -> bool:
        """A Pod: the API server defaults its schedulerName, and HAMi's webhook has already run on it."""
        return self.kind == "Pod"

    def eligible(self, candidates: Sequence[ClassLike]) -> tuple[tuple[ClassLike, VgpuClassDoc], ...]:
        """The candidate classes whose GPUs HAMi would consider for the pod, after its type and mode annotations."""
        out = []
        for view in candidates:
            doc = self.vgpu.get(view.name)
            if doc is not None and _type_allowed(self.annotations, doc.gpu_type) and _mode_allowed(self.annotations):
                out.append((view, doc))
        return tuple(out)


def _type_allowed(annotations: Mapping[str, str], gpu_type: str) -> bool:
    use, avoid = annotations.get(hami.USE_GPUTYPE, ""), annotations.get(hami.NOUSE_GPUTYPE, "")
    if hami.words(use) and not hami.type_matches(use, gpu_type):
        return False
    return not (hami.words(avoid) and hami.type_matches(avoid, gpu_type))


def _mode_allowed(annotations: Mapping[str, str]) -> bool:
    # HAMi admits a GPU when the annotation contains the GPU's mode (device.go:493-503); gpupolicy's are hami-core.
    mode = annotations.get(hami.VGPU_MODE)
    return mode is None or hami.HAMI_CORE in mode


class HamiAdmission:
    """The HAMi part of one admission policy, built once per engine."""

    def __init__(self, doc: HamiDoc, plugin_offers_count: bool) -> None:
        self.doc = doc
        self.names = (doc.count, doc.memory, doc.memory_percentage, doc.cores, doc.priority)
        self.attributes = frozenset(self.names[1:])
        self.plugin_offers_count = plugin_offers_count
        """An NVIDIA-plugin class offers HAMi's count resource too (then only HAMi's reach makes a pod HAMi's)."""
        self.vgpu = {c.name: c for c in doc.classes}

    @classmethod
    def build(cls, policy: AdmissionPolicy) -> HamiAdmission | None:
        if policy.hami is None:
            return None
        shared = any(c.mode != "vgpu" and any(o.resource == policy.hami.count for o in c.offers)
                     for c in policy.classes)
        return cls(policy.hami, shared)

    def narrow(self, facts: FactsLike, obj: Mapping[str, Any], workload: Workload) -> FactsLike:
        """The facts as HAMi's scheduler would see the pod: vgpu classes only, per-vGPU resources out of the
        totals, HAMi's added count in; unchanged for a pod HAMi does not take."""
        containers = self._containers(workload)
        if not self._takes(containers, facts.access.modes):
            return facts
        in_reach = self._reaches(facts.access.modes)
        mutated = tuple(self._mutate(c) for c in containers)
        pod = self._pod(obj, workload, mutated, in_reach)
        request = self._request(facts.request, mutated)
        keep = [i for i, view in enumerate(facts.classes) if view.name in self.vgpu]
        classes = tuple(facts.classes[i] for i in keep)
        conflicts = tuple(facts.conflicts[i] for i in keep)
        fitting = tuple(view for view in classes if view.fits(request.totals))
        candidates = tuple(view for view, conflict in zip(classes, conflicts, strict=True)
                           if conflict is None and view.fits(request.totals))
        return replace(facts, request=request, classes=classes, conflicts=conflicts,  # type: ignore[type-var]
                       candidates=candidates, fitting=fitting, hami=pod)

    def takes(self, workload: Workload, modes: frozenset[str]) -> bool:
        """Whether HAMi's scheduler takes the pod, given the sharing modes its namespace may use: it asks for a
        per-vGPU resource, or for HAMi's count resource where HAMi's webhook reaches (or no NVIDIA-plugin class
        offers that resource too)."""
        return self._takes(self._containers(workload), modes)

    def _takes(self, containers: Sequence[HamiContainer], modes: frozenset[str]) -> bool:
        asked = {name for c in containers for name in c.values}
        if not asked:
            return False
        counted = self.doc.count in asked and (self._reaches(modes) or not self.plugin_offers_count)
        return bool(asked & self.attributes) or counted

    def _reaches(self, modes: frozenset[str]) -> bool:
        """HAMi's webhook matches the namespace (gpupolicy scopes it to namespaces whose pods may use vgpu)."""
        return not self.doc.scoped or "vgpu" in modes

    # --- reading the pod -----------------------------------------------------------------------------------------

    def _containers(self, workload: Workload) -> tuple[HamiContainer, ...]:
        found = []
        for section in ("initContainers", "containers"):
            items = workload.pod_spec.get(section)
            for index, item in enumerate(items if isinstance(items, list) else ()):
                if isinstance(item, Mapping):
                    found.append(self._container(item, (*workload.spec_path, section, index)))
        return tuple(found)

    def _container(self, item: Mapping[str, Any], path: Path) -> HamiContainer:
        resources = item.get("resources") if isinstance(item.get("resources"), Mapping) else {}
        values: dict[str, HamiValue] = {}
        in_limits = set()
        for field in ("requests", "limits"):  # limits last: they win, as HAMi reads them first
            table = resources.get(field)
            if not isinstance(table, Mapping):
                continue
            for name in self.names:
                if name in table:
                    values[name] = HamiValue(name, table[name], parse_count(table[name]),
                                             (*path, "resources", field, name))
                    if field == "limits":
                        in_limits.add(name)
        security = item.get("securityContext")
        privileged = isinstance(security, Mapping) and security.get("privileged") is True
        name = item.get("name")
        return HamiContainer(name if isinstance(name, str) else f"#{path[-1]}", path, values, frozenset(in_limits),
                             privileged)

    def _mutate(self, container: HamiContainer) -> HamiContainer:
        """The count HAMi's webhook adds to a container giving only memory, cores or a percentage in its limits
        (device.go mutateContainerResource); a Pod HAMi already mutated is left as it is."""
        count, doc = self.doc.count, self.doc
        asks = container.in_limits & {doc.memory, doc.memory_percentage, doc.cores}
        if count in container.in_limits or not asks or doc.default_gpu_num == 0:
            return container
        added = HamiValue(count, doc.default_gpu_num, doc.default_gpu_num,
                          (*container.path, "resources", "limits", count), injected=True)
        return replace(container, values={**container.values, count: added}, in_limits=container.in_limits | {count})

    def _pod(self, obj: Mapping[str, Any], workload: Workload, containers: tuple[HamiContainer, ...],
             in_reach: bool) -> HamiPod:
        template = descend(obj, workload.spec_path[:-1])
        metadata = template.get("metadata") if isinstance(template, Mapping) else None
        raw = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        annotations = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(raw, Mapping) else {}
        spec = workload.pod_spec
        scheduler = spec.get("schedulerName") if isinstance(spec.get("schedulerName"), str) else ""
        node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else ""
        return HamiPod(self.doc, workload.kind, scheduler, (*workload.spec_path, "schedulerName"), node, annotations,
                       (*workload.spec_path[:-1], "metadata", "annotations"), containers, in_reach, self.vgpu)

    def _request(self, request: GpuRequest, containers: tuple[HamiContainer, ...]) -> GpuRequest:
        """The request without the per-vGPU resources (no node advertises them), with the counts HAMi adds."""
        added = {c.path: c.values[self.doc.count] for c in containers
                 if self.doc.count in c.values and c.values[self.doc.count].injected}
        kept = []
        for container in request.containers:
            amounts = [a for a in container.amounts if a.resource not in self.attributes]
            where = container.amounts[0].path[:-3] if container.amounts else ()
            if where in added and added[where].count:
                value = added.pop(where)
                amounts.append(Amount(value.resource, value.count or 0, value.path))
            if amounts:
                kept.append(ContainerRequest(container.name, container.section, container.sidecar,
                                             tuple(sorted(amounts, key=lambda a: a.resource))))
        return GpuRequest.of(tuple(kept), request.problems)


# --- the rules ----------------------------------------------------------------------------------------------------


def check_scheduler_bypassed(facts: FactsLike) -> tuple[Diagnostic, ...]:
    """The pod asks for HAMi's resources but HAMi's scheduler would not place it."""
    pod = facts.hami
    if pod is None:
        return ()
    if not pod.in_reach:
        # Outside HAMi's reach the pod's tenant may not use vgpu: tenant-sharing-mode-denied says so of a pod that
        # asks for a device. One asking only for per-vGPU resources asks for nothing a node advertises.
        return _unreached(pod) if not facts.request.totals else ()
    doc = pod.hami
    if pod.node_name:
        return (Diagnostic(
            "hami-scheduler-bypassed",
            f"the pod sets spec.nodeName {pod.node_name} and asks for HAMi vGPU resources, so no scheduler places "
            "it and HAMi's webhook denies it. HAMi's vGPUs are allocated by hami-scheduler at binding "
            "(HAMi's answer: \"pod has node assigned\").",
            (*pod.scheduler_path[:-1], "nodeName"),
            f"pin the pod with nodeSelector {{kubernetes.io/hostname: {pod.node_name}}} instead",
            fix=Fix((RemoveField((*pod.scheduler_path[:-1], "nodeName"), "spec.nodeName"),
                     SetNodeSelector(pod.scheduler_path[:-1], HOSTNAME, pod.node_name)))),)
    found = [d for c in pod.containers if (d := _uncounted(doc, c)) is not None]
    if found:
        return tuple(found)
    scheduler = pod.scheduler_name
    if scheduler in ("", doc.scheduler_name) or (scheduler == DEFAULT_SCHEDULER and not pod.live_pod):
        return ()
    if scheduler == DEFAULT_SCHEDULER:
        message = (f"the pod asks for HAMi vGPU resources but HAMi's webhook did not send it to "
                   f"{doc.scheduler_name}, so HAMi never allocates its vGPUs. Its schedulerName is still "
                   f"{DEFAULT_SCHEDULER}, which HAMi's webhook replaces whenever it runs: the webhook was "
                   "unreachable (it fails open) or does not match this namespace. default-scheduler would leave the "
                   f"pod Pending or bind it to a HAMi node whose device plugin then fails it (\"no binding pod "
                   "found\").")
        hint = (f"check HAMi's webhook and scheduler (kubectl get mutatingwebhookconfigurations; the "
                f"{doc.scheduler_name} pods), then create the pod again; if the manifest sets schedulerName: "
                f"{DEFAULT_SCHEDULER}, remove it")
        note = (f"HAMi's webhook sets it when it runs: check it (kubectl get mutatingwebhookconfigurations) and the "
                f"{doc.scheduler_name} pods")
    else:
        message = (f"the pod names scheduler {scheduler}, so HAMi's webhook leaves it alone and HAMi never "
                   f"allocates its vGPUs. {scheduler} cannot see HAMi's per-vGPU resources: the pod would stay "
                   "Pending, or be bound to a HAMi node whose device plugin then fails it (\"no binding pod found\").")
        hint = f"remove schedulerName (HAMi's webhook sets {doc.scheduler_name}), or set it to {doc.scheduler_name}"
        note = f"or remove it where HAMi's webhook reaches the namespace: it sets {doc.scheduler_name}"
    fix = Fix((SetField(pod.scheduler_path, doc.scheduler_name, "spec.schedulerName"),), note)
    return (Diagnostic("hami-scheduler-bypassed", message, pod.scheduler_path, hint, fix=fix),)


def _unreached(pod: HamiPod) -> tuple[Diagnostic, ...]:
    doc = pod.hami
    found = []
    for container in pod.containers:
        asked = sorted(container.in_limits & {doc.memory, doc.memory_percentage, doc.cores})
        if asked:
            found.append(Diagnostic(
                "hami-scheduler-bypassed",
                f'container "{container.name}" asks for {" and ".join(asked)} but not for {doc.count}, and HAMi\'s '
                "webhook does not reach the namespace (only namespaces whose tenants may use vgpu), so "
                f'{DEFAULT_SCHEDULER} gets the pod and no node advertises {asked[0]} ("Insufficient {asked[0]}").',
                container.values[asked[0]].path, "ask the platform team to allow vgpu for the namespace's tenant"))
    return tuple(found)


def _uncounted(doc: HamiDoc, container: HamiContainer) -> Diagnostic | None:
    asked = sorted(container.in_limits & {doc.memory, doc.memory_percentage, doc.cores})
    if not asked or doc.count in container.values:
        return None
    return Diagnostic(
        "hami-scheduler-bypassed",
        f'container "{container.name}" asks for {" and ".join(asked)} but not for {doc.count}, and HAMi adds no '
        f"vGPU count (defaultGPUNum is 0), so the pod would stay Pending. HAMi's webhook then leaves it to "
        f'{DEFAULT_SCHEDULER}, and no node advertises {asked[0]} ("Insufficient {asked[0]}").',
        container.values[asked[0]].path, f"add {doc.count}: 1 to the container's limits",
        fix=Fix((SetAmount(container.path, container.name, doc.count, 1),)))


def check_vgpu_memory(facts: FactsLike) -> tuple[Diagnostic, ...]:
    """gpumem HAMi cannot read (it drops the request) or no GPU the pod may land on registers (Pending)."""
    pod = facts.hami
    if pod is None:
        return ()
    doc = pod.hami
    eligible = pod.eligible(facts.candidates)
    found = []
    for container in pod.containers:
        value = container.values.get(doc.memory)
        if value is None or value.count is None or value.count == 0 or doc.count not in container.values:
            continue
        mib = value.count * doc.memory_factor
        if mib > hami.MAX_INT32:
            found.append(_memory_unreadable(doc, container, value))
            continue
        known = [(view, c) for view, c in eligible if c.card_memory_mib]
        if known and all(c.card_memory_mib < mib for _, c in known):
            found.append(_memory_too_large(facts.classes, pod, container, value, mib, known))
    return tuple(found)


def _memory_unreadable(doc: HamiDoc, container: HamiContainer, value: HamiValue) -> Diagnostic:
    assert value.count is not None
    return Diagnostic(
        "vgpu-memory-unsatisfiable",
        f'container "{container.name}" asks for {doc.memory}: {value.raw}, which HAMi reads as {value.count} MiB, '
        f"past the int32 it keeps memory in, so HAMi drops the container's vGPU request. The pod would then run "
        "without a GPU, or fail at the kubelet.",
        value.path, _mib_hint(doc, value), fix=_mib_fix(doc, container, value))


def _mib_fix(doc: HamiDoc, container: HamiContainer, value: HamiValue) -> Fix:
    """The MiB a suffixed value means; else no memory request (the vGPU then gets the default memory)."""
    assert value.count is not None
    if _suffixed(value.raw) and value.count >= 2**20:
        return Fix((SetAmount(container.path, container.name, doc.memory, value.count // 2**20),),
                   f"{doc.memory} counts MiB: {value.count // 2**20} is {value.raw}")
    return Fix((RemoveResource(container.path, container.name, doc.memory),), f"the vGPU then gets {_DEFAULT_MEMORY}")


def _suffixed(raw: Any) -> bool:
    return isinstance(raw, str) and re.search(r"[A-Za-z]$", raw.strip()) is not None


def _mib_hint(doc: HamiDoc, value: HamiValue) -> str:
    assert value.count is not None
    if _suffixed(value.raw) and value.count >= 2**20:
        return f"{doc.memory} counts MiB: write {value.count // 2**20} for {value.raw}"
    return f"{doc.memory} counts MiB per vGPU: write the MiB the container needs"


def _memory_too_large(classes: Sequence[ClassLike], pod: HamiPod, container: HamiContainer, value: HamiValue,
                      mib: int, known: Sequence[tuple[ClassLike, VgpuClassDoc]]) -> Diagnostic:
    doc = pod.hami
    largest = max(c.card_memory_mib for _, c in known)
    per = "; ".join(f"{view.name}: {c.card_memory_mib} MiB ({c.gpu_type})" for view, c in known[:_MAX_LISTED])
    factor = f" x memoryFactor {doc.memory_factor}" if doc.memory_factor != 1 else ""
    hint = f"ask for at most {largest // doc.memory_factor} ({doc.memory}: {largest // doc.memory_factor})"
    bigger = [view for view in classes if (c := pod.vgpu.get(view.name)) is not None and c.card_memory_mib >= mib]
    if bigger:
        hint += f", or pin the pod to class {bigger[0].name} with {bigger[0].pin()}"
    fix = Fix((SetAmount(container.path, container.name, doc.memory, largest // doc.memory_factor),))
    if _suffixed(value.raw):
        hint = f"{_mib_hint(doc, value)}; {hint}"
        meant = value.count // 2**20 if value.count and value.count >= 2**20 else 0
        fix = Fix((SetAmount(container.path, container.name, doc.memory, meant),),
                  f"{doc.memory} counts MiB: {meant} is {value.raw}") if 0 < meant * doc.memory_factor <= largest \
            else replace(fix, note=f"{doc.memory} counts MiB")
    return Diagnostic(
        "vgpu-memory-unsatisfiable",
        f'container "{container.name}" asks for {mib} MiB per vGPU ({doc.memory}: {value.raw}{factor}), more than '
        f"any GPU it may land on registers, so it would stay Pending. Per class: {per}. Its scheduling events "
        'would read "CardInsufficientMemory".',
        value.path, hint, fix=fix)


def check_vgpu_count(facts: FactsLike) -> tuple[Diagnostic, ...]:
    """More vGPUs in one container than any reachable node has GPUs: each vGPU needs its own GPU."""
    pod = facts.hami
    if pod is None:
        return ()
    doc = pod.hami
    eligible = pod.eligible(facts.candidates)
    if not eligible:
        return ()
    most = max(c.gpus for _, c in eligible)
    found = []
    for container in pod.containers:
        value = container.values.get(doc.count)
        if value is None or value.count is None or value.count <= most:
            continue
        per = "; ".join(f"{view.name}: {c.gpus} GPU(s) per node, {c.split_count} vGPUs each"
                        for view, c in eligible[:_MAX_LISTED])
        found.append(Diagnostic(
            "vgpu-count-above-gpus",
            f'container "{container.name}" asks for {value.count} {doc.count}, but HAMi puts each vGPU of a container '
            f"on a different GPU and no node it may land on has {value.count} GPUs, so it would stay Pending. Per "
            f'class: {per}. Its scheduling events would read "AllocatedCardsInsufficientRequest".',
            value.path,
            f"ask for at most {most} ({doc.count}: {most})",
            fix=Fix((SetAmount(container.path, container.name, doc.count, most),),
                    "HAMi gives each vGPU of a container a GPU of its own")))
    return tuple(found)


def check_out_of_range(facts: FactsLike) -> tuple[Diagnostic, ...]:
    """Percentages, cores and priorities HAMi reads otherwise than written (or answers with an error)."""
    pod = facts.hami
    if pod is None:
        return ()
    return tuple(d for c in pod.containers for d in _ranges(pod.hami, c))


def _ranges(doc: HamiDoc, container: HamiContainer) -> list[Diagnostic]:
    found = []
    name = f'container "{container.name}"'

    def set_to(resource: str, count: int) -> Fix:
        return Fix((SetAmount(container.path, container.name, resource, count),))

    def drop(resource: str) -> Fix:
        return Fix((RemoveResource(container.path, container.name, resource),))

    percent, memory = container.values.get(doc.memory_percentage), container.values.get(doc.memory)
    if percent is not None and percent.count is not None:
        if percent.count > hami.MAX_PERCENT:
            found.append(Diagnostic("hami-resource-out-of-range", f"{name} asks for {doc.memory_percentage}: "
                                    f"{percent.raw}, outside 0 to 100, and HAMi's webhook answers such a pod with an "
                                    "internal error (HTTP 500) instead of a reason.", percent.path,
                                    "give the percent of the GPU's memory the vGPU needs, 1 to 100",
                                    fix=set_to(doc.memory_percentage, hami.MAX_PERCENT)))
        elif percent.count == 0 and memory is None:
            found.append(Diagnostic("hami-resource-out-of-range", f"{name} asks for {doc.memory_percentage}: 0, "
                                    f"which HAMi reads as no percentage, so the vGPU gets {_DEFAULT_MEMORY}.",
                                    percent.path, "give the percent the vGPU needs (1 to 100), or remove it",
                                    fix=drop(doc.memory_percentage)))
        if memory is not None and memory.count:
            found.append(Diagnostic("hami-resource-out-of-range", f"{name} gives both {doc.memory} and "
                                    f"{doc.memory_percentage}, and HAMi silently uses {doc.memory} alone.",
                                    percent.path, f"keep one of {doc.memory} and {doc.memory_percentage}",
                                    fix=drop(doc.memory_percentage)))
    if memory is not None and memory.count == 0 and percent is None:
        found.append(Diagnostic("hami-resource-out-of-range", f"{name} asks for {doc.memory}: 0, which HAMi reads "
                                f"as no memory request, so the vGPU gets {_DEFAULT_MEMORY}.", memory.path,
                                "give the MiB the vGPU needs, or remove it", fix=drop(doc.memory)))
    cores = container.values.get(doc.cores)
    if cores is not None and cores.count is not None and cores.count > hami.MAX_PERCENT:
        found.append(Diagnostic("hami-resource-out-of-range", f"{name} asks for {doc.cores}: {cores.raw}, and HAMi "
                                "clamps it to 100: every SM of the GPU, which no other vGPU may then use.",
                                cores.path, "give the percent of one GPU's SMs the vGPU needs, 0 to 100",
                                fix=set_to(doc.cores, hami.MAX_PERCENT)))
    priority = container.values.get(doc.priority)
    if priority is not None and priority.count not in (0, 1):
        found.append(Diagnostic("hami-resource-out-of-range", f"{name} asks for {doc.priority}: {priority.raw}; "
                                "HAMi passes it to HAMi-core unchecked, which knows only 0 (high) and 1 (low).",
                                priority.path, f"use {doc.priority}: 0 or 1", fix=set_to(doc.priority, 1)))
    return found


def check_privileged(facts: FactsLike) -> tuple[Diagnostic, ...]:
    """A privileged container in a vGPU pod: HAMi's webhook denies it, and it would see every GPU."""
    pod = facts.hami
    if pod is None:
        return ()
    return tuple(Diagnostic(
        "hami-privileged-container",
        f'container "{c.name}" is privileged and the pod asks for HAMi vGPU resources, which HAMi\'s webhook denies '
        f'("container {c.name} is privileged"). A privileged container sees every GPU of the node, past '
        "HAMi-core's limits.",
        (*c.path, "securityContext", "privileged"),
        "drop securityContext.privileged and add only the capabilities the container needs",
        fix=Fix((RemoveField((*c.path, "securityContext", "privileged"),
                             f'securityContext.privileged of container "{c.name}"'),),
                "add only the capabilities the container needs"))
        for c in pod.containers if c.privileged)


def check_annotations(facts: FactsLike) -> tuple[Diagnostic, ...]:
    """HAMi's pod annotations: a mode, a GPU type or a policy word that leaves the pod Pending or means nothing."""
    pod = facts.hami
    if pod is None:
        return ()
    found = [*_mode_findings(pod), *_policy_findings(pod)]
    if _mode_allowed(pod.annotations):
        found += _type_findings(pod, facts.candidates)
    return tuple(found)


def _mode_findings(pod: HamiPod) -> list[Diagnostic]:
    mode = pod.annotations.get(hami.VGPU_MODE)
    if mode is None or _mode_allowed(pod.annotations):
        return []
    return [Diagnostic(
        "hami-annotation-invalid",
        f"annotation {hami.VGPU_MODE}: {mode} excludes every GPU of the vgpu classes, so the pod would stay Pending. "
        f"gpupolicy's vgpu classes register their GPUs in {hami.HAMI_CORE} mode, and HAMi gives a pod only GPUs "
        'whose mode its annotation contains ("CardTypeMismatch").',
        (*pod.annotations_path, hami.VGPU_MODE), f"remove the annotation, or set it to {hami.HAMI_CORE}",
        fix=Fix((SetField((*pod.annotations_path, hami.VGPU_MODE), hami.HAMI_CORE, f"annotation {hami.VGPU_MODE}"),),
                "or remove it"))]


def _policy_findings(pod: HamiPod) -> list[Diagnostic]:
    found = []
    for key, known, fallback in ((hami.GPU_SCHEDULER_POLICY, hami.GPU_POLICIES, "spread"),
                                 (hami.NODE_SCHEDULER_POLICY, hami.NODE_POLICIES, "binpack")):
        value = pod.annotations.get(key)
        unknown = [w for w in hami.words(value or "") if w not in known]
        if value is None or not unknown:
            continue
        near = did_you_mean(unknown[0], known)
        kept = [w if w in known else next(iter(did_you_mean(w, known)), "") for w in hami.words(value)]
        path = (*pod.annotations_path, key)
        fix = Fix((SetField(path, ",".join(dict.fromkeys(w for w in kept if w)), f"annotation {key}"),)) \
            if any(kept) else Fix((RemoveField(path, f"annotation {key}"),))
        found.append(Diagnostic(
            "hami-annotation-invalid",
            f"annotation {key}: {value} names {', '.join(unknown)}, which HAMi does not know and silently reads as "
            f"{fallback}.", (*pod.annotations_path, key),
            (f"did you mean {near[0]}? " if near else "") + f"use {', '.join(known)}", fix=fix))
    return found


def _type_findings(pod: HamiPod, candidates: Sequence[ClassLike]) -> list[Diagnostic]:
    pairs = [(view, pod.vgpu[view.name]) for view in candidates if view.name in pod.vgpu]
    if not pairs or pod.eligible(candidates):
        return []
    keys = [k for k in (hami.USE_GPUTYPE, hami.NOUSE_GPUTYPE) if hami.words(pod.annotations.get(k, ""))]
    key = keys[0]
    types = "; ".join(f"{view.name}: {c.gpu_type}" for view, c in pairs[:_MAX_LISTED])
    return [Diagnostic(
        "hami-annotation-invalid",
        f"annotation {key}: {pod.annotations[key]} leaves no GPU of the classes the pod may land on, so it would stay "
        f'Pending. HAMi matches GPU types by case-insensitive substring. Per class: {types} ("CardTypeMismatch").',
        (*pod.annotations_path, key),
        f"name a type one of them has (e.g. {pairs[0][1].gpu_type.removeprefix('NVIDIA-')}), or remove the "
        "annotation",
        fix=Fix((RemoveField((*pod.annotations_path, key), f"annotation {key}"),),
                f"or name a type one of them has, e.g. {pairs[0][1].gpu_type.removeprefix('NVIDIA-')}"))]


#: (rule id, default mode, summary, check) of every HAMi rule, registered in policy.admission.rules.RULES.
RULES: tuple[tuple[RuleId, RuleMode, str, Callable[[Any], tuple[Diagnostic, ...]]], ...] = (
    ("hami-scheduler-bypassed", "enforce",
     "a pod asks for HAMi vGPU resources but hami-scheduler would not place it", check_scheduler_bypassed),
    ("vgpu-memory-unsatisfiable", "enforce",
     "nvidia.com/gpumem HAMi drops, or more than any reachable vGPU class's GPU registers", check_vgpu_memory),
    ("vgpu-count-above-gpus", "enforce",
     "more vGPUs in one container than any reachable node has GPUs", check_vgpu_count),
    ("hami-resource-out-of-range", "enforce",
     "a vGPU percentage, core or priority value HAMi rejects, clamps or ignores", check_out_of_range),
    ("hami-privileged-container", "enforce",
     "a privileged container in a pod asking for HAMi vGPU resources", check_privileged),
    ("hami-annotation-invalid", "enforce",
     "a HAMi pod annotation that excludes every reachable GPU or names an unknown policy", check_annotations),
)
