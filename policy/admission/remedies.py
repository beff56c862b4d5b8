"""Remedies: one fix per object with findings, chosen by trying edits on it and re-running every rule.

First the edits the rules proposed with their findings (a rule that knows the one value at fault, such as HAMi's
scheduler name or a privileged flag, proposes its correction; each alone, then all together). Then two kinds
of candidates, cheapest change first (see _cost). Targeted ones, for the first finding:
a repair of the value at fault (a quantity the API server refuses, a node label misspelt), pinning the pod to
a class of its own tenant (with the tolerations that class's taints need, replacing a selector value it set
where need be), or changing its GPU request (another resource, one resource less, fewer devices where no class
of its tenant holds the amount asked). Then one rebuilt candidate per class its tenant may use: every refused
amount repaired, the request adapted to what the class offers (its resource names, one replica per container
where it shares, no more than one node holds), the pod pinned to it. Each candidate is applied to the object
and the result evaluated; the cheapest after which no rule finds anything is the fix of every finding. No
candidate moves the object to another namespace: the namespace picks the tenant, and a tenant's rule is the
platform team's to change, so where only the tenant's rule is left the hint says what to ask them to allow,
naming the spec field. Where nothing admits the object, the hint says that no change within the policy does.
A candidate after which findings remain that carry proposals is tried once more with them; where nothing admits,
the rules' proposals are made and the search runs once more on the result. Only objects with findings pay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from policy.admission.fixes import (
    AddToleration,
    Fix,
    PatchOp,
    Pin,
    RemovePlacement,
    RemoveResource,
    RenameResource,
    SetAmount,
    SetNodeSelector,
)
from policy.admission.rules import ClassView, Facts, excludes, join, tenant_ask
from policy.admission.workloads import Amount, ContainerRequest, GpuRequest, Workload, effective_totals
from policy.hardware import catalog
from policy.kube.quantity import parse_count, parse_quantity
from policy.kube.scheduling import REQUIRED_AFFINITY, AffinityTerm, NodeRequirement
from policy.resolved.resolve import MIG_PREFIX
from policy.spec.diagnostics import Diagnostic, Path, did_you_mean, value_at

_TARGETED = 12  # candidates tried per phase
_REBUILT = 24  # rebuilt candidates considered, cheapest first
_PINS = 8  # classes offered as pins per finding
_FIT_STEPS = 16  # passes lowering a rebuilt request's largest amounts (each reads every container once)
# The cheapest cost a phase's candidates can have (see Fix.cost).
_PLACEMENT, _REQUEST = (0, 0, 0, 0, 1), (0, 0, 0, 1, 1)  # a request edit costs at least a respelling
_TENANT_RULE, _MISMATCH = "tenant-sharing-mode-denied", "mig-strategy-mismatch"
Cost = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Assessment:
    """One evaluation: the object, the namespace's tenants, what the engine read and what the rules found."""

    obj: Mapping[str, Any]
    tenants: tuple[str, ...]
    workload: Workload
    facts: Facts
    findings: tuple[Diagnostic, ...]
    request: GpuRequest
    """The GPU request as read from the object (facts.request is the one the rules read: HAMi's scheduler takes
    some pods' requests otherwise, policy.admission.vgpu)."""


Assess = Callable[[Mapping[str, Any], tuple[str, ...], GpuRequest | None], Assessment | None]
"""Evaluate an edited object for the namespace's tenants (with its GPU request, when the caller knows it)."""


@dataclass(frozen=True)
class Context:
    """What hints need beyond one evaluation."""

    cluster: str
    """The policy's name (metadata.name of the ClusterGPUPolicy), so a hint can say which spec to change."""


def remedy(start: Assessment, context: Context, assess: Assess) -> tuple[Diagnostic, ...]:
    """The findings of ``start``, each with the object's fix (or the plain word that none exists) as its hint."""
    search = _Search(start, context, assess)
    fix = search.best()
    if fix is None:
        hint = _no_change(start, context, search.blocked)
        return tuple(replace(f, hint=hint, fix=None) for f in start.findings)
    hint = fix.describe()  # once: a pod may have a finding per container, all with this one fix
    return tuple(replace(f, hint=hint, fix=fix) for f in start.findings)


