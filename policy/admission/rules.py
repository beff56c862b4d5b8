"""Admission rules: the policy as rules see it, the facts about one pod, and one plain function per rule.

Every rule returns diagnostics whose ``code`` is its id and whose ``path`` points into the admitted
object; the engine sets their severity from the rule's mode. A message opens with one summary sentence
(no ". " inside it: the engine cuts warnings there), then gives details. Rules say what is wrong; the fix
is the engine's: it tries the edits policy/admission/remedies.py proposes and keeps one that, applied, admits the pod.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from policy.admission import vgpu
from policy.admission.workloads import GpuRequest, RequestProblem
from policy.hardware.labels import GFD_PREFIXES
from policy.kube.scheduling import AffinityTerm, NodeRequirement, NodeTaint, Placement, Toleration
from policy.resolved.offers import ClassDoc, OfferDoc
from policy.resolved.resolve import GPU, MIG_PREFIX, class_mode_name, describe_offer, mode_name
from policy.spec.diagnostics import Diagnostic, Path, format_path
from policy.spec.model import RuleId, RuleMode
from policy.vgpu.hami import DEFAULT_ATTRIBUTES

# HAMi's resource names (webhook.md §3.3): its scheduler extender serves them, the NVIDIA plugin never does.
HAMI_RESOURCES = DEFAULT_ATTRIBUTES
_MAX_LISTED = 6  # classes named in one message; a 30-class fleet would drown the reader
#: Taint effects that keep a pod off a node: the scheduler's TaintToleration filter reads NoSchedule and
#: NoExecute (PreferNoSchedule only scores); the kubelet, for a pod that names its node, reads NoExecute only.
SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
KUBELET_EFFECTS = frozenset({"NoExecute"})


# --- the compiled policy, as the rules read it -----------------------------------------------------------------


@dataclass(frozen=True)
class OfferView:
    """One resource a class advertises, with what the rules ask of it."""

    resource: str
    per_node: int
    devices_per_node: int
    replicas: int
    shared: bool
    strict: bool
    """The device plugin refuses a container asking for more than one shared replica."""
    modes: tuple[str, ...]
    mig_profile: str | None

    @classmethod
    def from_doc(cls, doc: OfferDoc) -> OfferView:
        return cls(doc.resource, doc.per_node, doc.devices_per_node, doc.replicas, doc.shared,
                   doc.fail_requests_greater_than_one, tuple(doc.modes), doc.mig_profile)

    @property
    def mode_name(self) -> str:
        return mode_name(self.modes)

    def explain(self) -> str:
        """``1 GPU x 8 time-slicing replicas per node``."""
        return describe_offer(self.devices_per_node, self.replicas, self.modes, self.mig_profile) + " per node"


@dataclass(frozen=True)
class ClassView:
    """A node class as the rules see it: the labels its nodes surely carry, and its offers by resource."""

    name: str
    product: str
    mode: str
    mig_strategy: str
    node_selector: tuple[tuple[str, str], ...]
    known: Mapping[str, str]
    """Labels every node of the class carries, as the policy predicts them."""
    labels: Mapping[str, frozenset[str]]
    """Known label key -> every value the nodes may carry (GPU product names come with or without NVIDIA-)."""
    offers: Mapping[str, OfferView]
    absent_prefixes: tuple[str, ...] = ()
    """Label prefixes no node of the class carries beyond ``known`` (GFD's, where GFD does not run)."""
    taints: tuple[NodeTaint, ...] = ()
    """The NoSchedule and NoExecute taints of the class's nodes (PreferNoSchedule keeps no pod away)."""

    @classmethod
    def from_doc(cls, doc: ClassDoc) -> ClassView:
        known = {**doc.node_labels, **doc.node_selector}
        labels = {key: _possible_values(key, value) for key, value in known.items()}
        absent = () if doc.feature_discovery else GFD_PREFIXES
        offers = {o.resource: OfferView.from_doc(o) for o in doc.offers}
        name = class_mode_name(doc.mode, (o.modes for o in offers.values()))
        taints = tuple(NodeTaint(t.key, t.value, t.effect) for t in doc.taints if t.effect in SCHEDULING_EFFECTS)
        return cls(doc.name, doc.product, name, doc.mig_strategy, tuple(sorted(doc.node_selector.items())),
                   known, labels, offers, absent, taints)

    def lacks(self, key: str) -> bool:
        """Whether no node of the class carries the label at all."""
        return key not in self.known and key.startswith(self.absent_prefixes)

    def fits(self, totals: Iterable[tuple[str, int]]) -> bool:
        """Whether one node offers every requested resource in the requested amount."""
        for resource, count in totals:
            offer = self.offers.get(resource)
            if offer is None or offer.per_node < count:
                return False
        return True

    def refuses_above_one(self, resource: str) -> bool:
        """Whether the device plugin of the class's nodes refuses a container asking for more than one replica of
        ``resource`` (shared with failRequestsGreaterThanOne): shared-gpu-request-above-one."""
        offer = self.offers.get(resource)
        return offer is not None and offer.shared and offer.strict

    def untolerated(self, tolerations: Sequence[Toleration], node_name: str | None = None) -> NodeTaint | None:
        """The first taint of the class that keeps the pod off its nodes, or None."""
        effects = KUBELET_EFFECTS if node_name else SCHEDULING_EFFECTS
        return next((t for t in self.taints if t.effect in effects and not t.tolerated_by(tolerations)), None)

    def pin(self) -> str:
        """The nodeSelector that sends a pod to this class: ``nodeSelector {node-pool: h100-train}``."""
        return "nodeSelector {" + ", ".join(f"{k}: {v}" for k, v in self.node_selector) + "}"


def _possible_values(key: str, value: str) -> frozenset[str]:
    # Drivers before R470-ish report "A100-SXM4-40GB" where newer ones say "NVIDIA-A100-SXM4-40GB"
    # (fixtures/nodes), so a product selector either way may match the class's nodes.
    if key.startswith("nvidia.com/") and key.endswith(".product"):
        bare = value.removeprefix("NVIDIA-")
        return frozenset({value, bare, f"NVIDIA-{bare}"})
    return frozenset({value})


@dataclass(frozen=True)
class Access:
    """What the namespace's tenants (or the default) allow: sharing modes and, optionally, classes."""

    who: str
    """``tenant prod``, ``tenants a and b together``, ``namespaces outside every tenant``."""
    modes: frozenset[str]
    classes: frozenset[str] | None
    """None: every class."""
    unknown: tuple[str, ...] = ()
    """Tenant names the policy does not know (the webhook's configuration and policy disagree)."""
    allow_path: str = ""
    """Where the spec lists the modes allowed: ``spec.tenants[1].allow``, ``spec.admission.defaultAllow``."""
    classes_path: str = ""
    """Where the spec lists the classes allowed: ``spec.tenants[2].classes`` (empty for the default rules)."""

    def denies(self, view: ClassView, offer: OfferView) -> tuple[tuple[str, ...], bool]:
        """(modes of the offer not allowed, whether the class itself is outside the allowed classes)."""
        bad = tuple(m for m in offer.modes if m not in self.modes)
        return bad, self.classes is not None and view.name not in self.classes

    def allows(self, view: ClassView, resources: Iterable[str]) -> bool:
        for resource in resources:
            offer = view.offers.get(resource)
            if offer is None:
                return False
            bad, outside = self.denies(view, offer)
            if bad or outside:
                return False
        return True

    def holds(self, view: ClassView, resource: str, count: int, total: int) -> bool:
        """Whether one container may get ``count`` of ``resource`` on the class, one node holds the pod's ``total``
        of it, and the class is this access's: a fix never lowers an amount that such a class holds (it places the
        pod there instead)."""
        offer = view.offers.get(resource)
        if offer is None or offer.per_node < max(count, total) or (count > 1 and view.refuses_above_one(resource)):
            return False
        bad, outside = self.denies(view, offer)
        return not bad and not outside

    def ask(self, modes: Sequence[str], classes: Sequence[str], spec: str = "") -> str:
        """What to ask the platform team for, naming the spec fields to change: ``allow mps
        (spec.tenants[1].allow) for tenant research in ClusterGPUPolicy mixed-fleet``; ``spec`` names the policy."""
        parts = []
        if modes:
            parts.append(f"{join(sorted(modes), 'and')}" + (f" ({self.allow_path})" if self.allow_path else ""))
        if classes:
            parts.append(f"class {join(sorted(classes), 'and')}" + (f" ({self.classes_path})" if self.classes_path
                                                                   else ""))
        return f"allow {join(parts, 'and')} for {self.who}" + (f" in {spec}" if spec else "")

    def describe(self) -> str:
        modes = join(sorted(self.modes), "and") if self.modes else "no sharing mode"
        on = f" on class {join(sorted(self.classes), 'or')}" if self.classes else ""
        return f"{modes}{on}"


# --- placement: can a class's nodes satisfy the pod's nodeSelector, required affinity and tolerations? --------

@dataclass(frozen=True)
class Conflict:
    """Why a pod's placement excludes a class: the requirement (or empty term) no node of the class meets, or
    a taint of its nodes the pod does not tolerate."""

    path: Path
    field: str
    """``nodeSelector``, ``required node affinity`` or ``tolerations``."""
    requirement: NodeRequirement | None
    taint: NodeTaint | None = None

    def explain(self, view: ClassView) -> str:
        if self.taint is not None:
            return f"its nodes carry the taint {self.taint.describe()}, which the pod does not tolerate"
        if self.requirement is None:
            return f"its {self.field} has an empty term, which matches no node"
        key = self.requirement.key
        if view.lacks(key):
            return (f"{self.field} {self.requirement.describe()} excludes it (its nodes carry no {key}: GPU "
                    "Feature Discovery does not label them)")
        have = f"{key}={view.known[key]}" if self.requirement.operator != "DoesNotExist" else key
        return f"{self.field} {self.requirement.describe()} excludes it (its nodes carry {have})"


def placement_conflict(placement: Placement, view: ClassView, spec_path: Path = ()) -> Conflict | None:
    """The first reason the pod cannot land on the class, or None; a label the class does not know never excludes.

    ``spec_path`` locates a taint conflict at the pod spec's tolerations."""
    for req in placement.node_selector:
        if excludes(req, view):
            return Conflict(req.path, requirement_field(req, placement), req)
    return terms_conflict(placement.terms, view) or taint_conflict(placement, view, spec_path)


def requirement_field(req: NodeRequirement, placement: Placement) -> str:
    """How a message names where a placement requirement comes from: the pod's nodeSelector, or the labels of the
    node its spec.nodeName names, where they are known (the engine's node list)."""
    if req.path[-1:] == ("nodeName",) and placement.node_name:
        if placement.node_missing:
            return f"nodeName {placement.node_name} (no such Node)"
        return f"nodeName {placement.node_name} (labelled)"
    return "nodeSelector"


def taint_conflict(placement: Placement, view: ClassView, spec_path: Path = ()) -> Conflict | None:
    taint = view.untolerated(placement.tolerations, placement.node_name) if view.taints else None
    return Conflict((*spec_path, "tolerations"), "tolerations", None, taint) if taint is not None else None


def terms_conflict(terms: Sequence[AffinityTerm], view: ClassView) -> Conflict | None:
    """Why the required node-affinity terms exclude the class (the first term's reason), or None."""
    if not terms:
        return None
    first: Conflict | None = None
    for term in terms:
        conflict = _term_conflict(term, view)
        if conflict is None:
            return None  # terms are ORed: one that may match is enough
        first = first or conflict
    return first


def _term_conflict(term: AffinityTerm, view: ClassView) -> Conflict | None:
    if term.matches_nothing:
        return Conflict(term.path, "required node affinity", None)
    for req in term.requirements:
        if excludes(req, view):
            return Conflict(req.path, "required node affinity", req)
    return None


def excludes(req: NodeRequirement, view: ClassView) -> bool:
    """Whether no node of the class can meet the requirement."""
    values = view.labels.get(req.key)
    if values is None:  # unknown labels never exclude, unless the class surely lacks them
        return view.lacks(req.key) and req.operator in ("In", "Exists", "Gt", "Lt")
    return not any(_satisfies(req, value) for value in values)



def _satisfies(req: NodeRequirement, value: str) -> bool:
    op = req.operator
    if op == "In":
        return value in req.values
    if op == "NotIn":
        return value not in req.values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    bound = _integer(req.values[0]) if len(req.values) == 1 else None
    if bound is None:
        return True  # an unreadable bound is the API server's to refuse, not ours to judge
    have = _integer(value)
    return have is not None and (have > bound if op == "Gt" else have < bound)


def _integer(text: str) -> int | None:
    return int(text) if re.fullmatch(r"[+-]?\d{1,18}", text, re.ASCII) else None


# --- the facts of one evaluation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """Everything the rules need about one pod (spec or template), computed once by the engine."""

    request: GpuRequest
    placement: Placement
    classes: tuple[ClassView, ...]
    conflicts: tuple[Conflict | None, ...]
    """Aligned with ``classes``: why the placement excludes each class, or None."""
    candidates: tuple[ClassView, ...]
    """Classes the pod may land on: placement allows them and one node offers the whole request."""
    access: Access
    tenants: tuple[Access, ...] = ()
    """What each tenant of the policy allows, to suggest one that may run the pod."""

    fitting: tuple[ClassView, ...] | None = None
    """Classes one node of which offers the whole request, in policy order (the engine knows them from
    its index; None: work them out here)."""
    hami: vgpu.HamiPod | None = None
    """The pod as HAMi takes it (classes and candidates are then the vgpu classes only); None for other pods."""

    @property
    def placeable(self) -> tuple[ClassView, ...]:
        return tuple(c for c, conflict in zip(self.classes, self.conflicts, strict=True) if conflict is None)

    @functools.cached_property
    def _position(self) -> dict[int, int]:
        return {id(c): i for i, c in enumerate(self.classes)}

    def conflict_of(self, view: ClassView) -> Conflict | None:
        position = self._position.get(id(view))
        if position is None:  # an equal view built elsewhere: compare by value, as before
            position = self.classes.index(view)
        return self.conflicts[position]

    def landing(self, resource: str) -> tuple[ClassView, ...]:
        """Where the pod may land as far as ``resource`` goes: the candidates or, when no class can run the
        whole request (another rule says why), every placeable class offering the resource, so that the
        other violations are reported at once too, not after the first is fixed."""
        if self.candidates:
            return self.candidates
        return tuple(c for c in self.placeable if resource in c.offers)

    @functools.cached_property
    def no_candidate(self) -> tuple[Diagnostic, ...]:
        """Why no class can run the pod (empty if one can); two rules read it, so it is worked out once."""
        return _no_candidate(self)


RuleCheck = Callable[[Facts], tuple[Diagnostic, ...]]


@dataclass(frozen=True)
class Rule:
    id: RuleId
    default_mode: RuleMode
    summary: str
    check: RuleCheck


# --- where the pod may run, in words ------------------------------------------------------------------------------


def _may_land(facts: Facts, classes: str) -> str:
    """``the scheduler may place the pod on class a or b``; a pod naming its node bypasses the scheduler."""
    node = facts.placement.node_name
    if node:
        return (f"the pod names node {node} (spec.nodeName bypasses the scheduler), and that node may be of "
                f"class {classes} as far as gpupolicy can tell")
    return f"the scheduler may place the pod on class {classes}"


def _stays(facts: Facts) -> str:
    node = facts.placement.node_name
    return f"so the kubelet of node {node} would refuse it" if node else "so it would stay Pending"


def _pending(facts: Facts, resource: str) -> str:
    node = facts.placement.node_name
    if node:
        return f" The pod would fail with reason OutOf{resource}."
    return f' Its scheduling events would read "Insufficient {resource}".'


# --- gpu-request-invalid ------------------------------------------------------------------------------------------


def check_request_valid(facts: Facts) -> tuple[Diagnostic, ...]:
    """An nvidia.com/ amount the API server refuses: not a quantity, not a whole number, no limit, or a
    request other than the limit."""
    return tuple(_invalid(p) for p in facts.request.problems)


def _invalid(problem: RequestProblem) -> Diagnostic:
    where = f'container "{problem.container}"'
    given = _shown(problem.given)
    api_path = format_path(problem.path).replace('["', "[").replace('"]', "]")
    if problem.kind == "limit-missing":
        what = f"{where} requests {problem.resource}: {given} without a limit"
        said = f"{api_path.rsplit('[', 1)[0].removesuffix('.requests')}.limits: Required value: {problem.reason}"
    else:
        what = f"{where} asks for {problem.resource}: {given} in {problem.field}"
        said = f"{api_path}: Invalid value: {given}: {problem.reason}"
    return Diagnostic(
        "gpu-request-invalid",
        f"{what}, which the API server refuses ({problem.reason}). Extended resources such as {problem.resource} "
        "are whole devices: the API server accepts only non-negative integers, set as a limit, with a request, "
        f"if any, equal to it; it would answer \"{said}\" and never create the object.",
        problem.path)


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value) if isinstance(value, int | float) else repr(value)[:40]


