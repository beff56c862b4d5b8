"""The admission rule engine: a pod or pod controller plus its tenants and the admission policy, to a Decision."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from policy.admission import budget, claims, fractions, remedies, templates
from policy.admission.fixes import AddToleration, Fix, Pin, SetNodeSelector
from policy.admission.rules import (
    RULES,
    Access,
    ClassView,
    Conflict,
    Facts,
    placement_conflict,
    requirement_field,
    terms_conflict,
)
from policy.admission.vgpu import HamiAdmission
from policy.admission.workloads import (
    GpuRequest,
    Workload,
    api_group,
    find_workload,
    gpu_resources_anywhere,
    placement_fields,
    read_gpu_request,
    read_placement,
    subject_of,
)
from policy.kube import selectors
from policy.kube.scheduling import NodeRequirement, NodeTaint, Placement, Toleration
from policy.resolved.offers import ALWAYS_ENFORCED, AdmissionPolicy, TenantDoc
from policy.spec.diagnostics import Diagnostic, Path, Severity, bounded, format_path, shorten, value_at
from policy.spec.model import RuleId

SEVERITY: Mapping[str, Severity] = {"enforce": "error", "warn": "warning", "audit": "info"}
EVALUATED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
MAX_WARNING_CHARS = 120  # the API server's advice for response.warnings (webhook.md §1.2)
MAX_MESSAGE_CHARS = 16_000  # a denial's status.message: every finding of an honest pod fits many times over
DEFAULT_WHO = "namespaces outside every tenant"
_FITTING_CACHE_SIZE = 4096  # distinct request totals remembered per engine
#: Verdicts remembered per engine, keyed by the object less its instance fields: the pods of one template, and
#: a controller's retries of a denied pod, are judged once (docs/performance.md). At most 256 x 16 KiB of keys.
MEMO_SIZE = 256
_MEMO_MAX_KEY_BYTES = 16 * 1024
_KEY_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
_UNJUDGED: Any = object()  # a memo miss (None is a verdict: no GPU request)
#: metadata fields that tell one object of a template from the next; the rules read none of them.
INSTANCE_FIELDS = frozenset({"name", "generateName", "uid", "resourceVersion", "creationTimestamp", "generation",
                             "managedFields"})
#: A notice, not a rule: objects that ask for GPUs where gpupolicy cannot read the pod spec (custom resources).
NOT_CHECKED = "workload-not-checked"


@dataclass(frozen=True)
class Decision:
    """The verdict on one object; all the webhook and `gpupolicy admit` need."""

    allowed: bool
    diagnostics: tuple[Diagnostic, ...] = ()
    """code = rule id; severity error (enforce: deny), warning (warn) or info (audit); path into the object."""
    subject: str = ""
    """The object as messages name it: ``Deployment nlp-inference``."""
    checked: bool = field(default=False, compare=False)  # bookkeeping for counts, no part of the verdict
    """The object asks for GPUs in a way the engine reads (nvidia.com/ resources, KAI annotations, a template that
    does, a DRA claim) and was judged: what `admit` counts as a workload checked."""

    @property
    def message(self) -> str:
        """The denial text: the object, then per violation its rule id, what is wrong, where, and the fix."""
        return self.render("error")

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per warn-mode finding, at most 120 characters each, without a "Warning:" prefix."""
        return tuple(_brief(f"{d.code}: {summary(d.message)}") for d in self.diagnostics if d.severity == "warning")

    @property
    def audit_annotations(self) -> dict[str, str]:
        """Audit-mode findings by rule id (a valid annotation key), their messages joined."""
        out: dict[str, list[str]] = {}
        for d in self.diagnostics:
            if d.severity == "info":
                out.setdefault(d.code, []).append(_line(d))
        return {code: " | ".join(lines) for code, lines in out.items()}

    def render(self, *severities: Severity) -> str:
        """Every finding of the given severities (all when none given) as text, one per line after the subject."""
        chosen = [d for d in self.diagnostics if not severities or d.severity in severities]
        if not chosen:
            return ""
        lines = [_line(d) for d in chosen]
        head = f"{bounded(self.subject)}: " if self.subject else ""
        return shorten(head + "\n".join(lines), MAX_MESSAGE_CHARS)  # a pod may have thousands of containers


ALLOWED = Decision(True)


def summary(message: str) -> str:
    """A message's first sentence (rules open every message with one)."""
    head, dot, _ = message.partition(". ")
    return head if dot else message.removesuffix(".")


def _brief(text: str) -> str:
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 1].rstrip() + "…"


def _line(d: Diagnostic) -> str:
    where = f" (at {format_path(d.path)})" if d.path else ""
    fix = f" Fix: {d.hint}" if d.hint else ""
    return bounded(f"[{d.code}] {d.message}{where}{fix}")  # messages quote fields of the object under review