class _Search:
    """Candidate fixes tried on the object, cheapest change first (Fix.cost): adding placement beats replacing a
    nodeSelector value the object set, which beats changing the GPU request, which beats dropping placement or
    fields the object states; then fewer steps; then the order in which they were proposed. A candidate that
    lowers an amount a class of the tenant holds is never kept."""

    def __init__(self, start: Assessment, context: Context, assess: Assess) -> None:
        self.start, self.context, self.assess = start, context, assess
        self.seen: dict[tuple[Any, ...], tuple[Assessment | None, tuple[PatchOp, ...]]] = {}
        self.blocked: tuple[Fix, Assessment] | None = None
        """The cheapest candidate after which only the tenant's rule finds something, and what it found."""

    def best(self, *, nested: bool = False) -> Fix | None:
        """The cheapest fix found; where none is, the edits the rules proposed themselves are made and the
        rest searched for on the result (once)."""
        proposals = _proposals(self.start)
        found = self._best(proposals)
        if found is not None or nested or not proposals:
            return found
        combined = _combined(proposals)
        after = self.outcome(combined)
        if after is None or not after.findings:
            return None
        nested_search = _Search(after, self.context, self.assess)
        rest = nested_search.best(nested=True)
        if rest is None and self.blocked is None and nested_search.blocked is not None:
            partial, blocked = nested_search.blocked
            self.blocked = combined.then(partial), blocked
        return None if rest is None else replace(combined, patch=self.seen[combined.edits][1]).then(rest)

    def _best(self, proposals: Sequence[Fix]) -> Fix | None:
        finding = next((f for f in self.start.findings if f.severity == "error"), self.start.findings[0])
        state = self.start
        # Each phase's candidates cost at least its bound; a fix already as cheap makes the phase pointless.
        # A refused amount stays refused whatever the placement or namespace: only request changes clear it, and
        # every rebuilt candidate then repairs it (so changes the request too).
        refused = bool(state.facts.request.problems)
        phases: tuple[tuple[Cost, Callable[[], Iterable[Fix]]], ...] = (
            # What the rules proposed (each, then all together), then repairs of the value at fault.
            (_PLACEMENT, lambda: (*proposals, _combined(proposals)) if len(proposals) > 1 else proposals),
            (_PLACEMENT, lambda: _repairs(state, finding)),
            (_PLACEMENT, lambda: () if refused else _pins(state, finding)),
            (_REQUEST, lambda: _request_edits(state, finding)),
            # A rebuilt candidate changing neither the request nor the stated placement is a pin, which the
            # targeted ones include: only a costlier fix leaves a rebuilt one room to beat it.
            (_REQUEST, lambda: sorted(rebuild(state), key=_cost)[:_REBUILT]),
        )
        found: Fix | None = None
        for bound, candidates in phases:
            if found is None or _cost(found) > bound:
                found = self._cheapest(candidates(), found, bound)
        return None if found is None else self._checked(found)

    def _checked(self, fix: Fix) -> Fix:
        """The fix with its patch, naming only the alternatives that, applied alone, admit the object too."""
        kept = tuple(replace(a, patch=self.seen[a.edits][1]) for a in fix.alternatives
                     if (after := self.outcome(a)) is not None and not after.findings)
        return replace(fix, patch=self.seen[fix.edits][1], alternatives=kept)

    def _cheapest(self, candidates: Iterable[Fix], best: Fix | None, bound: Cost) -> Fix | None:
        tried = 0
        for candidate in candidates:
            if (best is not None and _cost(candidate) >= _cost(best)) or lowers_held(self.start, candidate):
                continue
            if candidate.edits in self.seen or tried < _TARGETED:
                tried += 1
                result = self.outcome(candidate)
                if result is not None and result.findings and (follow := _proposals(result)):
                    # What is left carries the rules' own proposals (a second finding the first edit revealed).
                    candidate = candidate.then(_combined(follow))
                    result = self.outcome(candidate)
                if result is not None and not result.findings and (best is None or _cost(candidate) < _cost(best)):
                    best = candidate
                    if _cost(best) <= bound:
                        return best
                elif result is not None and all(f.code == _TENANT_RULE for f in result.findings):
                    self._note_blocked(candidate, result)
        return best

    def _note_blocked(self, candidate: Fix, result: Assessment) -> None:
        if self.blocked is None or _cost(candidate) < _cost(self.blocked[0]):
            self.blocked = replace(candidate, patch=self.seen[candidate.edits][1]), result

    def outcome(self, fix: Fix) -> Assessment | None:
        key = fix.edits
        if key not in self.seen:
            doc, ops = fix.apply(self.start.obj)
            # A fix that leaves the GPU request alone (placement) is read against the same request.
            same = not any(isinstance(e, SetAmount | RenameResource | RemoveResource) for e in key)
            self.seen[key] = (self.assess(doc, self.start.tenants, self.start.request if same else None), ops)
        return self.seen[key][0]