# --- no candidate: gpu-request-unsatisfiable and mig-strategy-mismatch ------------------------------------------


def check_request_unsatisfiable(facts: Facts) -> tuple[Diagnostic, ...]:
    """No class can run the pod: it would stay Pending ("Insufficient nvidia.com/gpu")."""
    return tuple(d for d in facts.no_candidate if d.code == "gpu-request-unsatisfiable")


def check_mig_strategy_mismatch(facts: Facts) -> tuple[Diagnostic, ...]:
    """No class can run the pod because it names MIG devices the way another MIG strategy does."""
    return tuple(d for d in facts.no_candidate if d.code == "mig-strategy-mismatch")


def _no_candidate(facts: Facts) -> tuple[Diagnostic, ...]:
    if facts.candidates or not facts.request.totals:
        return ()
    placeable = facts.placeable
    found = []
    for resource, count in facts.request.totals:
        if not any(c.fits(((resource, count),)) for c in placeable):
            found.append(_resource_problem(facts, resource, count, placeable))
    return tuple(found) or (_combination(facts),)


def _resource_problem(facts: Facts, resource: str, count: int, placeable: Sequence[ClassView]) -> Diagnostic:
    too_few = [c for c in placeable if resource in c.offers]
    if too_few:
        return _too_many(facts, resource, count, too_few)
    elsewhere = [c for c in facts.classes if c.fits(((resource, count),))]
    # A class only its taints keep the pod from is the answer, before any MIG naming the pod may have missed:
    # the pod asked for what that class offers, and its selector and affinity did not say to avoid it (a NotIn
    # that leaves a MIG class and a tainted whole-GPU class is fixed by the toleration, not by a MIG name).
    if any(facts.conflict_of(c).taint is not None for c in elsewhere):  # type: ignore[union-attr]
        return _excluded_by_placement(facts, resource, count, elsewhere)
    if _is_mig_mismatch(resource, placeable):
        return _mig_mismatch(facts, resource, count, placeable)
    if elsewhere:
        return _excluded_by_placement(facts, resource, count, elsewhere)
    return _not_offered(facts, resource, count)


