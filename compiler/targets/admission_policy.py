"""The admission rules as ValidatingAdmissionPolicy: CEL the API server evaluates itself, with nothing to run.

`render_admission_policies(resolved)` returns ValidatingAdmissionPolicy and Binding objects (admissionregistration
.k8s.io/v1, GA in Kubernetes 1.30) built from the same admission-policy document the rule engine loads
(policy/offers.py ``build_admission_policy``): every class, offer, label and tenant reaches the CEL as a typed
literal, never re-derived here (cel-monitoring.md §1.4).

Shape (cel-monitoring.md §1.1, §1.5; webhook.md §1.14):

* one policy per pod-spec path (`PATHS`: Pods at ``spec``, the pod-template kinds at ``spec.template.spec``,
  CronJobs at ``spec.jobTemplate.spec.template.spec``) so the API server's type checking sees one shape per
  policy, times one policy per rule mode present: ``validationActions`` belong to the binding and apply to
  every validation of its policy, so enforce rules go to a ``[Deny]`` binding, warn rules to ``[Warn]`` and
  audit rules to ``[Audit]`` (whose policy also writes one audit annotation per rule id, like the webhook);
* tenants are matched in CEL from ``namespaceObject``'s labels, so one policy serves every tenant;
* UPDATEs are ratcheted through ``oldObject``: an UPDATE that keeps every GPU request and the placement is
  never denied (design.md §4);
* ``messageExpression`` names the rule id, the object, what is wrong and the fix.

Never stricter than the webhook. The API server runs ValidatingAdmissionPolicy before the webhooks and only the
first denial reaches the user, so a VAP denial the engine would not give is a user-visible bug. Each rule's CEL
mirrors the engine (policy/rules.py) over what CEL can see; where it cannot decide what the engine decides, it
allows and leaves the case to the webhook (`NOT_DECIDED`, docs/validating-admission-policy.md). The
equivalence test runs every admission case through both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from compiler import objects
from compiler.objects import Obj
from compiler.targets.admission_webhook import RESOURCE_RULES, excluded_namespaces
from policy import offers
from policy.engine import DEFAULT_WHO
from policy.model import SHARING_MODES, ClusterGPUPolicy, RuleId, RuleMode
from policy.resolve import GPU, MIG_PREFIX, ResolvedPolicy
from policy.rules import RULES, ClassView
from policy.workloads import GPU_PREFIX

__all__ = ["ACTIONS", "CEL_FEATURES", "NOT_DECIDED", "PATHS", "PodSpecPath", "render_admission_policies",
           "report_notes", "variables_of"]

API_VERSION = "admissionregistration.k8s.io/v1"
NAME_SUFFIX = ".gpupolicy.dev"

#: validationActions per rule mode (cel-monitoring.md §1.1: Deny and Warn cannot be combined).
ACTIONS: Mapping[RuleMode, tuple[str, ...]] = {"enforce": ("Deny",), "warn": ("Warn",), "audit": ("Audit",)}
_MODE_SUFFIX: Mapping[RuleMode, str] = {"enforce": "deny", "warn": "warn", "audit": "audit"}

#: What the engine decides and this CEL does not (it allows; the webhook decides). Each entry: why.
NOT_DECIDED: tuple[tuple[str, str], ...] = (
    ("UPDATE ratchet", "CEL compares GPU requests by container name and placement with an absent field equal to an "
     "empty one, where the engine also compares container positions and which of limits or requests a count came "
     "from: an UPDATE that only moves a GPU container or rewrites requests beside equal limits is allowed"),
    ("pod controllers outside the webhook's registration", "PodTemplate and custom resources that embed pod "
     "templates (RayCluster, PyTorchJob, ...) are matched by neither; their operators' Pods are checked"),
    ("cost budget", "a pod far beyond the largest one measured (docs/validating-admission-policy.md) can exhaust "
     "the API server's CEL budget; failurePolicy then decides (Ignore beside the webhook, so it decides)"),
)


#: What only the webhook does, beyond the cases above: where the engine's answer is richer than CEL's.
WEBHOOK_ONLY: tuple[str, ...] = (
    "messages with a reason per class and the nearest offered MIG profile or label value (the VAP's messages "
    "name the rule, the object and a fix, without the per-class detail)",
    "metrics per rule and outcome (gpupolicy_admission_decisions_total); the API server counts VAP denials in "
    "apiserver_validating_admission_policy_check_total",
)

#: The API server's CEL limits for a ValidatingAdmissionPolicy (k8s.io/apiserver pkg/apis/cel/config.go): per
#: expression evaluation, and per (policy, binding) evaluation shared by validations and the variables they use.
PER_CALL_LIMIT = 1_000_000
POLICY_BUDGET = 10_000_000
#: The largest pod the cost is measured on (tests/compiler/test_admission_policy_cost.py): 300 containers.
COST_POD_CONTAINERS = 300


@dataclass(frozen=True)
class PodSpecPath:
    """Where one policy finds the pod spec, and which resources it matches."""

    name: str
    path: tuple[str, ...]
    rules: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]

    def spec(self, var: str) -> str:
        """The pod spec of ``object`` or ``oldObject``."""
        return ".".join((var, *self.path))

    def optional_spec(self, var: str) -> str:
        """The pod spec as an optional: None where a controller has no template (a ReplicationController may not)."""
        return var + "".join(f".?{part}" for part in self.path)


PATHS: tuple[PodSpecPath, ...] = (
    PodSpecPath("pods", ("spec",), tuple(r for r in RESOURCE_RULES if r[1] == ("pods",))),
    PodSpecPath("templates", ("spec", "template", "spec"),
                tuple((g, tuple(x for x in res if x != "cronjobs"), ops) for g, res, ops in RESOURCE_RULES
                      if res != ("pods",) and res != ("cronjobs",))),
    PodSpecPath("cronjobs", ("spec", "jobTemplate", "spec", "template", "spec"),
                (("batch", ("cronjobs",), ("CREATE", "UPDATE")),)),
)

#: CEL functions and syntax the policies use, with the first Kubernetes minor whose API server accepts them in a
#: new policy: libraries are written against the n-1 compatibility version, so one introduced in 1.x is
#: writable from 1.x+1 (k8s.io/apiserver pkg/cel/environment/base.go; cel-monitoring.md §1.2).
CEL_FEATURES: Mapping[str, int] = {
    "optionals (.?field, orValue)": 29,
    "quantity(), asInteger()": 29,
    "lists: sum(), max(), indexOf()": 0,
    "strings v2: join()": 30,
    "matches(), startsWith(), string(), int(), size()": 0,
}


# ---------------------------------------------------------------- CEL text builders


def lit(value: Any) -> str:
    """A CEL literal of JSON-like data; element types must be homogeneous (HomogeneousAggregateLiterals)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _limits(c: str) -> str:
    return f"{c}.?resources.?limits.orValue({{}})"


