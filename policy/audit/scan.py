"""Auditing running workloads: every object judged by the admission engine, one result per owning workload.

A Pod is folded into its owner (and a ReplicaSet into its Deployment, a Job into its CronJob) only when its
controller ownerReference resolves to an object of the input, by uid *and* kind and name in the same namespace,
and that owner got the same verdict. An ownerReference is written by whoever creates the object, so a forged one
(naming a uid that is not there, or the uid of some other object) leaves the pod reported by itself.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from policy.admission import workloads
from policy.admission.engine import NOT_CHECKED, Decision, Engine
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import WorkloadKind

Outcome = Literal["pass", "fail", "warn", "skip"]
#: Verdicts the audit's engine remembers: a cluster has more distinct templates in flight than the webhook sees at
#: once (each ReplicaSet's pods carry their own pod-template-hash), and a command may hold more (at most 64 MiB of
#: keys, by the engine's 16 KiB key bound).
MEMO_SIZE = 4096


@dataclass(frozen=True, order=True)
class ObjectRef:
    """An object as reports name it (a wg-policy ``ObjectReference``)."""

    namespace: str
    kind: str
    name: str
    api_version: str = ""
    uid: str = ""

    @property
    def subject(self) -> str:
        return f"{self.kind} {self.name}" + (f" (namespace {self.namespace})" if self.namespace else "")


@dataclass(frozen=True)
class Result:
    """The verdict on one owning workload, and the objects folded into it."""

    ref: ObjectRef
    tenants: tuple[str, ...]
    allowed: bool
    diagnostics: tuple[Diagnostic, ...]
    folded: tuple[ObjectRef, ...] = ()
    """Objects it owns that got the same verdict (its ReplicaSets and Pods), sorted."""

    @property
    def outcome(self) -> Outcome:
        """fail: some enforce-mode finding; warn: warn- or audit-mode findings only; skip: not checked; pass."""
        if not self.allowed:
            return "fail"
        if any(d.code == NOT_CHECKED for d in self.diagnostics):
            return "skip"
        return "warn" if self.diagnostics else "pass"

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the workload across two audits: namespace, kind, name."""
        return self.ref.namespace, self.ref.kind, self.ref.name


@dataclass(frozen=True)
class Audit:
    """Every result, sorted by namespace, kind, name; only objects that ask for GPUs have one."""

    results: tuple[Result, ...]
    objects: int
    """Objects read (every kind)."""

    @property
    def violations(self) -> tuple[Result, ...]:
        return tuple(r for r in self.results if r.outcome in ("fail", "warn"))

    @property
    def failed(self) -> bool:
        return any(r.outcome == "fail" for r in self.results)

    def counts(self) -> dict[Outcome, int]:
        out: dict[Outcome, int] = {"pass": 0, "fail": 0, "warn": 0, "skip": 0}
        for r in self.results:
            out[r.outcome] += 1
        return out


@dataclass(frozen=True)
class _Judged:
    ref: ObjectRef
    tenants: tuple[str, ...]
    decision: Decision
    owner_uid: str | None
    owner_kind: str
    owner_name: str
    idle: bool
    """A ReplicaSet scaled to 0 (a Deployment's old revision): it runs nothing, so it is left out when its owner
    is in the input (and judged instead)."""

    @functools.cached_property  # compared once per object it owns
    def verdict(self) -> tuple[bool, tuple[tuple[str, str], ...]]:
        """What must agree for an object to fold into its owner: allowed or not, and each finding's rule and
        severity (paths and messages differ: a Pod's spec is at spec, its Deployment's at spec.template.spec)."""
        return self.decision.allowed, tuple(sorted((d.code, d.severity) for d in self.decision.diagnostics))


@dataclass(frozen=True, order=True)
class WatchedKind:
    """A kind the live audit lists (and the in-cluster audit's ClusterRole grants list on)."""

    group: str
    kind: str
    resource: str
    """Its plural, as RBAC rules and REST paths name it."""
    field_selector: str = ""
    """What the list leaves to the API server to skip."""