def _too_many(facts: Facts, resource: str, count: int, too_few: Sequence[ClassView]) -> Diagnostic:
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"the pod requests {count} {resource}, more than any node it may run on offers, {_stays(facts)}."
        f" Per class: {_per_class(facts, resource, count)}.{_pending(facts, resource)}",
        facts.request.first_path(resource))


def _is_mig_mismatch(resource: str, placeable: Sequence[ClassView]) -> bool:
    offered = {r for c in placeable for r in c.offers}
    if resource.startswith(MIG_PREFIX):
        # A MIG class whose devices claims alone reach (DRA without the extended-resource bridge) does run the
        # mixed strategy: the request is unsatisfiable for that reason, which _class_reason says.
        claim_only = any(c.mig_strategy == "mixed" and not c.offers for c in placeable)
        return GPU in offered and not claim_only and not any(r.startswith(MIG_PREFIX) for r in offered)
    return resource == GPU and any(c.mig_strategy == "mixed" for c in placeable)


def _mig_mismatch(facts: Facts, resource: str, count: int, placeable: Sequence[ClassView]) -> Diagnostic:
    path = facts.request.first_path(resource)
    if resource == GPU:
        return Diagnostic(
            "mig-strategy-mismatch",
            f"the pod requests {GPU}, but the nodes it may run on use the MIG mixed strategy, which advertises "
            f"MIG devices as {MIG_PREFIX}<profile> instead. Per class: {_per_class(facts, resource, count)}."
            + _pending(facts, resource),
            path)
    singles = [c for c in placeable if c.mig_strategy == "single"]
    if singles:
        why = f"class {_names(singles)} uses the MIG single strategy, which advertises its MIG devices as {GPU}"
    else:
        why = f"no class here runs MIG with the mixed strategy ({_modes(placeable)})"
    return Diagnostic(
        "mig-strategy-mismatch",
        f"the pod requests {resource}, a MIG mixed-strategy resource that no node it may run on advertises."
        f" {why[0].upper()}{why[1:]}.{_pending(facts, resource)}",
        path)


