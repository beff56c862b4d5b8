"""Admission rules: the policy as rules see it, the facts about one pod, and one plain function per rule.

Every rule returns diagnostics whose ``code`` is its id and whose ``path`` points into the admitted
object; the engine sets their severity from the rule's mode. A message opens with one summary sentence
(no ". " inside it: the engine cuts warnings there), then gives details; the hint is the fix.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from policy import catalog, hami_rules
from policy.diagnostics import Diagnostic, Path, did_you_mean
from policy.hami import DEFAULT_ATTRIBUTES
from policy.labels import GFD_PREFIXES
from policy.model import RuleId, RuleMode
from policy.offers import ClassDoc, OfferDoc
from policy.resolve import GPU, MIG_PREFIX, describe_offer
from policy.workloads import AffinityTerm, GpuRequest, NodeRequirement, Placement

# HAMi's resource names (webhook.md §3.3): its scheduler extender serves them, the NVIDIA plugin never does.
HAMI_RESOURCES = DEFAULT_ATTRIBUTES
_MAX_LISTED = 6  # classes named in one message; a 30-class fleet would drown the reader


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

    @classmethod
    def from_doc(cls, doc: ClassDoc) -> ClassView:
        known = {**doc.node_labels, **doc.node_selector}
        labels = {key: _possible_values(key, value) for key, value in known.items()}
        absent = () if doc.feature_discovery else GFD_PREFIXES
        return cls(doc.name, doc.product, doc.mode, doc.mig_strategy, tuple(sorted(doc.node_selector.items())),
                   known, labels, {o.resource: OfferView.from_doc(o) for o in doc.offers}, absent)

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
    selector: str = ""
    """The tenant's namespaceSelector, for hints: ``gpu-tier=inference``."""

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

    def describe(self) -> str:
        modes = _join(sorted(self.modes), "and") if self.modes else "no sharing mode"
        on = f" on class {_join(sorted(self.classes), 'or')}" if self.classes else ""
        return f"{modes}{on}"


# --- placement: can a class's nodes satisfy the pod's nodeSelector and required affinity? ---------------------

@dataclass(frozen=True)
class Conflict:
    """Why a pod's placement excludes a class: the requirement (or empty term) no node of the class meets."""

    path: Path
    field: str
    """``nodeSelector`` or ``required node affinity``."""
    requirement: NodeRequirement | None

    def explain(self, view: ClassView) -> str:
        if self.requirement is None:
            return f"its {self.field} has an empty term, which matches no node"
        key = self.requirement.key
        if view.lacks(key):
            return (f"{self.field} {self.requirement.describe()} excludes it (its nodes carry no {key}: GPU "
                    "Feature Discovery does not label them)")
        have = f"{key}={view.known[key]}" if self.requirement.operator != "DoesNotExist" else key
        return f"{self.field} {self.requirement.describe()} excludes it (its nodes carry {have})"


def placement_conflict(placement: Placement, view: ClassView) -> Conflict | None:
    """The first reason the pod cannot land on the class, or None; a label the class does not know never excludes."""
    for req in placement.node_selector:
        if _excludes(req, view):
            return Conflict(req.path, "nodeSelector", req)
    return terms_conflict(placement.terms, view)


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
        if _excludes(req, view):
            return Conflict(req.path, "required node affinity", req)
    return None


def _excludes(req: NodeRequirement, view: ClassView) -> bool:
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
    return int(text) if re.fullmatch(r"[+-]?\d{1,18}", text) else None


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
    """Classes the scheduler may pick: placement allows them and one node offers the whole request."""
    access: Access
    tenants: tuple[Access, ...] = ()
    """What each tenant of the policy allows, to suggest one that may run the pod."""

    fitting: tuple[ClassView, ...] | None = None
    """Classes one node of which offers the whole request, in policy order (the engine knows them from
    its index; None: work them out here)."""
    hami: hami_rules.HamiPod | None = None
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

    @functools.cached_property
    def no_candidate(self) -> tuple[Diagnostic, ...]:
        """Why no class can run the pod (empty if one can); two rules read it, so it is worked out once."""
        return _no_candidate(self)

    def first_alternative(self, acceptable: Callable[[ClassView], bool]) -> ClassView | None:
        """The first of ``alternatives``, without looking further (hints name one class)."""
        resources = self.request.resources
        fitting = self.fitting if self.fitting is not None else \
            (c for c in self.classes if c.fits(self.request.totals))
        return next((c for c in fitting if self.access.allows(c, resources) and acceptable(c)), None)