def _cost(fix: Fix) -> Cost:
    return fix.cost


def lowers_held(state: Assessment, fix: Fix) -> bool:
    """Whether the fix asks a container for fewer devices of a resource than it asked for, while a class of the
    pod's tenant holds that many in one container: the fix would halve the job instead of placing it where it
    fits (a pin, tried before any request change, does that). HAMi pods are left out: their count is vGPUs,
    which HAMi spreads over distinct GPUs (policy.admission.vgpu), not the class's offer."""
    facts = state.facts
    if facts.hami is not None:
        return False
    asked = {(a.path[:-3], a.resource): a.count for c in facts.request.containers for a in c.amounts}
    totals = dict(facts.request.totals)
    for edit in fix.edits:
        if not isinstance(edit, SetAmount | RenameResource):
            continue
        before = asked.get((edit.container_path, edit.resource))
        total = totals.get(edit.resource, 0)
        if before is not None and edit.count < before and any(
                facts.access.holds(view, edit.resource, before, total) for view in facts.classes):
            return True
    return False


def _proposals(state: Assessment) -> list[Fix]:
    """The fixes the rules proposed with their findings (a rule knows the one value its finding is about), each
    writing amounts where the object writes them (limits, and requests where it names the resource)."""
    found: dict[tuple[Any, ...], Fix] = {}
    for finding in state.findings:
        if isinstance(finding.fix, Fix):
            steps = tuple(replace(s, fields=("limits", "requests") if _requested(state, s.container_path, s.resource)
                                  else ("limits",)) if isinstance(s, SetAmount) else s for s in finding.fix.steps)
            fix = replace(finding.fix, steps=steps)
            found.setdefault(fix.edits, fix)
    return list(found.values())


def _combined(proposals: Sequence[Fix]) -> Fix:
    return proposals[0] if len(proposals) == 1 else Fix.join(proposals)


def _no_change(start: Assessment, context: Context, blocked: tuple[Fix, Assessment] | None) -> str:
    """The hint where no fix admits the object: what the platform team would have to allow for the tenant (and
    the edit that leaves only that), or that the policy itself must change. Never another namespace: moving a
    workload to another tenant's namespaces is the platform team's call, not a fix."""
    access = start.facts.access
    if access.unknown:
        return ("compile the policy and roll out its admission policy and webhook configuration together (the "
                f"webhook routes this namespace to tenant {join(access.unknown, 'and')}, which its policy lacks)")
    spec = f"ClusterGPUPolicy {context.cluster}" if context.cluster else ""
    ask = tenant_ask(start.facts, spec) if any(f.code == _TENANT_RULE for f in start.findings) else ""
    if ask:
        return f"no change to this object within the policy admits it: ask the platform team to {ask}"
    if blocked is not None and (ask := tenant_ask(blocked[1].facts, spec)):
        return (f"no change to this object within the policy admits it: {blocked[0].describe()} "
                f"would leave only the tenant's rule, so ask the platform team to {ask}")
    return ("no change to this object within the policy admits it (gpupolicy tried every class of its tenant and "
            "other GPU requests): ask the platform team to change the policy")