def _excluded_by_placement(facts: Facts, resource: str, count: int, elsewhere: Sequence[ClassView]) -> Diagnostic:
    conflicts = [(c, facts.conflict_of(c)) for c in elsewhere]
    tainted = [c for c, conflict in conflicts if conflict is not None and conflict.taint is not None]
    others = [conflict for _, conflict in conflicts if conflict is not None and conflict.taint is None]
    reasons = "; ".join(f"{c.name}: {conflict.explain(c)}" for c, conflict in conflicts[:_MAX_LISTED]
                        if conflict is not None)
    fields = list(dict.fromkeys(conflict.field for conflict in others))
    if tainted and others:
        what = (f"the pod does not tolerate the taints of class {_names(tainted)}, and its {join(fields, 'and')} "
                f"excludes every other node class that offers {count} {resource}")
    elif tainted:
        only = "the only node class that offers" if len(tainted) == 1 else "the node classes that offer"
        what = f"the pod does not tolerate the taints of class {_names(tainted)}, {only} {count} {resource}"
    else:
        what = f"the pod's {join(fields, 'and')} excludes every node class that offers {count} {resource}"
    node = facts.placement.node_name
    if node:
        predicates = (["TaintToleration"] if tainted else []) + (["NodeAffinity"] if others else [])
        outcome = f" The kubelet of node {node} would refuse it (Predicate {' and '.join(predicates)} failed)."
    else:
        events = (['"had untolerated taint"'] if tainted else []) + (
            ['"didn\'t match Pod\'s node affinity/selector"'] if others else [])
        outcome = f" Its scheduling events would read {join(events, 'and')}."
    path = facts.conflict_of(tainted[0]).path if tainted else others[0].path  # type: ignore[union-attr]
    return Diagnostic("gpu-request-unsatisfiable", f"{what}, {_stays(facts)}. Per class: {reasons}.{outcome}", path)