RuleCheck = Callable[[Facts], tuple[Diagnostic, ...]]


@dataclass(frozen=True)
class Rule:
    id: RuleId
    default_mode: RuleMode
    summary: str
    check: RuleCheck


# --- no candidate: gpu-request-unsatisfiable and mig-strategy-mismatch ------------------------------------------


def check_request_unsatisfiable(facts: Facts) -> tuple[Diagnostic, ...]:
    """No class can run the pod: it would stay Pending ("Insufficient nvidia.com/gpu")."""
    return tuple(d for d in facts.no_candidate if d.code == "gpu-request-unsatisfiable")


def check_mig_strategy_mismatch(facts: Facts) -> tuple[Diagnostic, ...]:
    """No class can run the pod because it names MIG devices the way another MIG strategy does."""
    return tuple(d for d in facts.no_candidate if d.code == "mig-strategy-mismatch")


def _no_candidate(facts: Facts) -> tuple[Diagnostic, ...]:
    if facts.candidates:
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
    if _is_mig_mismatch(resource, placeable):
        return _mig_mismatch(facts, resource, count, placeable)
    elsewhere = [c for c in facts.classes if c.fits(((resource, count),))]
    if elsewhere:
        return _excluded_by_placement(facts, resource, count, elsewhere)
    return _not_offered(facts, resource, count)


def _pending(resource: str) -> str:
    return f' Its scheduling events would read "Insufficient {resource}".'


def _too_many(facts: Facts, resource: str, count: int, too_few: Sequence[ClassView]) -> Diagnostic:
    best = max(too_few, key=lambda c: c.offers[resource].per_node)
    offer = best.offers[resource]
    if all(c.offers[resource].shared for c in too_few):
        hint = (f"request {resource}: 1: class {best.name} shares its devices ({offer.explain()}), and more "
                "shared replicas add no compute")
    else:
        hint = (f"request at most {offer.per_node} {resource} per pod (class {best.name}: {offer.explain()}), "
                "or split the work across pods")
    elsewhere = [c for c in facts.classes if c not in too_few and c.fits(((resource, count),))]
    if elsewhere:
        hint += f", or pin the pod to class {elsewhere[0].name} with {elsewhere[0].pin()}"
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"the pod requests {count} {resource}, more than any node it may run on offers, so it would stay Pending."
        f" Per class: {_per_class(facts, resource, count)}.{_pending(resource)}",
        facts.request.first_path(resource), hint)


def _is_mig_mismatch(resource: str, placeable: Sequence[ClassView]) -> bool:
    offered = {r for c in placeable for r in c.offers}
    if resource.startswith(MIG_PREFIX):
        return GPU in offered and not any(r.startswith(MIG_PREFIX) for r in offered)
    return resource == GPU and any(c.mig_strategy == "mixed" for c in placeable)


def _mig_mismatch(facts: Facts, resource: str, count: int, placeable: Sequence[ClassView]) -> Diagnostic:
    path = facts.request.first_path(resource)
    if resource == GPU:
        mixed = [c for c in placeable if c.mig_strategy == "mixed"]
        offered = sorted({r for c in mixed for r in c.offers if r.startswith(MIG_PREFIX)})
        return Diagnostic(
            "mig-strategy-mismatch",
            f"the pod requests {GPU}, but the nodes it may run on use the MIG mixed strategy, which advertises "
            f"MIG devices as {MIG_PREFIX}<profile> instead. Per class: {_per_class(facts, resource, count)}."
            + _pending(resource),
            path, _one_of(offered))
    singles = [c for c in placeable if c.mig_strategy == "single"]
    if singles:
        why = (f"class {_names(singles)} uses the MIG single strategy, which advertises its MIG devices as {GPU}")
        hint = f"request {GPU}: {count} instead, and pin the pod to class {singles[0].name} with {singles[0].pin()}"
    else:
        why = f"no class here runs MIG with the mixed strategy ({_modes(placeable)})"
        hint = f"request {GPU}: {count} instead: this cluster's GPUs are advertised as {GPU}"
    return Diagnostic(
        "mig-strategy-mismatch",
        f"the pod requests {resource}, a MIG mixed-strategy resource that no node it may run on advertises."
        f" {why[0].upper()}{why[1:]}.{_pending(resource)}",
        path, hint)