# --- proposals ----------------------------------------------------------------------------------------------------


def propose(state: Assessment, finding: Diagnostic) -> list[Fix]:
    """Candidate fixes for one finding of ``state``, most preferred first, without duplicates."""
    found: dict[tuple[Any, ...], Fix] = {}
    for fix in (*_repairs(state, finding), *_pins(state, finding), *_request_edits(state, finding)):
        found.setdefault(fix.edits, fix)
    return list(found.values())


def _repairs(state: Assessment, finding: Diagnostic) -> Iterator[Fix]:
    """The value at fault, corrected: an amount the API server refuses, a node label value misspelt."""
    if finding.code == "gpu-request-invalid":
        yield from _quantity_repairs(state, finding.path)
    requirement = _requirement_at(state, finding.path)
    if requirement is not None and requirement.path[-1] == requirement.key and requirement.values:
        yield from _label_repairs(state, requirement)


def _quantity_repairs(state: Assessment, path: Path) -> Iterator[Fix]:
    for problem in state.facts.request.problems:
        if problem.path != path:
            continue
        fields = ("limits", "requests") if _requested(state, problem.container_path, problem.resource) else (
            "limits",)
        if problem.kind == "request-differs" and problem.limit is not None:
            count = problem.limit
        elif problem.kind == "limit-missing":
            count = _count_of(problem.given)
        else:
            count = _nearest_count(problem.given)
        yield Fix((SetAmount(problem.container_path, problem.container, problem.resource, count, fields),))


def _count_of(value: Any) -> int:
    found = parse_count(value)
    return found if found else _nearest_count(value)


def _nearest_count(value: Any) -> int:
    """The whole device count closest to what was meant: "0.5" and 0.5 become 1, "-2" 2, "٢" (a non-ASCII
    digit) 2; anything else 1."""
    number = parse_quantity(value)
    if number is None and isinstance(value, str):
        try:
            number = Fraction(int(value.strip()))  # Python reads every Unicode decimal digit
        except ValueError:
            number = None
    if number is None:
        return 1
    return max(1, math.ceil(abs(number)))


def _label_repairs(state: Assessment, requirement: NodeRequirement) -> Iterator[Fix]:
    known = sorted({c.known[requirement.key] for c in state.facts.classes
                    if requirement.key in c.known and c.fits(state.facts.request.totals)})
    near = did_you_mean(requirement.values[0], known)
    if near:
        note = ("GPU Feature Discovery appends -SHARED to the product of shared GPUs"
                if near[0].endswith("-SHARED") and not requirement.values[0].endswith("-SHARED") else "")
        yield Fix((SetNodeSelector(state.workload.spec_path, requirement.key, near[0], overrides=True),), note)


def _requirement_at(state: Assessment, path: Path) -> NodeRequirement | None:
    placement = state.facts.placement
    candidates = [*placement.node_selector, *(r for t in placement.terms for r in t.requirements)]
    return next((r for r in candidates if r.path == path), None)


# --- pins ---------------------------------------------------------------------------------------------------------


def _pins(state: Assessment, finding: Diagnostic) -> Iterator[Fix]:
    """Each class of the pod's tenant that holds its request, as a pin (only its tolerations first, where its
    taints alone keep the pod away); classes its tenant may not use are never offered."""
    facts = state.facts
    resources = facts.request.resources
    refused = _refused_anywhere(facts)
    stays_refused = any(map(refused, facts.candidates))  # tolerations only add candidates: such a one stays
    count = 0
    for view in _preferred(state, finding):
        if count >= _PINS:
            return
        if facts.request.totals and not view.fits(facts.request.totals):
            continue
        if not facts.access.allows(view, resources) or facts.candidates == (view,) or refused(view):
            continue
        edits = _pin_edits(state, view)
        conflict = facts.conflict_of(view)
        if conflict is not None and conflict.taint is not None and not stays_refused:
            # Only its taints keep the pod off the class: tolerating them may be all it takes.
            yield Fix((Pin(view.name, tuple(e for e in edits if isinstance(e, AddToleration))),))
        if edits:
            count += 1
            yield Fix((Pin(view.name, edits),))