def _not_offered(facts: Facts, resource: str, count: int) -> Diagnostic:
    hami = (f" {resource} is HAMi's resource, not advertised by the NVIDIA device plugin (GPU memory per slot is "
            "fixed by the node class)." if resource in HAMI_RESOURCES else "")
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"the pod requests {resource}, which no node class offers, {_stays(facts)}.{hami}"
        f" Per class: {_per_class(facts, resource, count)}.{_pending(facts, resource)}",
        facts.request.first_path(resource))


def _combination(facts: Facts) -> Diagnostic:
    first = facts.request.resources[0]
    wanted = join([f"{n} {r}" for r, n in facts.request.totals], "and")
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"no node class offers {wanted} on one node, {_stays(facts)}."
        f" Per class: {_per_class(facts, None, 0)}.",
        facts.request.first_path(first))


def _per_class(facts: Facts, resource: str | None, count: int) -> str:
    parts = [f"{c.name}: {_class_reason(facts, c, resource, count)}" for c in facts.classes[:_MAX_LISTED]]
    if len(facts.classes) > _MAX_LISTED:
        parts.append(f"and {len(facts.classes) - _MAX_LISTED} more")
    return "; ".join(parts) if parts else "the policy has no node class"


def _class_reason(facts: Facts, view: ClassView, resource: str | None, count: int) -> str:
    """The first real reason the class cannot run the pod: it does not offer the resource, then it offers too
    few on one node, then the pod's nodeSelector or affinity excludes it, then its taints (placement_conflict
    orders the last two). A class that never offers the resource is not "untolerated": tolerating its taint
    would change nothing."""
    resources = [resource] if resource else list(facts.request.resources)
    for r in resources:
        offer = view.offers.get(r)
        if offer is None and not view.offers:
            # A DRA class without the extended-resource bridge: only ResourceClaims reach its devices.
            return f"offers no resource a pod can ask for (its GPUs are claimed through DRA), not {r}"
        if offer is None:
            return f"offers {join(sorted(view.offers)[:3], 'and')}, not {r}"
        need = count if resource else dict(facts.request.totals)[r]
        if offer.per_node < need:
            return f"offers at most {offer.per_node} {r} per node ({offer.explain()})"
    conflict = facts.conflict_of(view)
    if conflict is not None:
        return conflict.explain(view)
    return "offers " + join([f"{view.offers[r].per_node} {r}" for r in resources], "and") + " per node"