def _one_of(offered: Sequence[str]) -> str:
    if not offered:
        return f"pin the pod to a class that offers {GPU}"
    if len(offered) == 1:
        return f"request {offered[0]}: 1 instead"
    return f"request one of {_join(offered[:4], 'or')} instead, such as {offered[0]}: 1"


def _excluded_by_placement(facts: Facts, resource: str, count: int, elsewhere: Sequence[ClassView]) -> Diagnostic:
    target = elsewhere[0]
    conflict = facts.conflict_of(target)
    assert conflict is not None  # elsewhere fits but is not placeable
    reasons = "; ".join(f"{c.name}: {facts.conflict_of(c).explain(c)}"  # type: ignore[union-attr]
                        for c in elsewhere[:_MAX_LISTED])
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"the pod's {conflict.field} excludes every node class that offers {count} {resource}, so it would stay "
        f"Pending. Per class: {reasons}. Its scheduling events would read "
        "\"didn't match Pod's node affinity/selector\".",
        conflict.path, _placement_hint(conflict, elsewhere))


def _placement_hint(conflict: Conflict, elsewhere: Sequence[ClassView]) -> str:
    req = conflict.requirement
    if req is not None and req.operator == "In" and req.values:
        known = sorted({c.known[req.key] for c in elsewhere if req.key in c.known})
        near = did_you_mean(req.values[0], known)
        if near:
            why = " (GPU Feature Discovery appends -SHARED to the product of shared GPUs)" \
                if near[0].endswith("-SHARED") and not req.values[0].endswith("-SHARED") else ""
            return f"did you mean {req.key}={near[0]}?{why}"
    target = _meant_class(req, elsewhere) if req is not None else elsewhere[0]
    if req is None:
        return f"remove the empty nodeSelectorTerm, or pin the pod to class {target.name} with {target.pin()}"
    return (f"no node class matches {req.describe()}: remove it, or pin the pod to class {target.name} "
            f"with {target.pin()}")


def _meant_class(req: NodeRequirement, elsewhere: Sequence[ClassView]) -> ClassView:
    """The class a failed requirement most likely aimed at: one whose GPU product its values name
    (nvidia.com/gpu.product=Tesla-T4 means the T4 class, labelled or not), else the first."""
    wanted = {v.removeprefix("NVIDIA-").removesuffix("-SHARED").lower() for v in req.values}
    return next((c for c in elsewhere if c.product.removeprefix("NVIDIA-").lower() in wanted), elsewhere[0])


def _not_offered(facts: Facts, resource: str, count: int) -> Diagnostic:
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"the pod requests {resource}, which no node class offers, so it would stay Pending."
        f" Per class: {_per_class(facts, resource, count)}.{_pending(resource)}",
        facts.request.first_path(resource), _nearest_request(facts, resource, count))


def _nearest_request(facts: Facts, resource: str, count: int) -> str:
    offered = sorted({r for c in facts.classes for r in c.offers})
    if not offered:
        return "the policy has no node class offering GPUs"
    if resource in HAMI_RESOURCES:
        instead = GPU if GPU in offered else offered[0]
        return (f"{resource} is HAMi's resource, not advertised by the NVIDIA device plugin: request {instead} "
                "instead (GPU memory per slot is fixed by the node class)")
    if resource.startswith(MIG_PREFIX):
        nearest = _nearest_profile(resource, [r for r in offered if r.startswith(MIG_PREFIX)])
        if nearest is not None:
            owners = [c.name for c in facts.classes if nearest in c.offers]
            return f"request {nearest}: {count} instead (offered by class {_join(owners, 'and')})"
    near = did_you_mean(resource, offered)
    if near:
        return f"did you mean {near[0]}?"
    return f"request one of {_join(offered[:6], 'or')}"