def _requests(c: str) -> str:
    return f"{c}.?resources.?requests.orValue({{}})"


def amount(c: str, r: str) -> str:
    """Container ``c``'s count of resource ``r`` (a CEL string expression): the limit, else the request, else 0.

    Quantities reach CEL as canonical strings ("1k" for 1000), so they are parsed with quantity(), never int()
    (cel-monitoring.md §1.3). Extended resources are whole numbers (API validation), so asInteger() holds."""
    return (f"({r} in {_limits(c)} ? quantity(string({c}.resources.limits[{r}])).asInteger() : "
            f"{r} in {_requests(c)} ? quantity(string({c}.resources.requests[{r}])).asInteger() : 0)")


def _effective_text(c: str, k: str) -> str:
    """The limit, else the request, as the canonical text the API server shows (for comparing two objects)."""
    return (f"({k} in {_limits(c)} ? string({c}.resources.limits[{k}]) : "
            f"{k} in {_requests(c)} ? string({c}.resources.requests[{k}]) : '')")


def _any_gpu_key(c: str, body: str) -> str:
    """Some nvidia.com/ key ``k`` of the container's limits or requests satisfies ``body``."""
    return (f"({_limits(c)}.exists(k, k.startsWith('{GPU_PREFIX}') && {body}) || "
            f"{_requests(c)}.exists(k, k.startsWith('{GPU_PREFIX}') && {body}))")


def _all_gpu_keys(c: str, body: str) -> str:
    """Every nvidia.com/ key ``k`` of the container's limits and requests satisfies ``body``."""
    return (f"({_limits(c)}.all(k, !k.startsWith('{GPU_PREFIX}') || {body}) && "
            f"{_requests(c)}.all(k, !k.startsWith('{GPU_PREFIX}') || {body}))")