# --- shared-gpu-request-above-one ---------------------------------------------------------------------------------


def check_shared_above_one(facts: Facts) -> tuple[Diagnostic, ...]:
    """A container asks for more than one replica of a resource some class it may land on shares."""
    found = []
    for container in facts.request.containers:
        for amount in container.amounts:
            if amount.count <= 1:
                continue
            shared = [c for c in facts.landing(amount.resource) if c.refuses_above_one(amount.resource)]
            if shared:
                found.append(_shared_finding(facts, container.name, amount.resource, amount.count, amount.path, shared))
    return tuple(found)


def _shared_finding(facts: Facts, container: str, resource: str, count: int, path: Path,
                    shared: Sequence[ClassView]) -> Diagnostic:
    where = join([f"{c.name} ({c.offers[resource].explain()})" for c in shared[:_MAX_LISTED]], "or")
    return Diagnostic(
        "shared-gpu-request-above-one",
        f'container "{container}" requests {count} {resource}; shared devices allow 1 per container.'
        f" {_capital(_may_land(facts, where))}, where the device plugin refuses more than 1 shared replica per "
        "container (failRequestsGreaterThanOne) and the kubelet fails the pod with UnexpectedAdmissionError.",
        path)


# --- tenant-sharing-mode-denied ------------------------------------------------------------------------------------