#: Finished pods (Succeeded, Failed) hold no GPU and never start again (``_finished``): the API server leaves them
#: out of the list, which on a batch cluster is most of its pods (metadata.fieldSelector on status.phase is one of
#: the fields the pod registry selects on: kubernetes pkg/registry/core/pod/strategy.go ToSelectableFields).
RUNNING_PODS = "status.phase!=Succeeded,status.phase!=Failed"
NAMESPACES = WatchedKind("", "Namespace", "namespaces")
"""Listed beside the workloads: their labels pick the tenants."""
_BUILT_IN_RESOURCES: Mapping[tuple[str, str], str] = {
    ("", "Pod"): "pods", ("", "ReplicationController"): "replicationcontrollers",
    ("apps", "Deployment"): "deployments", ("apps", "ReplicaSet"): "replicasets",
    ("apps", "StatefulSet"): "statefulsets", ("apps", "DaemonSet"): "daemonsets",
    ("batch", "Job"): "jobs", ("batch", "CronJob"): "cronjobs",
}


def watched_kinds(workload_kinds: Sequence[WorkloadKind] = ()) -> tuple[WatchedKind, ...]:
    """Every kind a live audit lists, sorted by group and kind: the built-in objects the engine reads a pod spec
    from and that run pods (a PodTemplate runs none; the extensions group is not served since Kubernetes 1.16),
    the workload custom resources of ``workload_kinds`` (the policy's table, policy/spec/workload_kinds.py with the
    spec's own), and Namespaces. The in-cluster audit's ClusterRole is compiled from this same list."""
    built_in = [WatchedKind(group, kind, _BUILT_IN_RESOURCES[group, kind],
                            RUNNING_PODS if (group, kind) == ("", "Pod") else "")
                for group, kind in workloads.POD_SPEC_PATHS if kind != "PodTemplate" and group != "extensions"]
    custom = [WatchedKind(k.group, k.kind, k.resource) for k in workload_kinds]
    found = {(w.group, w.kind): w for w in (NAMESPACES, *built_in, *custom)}
    return tuple(sorted(found.values()))