def _requests_gpu(c: str) -> str:
    return _any_gpu_key(c, "true")


def v(name: str) -> str:
    return f"variables.{name}"


# ---------------------------------------------------------------- data from the admission-policy document


def _data(policy: offers.AdmissionPolicy) -> list[tuple[str, str]]:
    """Typed literals: per class its offers, labels and modes; the tenants; the resources some class offers."""
    views = [ClassView.from_doc(c) for c in policy.classes]
    known = sorted({o.resource for c in policy.classes for o in c.offers})
    tenants = policy.tenants
    return [
        ("classes", lit([c.name for c in policy.classes])),
        ("offers", lit({c.name: {o.resource: o.per_node for o in c.offers} for c in policy.classes})),
        ("shared", lit({c.name: sorted(o.resource for o in c.offers if o.shared) for c in policy.classes})),
        ("strict", lit({c.name: sorted(o.resource for o in c.offers if o.shared and o.fail_requests_greater_than_one)
                        for c in policy.classes})),
        ("modes", lit({c.name: {o.resource: list(o.modes) for o in c.offers} for c in policy.classes})),
        ("labels", lit({view.name: {k: sorted(vals) for k, vals in view.labels.items()} for view in views})),
        ("absent", lit({view.name: list(view.absent_prefixes) for view in views})),
        ("mixed", lit([c.name for c in policy.classes if c.mig_strategy == "mixed"])),
        ("single", lit([c.name for c in policy.classes if c.mig_strategy == "single"])),
        ("pins", lit({view.name: view.pin() for view in views})),
        ("known", lit(known)),
        ("idx", lit(list(range(len(known))))),
        ("allModes", lit(list(SHARING_MODES))),
        ("defaultModes", lit(list(policy.default_allow))),
        ("tenantNames", lit([t.name for t in tenants])),
        # A selector as a list of requirements, each a map of one-element or value lists, so the literal stays
        # homogeneous: map(string, list(map(string, list(string)))) (cel-monitoring.md §1.4).
        ("tenantSel", lit({t.name: [{"key": [k], "operator": ["In"], "values": [val]}
                                    for k, val in sorted(t.match_labels.items())]
                           + [{"key": [e.key], "operator": [e.operator], "values": list(e.values)}
                              for e in t.match_expressions] for t in tenants})),
        ("tenantModes", lit({t.name: list(t.allow) for t in tenants})),
        ("tenantClasses", lit({t.name: list(t.classes) for t in tenants if t.classes})),
    ]


# ---------------------------------------------------------------- the facts of one pod, in CEL