def check_tenant_access(facts: Facts) -> tuple[Diagnostic, ...]:
    """A class the pod may land on uses a sharing mode, or is a class, the namespace's tenants may not use."""
    return tuple(_tenant_finding(facts, resource, denied) for resource, denied in tenant_denials(facts))


Denied = tuple[ClassView, tuple[str, ...], bool]
"""A class the pod may land on, the modes of its offer the access does not allow, whether it is outside the
access's classes."""


def tenant_denials(facts: Facts) -> list[tuple[str, list[Denied]]]:
    """Per requested resource, the classes the pod may land on that the namespace's tenants may not use."""
    found = []
    access = facts.access
    modes, classes = access.modes, access.classes
    for resource in facts.request.resources:
        denied = []
        for view in facts.landing(resource):
            offer = view.offers[resource]
            if modes.issuperset(offer.modes) and (classes is None or view.name in classes):
                continue  # the common case, decided without building denies()' tuple
            bad, outside = access.denies(view, offer)
            if bad or outside:
                denied.append((view, bad, outside))
        if denied:
            found.append((resource, denied))
    return found


def tenant_ask(facts: Facts, spec: str = "") -> str:
    """What the platform team would have to allow for the tenant to run the pod where it may land: ``allow mps
    for tenant research (spec.tenants[1].allow)``; empty when the tenant rule finds nothing."""
    modes: dict[str, None] = {}
    classes: dict[str, None] = {}
    for _, denied in tenant_denials(facts):
        for view, bad, outside in denied:
            modes.update(dict.fromkeys(bad))  # the spec's own mode names: mig and time-slicing, not mig+time-slicing
            if outside:
                classes[view.name] = None
    return facts.access.ask(list(modes), list(classes), spec) if modes or classes else ""


def _tenant_finding(facts: Facts, resource: str,
                    denied: Sequence[tuple[ClassView, tuple[str, ...], bool]]) -> Diagnostic:
    access = facts.access
    bad_modes = sorted({v.offers[resource].mode_name for v, bad, _ in denied if bad})
    if access.unknown:
        summary = f"tenant {join(access.unknown, 'and')} is not in the admission policy, so this pod may use no GPU"
        where = join([v.name for v, _, _ in denied[:_MAX_LISTED]], "or")
    elif bad_modes:
        summary = f"{access.who} may not use {join(bad_modes, 'or')} GPUs, where this pod may run"
        where = join([f"{v.name} ({_denial(v.offers[resource], bad, outside)})"
                       for v, bad, outside in denied[:_MAX_LISTED]], "or")
    else:
        summary = f"{access.who} may not use class {_names([v for v, _, _ in denied])}, where this pod may run"
        where = join([f"{v.name} ({_denial(v.offers[resource], bad, outside)})"
                       for v, bad, outside in denied[:_MAX_LISTED]], "or")
    return Diagnostic(
        "tenant-sharing-mode-denied",
        f"{summary}. For {resource} {_may_land(facts, where)}; {access.who} may use {access.describe()}.",
        facts.request.first_path(resource))