def _refused_anywhere(facts: Facts) -> Callable[[ClassView], bool]:
    """Whether the device plugin of a class refuses a container of the pod (more than one replica of a resource
    it shares strictly): a pin to that class, or tolerations that keep it among the candidates, leaves
    shared-gpu-request-above-one, so they are not tried (a pin never changes the request, and the class stays a
    candidate). Never for a pod naming its node (the node decides its class) or one HAMi takes (whose request
    the rules read as HAMi counts it)."""
    if facts.placement.node_name is not None or facts.hami is not None:
        return lambda view: False
    above_one = {a.resource for c in facts.request.containers for a in c.amounts if a.count > 1}
    return lambda view: any(view.refuses_above_one(r) for r in above_one)


def _preferred(state: Assessment, finding: Diagnostic) -> list[ClassView]:
    """The classes in policy order, the one a failed product selector names first (nvidia.com/gpu.product=
    Tesla-T4 means the T4 class, whether GFD labels it or not)."""
    classes = list(state.facts.classes)
    requirement = _requirement_at(state, finding.path)
    if requirement is None or not requirement.key.endswith(".product"):
        return classes
    wanted = {v.removeprefix("NVIDIA-").removesuffix("-SHARED").lower() for v in requirement.values}
    meant = [c for c in classes if c.product.removeprefix("NVIDIA-").lower() in wanted]
    return meant + [c for c in classes if c not in meant]


def _pin_edits(state: Assessment, view: ClassView) -> tuple[SetNodeSelector | RemovePlacement | AddToleration, ...]:
    spec_path, placement = state.workload.spec_path, state.facts.placement
    pinned = dict(view.node_selector)
    stated = {r.key: r.values for r in placement.node_selector}
    edits: list[SetNodeSelector | RemovePlacement | AddToleration] = [
        SetNodeSelector(spec_path, k, v, overrides=k in stated) for k, v in view.node_selector
        if stated.get(k) != (v,)]
    edits += [RemovePlacement(r.path, f"nodeSelector {r.describe()}") for r in placement.node_selector
              if r.key not in pinned and excludes(r, view)]
    edits += _affinity_edits(spec_path, placement.terms, view)
    for taint in view.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not taint.tolerated_by(placement.tolerations):
            operator = "Equal" if taint.value else "Exists"
            edits.append(AddToleration(spec_path, taint.key, operator, taint.value, taint.effect))
    return tuple(edits)


def _affinity_edits(spec_path: Path, terms: Sequence[AffinityTerm], view: ClassView) -> list[RemovePlacement]:
    """What must go from the required node affinity for the class's nodes to match it: the excluding
    expressions of the term with fewest of them, the term itself if that empties it, or the whole required
    node affinity if it was the only term."""
    if not terms or any(not t.matches_nothing and not any(excludes(r, view) for r in t.requirements)
                        for t in terms):
        return []
    best = min(terms, key=lambda t: t.size if t.matches_nothing else sum(excludes(r, view) for r in t.requirements))
    failing = [r for r in best.requirements if excludes(r, view)]
    if best.matches_nothing or len(failing) >= best.size:
        if len(terms) == 1:
            return [RemovePlacement((*spec_path, *REQUIRED_AFFINITY[:-1]), "the required node affinity")]
        return [RemovePlacement(best.path, f"node-affinity term {best.path[-1]}")]
    return [RemovePlacement(r.path, f"required node affinity {r.describe()}")
            for r in sorted(failing, key=lambda r: r.path, reverse=True)]


# --- rebuilt for one class ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    """One container's amount of one resource, as a rebuilt request sees it."""

    container_path: Path
    container: str
    section: str
    sidecar: bool
    resource: str
    count: int
    refused: bool = False
    """The API server refuses what is written (so it must be written anew, whatever the count)."""