def _nearest_profile(resource: str, offered: Sequence[str]) -> str | None:
    """The offered MIG resource closest to ``resource`` (catalog.nearest_profile on the profile parts)."""
    by_profile = {r.removeprefix(MIG_PREFIX): r for r in offered}
    nearest = catalog.nearest_profile(resource.removeprefix(MIG_PREFIX), by_profile)
    return by_profile[nearest] if nearest else None


def _combination(facts: Facts) -> Diagnostic:
    first = facts.request.resources[0]
    wanted = _join([f"{n} {r}" for r, n in facts.request.totals], "and")
    return Diagnostic(
        "gpu-request-unsatisfiable",
        f"no node class offers {wanted} on one node, so the pod would stay Pending."
        f" Per class: {_per_class(facts, None, 0)}.",
        facts.request.first_path(first),
        "split the pod into pods that each request what one node class offers")


def _per_class(facts: Facts, resource: str | None, count: int) -> str:
    parts = [f"{c.name}: {_class_reason(facts, c, resource, count)}" for c in facts.classes[:_MAX_LISTED]]
    if len(facts.classes) > _MAX_LISTED:
        parts.append(f"and {len(facts.classes) - _MAX_LISTED} more")
    return "; ".join(parts) if parts else "the policy has no node class"


def _class_reason(facts: Facts, view: ClassView, resource: str | None, count: int) -> str:
    conflict = facts.conflict_of(view)
    if conflict is not None:
        return conflict.explain(view)
    resources = [resource] if resource else list(facts.request.resources)
    for r in resources:
        offer = view.offers.get(r)
        if offer is None:
            return f"offers {_join(sorted(view.offers)[:3], 'and')}, not {r}"
        need = count if resource else dict(facts.request.totals)[r]
        if offer.per_node < need:
            return f"offers at most {offer.per_node} {r} per node ({offer.explain()})"
    return "offers " + _join([f"{view.offers[r].per_node} {r}" for r in resources], "and") + " per node"


# --- shared-gpu-request-above-one ---------------------------------------------------------------------------------


def check_shared_above_one(facts: Facts) -> tuple[Diagnostic, ...]:
    """A container asks for more than one replica of a resource some candidate class shares."""
    found = []
    for container in facts.request.containers:
        for amount in container.amounts:
            if amount.count <= 1:
                continue
            shared = [c for c in facts.candidates
                      if (o := c.offers.get(amount.resource)) is not None and o.shared and o.strict]
            if shared:
                found.append(_shared_finding(facts, container.name, amount.resource, amount.count, amount.path, shared))
    return tuple(found)


def _shared_finding(facts: Facts, container: str, resource: str, count: int, path: Path,
                    shared: Sequence[ClassView]) -> Diagnostic:
    where = _join([f"{c.name} ({c.offers[resource].explain()})" for c in shared[:_MAX_LISTED]], "or")
    pin = facts.first_alternative(lambda c: not any(
        (o := c.offers.get(r)) is not None and o.shared for r, _ in facts.request.totals))
    if pin is not None:
        hint = f"pin the pod to unshared devices with {pin.pin()} (class {pin.name}), or request {resource}: 1"
    else:
        what = "sharing: exclusive" if resource == GPU else f"{resource} unshared"
        hint = (f"request {resource}: 1 per container: more shared replicas of one device add no compute; for "
                f"{count} whole devices, add a node class with {what}")
    return Diagnostic(
        "shared-gpu-request-above-one",
        f'container "{container}" requests {count} {resource}; shared devices allow 1 per container.'
        f" The scheduler may place the pod on class {where}, where the device plugin refuses more than 1 shared "
        "replica per container (failRequestsGreaterThanOne) and the kubelet fails the pod with "
        "UnexpectedAdmissionError.",
        path, hint)