def _per_request(path: PodSpecPath) -> list[tuple[str, str]]:
    sidecar = "c.?restartPolicy.orValue('') == 'Always'"
    row = f"{v('idx')}.map(i, {amount('c', v('known') + '[i]')})"
    placeable_fits = (f"{v('placeable')}.exists(n, {v('known')}[i] in {v('offers')}[n] && "
                      f"{v('offers')}[n][{v('known')}[i]] >= {v('totals')}[i])")
    return [
        ("spec", path.spec("object")),
        ("init", f"{v('spec')}.?initContainers.orValue([])"),
        ("gpuInit", f"{v('init')}.filter(c, {_requests_gpu('c')})"),
        ("gpuApp", f"{v('spec')}.containers.filter(c, {_requests_gpu('c')})"),
        ("gpuCtrs", f"{v('gpuInit')} + {v('gpuApp')}"),
        # Counts per known resource, one row per container: sidecars (init containers with restartPolicy Always)
        # and plain init containers carry their position among the init containers first.
        ("initNames", f"{v('init')}.map(c, c.name)"),
        ("sideRows", f"{v('gpuInit')}.filter(c, {sidecar}).map(c, [{v('initNames')}.indexOf(c.name)] + {row})"),
        ("plainRows", f"{v('gpuInit')}.filter(c, !({sidecar})).map(c, [{v('initNames')}.indexOf(c.name)] + {row})"),
        ("appRows", f"{v('gpuApp')}.map(c, {row})"),
        # The effective pod request as the scheduler counts it (k8s resourcehelper.PodRequests, workloads.py):
        # max(regular + sidecars, the largest plain init container plus the sidecars started before it).
        ("totals", f"{v('idx')}.map(i, [{v('appRows')}.map(r, r[i]).sum() + {v('sideRows')}.map(r, r[i + 1]).sum(),"
                   f" ([0] + {v('plainRows')}.map(q, q[i + 1] + {v('sideRows')}.filter(r, r[0] < q[0])"
                   f".map(r, r[i + 1]).sum())).max()].max())"),
        ("requested", f"{v('idx')}.filter(i, {v('totals')}[i] > 0)"),
        # nvidia.com/ resources no class offers, per container asking for more than 0 of them.
        ("unknown", f"{v('gpuCtrs')}.map(c, {_limits('c')}.filter(k, k.startsWith('{GPU_PREFIX}') && "
                    f"!(k in {v('known')}) && {amount('c', 'k')} > 0) + {_requests('c')}.filter(k, "
                    f"k.startsWith('{GPU_PREFIX}') && !(k in {v('known')}) && !(k in {_limits('c')}) && "
                    f"{amount('c', 'k')} > 0)).filter(l, l.size() > 0)"),
        ("sel", f"{v('spec')}.?nodeSelector.orValue({{}})"),
        ("terms", f"{v('spec')}.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
                  ".?nodeSelectorTerms.orValue([])"),
        ("placeable", f"{v('classes')}.filter(n, !{_selector_excludes('n')} && !{_terms_exclude('n')})"),
        ("candidates", f"{v('placeable')}.filter(n, {_fits('n')})"),
        # Flattened through join and split (the Kubernetes CEL environment has no flatten() before 1.35);
        # resource names are qualified names, which hold no comma.
        ("unknownNames", f"{v('unknown')}.map(l, l.join(',')).join(',').split(',').filter(r, r != '')"),
        ("asks", f"{v('requested')}.size() > 0 || {v('unknown')}.size() > 0"),
        ("failing", f"{v('requested')}.filter(i, !{placeable_fits}).map(i, {v('known')}[i]) + {v('unknownNames')}"),
        ("mismatched", f"{v('failing')}.filter(r, !{v('placeable')}.exists(n, r in {v('offers')}[n]) && "
                       f"{_mig_mismatch('r')})"),
        ("oldSpec", f"oldObject == null ? {{}} : {path.optional_spec('oldObject')}.orValue({{}})"),
        ("oldGpuInit", f"{v('oldSpec')}.?initContainers.orValue([]).filter(c, {_requests_gpu('c')})"),
        ("oldGpuApp", f"{v('oldSpec')}.?containers.orValue([]).filter(c, {_requests_gpu('c')})"),
        ("oldInitNames", f"{v('oldGpuInit')}.map(c, c.name)"),
        ("oldAppNames", f"{v('oldGpuApp')}.map(c, c.name)"),
        ("unchanged", _unchanged()),
        # Nothing to decide: an UPDATE keeping GPUs and placement, or only zero counts (engine: allowed).
        ("skip", f"{v('unchanged')} || !{v('asks')}"),
        ("strictRes", f"{v('known')}.filter(r, {v('candidates')}.exists(n, r in {v('strict')}[n]))"),
        ("overOne", f"{v('gpuCtrs')}.filter(c, {v('strictRes')}.exists(r, {amount('c', 'r')} > 1))"),
        *_tenancy(),
    ]


def _fits(n: str) -> str:
    return (f"({v('unknown')}.size() == 0 && {v('requested')}.all(i, {v('known')}[i] in {v('offers')}[{n}] && "
            f"{v('offers')}[{n}][{v('known')}[i]] >= {v('totals')}[i]))")


def _lacks(n: str, key: str) -> str:
    """No node of the class carries the label (rules.ClassView.lacks)."""
    return f"(!({key} in {v('labels')}[{n}]) && {v('absent')}[{n}].exists(p, {key}.startsWith(p)))"


def _selector_excludes(n: str) -> str:
    """A nodeSelector entry no node of the class can satisfy (rules._excludes for key In [value])."""
    labels = f"{v('labels')}[{n}]"
    return (f"{v('sel')}.exists(k, k in {labels} ? !({v('sel')}[k] in {labels}[k]) : {_lacks(n, 'k')})")


_INTEGER = "'^[+-]?[0-9]{1,18}$'"