#: Node name -> its labels (only the keys the classes select by matter: `Engine.selector_keys`), or None for a node
#: known not to exist (the webhook's node cache, synced, and a fresh GET of the node both found none). A name
#: missing from the mapping is a node whose labels are not known: the pod is judged on every class its placement
#: leaves, as if the scheduler could place it on any.
Nodes = Mapping[str, Mapping[str, str] | None]


@dataclass(frozen=True)
class _Tenant:
    name: str
    selector: tuple[selectors.Requirement, ...]
    access: Access


class Engine:
    """Evaluates objects against one admission policy; build it once per policy, call ``evaluate`` often."""

    def __init__(self, policy: AdmissionPolicy, *, memo_size: int = MEMO_SIZE,
                 nodes: Nodes | None = None) -> None:
        """``memo_size``: how many verdicts to remember (0: judge every object afresh, as the benchmarks do to
        time the rules themselves). ``nodes``: node name -> labels, where known (`admit --nodes`): a pod whose
        spec.nodeName names one of them may run only on the classes whose selectors that node's labels meet (see
        `Nodes`; ``evaluate`` takes them per call too, as the webhook's node cache gives them)."""
        self.policy = policy
        self._nodes: Nodes = dict(nodes or {})
        self._classes = tuple(ClassView.from_doc(c) for c in policy.classes)
        self._no_conflicts: tuple[Conflict | None, ...] = (None,) * len(self._classes)
        self._tenants = {t.name: _compile_tenant(t, i) for i, t in enumerate(policy.tenants)}
        self._tenant_access = tuple(t.access for t in self._tenants.values())
        self._default = Access(DEFAULT_WHO, frozenset(policy.default_allow), None,
                               allow_path="spec.admission.defaultAllow")
        self._severity = {rule.id: "error" if rule.id in ALWAYS_ENFORCED else
                          SEVERITY[policy.rules.get(rule.id, rule.default_mode)] for rule in RULES}
        self._tainted = frozenset(i for i, view in enumerate(self._classes) if view.taints)
        self._selector_keys = tuple(sorted({key for view in self._classes for key, _ in view.node_selector}))
        self._untolerated: dict[tuple[Any, ...], tuple[tuple[int, NodeTaint], ...]] = {}
        self._context = remedies.Context(policy.cluster)
        # Work done once per policy rather than per review (docs/performance.md): which classes know a
        # label key, and which may carry each key=value, so a nodeSelector's conflicts are set operations
        # instead of a walk over every class; and, per distinct request, the classes that could fit it.
        knows: dict[str, set[int]] = {}
        carries: dict[tuple[str, str], set[int]] = {}
        for i, view in enumerate(self._classes):
            for key, values in view.labels.items():
                knows.setdefault(key, set()).add(i)
                for value in values:
                    carries.setdefault((key, value), set()).add(i)
        self._knows = {key: frozenset(found) for key, found in knows.items()}
        self._carries = {pair: frozenset(found) for pair, found in carries.items()}
        self._fitting: dict[tuple[tuple[str, int], ...], tuple[tuple[int, ...], tuple[ClassView, ...]]] = {}
        self._lacks: dict[str, frozenset[int]] = {}
        self._claims = claims.ClaimPolicy.build(policy)  # DRA claims (policy.admission.claims)
        self._hami = HamiAdmission.build(policy)  # vGPU pods see only the vgpu classes (policy.admission.vgpu)
        self.kinds = templates.KindTable(policy.workload_kinds)  # custom resources with pod templates
        self._memo: dict[_MemoKey, tuple[bool, tuple[Diagnostic, ...]] | None] = {}
        self._memo_size = memo_size
        # The most GPU devices one node of any class offers, all resources together, and that class: a pod with more
        # GPU containers than this is refused before the rules run (beyond_every_class).
        self._largest = max(((sum(o.per_node for o in view.offers.values()), view.name) for view in self._classes),
                            key=lambda pair: pair[0], default=(0, ""))

    @property
    def classes(self) -> tuple[ClassView, ...]:
        return self._classes

    @property
    def selector_keys(self) -> tuple[str, ...]:
        """Every node label key some class's nodeSelector names, sorted: all a pinned pod's node is judged by, so
        all a node cache need keep of a node's labels."""
        return self._selector_keys

    def tenants_for(self, namespace_labels: Mapping[str, str], *, namespace: str | None = None) -> tuple[str, ...]:
        """Every tenant whose namespaceSelector matches the labels, in policy order (offline routing).

        With ``namespace``, its kubernetes.io/metadata.name label is added, as the API server sets it on every
        namespace (1.21+), so selectors by name work offline too."""
        labels = {k: v for k, v in namespace_labels.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(namespace_labels, Mapping) else {}
        if namespace is not None:
            labels[selectors.NAMESPACE_NAME_LABEL] = namespace
        return tuple(t.name for t in self._tenants.values() if selectors.matches(t.selector, labels))

    def evaluate(self, obj: Mapping[str, Any], *, tenants: Sequence[str] = (), operation: str = "CREATE",
                 old_obj: Mapping[str, Any] | None = None, expired: budget.Expired = budget.never,
                 nodes: Nodes | None = None) -> Decision:
        """The decision on a Pod or pod controller; every other object, and any malformed one, is allowed.

        ``tenants`` are the namespace's tenants as the webhook path names them: () means the default rules,
        several mean only what all of them allow. UPDATEs that change neither GPU requests nor placement are
        allowed unchecked, so scaling or relabelling an existing object never fails. Every finding's hint is a
        fix verified to admit the object (policy/admission/remedies.py), or says that none within the policy does.
        A custom resource that asks for GPUs gets a workload-not-checked notice. Objects are judged without their
        instance fields (``without_instance_fields``), so the objects of one template share a verdict, which the
        engine remembers (up to ``memo_size``).

        ``expired`` is the review's time budget (policy/admission/budget.py): asked between steps, each linear in
        the object; once it is true the engine raises ``OverBudget`` and remembers nothing. It raises nothing else.

        ``nodes``: the nodes known for this call (the webhook's node cache answer for the node the object names),
        in place of the engine's own; see `Nodes`. A verdict on a pinned pod is remembered with its node's labels.
        """
        known = self._nodes if nodes is None else nodes
        if not isinstance(operation, str) or operation not in EVALUATED_OPERATIONS:
            return ALLOWED
        if claims.is_claim(obj):
            return self._claim_decision(obj, tenants, operation, old_obj)
        workload = find_workload(obj)
        if workload is None:
            found = self.kinds.templates(obj)
            if found is None:
                return _unchecked(obj)
            return self._evaluate_templates(obj, found, tenants, operation, old_obj, expired, known)
        return self._evaluate_workload(obj, workload, tenants, operation, old_obj, expired, known)

    def _evaluate_workload(self, obj: Mapping[str, Any], workload: Workload, tenants: Sequence[str], operation: str,
                           old_obj: Mapping[str, Any] | None, expired: budget.Expired, known: Nodes,
                           ask: templates.Ask | None = None) -> Decision:
        """``evaluate`` for a Pod or pod controller; ``ask``: what it asks for, where already worked out (a custom
        resource's template), so that it is read once; ``known``: the nodes known for this call."""
        claimed = bool(self._claims.classes and workload.pod_spec.get("resourceClaims"))
        if claimed:
            denied = self._pod_claims(workload, tenants, operation, old_obj)
            if denied is not None:
                return denied
        request = ask.request if ask is not None else None
        fraction = ask.fraction if ask is not None else None
        if operation == "UPDATE":
            request = request if request is not None else read_gpu_request(workload)
            if ask is None:  # an UPDATE reads it at once: a fraction added to a template asks for a GPU
                fraction = fractions.read(obj, workload)
            if request.empty and fraction is None:
                return ALLOWED
            if self._unchanged(obj, workload, request, old_obj):
                return Decision(True, (), workload.subject, checked=True)
        names = _tenant_names(tenants)
        template = without_instance_fields(obj)
        key = _memo_key(template, names, _node_part(workload, known, self._nodes)) if self._memo_size else None
        judged = self._memo.get(key, _UNJUDGED) if key is not None else _UNJUDGED
        if judged is _UNJUDGED:
            if ask is None and operation != "UPDATE":  # read only where the verdict is not remembered
                fraction = fractions.read(template, workload)
            judged = self._judge(template, workload, names, request, fraction, expired, known)
            if key is not None:
                if len(self._memo) >= self._memo_size:
                    self._memo.clear()  # bounded like the caches above; refilled by the next reviews
                self._memo[key] = judged
        if judged is None:  # no GPU request; its claims, where it names any, were judged above
            return Decision(True, (), workload.subject, checked=True) if claimed else ALLOWED
        allowed, diagnostics = judged
        return Decision(allowed, diagnostics, workload.subject, checked=True)

    def _claim_decision(self, obj: Mapping[str, Any], tenants: Sequence[str], operation: str,
                        old_obj: Mapping[str, Any] | None) -> Decision:
        """A DRA claim or template (policy/admission/claims.py). Claim rules are always enforced, like
        gpu-request-invalid."""
        found = claims.claim_findings(self._claims, obj, _tenant_names(tenants), self.access(tenants).who, operation,
                                      old_obj)
        return Decision(not found, found, subject_of(obj), checked=claims.asks_gpu(self._claims, obj))

    def _pod_claims(self, workload: Workload, tenants: Sequence[str], operation: str,
                    old_obj: Mapping[str, Any] | None) -> Decision | None:
        """The denial of a workload naming templates whose DeviceClass its tenant may not use, or None to judge it
        as a workload."""
        if operation == "UPDATE":
            old = find_workload(old_obj) if isinstance(old_obj, Mapping) else None
            if old is not None and old.pod_spec.get("resourceClaims") == workload.pod_spec.get("resourceClaims"):
                return None  # the claims it names are unchanged: never denied for them now
        found = claims.pod_findings(self._claims, workload.pod_spec, workload.spec_path, _tenant_names(tenants),
                                    self.access(tenants).who)
        return Decision(False, found, workload.subject, checked=True) if found else None

    def _evaluate_templates(self, obj: Mapping[str, Any], found: tuple[templates.Template, ...], tenants: Sequence[str],
                            operation: str, old_obj: Mapping[str, Any] | None, expired: budget.Expired,
                            nodes: Nodes) -> Decision:
        """A workload custom resource: each pod template judged as a Pod (an UPDATE against the same template of
        the old object), every finding moved back to the template's fields and naming the template. One that asks
        for GPUs in no template the table knows gets the workload-not-checked notice, as an unknown kind does."""
        old = {t.path: t.pod for t in self.kinds.templates(old_obj) or ()} if operation == "UPDATE" else {}
        allowed, judged = True, []
        for template in found:
            budget.check(expired, "judging pod templates")  # a memo hit skips the checks inside evaluate
            ask = template.ask
            if ask is None or not ask.any:
                continue
            decision = self._evaluate_workload(template.pod, ask.workload, tenants, operation,
                                               old.get(template.path), expired, nodes, ask)
            allowed = allowed and decision.allowed
            located = tuple(self._fixed(obj, template, template.locate(d), tenants, expired, nodes)
                            for d in decision.diagnostics)
            judged.append((template, located))
        if not judged:
            return _unchecked(obj)
        return Decision(allowed, templates.joined(judged), subject_of(obj), checked=True)

    def _fixed(self, obj: Mapping[str, Any], template: templates.Template, d: Diagnostic, tenants: Sequence[str],
               expired: budget.Expired, nodes: Nodes) -> Diagnostic:
        """A located finding whose fix, moved onto the object's own fields, is written as the object's JSON Patch:
        the patch found on the template's pod spec, where that is the object's own, else the edits applied to the
        template's part of the object (a copy of that part alone: linear in the template,
        however many templates the object has). For a template built from fields outside a pod spec, the fix is
        kept only once the template, built again from the edited part, is admitted (a podSpecPatch may set the
        field the fix edits); otherwise it is dropped and the hint keeps it in words."""
        if d.fix is None:
            return d
        if template.direct and all(f.patch for f in (d.fix, *d.fix.alternatives)):
            return d  # the pod spec is the object's own: the patch found on it, moved, is the object's
        base = template.base
        part = value_at(obj, base) if base else obj
        if not isinstance(part, Mapping):
            return replace(d, fix=None)

        def patched(fix: Fix) -> tuple[Fix, Mapping[str, Any]] | None:
            local = fix.relocated(lambda p: p[len(base):] if p[:len(base)] == base else None)
            if local is None:
                return None
            doc, ops = local.apply(part)
            return replace(fix, patch=tuple({**op, "path": (*base, *op["path"])} for op in ops)), doc

        found = patched(d.fix)
        if found is None:
            return replace(d, fix=None)
        fix, doc = found
        if template.direct:
            alternatives = tuple(each[0] for each in map(patched, fix.alternatives) if each is not None)
            return replace(d, fix=replace(fix, alternatives=alternatives))
        # the alternatives would each need a check of their own: the hint names them, the JSON has the first fix
        fix = replace(fix, alternatives=())
        again = template.again(obj, doc)
        ask = again.ask if again is not None else None
        admitted = ask is None or not ask.any or self._evaluate_workload(
            again.pod, ask.workload, tenants, "CREATE", None, expired, nodes, ask).diagnostics == ()  # type: ignore[union-attr]
        return replace(d, fix=fix if admitted else None)

    def _judge(self, template: Mapping[str, Any], workload: Workload, tenants: tuple[str, ...],
               request: GpuRequest | None, fraction: fractions.Fraction | None,
               expired: budget.Expired, nodes: Nodes) -> tuple[bool, tuple[Diagnostic, ...]] | None:
        """The verdict and findings (each with its checked fix) on an object without its instance fields; None
        when it asks for no GPU. ``request``: the workload's, when already read; ``fraction``: its KAI annotations
        (KAI's fractional GPUs ask by annotation, not by resource)."""
        if request is None:
            request = read_gpu_request(workload)
        kai = self._kai_findings(template, workload, tenants, fraction) if fraction is not None else ()
        if request.empty:
            return None if fraction is None else (not any(d.severity == "error" for d in kai), kai)
        judged = self._judge_request(template, workload, tenants, request, expired, nodes)
        if not kai:
            return judged
        allowed, diagnostics = judged if judged is not None else (True, ())
        return allowed and not any(d.severity == "error" for d in kai), (*kai, *diagnostics)

    def _kai_findings(self, obj: Mapping[str, Any], workload: Workload, tenants: tuple[str, ...],
                      fraction: fractions.Fraction) -> tuple[Diagnostic, ...]:
        """What is wrong with a KAI fractional-GPU pod: what KAI refuses in its annotations (first: such a pod
        never runs), else the sharing mode its tenant may not use, else the classes outside the tenant's that KAI
        may place it on (with a pin to one of the tenant's, checked)."""
        if fraction.problems:
            return fractions.invalid(fraction, self._severity["kai-annotation-invalid"])
        access, severity = self.access(tenants), self._severity["tenant-sharing-mode-denied"]
        mode = fractions.finding(fraction, access, severity)
        if mode is not None or access.classes is None:
            return (mode,) if mode is not None else ()
        outside = self._kai_outside(workload, access)
        if not outside:
            return ()
        fix = next((f for f in self._kai_pins(workload, access) if not self._kai_outside(
            find_workload(f.apply(obj)[0]), access)), None)  # type: ignore[arg-type]
        if fix is not None:
            fix = replace(fix, patch=fix.apply(obj)[1])
        return (fractions.class_finding(fraction, access, outside, fix, severity),)

    def _kai_outside(self, workload: Workload, access: Access) -> tuple[str, ...]:
        """The classes outside the tenant's that KAI may place a fractional-GPU pod on: those offering whole GPUs
        (nvidia.com/gpu, of which KAI reserves one to share) that the pod's placement does not exclude."""
        placement = read_placement(workload, tolerations=bool(self._tainted))
        fitting, _ = self._fitting_classes(fractions.RESERVED)
        conflicts = self._conflicts(placement, workload.spec_path, self._untolerated_by(placement))
        return tuple(self._classes[i].name for i in fitting if conflicts[i] is None
                     and self._classes[i].name not in (access.classes or ()))

    def _kai_pins(self, workload: Workload, access: Access) -> Iterator[Fix]:
        """A pin to each of the tenant's classes that offers whole GPUs, in policy order: its nodeSelector entries
        (replacing the pod's where they differ) and tolerations of its nodes' taints."""
        stated = workload.pod_spec.get("nodeSelector")
        stated = stated if isinstance(stated, Mapping) else {}
        tolerations = read_placement(workload).tolerations
        for view in self._classes:
            if view.name not in (access.classes or ()) or not view.fits(fractions.RESERVED):
                continue
            edits: list[SetNodeSelector | AddToleration] = [
                SetNodeSelector(workload.spec_path, k, v, overrides=k in stated) for k, v in view.node_selector
                if stated.get(k) != v]
            edits += [AddToleration(workload.spec_path, t.key, "Equal" if t.value else "Exists", t.value, t.effect)
                      for t in view.taints if not t.tolerated_by(tolerations)]
            if edits:
                yield Fix((Pin(view.name, tuple(edits)),))

    def _judge_request(self, template: Mapping[str, Any], workload: Workload, tenants: tuple[str, ...],
                       request: GpuRequest, expired: budget.Expired,
                       nodes: Nodes) -> tuple[bool, tuple[Diagnostic, ...]] | None:
        """The verdict and findings on a workload's nvidia.com/ request (not empty)."""
        beyond = self.beyond_every_class(workload, request)
        if beyond is not None:
            return beyond.severity != "error", (beyond,)
        budget.check(expired, "applying the rules")
        found = self._assess(template, workload, request, tenants, nodes)
        if not found.findings:
            return True, ()

        def reassess(obj: Mapping[str, Any], tenants: tuple[str, ...],
                     request: GpuRequest | None = None) -> remedies.Assessment | None:
            budget.check(expired, "searching for a fix")
            return self._reassess(obj, tenants, request, nodes)

        diagnostics = remedies.remedy(found, self._context, reassess)
        return not any(d.severity == "error" for d in diagnostics), diagnostics

    def _reassess(self, obj: Mapping[str, Any], tenants: tuple[str, ...],
                  request: GpuRequest | None = None, nodes: Nodes | None = None) -> remedies.Assessment | None:
        """What the rules find in an edited object (None if the edit left it no GPU request)."""
        workload = find_workload(obj)
        if request is None and workload is not None:
            request = read_gpu_request(workload)
        if workload is None or request is None or request.empty:
            return None
        return self._assess(obj, workload, request, tenants, self._nodes if nodes is None else nodes)

    def beyond_every_class(self, workload: Workload, request: GpuRequest) -> Diagnostic | None:
        """The finding for a pod more GPU containers than one node of any class holds, or None.

        Each such container needs at least one device on the pod's one node, so no edit of amounts, placement or
        namespace admits the pod: it is refused before any rule or fix search runs, whatever its size (a legal
        pod may carry thousands of containers). Not a new rule: it is gpu-request-unsatisfiable, in its mode."""
        needed = request.gpu_containers
        if needed <= self._largest[0]:
            return None
        most, name = self._largest
        where = (f"the largest node class, {name}, holds {most} GPU devices per node" if name
                 else "the policy has no node class that offers a GPU")
        return Diagnostic(
            "gpu-request-unsatisfiable",
            f"the pod has {needed} containers that ask for GPUs, and each needs at least one device on the one node "
            f"the pod runs on; {where}, so no edit of its requests, placement or namespace can place it and it would "
            "stay Pending",
            (*workload.spec_path, "containers"),
            f"split the work into pods of at most {most} GPU containers (a Job's parallelism, a Deployment's "
            "replicas, or a LeaderWorkerSet's group size)" if most else "ask the platform team for a GPU node class",
            severity=self._severity["gpu-request-unsatisfiable"])

    def _assess(self, obj: Mapping[str, Any], workload: Workload, request: GpuRequest,
                tenants: tuple[str, ...], nodes: Nodes) -> remedies.Assessment:
        placement = read_placement(workload, tolerations=bool(self._tainted))
        if placement.node_name is not None and placement.node_name in nodes:
            placement = _on_node(placement, nodes[placement.node_name], self._selector_keys, workload.spec_path)
        if self._tainted:
            placement = _with_implied_tolerations(placement, request)
        untolerated = self._untolerated_by(placement)
        fitting, fitting_views = self._fitting_classes(request.totals)
        if placement.unconstrained and not untolerated:
            conflicts, candidates = self._no_conflicts, fitting_views
        else:
            conflicts = self._conflicts(placement, workload.spec_path, untolerated)
            candidates = tuple(self._classes[i] for i in fitting if conflicts[i] is None)
        facts = Facts(request, placement, self._classes, conflicts, candidates, self.access(tenants),
                      self._tenant_access, fitting_views)
        if self._hami is not None:
            facts = self._hami.narrow(facts, obj, workload)
        # Rules report "error"; a copy is made only for a finding the policy sets to another severity.
        found = tuple(d if d.severity == (severity := self._severity[rule.id]) else replace(d, severity=severity)
                      for rule in RULES for d in rule.check(facts))
        return remedies.Assessment(obj, tenants, workload, facts, found, request)

    def access(self, tenants: Sequence[str]) -> Access:
        """What the given tenants together allow (the default rules for none; nothing for unknown names)."""
        names = _tenant_names(tenants)
        if not names:
            return self._default
        unknown = tuple(n for n in names if n not in self._tenants)
        if unknown:
            return Access(f"tenant {', '.join(unknown)}", frozenset(), frozenset(), unknown)
        if len(names) == 1:
            return self._tenants[names[0]].access
        return _intersect([self._tenants[n].access for n in names], names)

    def _fitting_classes(self, totals: tuple[tuple[str, int], ...]) -> tuple[tuple[int, ...], tuple[ClassView, ...]]:
        """The classes one node of which offers all of ``totals``, in policy order, as indices and views
        (memoised: the pods of one template, and most pods of a cluster, ask for the same few amounts)."""
        found = self._fitting.get(totals)
        if found is None:
            indices = tuple(i for i, view in enumerate(self._classes) if view.fits(totals))
            found = (indices, tuple(self._classes[i] for i in indices))
            if len(self._fitting) >= _FITTING_CACHE_SIZE:
                self._fitting.clear()  # bounded, whatever callers send; refilled by the next reviews
            self._fitting[totals] = found
        return found

    def _conflicts(self, placement: Placement, spec_path: Path,
                   untolerated: tuple[tuple[int, NodeTaint], ...]) -> tuple[Conflict | None, ...]:
        """placement_conflict for every class, aligned with the classes (the same values, faster).

        A nodeSelector entry key=value excludes exactly the classes that know the key but may not carry
        the value; assigning in reverse lets each class keep its first excluding entry, as
        placement_conflict reports it. Affinity terms, rarer and richer, are checked class by class, and a
        taint the pod does not tolerate excludes what nothing else does.
        """
        conflicts: list[Conflict | None] = [None] * len(self._classes)
        for req in reversed(placement.node_selector):
            if req.operator != "In" or len(req.values) != 1:
                return tuple(placement_conflict(placement, view, spec_path) for view in self._classes)
            excluded = (self._knows.get(req.key, frozenset()) - self._carries.get((req.key, req.values[0]),
                                                                                  frozenset())) | self._lacking(req.key)
            if excluded:
                conflict = Conflict(req.path, requirement_field(req, placement), req)
                for i in excluded:
                    conflicts[i] = conflict
        if placement.terms:
            for i, view in enumerate(self._classes):
                if conflicts[i] is None:
                    conflicts[i] = terms_conflict(placement.terms, view)
        for i, taint in untolerated:
            if conflicts[i] is None:
                conflicts[i] = Conflict((*spec_path, "tolerations"), "tolerations", None, taint)
        return tuple(conflicts)

    def _untolerated_by(self, placement: Placement) -> tuple[tuple[int, NodeTaint], ...]:
        """(class index, taint) for every tainted class the pod's tolerations leave out (memoised: a cluster's
        pods carry few distinct tolerations)."""
        if not self._tainted:
            return ()
        key = (placement.tolerations, placement.node_name is not None)
        found = self._untolerated.get(key)
        if found is None:
            found = tuple((i, taint) for i in sorted(self._tainted)
                          if (taint := self._classes[i].untolerated(placement.tolerations, placement.node_name))
                          is not None)
            if len(self._untolerated) < _FITTING_CACHE_SIZE:
                self._untolerated[key] = found
        return found

    def _lacking(self, key: str) -> frozenset[int]:
        """Indices of the classes whose nodes surely carry no label ``key`` (memoised per key)."""
        found = self._lacks.get(key)
        if found is None:
            found = frozenset(i for i, view in enumerate(self._classes) if view.lacks(key))
            if len(self._lacks) < _FITTING_CACHE_SIZE:
                self._lacks[key] = found
        return found

    def _unchanged(self, obj: Mapping[str, Any], new: Workload, request: GpuRequest,
                   old_obj: Mapping[str, Any] | None) -> bool:
        """Ratcheting (Kyverno-style): an UPDATE keeping GPU requests, placement and the GPU annotations cannot make
        things worse."""
        old = find_workload(old_obj)
        if old is None or old_obj is None or old.spec_path != new.spec_path:
            return False
        return (read_gpu_request(old) == request and placement_fields(old) == placement_fields(new)
                and fractions.gpu_annotations(old_obj, old) == fractions.gpu_annotations(obj, new))


def without_instance_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object less the metadata that makes one object of a template differ from the next (its name, uid,
    resourceVersion, timestamps, managedFields): what the rules judge. A controller's pods differ only there,
    so they share one verdict (the engine's memo); messages name the object from its own metadata."""
    metadata = obj.get("metadata")
    if type(metadata) is not dict or not INSTANCE_FIELDS.intersection(metadata):
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k not in INSTANCE_FIELDS}}


