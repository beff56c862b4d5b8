"""The tenancy guard: a ValidatingAdmissionPolicy that lets only the tenancy managers set the labels tenants select by.

Tenants are namespaceSelectors (the webhook registration routes each tenant by one, the admission policies match
``namespaceObject``'s labels), so whoever may set those labels chooses a namespace's tenant: a sandbox user who may
update namespaces labels one ``gpu-tier=prod`` and gets prod's GPUs, or removes the label and falls to
admission.defaultAllow. The guard (policy/resolved/tenancy.py names its keys and managers) judges every Namespace
CREATE and UPDATE, the status and finalize subresources included (their registry strategies reset spec or status,
never metadata, so labels change through them too: kubernetes pkg/registry/core/namespace/strategy.go): adding,
changing or removing a guarded key is denied unless ``request.userInfo`` is a manager, with a message naming the key,
the tenant the change would put the namespace in and who may set it. ``kubernetes.io/metadata.name``, which the API
server sets to the name on every write, needs no guard, so a spec whose tenants select only by it compiles none.

Shape (cel-monitoring.md §1.1): two matchConditions keep the policy off everything else before any variable runs,
an update that leaves every guarded key alone and a manager's request; the validation repeats both, so the policy
holds even if a copy drops its conditions. failurePolicy Fail: an expression that cannot be evaluated must not open
the guard. The binding's validationActions follow admission.enforcement, so a rollout can start with warn.

The webhook path needs nothing: the API server itself evaluates the tenants' namespaceSelectors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compiler import cel_estimate, objects
from compiler.cel_estimate import Shape, list_of, map_of, record, text
from compiler.objects import Obj
from compiler.targets import admission_policy
from compiler.targets.admission_policy import lit, tenant_requirement, tenant_selectors
from compiler.targets.admission_policy_cost import PER_CALL_LIMIT, POLICY_BUDGET, PolicyCost
from policy.resolved import offers
from policy.resolved import tenancy as tenancy_facts
from policy.resolved.resolve import ResolvedPolicy
from policy.resolved.tenancy import GUARD_NAME, Tenancy

__all__ = ["ENVELOPE", "GUARD_FILE", "GUARD_NAME", "RULE", "GuardEnvelope", "estimate_guard", "policy_names",
           "render_tenancy_guard", "report_notes"]

API_VERSION = "admissionregistration.k8s.io/v1"
#: The id the guard's messages start with, as the admission policies' start with their rule's.
RULE = "tenant-label-guarded"
#: Where the tree holds it (compiler/tree.py names admission/ files kind-name).
GUARD_FILE = f"admission/validatingadmissionpolicy-{GUARD_NAME}.yaml"
RESOURCES = ("namespaces", "namespaces/finalize", "namespaces/status")


def _v(name: str) -> str:
    return f"variables.{name}"


_NEW = "object.metadata.?labels.orValue({})"
_OLD = "(oldObject == null ? {} : oldObject.metadata.?labels.orValue({}))"


def _changed(key: str, new: str, old: str) -> str:
    """The guarded key ``key`` is added, removed or given another value between the label maps ``old`` and ``new``
    (on CREATE ``old`` is empty, so a key the new namespace carries counts as added)."""
    return f"(({key} in {new}) != ({key} in {old}) || ({key} in {new} && {new}[{key}] != {old}[{key}]))"


def _touches(keys: str) -> str:
    """Some guarded key changes. A one-element list and all() name each label map once, as a variable would
    (matchConditions see none), without cel.bind, which only newer API servers have."""
    return f"[{_NEW}].all(new, [{_OLD}].all(old, {keys}.exists(k, {_changed('k', 'new', 'old')})))"


def _is_manager(facts: Tenancy) -> str:
    """request.userInfo names a manager: one of the usernames, or a member of one of the groups (groups always hold
    system:masters). Both read optionally: the API server leaves an empty field out of the request it shows CEL."""
    groups = f"request.userInfo.?groups.orValue([]).exists(g, g in {lit(list(facts.groups))})"
    if not facts.users:
        return f"({groups})"
    return f"(request.userInfo.?username.orValue('') in {lit(list(facts.users))} || {groups})"


def _tenants_text(tenants: str) -> str:
    """Which tenant a list of tenant names puts a namespace in, as the admission messages say it."""
    return (f"({tenants}.size() == 0 ? 'no tenant (admission.defaultAllow applies)' : {tenants}.size() == 1 ? "
            f"'tenant ' + {tenants}[0] : 'tenants ' + {tenants}.join(', ') + ' together')")


def _change_text(key: str) -> str:
    """What a request does to one changed key, as the denial says it (adding k=v, removing k, changing k from a
    to b)."""
    new, old = _v("newLabels"), _v("oldLabels")
    return (f"(!({key} in {old}) ? 'adding ' + {key} + '=' + {new}[{key}] : !({key} in {new}) ? 'removing ' + {key}"
            f" + ' (it was ' + {old}[{key}] + ')' : 'changing ' + {key} + ' from ' + {old}[{key}] + ' to ' + "
            f"{new}[{key}])")


def _message(facts: Tenancy) -> str:
    after, before = _v("tenantsAfter"), _v("tenantsBefore")
    same = f"({after}.size() == {before}.size() && {after}.all(t, t in {before}))"
    move = (f"(oldObject == null ? 'put it in ' + {_v('afterText')} : {same} ? 'keep it in ' + {_v('afterText')} : "
            f"'move it from ' + {_v('beforeText')} + ' to ' + {_v('afterText')})")
    keys = ", ".join(facts.guarded)
    who = (f"; only the tenancy managers may add, change or remove {keys} ({facts.describe_managers()}; "
           "admission.tenancy in the cluster spec)")
    return (f"'[{RULE}] Namespace ' + object.metadata.name + ': ' + {_v('changed')}.map(k, {_change_text('k')})"
            f".join(', ') + ' would ' + {move} + {lit(who)}")


def _selected(labels: str) -> str:
    """The tenants whose selectors match the label map ``labels`` (the admission policies' ``tenants``)."""
    return f"{_v('tenantNames')}.filter(t, {_v('tenantSel')}[t].all(e, {tenant_requirement(labels)}))"


def _variables(facts: Tenancy, document: offers.AdmissionPolicy) -> list[tuple[str, str]]:
    keys = lit(list(facts.guarded))
    return [
        ("newLabels", _NEW),
        ("oldLabels", _OLD),
        ("changed", f"{keys}.filter(k, {_changed('k', _v('newLabels'), _v('oldLabels'))})"),
        ("manager", _is_manager(facts)),
        ("tenantNames", lit([t.name for t in document.tenants])),
        ("tenantSel", lit(tenant_selectors(document.tenants))),
        ("tenantsAfter", _selected(_v("newLabels"))),
        ("tenantsBefore", _selected(_v("oldLabels"))),
        # For the message only (variables are evaluated when first read, so a request the guard admits pays none).
        ("afterText", _tenants_text(_v("tenantsAfter"))),
        ("beforeText", _tenants_text(_v("tenantsBefore"))),
    ]


def policy_names(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """The name of the guard's ValidatingAdmissionPolicy where the tree holds one (monitoring watches it)."""
    return (GUARD_NAME,) if tenancy_facts.tenancy(resolved.spec).guard else ()


def render_tenancy_guard(resolved: ResolvedPolicy) -> list[Obj]:
    """The guard and its binding, where tenants read a mutable label and the API server has VAP; else nothing."""
    facts = tenancy_facts.tenancy(resolved.spec)
    if not facts.guard:
        return []
    policy = resolved.policy
    keys = lit(list(facts.guarded))
    document = offers.build_admission_policy(resolved)
    # The guard needs nothing running, so Argo CD applies it with the workloads, and Flux's admission-policy
    # Kustomization (selected by this component) with the other policies.
    meta = objects.metadata(GUARD_NAME, labels=objects.labels(policy, admission_policy.COMPONENT),
                            annotations={objects.SYNC_WAVE: objects.SYNC_WAVE_WORKLOAD})
    guard = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta,
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                   "resources": list(RESOURCES), "scope": "Cluster"}],
            },
            # Every namespace update reaches the API server's admission chain; only one that touches a guarded key,
            # sent by someone other than a manager, reaches the validation.
            "matchConditions": [
                {"name": "changes-a-tenant-label", "expression": _touches(keys)},
                {"name": "not-a-tenancy-manager", "expression": f"!{_is_manager(facts)}"},
            ],
            "variables": [{"name": n, "expression": e} for n, e in _variables(facts, document)],
            "validations": [{
                "expression": f"{_v('manager')} || {_v('changed')}.size() == 0",
                "messageExpression": _message(facts),
                "message": f"[{RULE}] only the tenancy managers ({facts.describe_managers()}) may add, change or "
                           f"remove the namespace labels that select tenants: {', '.join(facts.guarded)}",
                "reason": "Forbidden",
            }],
        },
    }
    binding = {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding", "metadata": meta,
               "spec": {"policyName": GUARD_NAME,
                        "validationActions": list(admission_policy.ACTIONS[resolved.spec.admission.enforcement])}}
    return [guard, binding]