def rebuild(state: Assessment) -> list[Fix]:
    """Per class the pod's tenant may use, the object adapted to it: refused amounts repaired, the request made of
    what the class offers, unpinned and pinned to it."""
    slots = _slots(state)
    out: list[Fix] = []
    for view in _likeliest(state, slots):
        adapted = _adapt(state, slots, view)
        if adapted is None:
            continue
        edits, resources = adapted
        if not state.facts.access.allows(view, resources):
            continue
        if edits:
            out.append(Fix(tuple(edits)))
        pin = _pin_edits(state, view)
        if pin:
            out.append(Fix((*edits, Pin(view.name, pin))))
    return out


def _likeliest(state: Assessment, slots: Sequence[_Slot]) -> list[ClassView]:
    """The classes most likely to take the object with least change, at most _REBUILT of them (in policy order
    within a rank): offering what it asks for, to its own tenants, first; a 300-class fleet is not rebuilt whole."""
    wanted = {s.resource for s in slots if s.count > 0}
    access = state.facts.access

    def rank(view: ClassView) -> tuple[bool, bool]:
        offered = wanted <= view.offers.keys()
        return not offered, not (offered and access.allows(view, wanted))

    return sorted(state.facts.classes, key=rank)[:_REBUILT]


def _slots(state: Assessment) -> list[_Slot]:
    request = state.facts.request
    found: dict[tuple[Path, str], _Slot] = {}
    for container in request.containers:
        for amount in container.amounts:
            path = amount.path[:-3]
            found[(path, amount.resource)] = _Slot(path, container.name, container.section, container.sidecar,
                                                   amount.resource, amount.count)
    for problem in request.problems:
        key = (problem.container_path, problem.resource)
        if key in found:
            found[key] = replace(found[key], refused=True)
            continue
        spec = value_at(state.obj, problem.container_path)
        sidecar = isinstance(spec, Mapping) and spec.get("restartPolicy") == "Always"
        count = problem.limit if problem.limit is not None else (
            _count_of(problem.given) if problem.kind == "limit-missing" else _nearest_count(problem.given))
        found[key] = _Slot(problem.container_path, problem.container, str(problem.container_path[-2]),
                           problem.container_path[-2] == "initContainers" and sidecar, problem.resource, count, True)
    return list(found.values())


def _adapt(state: Assessment, slots: Sequence[_Slot], view: ClassView) -> tuple[list[Any], list[str]] | None:
    """The edits that make the request one the class offers, and the resources it then asks for; None when it
    cannot be (a resource the class lacks, with nothing to ask for instead)."""
    final: dict[tuple[Path, str], tuple[str, int] | None] = {}
    taken: dict[Path, set[str]] = {}  # each container's resources, gathered once (not once per slot)
    for slot in slots:
        taken.setdefault(slot.container_path, set()).add(slot.resource)
    for slot in slots:
        if slot.count == 0:
            continue
        resource = slot.resource
        if resource not in view.offers:
            has = taken[slot.container_path]
            resource = next((r for r in _instead(slot.resource, sorted(view.offers)) if r not in has), "")
        if not resource:
            final[(slot.container_path, slot.resource)] = None
            continue
        offer = view.offers[resource]
        count = min(slot.count, offer.per_node, 1 if offer.shared and offer.strict else slot.count)
        final[(slot.container_path, slot.resource)] = (resource, count)
    kept = [s for s in slots if final.get((s.container_path, s.resource))]
    if not kept or not _fit(view, kept, final):
        return None
    mismatched = {f.path for f in state.findings if f.code == _MISMATCH}
    edits: list[Any] = []
    for slot in slots:
        target = final.get((slot.container_path, slot.resource), (slot.resource, slot.count))
        fields = ("limits", "requests") if _requested(state, slot.container_path, slot.resource) else ("limits",)
        if target is None:
            edits.append(RemoveResource(slot.container_path, slot.container, slot.resource))
        elif target[0] != slot.resource:
            respells = target[1] == slot.count and (*slot.container_path, "resources", "limits",
                                                    slot.resource) in mismatched
            edits.append(RenameResource(slot.container_path, slot.container, slot.resource, *target, fields, respells))
        elif target[1] != slot.count or slot.refused:
            edits.append(SetAmount(slot.container_path, slot.container, slot.resource, target[1], fields))
    resources = sorted({t[0] for t in final.values() if t is not None})
    return edits, resources