def namespace_labels(objects: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """The labels of every Namespace object among ``objects``, by name (string labels only)."""
    out: dict[str, dict[str, str]] = {}
    for obj in objects:
        metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
        if obj.get("kind") != "Namespace" or not isinstance(metadata, Mapping):
            continue
        labels = metadata.get("labels")
        out[_text(metadata.get("name"))] = {k: v for k, v in labels.items() if isinstance(k, str)
                                            and isinstance(v, str)} if isinstance(labels, Mapping) else {}
    return out


def audit(engine: Engine, objects: Iterable[Mapping[str, Any]],
          namespace_labels: Mapping[str, Mapping[str, str]]) -> Audit:
    """Judge every object as the webhook would at its creation, and fold owned objects into their owners; Pods
    that have finished (Succeeded, Failed) are left out.

    ``namespace_labels``: each namespace's labels (they pick its tenants); a namespace missing there has only its
    kubernetes.io/metadata.name label. Linear in the objects: each is judged once (the engine remembers the
    verdict of a template), and each owner chain is walked once (a forged cycle ends where it closes), so how
    deep chains go and in what order the objects come change nothing."""
    judged: list[_Judged] = []
    count = 0
    tenants_of: dict[str, tuple[str, ...]] = {}
    for obj in objects:
        count += 1
        one = _judge(engine, obj, namespace_labels, tenants_of)
        if one is not None:
            judged.append(one)
    by_uid = {j.ref.uid: i for i, j in enumerate(judged) if j.ref.uid}
    roots = _roots(judged, by_uid)
    folded: dict[int, list[ObjectRef]] = {}
    for i, root in enumerate(roots):
        if root != i:
            folded.setdefault(root, []).append(judged[i].ref)
    results = [Result(j.ref, j.tenants, j.decision.allowed, j.decision.diagnostics, tuple(sorted(folded.get(i, ()))))
               for i, j in enumerate(judged)
               if roots[i] == i and not (j.idle and not folded.get(i) and _owner(j, judged, by_uid) is not None)]
    return Audit(tuple(sorted(results, key=lambda r: r.ref)), count)


def _judge(engine: Engine, obj: Mapping[str, Any], namespace_labels: Mapping[str, Mapping[str, str]],
           tenants_of: dict[str, tuple[str, ...]]) -> _Judged | None:
    """The engine's verdict on one object, or None when it asks for no GPU (nothing to report)."""
    if not isinstance(obj, Mapping) or obj.get("kind") == "Namespace" or _finished(obj):
        return None
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace = _text(metadata.get("namespace"))
    if namespace not in tenants_of:
        tenants_of[namespace] = engine.tenants_for(namespace_labels.get(namespace, {}), namespace=namespace or None)
    tenants = tenants_of[namespace]
    decision = engine.evaluate(obj, tenants=tenants)
    if not decision.subject and not decision.diagnostics:
        return None  # no GPU request, or not an object at all
    kind, name = _text(obj.get("kind")), _text(metadata.get("name"))
    ref = ObjectRef(namespace, kind, name, _text(obj.get("apiVersion")), _text(metadata.get("uid")))
    owner = _controller(metadata.get("ownerReferences"))
    spec = obj.get("spec")
    idle = kind == "ReplicaSet" and isinstance(spec, Mapping) and spec.get("replicas") == 0 and owner is not None
    return _Judged(ref, tenants, decision, *(owner or (None, "", "")), idle=idle)


def _finished(obj: Mapping[str, Any]) -> bool:
    """A Pod that has run to its end (Succeeded or Failed): it holds no GPU and never starts again, so it is no
    running workload (its Job, if any, is judged)."""
    status = obj.get("status")
    return obj.get("kind") == "Pod" and isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed")


def _controller(refs: Any) -> tuple[str, str, str] | None:
    """(uid, kind, name) of the ownerReference with controller: true (at most one may have it), else None."""
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return _text(ref.get("uid")), _text(ref.get("kind")), _text(ref.get("name"))
    return None


def _roots(judged: Sequence[_Judged], by_uid: Mapping[str, int]) -> list[int]:
    """Per object, the index of the object it folds into (itself when it stands alone); each chain walked once."""
    roots: list[int | None] = [None] * len(judged)
    for start in range(len(judged)):
        chain: list[int] = []
        on_chain: set[int] = set()
        at: int | None = start
        while at is not None and roots[at] is None:
            chain.append(at)
            on_chain.add(at)
            at = _owner_index(judged[at], judged, by_uid)
            if at in on_chain:  # a cycle (only forged ownerReferences close one) ends where it closes
                at = None
        top = roots[at] if at is not None and roots[at] is not None else chain[-1]
        for i in chain:
            roots[i] = top
    return [r if r is not None else i for i, r in enumerate(roots)]


def _owner(one: _Judged, judged: Sequence[_Judged], by_uid: Mapping[str, int]) -> int | None:
    """The index of its controller in the input: resolved by uid, and of the kind, name and namespace its
    ownerReference names (a forged uid alone resolves nothing)."""
    at = by_uid.get(one.owner_uid) if one.owner_uid else None
    if at is None:
        return None
    owner = judged[at]
    if owner is one or (owner.ref.kind, owner.ref.name, owner.ref.namespace) != (
            one.owner_kind, one.owner_name, one.ref.namespace):
        return None
    return at


def _owner_index(one: _Judged, judged: Sequence[_Judged], by_uid: Mapping[str, int]) -> int | None:
    """The owner it folds into: its controller in the input (``_owner``) with the same verdict."""
    at = _owner(one, judged, by_uid)
    return at if at is not None and judged[at].verdict == one.verdict else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