# ---------------------------------------------------------------- cost


@dataclass(frozen=True)
class GuardEnvelope:
    """The largest request the guard's estimate holds for. The API server bounds a namespace's labels only by the
    256 KiB of all its annotations and labels together and user names not at all, so these are declared bounds."""

    labels: int = 64
    """Labels of a namespace (the admission policies' envelope, admission_policy_cost.Envelope.namespace_labels)."""
    groups: int = 64
    """Groups of the requesting user."""
    name: int = 512
    """Characters of the username and of each group."""


ENVELOPE = GuardEnvelope()
_KEY, _VALUE, _NAMESPACE, _OPERATION = 317, 63, 63, 7  # a qualified name, a label value, a DNS label


def scope(envelope: GuardEnvelope = ENVELOPE) -> dict[str, Shape]:
    """What the guard's expressions see, at the envelope's bounds."""
    namespace = record(metadata=record(name=text(_NAMESPACE), labels=map_of(text(_KEY), text(_VALUE),
                                                                           envelope.labels)))
    user = record(username=text(envelope.name), groups=list_of(text(envelope.name), envelope.groups))
    return {"object": namespace, "oldObject": namespace, "request": record(operation=text(_OPERATION), userInfo=user)}


def estimate_guard(guard: Mapping[str, Any], envelope: GuardEnvelope = ENVELOPE) -> PolicyCost:
    """The most each expression of the guard, and one evaluation of it, may cost (as admission_policy_cost counts
    the admission policies: variables twice, once for the validations and once for the messages)."""
    spec = guard["spec"]
    base = scope(envelope)
    shapes: dict[str, Shape] = {}
    costs: dict[str, int] = {}
    for variable in spec["variables"]:
        found = cel_estimate.estimate(variable["expression"], cel_estimate.with_variables(base, shapes))
        shapes[variable["name"]], costs[variable["name"]] = found.shape, found.cost
    full = cel_estimate.with_variables(base, shapes)

    def each(expressions: list[str]) -> tuple[int, ...]:
        return tuple(cel_estimate.estimate(e, full).cost for e in expressions)

    return PolicyCost(costs, each([x["expression"] for x in spec["validations"]]),
                      each([x["messageExpression"] for x in spec["validations"]]),
                      each([c["expression"] for c in spec["matchConditions"]]))