def _satisfies(e: str, value: str) -> str:
    """rules._satisfies: whether a node label value meets one match expression."""
    vals = f"{e}.?values.orValue([])"
    bound = (f"({vals}.size() == 1 && {vals}[0].matches({_INTEGER}) ? ({value}.matches({_INTEGER}) && "
             f"({e}.operator == 'Gt' ? int({value}) > int({vals}[0]) : int({value}) < int({vals}[0]))) : true)")
    return (f"({e}.operator == 'In' ? {value} in {vals} : {e}.operator == 'NotIn' ? !({value} in {vals}) : "
            f"{e}.operator == 'Exists' ? true : {e}.operator == 'DoesNotExist' ? false : {bound})")


def _terms_exclude(n: str) -> str:
    """Every required node-affinity term excludes the class (rules.terms_conflict); matchFields never exclude."""
    labels = f"{v('labels')}[{n}]"
    requirement = (f"(e.key in {labels} ? !{labels}[e.key].exists(x, {_satisfies('e', 'x')}) : "
                   f"{_lacks(n, 'e.key')} && e.operator in ['In', 'Exists', 'Gt', 'Lt'])")
    empty = "(t.?matchExpressions.orValue([]).size() == 0 && t.?matchFields.orValue([]).size() == 0)"
    return (f"({v('terms')}.size() > 0 && {v('terms')}.all(t, {empty} || "
            f"t.?matchExpressions.orValue([]).exists(e, {requirement})))")


def _mig_mismatch(r: str) -> str:
    """rules._is_mig_mismatch over the classes the placement allows."""
    placeable = v("placeable")
    offers_gpu = f"{placeable}.exists(n, '{GPU}' in {v('offers')}[n])"
    offers_mig = f"{placeable}.exists(n, {v('offers')}[n].exists(k, k.startsWith('{MIG_PREFIX}')))"
    mixed = f"{placeable}.exists(n, n in {v('mixed')})"
    return f"(({r}.startsWith('{MIG_PREFIX}') && {offers_gpu} && !{offers_mig}) || ({r} == '{GPU}' && {mixed}))"


def _unchanged() -> str:
    """An UPDATE keeping every GPU request and the placement (engine._unchanged).

    The GPU containers of each section must have the same names in the same order; each is then paired with the
    old one of its name (indexOf, so the cost stays linear in the pair count, not quadratic) and compared by
    restart policy and by the count of every nvidia.com/ resource."""
    same = f"{_effective_text('o', 'k')} == {_effective_text('c', 'k')}"

    def section(mine: str, names: str, theirs: str) -> str:
        pair = f"[{theirs}[{v(names)}.indexOf(c.name)]]"
        return (f"{mine}.map(c, c.name) == {v(names)} && {mine}.all(c, {pair}.all(o, "
                f"o.?restartPolicy.orValue('') == c.?restartPolicy.orValue('') && "
                f"{_all_gpu_keys('c', same)} && {_all_gpu_keys('o', same)}))")

    terms = ".?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms.orValue([])"
    new, old = v("spec"), v("oldSpec")
    return (f"request.operation == 'UPDATE' && oldObject != null && "
            f"{new}.?nodeSelector.orValue({{}}) == {old}.?nodeSelector.orValue({{}}) && "
            f"{new}{terms} == {old}{terms} && {section(v('gpuInit'), 'oldInitNames', v('oldGpuInit'))} && "
            f"{section(v('gpuApp'), 'oldAppNames', v('oldGpuApp'))}")


def _tenancy() -> list[tuple[str, str]]:
    """The namespace's tenants from namespaceObject's labels (engine.tenants_for), and what they allow together."""
    labels = "variables.nsLabels"
    requirement = (f"(e['operator'][0] == 'In' ? (e['key'][0] in {labels} && {labels}[e['key'][0]] in e['values'])"
                   f" : e['operator'][0] == 'NotIn' ? !(e['key'][0] in {labels} && {labels}[e['key'][0]] in "
                   f"e['values']) : e['operator'][0] == 'Exists' ? e['key'][0] in {labels} : "
                   f"!(e['key'][0] in {labels}))")
    return [
        # The API server labels every namespace with kubernetes.io/metadata.name (1.21+).
        ("nsLabels", "namespaceObject == null ? {} : namespaceObject.metadata.?labels.orValue({})"),
        ("tenants", f"{v('tenantNames')}.filter(t, {v('tenantSel')}[t].all(e, {requirement}))"),
        ("allowed", f"{v('tenants')}.size() == 0 ? {v('defaultModes')} : "
                    f"{v('allModes')}.filter(m, {v('tenants')}.all(t, m in {v('tenantModes')}[t]))"),
        ("limitedBy", f"{v('tenants')}.filter(t, t in {v('tenantClasses')})"),
        ("who", f"{v('tenants')}.size() == 0 ? '{DEFAULT_WHO}' : {v('tenants')}.size() == 1 ? 'tenant ' + "
                f"{v('tenants')}[0] : 'tenants ' + {v('tenants')}.join(', ') + ' together'"),
    ]