def _fit(view: ClassView, kept: Sequence[_Slot], final: dict[tuple[Path, str], tuple[str, int] | None]) -> bool:
    """Lower the largest amounts until one node of the class holds the pod's total of each resource (sidecars and
    init containers add up as the scheduler adds them); False when no amounts of at least one each fit.

    Linear in the containers: a pod whose floor (one of everything it asks for) does not fit is refused at once,
    and the lowering takes at most _FIT_STEPS passes, each reading every container once."""
    if _over(view, kept, {k: (v[0], 1) for k, v in final.items() if v is not None}):
        return False
    for _ in range(min(len(kept) * 4, _FIT_STEPS)):
        over = _over(view, kept, final)
        if not over:
            return True
        resource, excess = over[0]
        key, (_, count) = max(((k, v) for k, v in final.items() if v is not None and v[0] == resource),
                              key=lambda kv: kv[1][1])  # type: ignore[index]
        final[key] = (resource, max(1, count - excess))
    return not _over(view, kept, final)


def _over(view: ClassView, kept: Sequence[_Slot],
          amounts: Mapping[tuple[Path, str], tuple[str, int] | None]) -> list[tuple[str, int]]:
    """Each resource whose total, with these amounts, exceeds what one node of the class holds, and by how much."""
    containers: dict[Path, list[Amount]] = {}
    first: dict[Path, _Slot] = {}
    for slot in kept:
        resource, count = amounts[(slot.container_path, slot.resource)]  # type: ignore[misc]
        first.setdefault(slot.container_path, slot)
        containers.setdefault(slot.container_path, []).append(
            Amount(resource, count, (*slot.container_path, "resources", "limits", resource)))
    requests = [ContainerRequest(s.container, s.section, s.sidecar, tuple(containers[path]))
                for path, s in first.items()]
    return [(r, n - view.offers[r].per_node) for r, n in effective_totals(requests) if n > view.offers[r].per_node]


# --- request edits -----------------------------------------------------------------------------------------------


def _request_edits(state: Assessment, finding: Diagnostic) -> Iterator[Fix]:
    target = _amount_at(state, finding.path)
    if target is None:
        return
    container_path, container, resource, count = target
    facts = state.facts
    fields = ("limits", "requests") if _requested(state, container_path, resource) else ("limits",)
    offered = sorted({r for c in facts.classes for r in c.offers})
    note = _why_fewer(facts, finding, resource, count)
    counts = [SetAmount(container_path, container, resource, k, fields) for k in _fewer(facts, resource, count)]
    has = {a.resource for c in facts.request.containers for a in c.amounts if a.path[:-3] == container_path}
    respell = finding.code == _MISMATCH
    renames = [RenameResource(container_path, container, resource, instead, k, fields, respell and k == count)
               for instead in _instead(resource, offered) if instead not in has
               for k in dict.fromkeys((count, 1)) if any(c.fits(((instead, k),)) for c in facts.classes)]
    edits = (*renames, *counts) if resource not in offered else (*counts, *renames)
    for edit in edits:
        if isinstance(edit, SetAmount):
            yield Fix((edit,), note)
        else:
            yield Fix((edit,), _why_instead(resource), alternatives=_other_profiles(edit, offered, has))
    if _keeps_a_gpu(state, container_path, resource):
        yield Fix((RemoveResource(container_path, container, resource),), _why_remove(finding))


def _amount_at(state: Assessment, path: Path) -> tuple[Path, str, str, int] | None:
    """(container path, container name, resource, count) of the amount a finding points at."""
    if len(path) < 4 or path[-3] != "resources" or path[-2] not in ("limits", "requests"):
        return None
    container_path, resource = path[:-3], path[-1]
    for container in state.facts.request.containers:
        for amount in container.amounts:
            if amount.resource == resource and amount.path[:-3] == container_path:
                return container_path, container.name, resource, amount.count
    return None