# ---------------------------------------------------------------- REPORT.md


def report_notes(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """Who may move a namespace between tenants, and what holds them to it."""
    facts = tenancy_facts.tenancy(resolved.spec)
    if not facts.labels or not facts.enforced:
        return ()
    mutable = [label for label in facts.labels if not label.immutable]
    by_name = next((label for label in facts.labels if label.immutable), None)
    keys = ", ".join(label.key for label in mutable)
    notes: list[str] = []
    if facts.guard:
        guard = render_tenancy_guard(resolved)[0]
        cost = estimate_guard(guard)
        name, largest = cost.largest
        notes.append(
            f"Tenancy: tenants select namespaces by {keys}. Only these identities may add, change or remove "
            f"{'it' if len(mutable) == 1 else 'them'}, and so move a namespace between tenants: "
            f"{facts.describe_managers()} ({GUARD_FILE}, on every Namespace CREATE and UPDATE, its status and "
            "finalize subresources included). So may whoever can impersonate them, or delete that policy or its "
            f"binding (docs/security.md). Its costliest expression (the {name}) is estimated at {largest:,} of the "
            f"{PER_CALL_LIMIT:,} the API server allows one, and one evaluation at {cost.total:,} of "
            f"{POLICY_BUDGET:,} (for {ENVELOPE.labels} namespace labels and {ENVELOPE.groups} groups).")
    elif mutable:
        reason = tenancy_facts.guard_missing_reason(resolved.spec)
        notes.append(
            f"Tenancy: tenants select namespaces by {keys}, and nothing in the tree guards "
            f"{'it' if len(mutable) == 1 else 'them'}: whoever may update a namespace (RBAC update or patch on "
            "namespaces or namespaces/status) or create one may choose its tenant. "
            f"{reason[:1].upper()}{reason[1:]}.")
    if by_name is not None:
        tenants = by_name.tenants
        notes.append(
            f"Tenant{'s' if len(tenants) > 1 else ''} {', '.join(tenants)} select{'' if len(tenants) > 1 else 's'} "
            f"namespaces by {by_name.key}, which the API server sets to each namespace's name: no one can move a "
            "namespace into or out of them by a label, but whoever may create namespaces may create one of a name "
            "they list before the platform does.")
    return tuple(notes)