def _access_ok(n: str) -> str:
    """The namespace's tenants may use the class for every requested resource (rules.Access.allows)."""
    return (f"({v('requested')}.all(i, {v('modes')}[{n}][{v('known')}[i]].all(m, m in {v('allowed')})) && "
            f"{v('limitedBy')}.all(t, {n} in {v('tenantClasses')}[t]))")


# ---------------------------------------------------------------- one entry per rule


@dataclass(frozen=True)
class CelRule:
    """One engine rule in CEL: when the object passes it, and the message (rule id, subject, what, fix)."""

    holds: str
    message: str
    reason: str = "Forbidden"


_SUBJECT = "object.kind + ' ' + object.metadata.?name.orValue('')"


def _message(rule: RuleId, what: str, fix: str) -> str:
    return f"'[{rule}] ' + {_SUBJECT} + ': ' + {what} + '. Fix: ' + {fix}"


def _first_class(condition: str) -> str:
    """Classes (policy order) one node of which offers the whole request and that satisfy ``condition``."""
    return f"{v('classes')}.filter(n, {_fits('n')} && {_access_ok('n')} && {condition})"


def _request_text() -> str:
    return (f"{v('requested')}.map(i, string({v('totals')}[i]) + ' ' + {v('known')}[i]).join(' and ')"
            f" + ({v('unknown')}.size() > 0 ? ' and ' + {v('unknown')}.map(l, l.join(', ')).join(', ') : '')")


def _unsatisfiable_fix() -> str:
    failing, placeable, offers_ = v("failing"), v("placeable"), v("offers")
    too_few = f"{failing}.filter(r, {placeable}.exists(n, r in {offers_}[n]))"
    most = f"{placeable}.filter(n, {too_few}[0] in {offers_}[n]).map(n, {offers_}[n][{too_few}[0]]).max()"
    elsewhere = f"{v('classes')}.filter(n, {_fits('n')})"
    offered = f"{v('known')}.join(', ')"
    return (f"({v('unknown')}.size() > 0 ? 'request one of ' + {offered} + ' instead of ' + "
            f"{v('unknown')}.map(l, l.join(', ')).join(', ') : {too_few}.size() > 0 ? 'request at most ' + "
            f"string({most}) + ' ' + {too_few}[0] + ' per pod, or split the work across pods' : "
            f"{elsewhere}.size() > 0 ? 'pin the pod to class ' + {elsewhere}[0] + ' with ' + "
            f"{v('pins')}[{elsewhere}[0]] : 'split the pod into pods that each request what one node class offers')")


def _mismatch_fix() -> str:
    placeable = v("placeable")
    mig = (f"{placeable}.filter(n, n in {v('mixed')}).map(n, {v('offers')}[n].filter(k, k.startsWith("
           f"'{MIG_PREFIX}')).join(', ')).join(', ')")
    single = f"{placeable}.filter(n, n in {v('single')})"
    return (f"({v('mismatched')}[0] == '{GPU}' ? 'request one of ' + {mig} + ' instead' : "
            f"'request {GPU} instead' + ({single}.size() > 0 ? ', and pin the pod to class ' + {single}[0] + "
            f"' with ' + {v('pins')}[{single}[0]] : ''))")