_MemoKey = tuple[tuple[str, ...], bytes, tuple[Any, ...]]


def _memo_key(template: Mapping[str, Any], tenants: tuple[str, ...], node: tuple[Any, ...] = ()) -> _MemoKey | None:
    """The memo's key: the tenants, the object's exact JSON and what a per-call node list says of the node it names
    (`_node_part`), or None where that JSON would not tell the object from another (below) or it is too large to be
    worth keeping.

    Objects are as json.loads or yaml.safe_load build them. JSON cannot write a date or a str subclass (YAML can
    build the first): those raise here and are judged unremembered. orjson writes NaN and ±Infinity as null,
    which a null also is: a key with a null in it is kept only when it reads back as the object.
    """
    try:
        data = orjson.dumps(template, option=_KEY_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    if len(data) > _MEMO_MAX_KEY_BYTES or (b"null" in data and orjson.loads(data) != template):
        return None
    return tenants, data, node


def _node_part(workload: Workload, nodes: Nodes, own: Nodes) -> tuple[Any, ...]:
    """What the memo must tell apart beyond the object: the labels a per-call node list gives the node the pod names
    (the same pod on the same node is judged again once the node's labels change, or once it is known at all).
    The engine's own list is fixed, so the object alone keys its verdicts."""
    name = workload.pod_spec.get("nodeName")
    if nodes is own or not isinstance(name, str) or name not in nodes:
        return ()
    labels = nodes[name]
    return (name, None) if labels is None else (name, *sorted(labels.items()))


def _on_node(placement: Placement, labels: Mapping[str, str] | None, keys: Sequence[str], spec_path: Path) -> Placement:
    """The placement of a pod bound to a node whose labels are known: for every label key a class selects by, the
    node's value (or its absence), as requirements at spec.nodeName, so exactly the classes that node can be of
    remain (the scheduler is bypassed; the kubelet of that node admits the pod). ``labels`` None: no such node
    exists, so no class remains (each key required absent, and the placement says why)."""
    if labels is None:
        labels, placement = {}, replace(placement, node_missing=True)
    at = (*spec_path, "nodeName")
    pinned = tuple(NodeRequirement(key, "In", (labels[key],), at) if isinstance(labels.get(key), str)
                   else NodeRequirement(key, "DoesNotExist", (), at) for key in keys)
    return replace(placement, node_selector=(*placement.node_selector, *pinned))


def _with_implied_tolerations(placement: Placement, request: GpuRequest) -> Placement:
    """The pod's tolerations plus what the ExtendedResourceToleration admission plugin adds to a pod asking for an
    extended resource: {key: <resource>, operator: Exists, effect: NoSchedule} (kubernetes plugin/pkg/admission/
    extendedresourcetoleration; GKE and AKS enable it, so GPU nodes tainted nvidia.com/gpu:NoSchedule take GPU pods
    unasked). Counted as present whether the plugin runs or not: a class counted as reachable can only make the
    tenant rule stricter."""
    implied = tuple(Toleration(r, "Exists", "", "NoSchedule") for r in request.resources)
    return replace(placement, tolerations=(*placement.tolerations, *implied))


def _unchecked(obj: Any) -> Decision:
    """Allowed: a custom resource's pods are checked when its operator creates them. One that asks for GPUs in
    any limits or requests gets a notice saying so, so that no GPU object passes `gpupolicy admit` silently."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("kind"), str):
        return ALLOWED
    resources = gpu_resources_anywhere(obj)
    if not resources:
        return ALLOWED
    subject = subject_of(obj)
    notice = Diagnostic(
        NOT_CHECKED,
        f"{subject} ({api_group(obj) or 'core'} API group) asks for {', '.join(resources)} in a kind whose pod "
        "templates gpupolicy does not read, so it is not checked here: its operator or controller creates the "
        "pods, and the webhook checks each of them when it is created", ("kind",),
        "render one of its pods (or the operator's pod template) and run `gpupolicy admit` on it, or make it a "
        "case of an admission test suite", severity="info")
    return Decision(True, (notice,), subject)


def _tenant_names(tenants: Any) -> tuple[str, ...]:
    if isinstance(tenants, str):
        return (tenants,)  # a lone name passed by mistake is still one name, not its characters
    if not isinstance(tenants, Sequence):
        return ()
    return tuple(dict.fromkeys(t for t in tenants if isinstance(t, str)))


def _compile_tenant(doc: TenantDoc, index: int) -> _Tenant:
    """``index``: the tenant's place in the spec's tenants (the admission policy keeps their order), for hints."""
    reqs = selectors.requirements_from(doc.match_labels,
                                       [(e.key, e.operator, e.values) for e in doc.match_expressions])
    access = Access(f"tenant {doc.name}", frozenset(doc.allow), frozenset(doc.classes) if doc.classes else None,
                    allow_path=f"spec.tenants[{index}].allow", classes_path=f"spec.tenants[{index}].classes")
    return _Tenant(doc.name, reqs, access)


def _intersect(accesses: Sequence[Access], names: Sequence[str]) -> Access:
    # The API server calls every matching webhook entry and ANDs their verdicts, so a namespace two
    # tenants select gets only what both allow.
    modes = frozenset.intersection(*(a.modes for a in accesses))
    limited = [a.classes for a in accesses if a.classes is not None]
    classes = frozenset.intersection(*limited) if limited else None
    who = f"tenants {', '.join(names[:-1])} and {names[-1]} together"
    return Access(who, modes, classes, allow_path=" and ".join(a.allow_path for a in accesses),
                  classes_path=" and ".join(a.classes_path for a in accesses if a.classes is not None))


# --- the test-suite document (`gpupolicy test`) -------------------------------------------------------------


class _SuiteModel(BaseModel):
    # defer_build: only `gpupolicy test` validates suites; the webhook and `admit` import this module too.
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
                              use_attribute_docstrings=True, defer_build=True)


class Expectation(_SuiteModel):
    allowed: bool
    """Whether the object must be admitted (warn and audit findings do not deny)."""
    rules: tuple[RuleId | claims.ClaimRule | Literal["workload-not-checked"], ...] | None = None
    """Rule ids that must fire, in any mode, and no others (workload-not-checked counts as one); omit to not
    check them."""
    message: str | None = None
    """A regular expression searched in the text of every finding (messages, paths and fixes)."""


class SuiteCase(_SuiteModel):
    name: str = Field(min_length=1)
    object: dict[str, Any] | None = None
    """The object under test, inline (give object or file)."""
    file: str | None = None
    """A manifest file holding the object, relative to the suite."""
    index: int | None = Field(default=None, ge=0)
    """Which document of the file (0-based); by default the first Pod or pod controller."""
    namespace: str | None = None
    """The object's namespace; defaults to its metadata.namespace, else default."""
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    """Labels of that namespace, added to the suite's namespaces entry (its name label is implicit)."""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"] = "CREATE"
    old_object: dict[str, Any] | None = None
    """The object before an UPDATE."""
    expect: Expectation

    @model_validator(mode="after")
    def _object_or_file(self) -> SuiteCase:
        if (self.object is None) == (self.file is None):
            raise PydanticCustomError("invalid-value", "give exactly one of object or file")
        return self


class SuiteMetadata(_SuiteModel):
    name: str = Field(min_length=1)


class AdmissionTestSuite(_SuiteModel):
    """Table-driven admission tests for one cluster policy (`gpupolicy test`)."""

    api_version: Literal["gpupolicy.dev/v1alpha1"]
    kind: Literal["AdmissionTestSuite"]
    metadata: SuiteMetadata | None = None
    policy: str = Field(min_length=1)
    """The ClusterGPUPolicy file under test, relative to the suite."""
    namespaces: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Labels of the namespaces cases name, so cases need not repeat them."""
    cases: tuple[SuiteCase, ...] = Field(min_length=1)