def _requested(state: Assessment, container_path: Path, resource: str) -> bool:
    requests = value_at(state.obj, (*container_path, "resources", "requests"))
    return isinstance(requests, Mapping) and resource in requests


def _fewer(facts: Facts, resource: str, count: int) -> list[int]:
    """Smaller counts worth trying, largest first: what each class's node offers, what would bring the pod's
    total within it (an init container beside sidecars), and 1."""
    total = dict(facts.request.totals).get(resource, count)
    found = {1} if count > 1 else set()
    for view in facts.classes:
        offer = view.offers.get(resource)
        if offer is None:
            continue
        found.add(min(count - 1, offer.per_node))
        found.add(count - (total - offer.per_node))
    return sorted((k for k in found if 0 < k < count), reverse=True)


def _instead(resource: str, offered: Sequence[str]) -> list[str]:
    """Offered resources to ask for instead, nearest first: the nearest MIG profile, a close spelling, then
    what the cluster advertises (whole GPUs before MIG devices)."""
    others = [r for r in offered if r != resource]
    migs = [r for r in others if r.startswith(MIG_PREFIX)]
    found: list[str] = []
    if resource.startswith(MIG_PREFIX) and migs:
        by_profile = {r.removeprefix(MIG_PREFIX): r for r in migs}
        nearest = catalog.nearest_profile(resource.removeprefix(MIG_PREFIX), by_profile)
        if nearest:
            found.append(by_profile[nearest])
    if not resource.startswith(("nvidia.com/gpu", MIG_PREFIX)):
        found += did_you_mean(resource, others)
    found += [r for r in others if not r.startswith(MIG_PREFIX)] + migs
    return list(dict.fromkeys(found))[:4]


def _keeps_a_gpu(state: Assessment, container_path: Path, resource: str) -> bool:
    return any(a.count > 0 for c in state.facts.request.containers for a in c.amounts
               if not (a.resource == resource and a.path[:-3] == container_path))


def _why_fewer(facts: Facts, finding: Diagnostic, resource: str, count: int) -> str:
    if finding.code != "shared-gpu-request-above-one":
        return ""
    unshared = [(o.per_node, c.name) for c in facts.classes
                if (o := c.offers.get(resource)) is not None and not o.shared]
    what = f"unshared {resource} devices" if resource.startswith(MIG_PREFIX) else "whole GPUs"
    if any(per_node >= count for per_node, _ in unshared):
        tail = ""
    elif unshared:
        most = max(per_node for per_node, _ in unshared)
        on = join(sorted(name for per_node, name in unshared if per_node == most), "and")
        tail = f"; no node holds {count} {what}: at most {most} per node, on class {on}"
    elif resource.startswith(MIG_PREFIX):
        tail = f"; {count} {what} need a MIG class that does not time-slice the profile"
    else:
        tail = f"; {count} {what} need a class with sharing: exclusive"
    return f"more shared replicas of one device add no compute{tail}"


def _why_instead(resource: str) -> str:
    if not resource.startswith(("nvidia.com/gpu", MIG_PREFIX)):
        return f"no node class advertises {resource}"
    return ""


def _other_profiles(edit: RenameResource, offered: Sequence[str], has: set[str]) -> tuple[Fix, ...]:
    """The same rename to each other MIG profile the cluster offers, as alternatives the search then checks."""
    if not edit.instead.startswith(MIG_PREFIX):
        return ()
    others = [r for r in offered if r.startswith(MIG_PREFIX) and r not in (edit.resource, edit.instead, *has)]
    return tuple(Fix((replace(edit, instead=other),)) for other in others[:4])


def _why_remove(finding: Diagnostic) -> str:
    if finding.code == "gpu-request-unsatisfiable" and finding.message.startswith("no node class offers"):
        return "no node class offers both on one node: run the other part in a pod of its own"
    return ""