def _shared_rule() -> CelRule:
    strict, over = v("strictRes"), v("overOne")
    unshared = _first_class(f"{v('requested')}.all(i, !({v('known')}[i] in {v('shared')}[n]))")
    resource = f"{strict}.filter(r, {amount(over + '[0]', 'r')} > 1)[0]"
    what = (f"'container ' + {over}[0].name + ' requests more than 1 ' + {resource} + ', and the scheduler may "
            f"place the pod on class ' + {v('candidates')}.filter(n, {resource} in {v('strict')}[n]).join(', ') + "
            f"', whose device plugin refuses more than 1 shared replica per container (UnexpectedAdmissionError)'")
    fix = (f"({unshared}.size() > 0 ? 'pin the pod to unshared devices with ' + {v('pins')}[{unshared}[0]] + "
           f"' (class ' + {unshared}[0] + '), or request ' + {resource} + ': 1' : 'request ' + {resource} + "
           f"': 1 per container: more shared replicas of one device add no compute')")
    return CelRule(f"{v('skip')} || {over}.size() == 0",
                   _message("shared-gpu-request-above-one", what, fix))


def _tenant_rule() -> CelRule:
    denied = f"{v('candidates')}.filter(n, !{_access_ok('n')})"
    allowed = _first_class("true")
    what = (f"{v('who')} + ' may use only ' + ({v('allowed')}.size() > 0 ? {v('allowed')}.join(', ') : "
            f"'no sharing mode') + ({v('limitedBy')}.size() > 0 ? ' on its classes' : '') + ', but the scheduler "
            f"may place this pod on class ' + {denied}.join(', ')")
    fix = (f"({allowed}.size() > 0 ? 'pin the pod to class ' + {allowed}[0] + ' with ' + {v('pins')}[{allowed}[0]] "
           f": 'run it in a namespace of a tenant that may use these classes, or ask the platform team to allow it')")
    return CelRule(f"{v('skip')} || {denied}.size() == 0", _message("tenant-sharing-mode-denied", what, fix))


def cel_rules() -> dict[RuleId, CelRule]:
    """Every engine rule (policy/rules.py RULES) in CEL, in the engine's order."""
    no_candidate = f"{v('skip')} || {v('candidates')}.size() > 0"
    table: dict[RuleId, CelRule] = {
        "mig-strategy-mismatch": CelRule(
            f"{no_candidate} || {v('mismatched')}.size() == 0",
            _message("mig-strategy-mismatch", f"'the pod requests ' + {v('mismatched')}[0] + ', a name the nodes "
                     "it may run on do not advertise under their MIG strategy, so it would stay Pending'",
                     _mismatch_fix())),
        "gpu-request-unsatisfiable": CelRule(
            f"{no_candidate} || ({v('failing')}.size() > 0 && {v('failing')}.all(r, r in {v('mismatched')}))",
            _message("gpu-request-unsatisfiable", f"'no node class this pod may run on offers ' + "
                     f"{_request_text()} + ' on one node, so it would stay Pending'", _unsatisfiable_fix())),
        "shared-gpu-request-above-one": _shared_rule(),
        "tenant-sharing-mode-denied": _tenant_rule(),
    }
    return {rule.id: table[rule.id] for rule in RULES}


# ---------------------------------------------------------------- objects


def variables_of(policy: offers.AdmissionPolicy, path: PodSpecPath) -> list[tuple[str, str]]:
    """Every variable of the policy for ``path``, in evaluation order (data first)."""
    return _data(policy) + _per_request(path)


def _match_conditions(path: PodSpecPath) -> list[Obj]:
    spec = path.optional_spec("object")
    ctrs = f"({spec}.?containers.orValue([]) + {spec}.?initContainers.orValue([]))"
    old = path.optional_spec("oldObject")
    return [
        # Only objects asking for an nvidia.com/ resource: an UPDATE that removes them is never denied anyway.
        {"name": "requests-nvidia-resources", "expression": f"{ctrs}.exists(c, {_requests_gpu('c')})"},
        # An UPDATE leaving the whole pod spec alone cannot be denied (design.md §4): skipped before any cost.
        {"name": "pod-spec-created-or-changed",
         "expression": f"request.operation != 'UPDATE' || oldObject == null || {spec} != {old}"},
    ]


def _name(path: PodSpecPath, mode: RuleMode) -> str:
    return f"gpupolicy-{path.name}-{_MODE_SUFFIX[mode]}{NAME_SUFFIX}"