# --- tenant-sharing-mode-denied ------------------------------------------------------------------------------------


def check_tenant_access(facts: Facts) -> tuple[Diagnostic, ...]:
    """A candidate class uses a sharing mode, or is a class, the namespace's tenants may not use."""
    found = []
    access = facts.access
    modes, classes = access.modes, access.classes
    for resource in facts.request.resources:
        denied = []
        for view in facts.candidates:
            offer = view.offers[resource]
            if modes.issuperset(offer.modes) and (classes is None or view.name in classes):
                continue  # the common case, decided without building denies()' tuple
            bad, outside = access.denies(view, offer)
            if bad or outside:
                denied.append((view, bad, outside))
        if denied:
            found.append(_tenant_finding(facts, resource, denied))
    return tuple(found)


def _tenant_finding(facts: Facts, resource: str,
                    denied: Sequence[tuple[ClassView, tuple[str, ...], bool]]) -> Diagnostic:
    access = facts.access
    bad_modes = sorted({m for _, bad, _ in denied for m in bad})
    if access.unknown:
        summary = f"tenant {_join(access.unknown, 'and')} is not in the admission policy, so this pod may use no GPU"
    elif bad_modes:
        summary = f"{access.who} may not use {_join(bad_modes, 'or')} GPUs, where this pod may be scheduled"
    else:
        summary = f"{access.who} may not use class {_names([v for v, _, _ in denied])}, where this pod may be scheduled"
    if access.unknown:
        where = _join([v.name for v, _, _ in denied[:_MAX_LISTED]], "or")
        hint = "compile the policy and roll out its admission policy and webhook configuration together"
    else:
        where = _join([f"{v.name} ({_denial(bad, outside)})" for v, bad, outside in denied[:_MAX_LISTED]], "or")
        hint = _tenant_hint(facts, [v for v, _, _ in denied])
    return Diagnostic(
        "tenant-sharing-mode-denied",
        f"{summary}. For {resource} the scheduler may pick class {where}; {access.who} may use "
        f"{access.describe()}.",
        facts.request.first_path(resource), hint)


def _tenant_hint(facts: Facts, denied: Sequence[ClassView]) -> str:
    allowed = facts.first_alternative(lambda c: True)
    if allowed is not None:
        return f"pin the pod to class {allowed.name} with {allowed.pin()}"
    resources = facts.request.resources
    others = [a for a in facts.tenants if all(a.allows(v, resources) for v in denied)]
    if others:
        return (f"run it in a namespace of {others[0].who} ({others[0].selector}), which may use "
                f"{others[0].describe()}, or ask the platform team to allow it")
    return f"no class {facts.access.who} may use offers this request: ask the platform team to allow it"


def _denial(bad: tuple[str, ...], outside: bool) -> str:
    parts = list(bad)
    if outside:
        parts.append("not one of the tenant's classes")
    return ", ".join(parts)


# --- the rule table ------------------------------------------------------------------------------------------------

RULES: tuple[Rule, ...] = (
    Rule("mig-strategy-mismatch", "enforce",
         "requests MIG devices under the other MIG strategy's resource name", check_mig_strategy_mismatch),
    Rule("gpu-request-unsatisfiable", "enforce",
         "no node class can run the pod's GPU request: it would stay Pending", check_request_unsatisfiable),
    Rule("shared-gpu-request-above-one", "enforce",
         "a container asks for more than one shared replica on a class the scheduler may pick",
         check_shared_above_one),
    Rule("tenant-sharing-mode-denied", "enforce",
         "the scheduler may pick a class or sharing mode the namespace's tenant may not use", check_tenant_access),
    *(Rule(*rule) for rule in hami_rules.RULES),
)


# --- wording ----------------------------------------------------------------------------------------------------


def _join(items: Sequence[str], word: str) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {word} {items[-1]}"


def _names(views: Sequence[ClassView]) -> str:
    return _join([v.name for v in views], "and")


def _modes(views: Sequence[ClassView]) -> str:
    return ", ".join(f"{v.name}: {v.mode}" for v in views[:_MAX_LISTED])