def _denial(offer: OfferView, bad: tuple[str, ...], outside: bool) -> str:
    parts = [offer.mode_name] if bad else []
    if outside:
        parts.append("not one of the tenant's classes")
    return ", ".join(parts)


# --- the rule table ------------------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule("gpu-request-invalid", "enforce",
         "an nvidia.com/ amount the API server refuses (not a whole number, no limit, a request other than the "
         "limit); always enforced", check_request_valid),
    Rule("mig-strategy-mismatch", "enforce",
         "requests MIG devices under the other MIG strategy's resource name", check_mig_strategy_mismatch),
    Rule("gpu-request-unsatisfiable", "enforce",
         "no node class can run the pod's GPU request: it would stay Pending", check_request_unsatisfiable),
    Rule("shared-gpu-request-above-one", "enforce",
         "a container asks for more than one shared replica on a class the scheduler may pick",
         check_shared_above_one),
    Rule("tenant-sharing-mode-denied", "enforce",
         "the scheduler may pick a class or sharing mode the namespace's tenant may not use", check_tenant_access),
    *(Rule(*rule) for rule in vgpu.RULES),
    # Judged by the engine from the pod's annotations (policy/admission/fractions.py), which Facts do not carry.
    Rule("kai-annotation-invalid", "enforce",
         "a KAI Scheduler fractional-GPU annotation KAI refuses (a gpu-fraction outside (0, 1), a gpu-memory or "
         "device count that is not a positive integer, a container name naming no container, a fraction beside a "
         "whole-GPU limit)", lambda facts: ()),
)


#: Edit kinds (policy.admission.fixes) by what they change: where the pod runs, and what it asks for.
PLACEMENT_EDITS = frozenset({"set-node-selector", "remove-placement", "add-toleration"})
REQUEST_EDITS = frozenset({"set-resource", "rename-resource", "remove-resource"})
#: Each rule's subject, as the edit kinds that answer its findings: a finding's fix (one per object, shared by its
#: findings) holds at least one of them, so the hint speaks of what the rule's message does. A MIG naming mismatch
#: is answered by the other strategy's name or by nodes that advertise the name, never by a toleration alone; a
#: tenant's rule by where the pod runs or what it asks for, never by another namespace. Every rule has a row
#: (tests/policy/test_fix_subjects.py walks them).
SUBJECTS: Mapping[RuleId, frozenset[str]] = {
    "gpu-request-invalid": REQUEST_EDITS,
    "mig-strategy-mismatch": frozenset({"rename-resource", "set-node-selector", "remove-placement"}),
    "gpu-request-unsatisfiable": REQUEST_EDITS | PLACEMENT_EDITS,
    "shared-gpu-request-above-one": REQUEST_EDITS | PLACEMENT_EDITS,
    "tenant-sharing-mode-denied": REQUEST_EDITS | PLACEMENT_EDITS,
    "hami-scheduler-bypassed": frozenset({"set-field", "remove-field", "set-node-selector"}),
    "vgpu-memory-unsatisfiable": frozenset({"set-resource", "remove-resource"}) | PLACEMENT_EDITS,
    "vgpu-count-above-gpus": frozenset({"set-resource"}) | PLACEMENT_EDITS,
    "hami-resource-out-of-range": frozenset({"set-resource", "remove-resource"}),
    "hami-privileged-container": frozenset({"remove-field"}),
    "hami-annotation-invalid": frozenset({"set-field", "remove-field"}),
    "kai-annotation-invalid": frozenset({"set-field", "remove-field"}),
}


# --- wording ----------------------------------------------------------------------------------------------------


def join(items: Sequence[str], word: str) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {word} {items[-1]}"



def _names(views: Sequence[ClassView]) -> str:
    return join([v.name for v in views], "and")


def _modes(views: Sequence[ClassView]) -> str:
    return ", ".join(f"{v.name}: {v.mode}" for v in views[:_MAX_LISTED])


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