def _policy_object(resolved: ResolvedPolicy, document: offers.AdmissionPolicy, path: PodSpecPath, mode: RuleMode,
                   rules: Iterable[RuleId], both: bool) -> Obj:
    policy = resolved.policy
    table = cel_rules()
    validations = [{"expression": table[r].holds, "messageExpression": table[r].message,
                    "message": f"[{r}] {_summary(r)}", "reason": table[r].reason} for r in rules]
    spec: Obj = {
        # Beside the webhook an evaluation error (a pod beyond the cost budget) is left to the webhook, so the VAP
        # is never stricter; alone it follows admission.failurePolicy like the webhook would.
        "failurePolicy": "Ignore" if both else policy.spec.admission.failure_policy,
        "matchConstraints": {
            "matchPolicy": "Equivalent",
            "namespaceSelector": {"matchExpressions": [_requirement(excluded_namespaces(policy))]},
            "resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(ops),
                               "resources": list(res), "scope": "Namespaced"} for group, res, ops in path.rules],
        },
        "matchConditions": _match_conditions(path),
        "variables": [{"name": n, "expression": e} for n, e in variables_of(document, path)],
        "validations": validations,
    }
    if mode == "audit":
        # The webhook's audit annotations are keyed by rule id; here they publish as <policy name>/<rule id>.
        spec["auditAnnotations"] = [{"key": r, "valueExpression": f"{table[r].holds} ? '' : {table[r].message}"}
                                    for r in rules]
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
            "metadata": objects.metadata(_name(path, mode), labels=_labels(policy)), "spec": spec}


def _binding(policy: ClusterGPUPolicy, path: PodSpecPath, mode: RuleMode) -> Obj:
    name = _name(path, mode)
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": objects.metadata(name, labels=_labels(policy)),
            "spec": {"policyName": name, "validationActions": list(ACTIONS[mode])}}


def render_admission_policies(resolved: ResolvedPolicy) -> list[Obj]:
    """The policies and bindings for admission.engine vap or both, sorted by (kind, name); empty otherwise."""
    spec = resolved.spec
    if not spec.admission.enabled or spec.admission_engine == "webhook":
        return []
    document = offers.build_admission_policy(resolved)
    both = spec.admission_engine == "both"
    by_mode: dict[RuleMode, list[RuleId]] = {}
    for rule in RULES:
        by_mode.setdefault(document.rules[rule.id], []).append(rule.id)
    out: list[Obj] = []
    for path in PATHS:
        for mode, rules in by_mode.items():
            out.append(_policy_object(resolved, document, path, mode, rules, both))
            out.append(_binding(resolved.policy, path, mode))
    return sorted(out, key=lambda obj: (obj["kind"], obj["metadata"]["name"]))


def report_notes(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """REPORT.md's notes on who enforces the rules, and what the ValidatingAdmissionPolicy leaves to the webhook."""
    spec = resolved.spec
    if not spec.admission.enabled:
        return ()
    engine = spec.admission_engine
    if engine == "webhook":
        return ("Admission: the webhook enforces every rule (admission.engine: webhook). From Kubernetes 1.30, "
                "admission.engine: both adds ValidatingAdmissionPolicies that hold the core rules inside the API "
                "server even while the webhook is down.",)
    gaps = "; ".join(f"{what}: {why}" for what, why in NOT_DECIDED)
    cost = (f" Estimated CEL cost on a {COST_POD_CONTAINERS}-container pod: each policy stays within the API "
            f"server's {POLICY_BUDGET:,} per evaluation and each expression within {PER_CALL_LIMIT:,} "
            "(docs/validating-admission-policy.md).")
    if engine == "both":
        return (f"Admission: ValidatingAdmissionPolicies (admission/validatingadmissionpolicy-*) hold the rules CEL "
                f"decides inside the API server, which runs them before the webhook, so their message is the one "
                f"users see; the webhook still evaluates everything and decides what CEL leaves to it ({gaps})."
                + cost,)
    return (f"Admission: ValidatingAdmissionPolicies only (admission.engine: vap): no webhook is deployed. Not "
            f"enforced without the webhook: {gaps}; and "
            + "; ".join(WEBHOOK_ONLY) + "." + cost,)


def _summary(rule: RuleId) -> str:
    return next(r.summary for r in RULES if r.id == rule)


def _labels(policy: ClusterGPUPolicy) -> dict[str, str]:
    return objects.labels(policy, "admission-policy")


def _requirement(req: Any) -> Obj:
    out: Obj = {"key": req.key, "operator": req.operator}
    if req.operator in ("In", "NotIn"):
        out["values"] = sorted(req.values)
    return out
