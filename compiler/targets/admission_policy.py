"""The admission rules as ValidatingAdmissionPolicy: CEL the API server evaluates itself, with nothing to run.

`render_admission_policies(resolved)` returns ValidatingAdmissionPolicy and Binding objects (admissionregistration
.k8s.io/v1, GA in Kubernetes 1.30) built from the same admission-policy document the rule engine loads
(policy/resolved/offers.py ``build_admission_policy``): every class, offer, label, taint and tenant reaches the CEL
as a typed literal, never re-derived here (cel-monitoring.md §1.4).

Shape (cel-monitoring.md §1.1, §1.5; webhook.md §1.14):

* one policy per pod-spec path (`PATHS`: Pods at ``spec``, the pod-template kinds at ``spec.template.spec``,
  CronJobs at ``spec.jobTemplate.spec.template.spec``) so the API server's type checking sees one shape per
  policy, times one policy per rule mode present: ``validationActions`` belong to the binding and apply to
  every validation of its policy, so enforce rules go to a ``[Deny]`` binding, warn rules to ``[Warn]`` and
  audit rules to ``[Audit]`` (whose policy also writes one audit annotation per rule id, like the webhook);
* tenants are matched in CEL from ``namespaceObject``'s labels, so one policy serves every tenant;
* UPDATEs are ratcheted through ``oldObject``: an UPDATE that keeps every GPU request and the placement is
  never denied (design.md §4);
* ``messageExpression`` names the rule id, the object, what is wrong and the fix; a fix that pins the pod to a
  class is one that, merged into the pod, leaves every class the pod may then reach clear of every rule.

Never stricter than the webhook. The API server runs ValidatingAdmissionPolicy before the webhooks and only the
first denial reaches the user, so a VAP denial the engine would not give is a user-visible bug. Each rule's CEL
mirrors the engine (policy/admission/rules.py) over what CEL can see; where it cannot decide what the engine decides,
the ``undecided`` variable is true, every validation passes and the webhook decides (`NOT_DECIDED`, `NOT_COMPILED`,
docs/validating-admission-policy.md). The equivalence test runs every admission case through both.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from compiler import objects
from compiler.objects import Obj
from compiler.targets import admission_policy_cost
from compiler.targets.admission_webhook import RESOURCE_RULES, excluded_namespaces
from compiler.targets.workload_kinds import OPERATIONS as WORKLOAD_OPERATIONS
from compiler.targets.workload_kinds import resource_rules as workload_rules
from policy.admission.engine import DEFAULT_WHO
from policy.admission.rules import RULES, ClassView, excludes
from policy.admission.templates import parse
from policy.admission.vgpu import HamiAdmission
from policy.admission.workloads import GPU_PREFIX
from policy.kube.scheduling import NodeRequirement
from policy.resolved import offers
from policy.resolved.resolve import GPU, MIG_PREFIX, ResolvedPolicy
from policy.spec.model import SHARING_MODES, ClusterGPUPolicy, PodTemplateRef, RuleId, RuleMode, Spec, WorkloadKind

__all__ = ["ACTIONS", "NOT_COMPILED", "NOT_DECIDED", "PATHS", "PodSpecPath", "cel_rules", "lit", "paths_for",
           "policy_names", "render_admission_policies", "report_notes", "tenant_requirement", "tenant_selectors",
           "variables_of"]

API_VERSION = "admissionregistration.k8s.io/v1"
NAME_SUFFIX = ".gpupolicy.dev"
#: app.kubernetes.io/component of the policies and bindings (the Flux examples select them by it).
COMPONENT = "admission-policy"

#: validationActions per rule mode (cel-monitoring.md §1.1: Deny and Warn cannot be combined).
ACTIONS: Mapping[RuleMode, tuple[str, ...]] = {"enforce": ("Deny",), "warn": ("Warn",), "audit": ("Audit",)}
_MODE_SUFFIX: Mapping[RuleMode, str] = {"enforce": "deny", "warn": "warn", "audit": "audit"}

#: Rules with no CEL: the policies never give them, the webhook does. Each entry: why.
NOT_COMPILED: Mapping[RuleId, str] = {
    "gpu-request-invalid": "the API server refuses such amounts itself, when it decodes or validates the object, "
    "before any admission policy or webhook runs (the rule exists for `gpupolicy admit` and test suites offline)",
    "hami-scheduler-bypassed": "HAMi vGPU pods are left to the webhook (see below)",
    "vgpu-memory-unsatisfiable": "HAMi vGPU pods are left to the webhook (see below)",
    "vgpu-count-above-gpus": "HAMi vGPU pods are left to the webhook (see below)",
    "hami-resource-out-of-range": "HAMi vGPU pods are left to the webhook (see below)",
    "hami-privileged-container": "HAMi vGPU pods are left to the webhook (see below)",
    "hami-annotation-invalid": "HAMi vGPU pods are left to the webhook (see below)",
    "kai-annotation-invalid": "the policies read no annotations: KAI Scheduler's fractional-GPU pods are left to "
    "the webhook",
}

#: What the engine decides and this CEL does not: it allows, and the webhook decides. Each entry: why.
NOT_DECIDED: tuple[tuple[str, str], ...] = (
    ("HAMi vGPU pods", "a pod HAMi's scheduler takes (it asks for a per-vGPU resource, or for HAMi's count "
     "resource in a namespace HAMi's webhook reaches) can only land on vgpu classes, with HAMi's own rules; the "
     "prediction of HAMi's mutation and its rules stay with the engine, so the policies allow every such pod"),
    ("amounts CEL does not read", "an nvidia.com/ amount that is not a whole non-negative quantity, lacks a "
     "limit or differs from it never reaches admission in a cluster (the API server refuses it first); one beyond "
     "int64 (10E) is no int in CEL, and a request written in another unit than its equal limit (1Ki and 1024) "
     "does not read as the same text; the policies allow all of these"),
    ("GPU sidecars interleaved with GPU init containers", "the scheduler adds to each init container the sidecars "
     "started before it; CEL, which has no running sums, works this out where the GPU sidecars all come before the "
     "other GPU init containers or all after them, and leaves a pod that interleaves them to the webhook"),
    ("Lt and Gt tolerations", "tolerations comparing taint values as integers (alpha, feature gate "
     "TaintTolerationComparisonOperators) are left to the webhook"),
    ("UPDATEs only the policies' ratchet keeps", "the policies compare the GPU containers of each section by name "
     "and order, the counts of the resources some class offers, and an absent nodeSelector, affinity, tolerations "
     "or nodeName as an empty one; the engine also compares container positions and other nvidia.com/ amounts, "
     "so an UPDATE that only moves a GPU container among the others, or changes only an amount no class offers, "
     "is allowed by the policies and checked by the webhook"),
    ("KAI fractional GPUs", "a pod asking KAI Scheduler for a fraction of a GPU by annotation (gpu-fraction, "
     "gpu-memory) asks for no nvidia.com/ resource, so the policies' matchConditions skip it; the webhook checks its "
     "sharing mode against the tenant"),
    ("workload custom resources", "the policies read a custom resource's pod template only where it is a plain "
     "pod spec at a path they already read (Knative's Service and Configuration at spec.template.spec); templates "
     "behind a list or map (KubeRay worker groups, Kubeflow replica specs, Argo templates), at other paths, or with "
     "containers, GPU keys or a podSpecPatch outside the pod spec (KServe, NIM, Dynamo, Argo) are left to the "
     "webhook, which reads every template of the workload-kinds table"),
    ("pods naming their node", "a pod with spec.nodeName is judged on exactly the classes its node's labels select, "
     "which only the webhook's node cache knows (CEL cannot read a Node); beside a webhook with failurePolicy Fail "
     "and its node cache (admission.nodeCache) the policies leave such pods to it (were it down, they are refused), "
     "otherwise they judge them on every class the pod may reach"),
    ("pods beyond the cost envelope", "a pod larger than the envelope the cost is estimated for "
     "(docs/validating-admission-policy.md) may exhaust the API server's CEL budget; failurePolicy then decides "
     "(Ignore beside the webhook, which then decides)"),
)

#: What only the webhook does, beyond the cases above: where the engine's answer is richer than CEL's.
WEBHOOK_ONLY: tuple[str, ...] = (
    "messages with a reason per class and a fix checked against every rule for every finding (the VAP's "
    "messages name the rule, the object and one fix: a pin to a class it checked, else advice)",
    "metrics per rule and outcome (gpupolicy_admission_decisions_total); the API server counts VAP denials in "
    "apiserver_validating_admission_policy_check_total",
)


@dataclass(frozen=True)
class PodSpecPath:
    """Where one policy finds the pod spec, and which resources it matches."""

    name: str
    path: tuple[str, ...]
    rules: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    custom: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()
    """Workload custom resources whose pod template is a plain pod spec at this same path: (group, versions,
    resources), matched on CREATE and UPDATE (Knative's Service and Configuration at spec.template.spec)."""

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



def paths_for(kinds: Iterable[WorkloadKind]) -> tuple[PodSpecPath, ...]:
    """PATHS, each also matching the table's kinds that carry a plain pod spec at its path. A template behind a
    list or map wildcard, at another path, or with containers, GPU keys or a patch outside its pod spec is left
    to the webhook (NOT_DECIDED)."""
    found: dict[tuple[str, ...], list[WorkloadKind]] = {}
    for kind in kinds:
        for ref in kind.templates:
            steps = parse(ref.path)
            if all(isinstance(step, str) for step in steps) and _plain(ref):
                found.setdefault(tuple(str(step) for step in steps), []).append(kind)
    out = []
    for path in PATHS:
        matched = found.get(path.path, [])
        rules = workload_rules(matched) if matched else ()
        out.append(replace(path, custom=rules) if rules else path)
    return tuple(out)


def _plain(ref: PodTemplateRef) -> bool:
    return ref.pod_spec == "." and not ref.containers and not ref.gpu_keys and ref.pod_spec_patch is None


# ---------------------------------------------------------------- CEL text builders


def lit(value: Any) -> str:
    """A CEL literal of JSON-like data; element types must be homogeneous (HomogeneousAggregateLiterals)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _limits(c: str) -> str:
    return f"{c}.?resources.?limits.orValue({{}})"


def _requests(c: str) -> str:
    return f"{c}.?resources.?requests.orValue({{}})"


def amount(c: str, r: str) -> str:
    """Container ``c``'s count of resource ``r`` (a CEL string expression): its limit, else 0.

    Extended resources need a limit, and a request equal to it (``invalid`` leaves every other case undecided), so
    the limit is the count."""
    return f"({r} in {_limits(c)} ? {_count(f'{c}.resources.limits[{r}]')} : 0)"


def _count(q: str) -> str:
    """A whole quantity as an int. Quantities reach CEL as canonical strings ("1k" for 1000), so they are parsed
    with quantity(), never int() (cel-monitoring.md §1.3)."""
    return f"quantity(string({q})).asInteger()"


def _whole(q: str) -> str:
    """A non-negative integer quantity (canonical text of a negative one starts with '-'), as CEL can read it."""
    return f"(isQuantity(string({q})) && !string({q}).startsWith('-') && quantity(string({q})).isInteger())"


def _any_gpu_key(c: str, body: str) -> str:
    """Some nvidia.com/ key ``k`` of the container's limits or requests satisfies ``body``."""
    return (f"({_limits(c)}.exists(k, k.startsWith('{GPU_PREFIX}') && {body}) || "
            f"{_requests(c)}.exists(k, k.startsWith('{GPU_PREFIX}') && {body}))")


def _requests_gpu(c: str) -> str:
    return _any_gpu_key(c, "true")


def v(name: str) -> str:
    return f"variables.{name}"


# ---------------------------------------------------------------- data from the admission-policy document


@dataclass(frozen=True)
class _Facts:
    """What decides the shape of the policy's CEL: whether any class is tainted, and the HAMi install if any."""

    tainted: bool
    hami: HamiAdmission | None
    pinned_left: bool = False
    """Pods naming their node are left to the webhook (`leaves_pinned_pods`)."""
    claim_only_mig: tuple[str, ...] = ()
    """MIG mixed classes that offer pods nothing (DRA without the extended-resource bridge): no strategy mismatch."""

    @classmethod
    def of(cls, policy: offers.AdmissionPolicy, *, pinned_left: bool = False) -> _Facts:
        return cls(any(ClassView.from_doc(c).taints for c in policy.classes), HamiAdmission.build(policy), pinned_left,
                   tuple(c.name for c in policy.classes if c.mig_strategy == "mixed" and not c.offers))


def leaves_pinned_pods(spec: Spec) -> bool:
    """Whether the policies leave pods naming their node (spec.nodeName) to the webhook: beside it (engine both) with
    its node cache (admission.nodeCache), and only where it fails closed, so a pinned pod is never admitted unjudged
    while the webhook is down. The webhook judges such a pod on its node's classes (docs/admission.md §5), which the
    policies cannot: judged on every class the pod may reach, they would refuse pinned pods the webhook admits."""
    return spec.admission_engine == "both" and spec.admission.failure_policy == "Fail" and spec.admission.node_cache


def _data(policy: offers.AdmissionPolicy) -> list[tuple[str, str]]:
    """Typed literals: per class its offers, labels, modes and taints; the tenants; the resources some class offers."""
    views = [ClassView.from_doc(c) for c in policy.classes]
    known = sorted({o.resource for c in policy.classes for o in c.offers})
    tenants = policy.tenants
    strict = {c.name: sorted(o.resource for o in c.offers if o.shared and o.fail_requests_greater_than_one)
              for c in policy.classes}
    found = [
        ("classes", lit([c.name for c in policy.classes])),
        ("offers", lit({c.name: {o.resource: o.per_node for o in c.offers} for c in policy.classes})),
        ("strict", lit(strict)),
        ("strictAnywhere", lit(sorted({r for names in strict.values() for r in names}))),
        ("modes", lit({c.name: {o.resource: list(o.modes) for o in c.offers} for c in policy.classes})),
        ("labels", lit({view.name: {k: sorted(vals) for k, vals in view.labels.items()} for view in views})),
        ("absent", lit({view.name: list(view.absent_prefixes) for view in views})),
        ("mixed", lit([c.name for c in policy.classes if c.mig_strategy == "mixed"])),
        ("single", lit([c.name for c in policy.classes if c.mig_strategy == "single"])),
        ("pins", lit({view.name: view.pin() for view in views})),
        ("selectorKeys", lit({view.name: [k for k, _ in view.node_selector] for view in views})),
        ("pinReach", lit(_pin_reach(views))),
        ("known", lit(known)),
        ("idx", lit(list(range(len(known))))),
        ("allModes", lit(list(SHARING_MODES))),
        ("defaultModes", lit(list(policy.default_allow))),
        ("tenantNames", lit([t.name for t in tenants])),
        ("tenantSel", lit(tenant_selectors(tenants))),
        ("tenantModes", lit({t.name: list(t.allow) for t in tenants})),
        ("tenantClasses", lit({t.name: list(t.classes) for t in tenants if t.classes})),
    ]
    if any(view.taints for view in views):
        # [key, value, effect] of every NoSchedule and NoExecute taint (ClassView.taints), and as kubectl writes them.
        found += [("taints", lit({view.name: [[t.key, t.value, t.effect] for t in view.taints] for view in views})),
                  ("taintText", lit({view.name: ", ".join(t.describe() for t in view.taints) for view in views})),
                  # Taints a pod asking for the resource they name tolerates unasked (ExtendedResourceToleration).
                  ("taintResources", lit(sorted({t.key for view in views for t in view.taints
                                                 if t.key.startswith(GPU_PREFIX)})))]
    return found


def tenant_selectors(tenants: Iterable[offers.TenantDoc]) -> dict[str, list[dict[str, list[str]]]]:
    """Each tenant's selector as a list of requirements, each a map of one-element or value lists, so the literal
    stays homogeneous: map(string, list(map(string, list(string)))) (cel-monitoring.md §1.4)."""
    return {t.name: [{"key": [k], "operator": ["In"], "values": [val]} for k, val in sorted(t.match_labels.items())]
            + [{"key": [e.key], "operator": [e.operator], "values": list(e.values)} for e in t.match_expressions]
            for t in tenants}


def tenant_requirement(labels: str) -> str:
    """Requirement ``e`` (a `tenant_selectors` entry) holds for the label map ``labels`` (selectors.Requirement)."""
    return (f"(e['operator'][0] == 'In' ? (e['key'][0] in {labels} && {labels}[e['key'][0]] in e['values'])"
            f" : e['operator'][0] == 'NotIn' ? !(e['key'][0] in {labels} && {labels}[e['key'][0]] in "
            f"e['values']) : e['operator'][0] == 'Exists' ? e['key'][0] in {labels} : "
            f"!(e['key'][0] in {labels}))")


def _pin_reach(views: list[ClassView]) -> dict[str, list[str]]:
    """The classes a pod pinned to a class's nodeSelector may still reach: that class, and every other whose nodes
    may carry the selector's labels (rules.excludes judges; a label a class does not know never excludes it).

    Only a class that lists the value for the key, or does not know the key, can carry ``key=value``, so excludes
    is asked about those alone: linear in the classes for disjoint selectors, not quadratic."""
    position = {view.name: i for i, view in enumerate(views)}
    listing: dict[tuple[str, str], list[ClassView]] = {}
    unknown: dict[str, list[ClassView]] = {}
    for key in {k for view in views for k, _ in view.node_selector}:
        for other in views:
            values = other.labels.get(key)
            if values is None:
                unknown.setdefault(key, []).append(other)
            for value in values or ():
                listing.setdefault((key, value), []).append(other)
    reach: dict[str, list[str]] = {}
    for view in views:
        requirements = [NodeRequirement(k, "In", (val,), ()) for k, val in view.node_selector]
        candidates: dict[str, ClassView] | None = None
        for req in requirements:
            found = {o.name: o for o in (*listing.get((req.key, req.values[0]), ()), *unknown.get(req.key, ()))}
            candidates = found if candidates is None else {n: o for n, o in candidates.items() if n in found}
        pool = views if candidates is None else sorted(candidates.values(), key=lambda o: position[o.name])
        reach[view.name] = [o.name for o in pool if not any(excludes(req, o) for req in requirements)]
    return reach


# ---------------------------------------------------------------- the facts of one pod, in CEL


def _request(path: PodSpecPath) -> list[tuple[str, str]]:
    """The pod's GPU containers, whether CEL can read their amounts, and the effective request per resource."""
    # A request must repeat its limit; compared as the canonical text, so a request written in another unit than
    # its equal limit (1Ki and 1024) is left undecided too.
    request_ok = f"(k in {_limits('c')} && string(c.resources.requests[k]) == string(c.resources.limits[k]))"
    return [
        ("spec", path.spec("object")),
        ("init", f"{v('spec')}.?initContainers.orValue([])"),
        ("gpuInit", f"{v('init')}.filter(c, {_requests_gpu('c')})"),
        ("gpuApp", f"{v('spec')}.containers.filter(c, {_requests_gpu('c')})"),
        ("gpuCtrs", f"{v('gpuInit')} + {v('gpuApp')}"),
        # An amount the API server refuses (workloads.RequestProblem), or one CEL does not read as an int.
        ("invalid", f"{v('gpuCtrs')}.exists(c, {_limits('c')}.exists(k, k.startsWith('{GPU_PREFIX}') && "
                    f"!{_whole('c.resources.limits[k]')}) || {_requests('c')}.exists(k, "
                    f"k.startsWith('{GPU_PREFIX}') && !{request_ok}))"),
        # Counts per known resource, one row per container; an init container's row starts with its position among
        # the init containers and 1 for a sidecar (restartPolicy Always), 0 for a plain one.
        ("initNames", f"{v('init')}.map(c, c.name)"),
        ("initRows", _init_rows(v("gpuInit"), v("initNames"))),
        ("appRows", f"{v('gpuApp')}.map(c, {_row('c')})"),
        ("sideRows", f"{v('initRows')}.filter(r, r[1] == 1)"),
        ("plainRows", f"{v('initRows')}.filter(r, r[1] == 0)"),
        # Where the GPU sidecars stand among the GPU init containers: all before them (each init container runs
        # beside every sidecar), all after (beside none), or interleaved, which only the webhook works out.
        ("sidecarsFirst", f"{v('sideRows')}.size() == 0 || {v('plainRows')}.size() == 0 || "
                          f"{v('sideRows')}.map(r, r[0]).max() < {v('plainRows')}.map(r, r[0]).min()"),
        ("interleaved", f"!{v('sidecarsFirst')} && {v('sideRows')}.map(r, r[0]).min() < "
                        f"{v('plainRows')}.map(r, r[0]).max()"),
        # The effective pod request as the scheduler counts it (k8s resourcehelper.PodRequests, workloads.py):
        # max(regular + sidecars, the largest plain init container plus the sidecars started before it).
        ("totals", f"{v('idx')}.map(i, [{v('appRows')}.map(r, r[i]).sum() + {v('sideRows')}.map(r, r[i + 2]).sum(),"
                   f" ([0] + {v('plainRows')}.map(r, r[i + 2])).max() + ({v('sidecarsFirst')} ? "
                   f"{v('sideRows')}.map(r, r[i + 2]).sum() : 0)].max())"),
        ("requested", f"{v('idx')}.filter(i, {v('totals')}[i] > 0)"),
        # nvidia.com/ resources no class offers, per container asking for more than 0 of them.
        # nvidia.com/ resources no class offers, per container asking for more than 0 of them (in its limits: a
        # request without a limit is ``invalid``).
        ("unknown", f"{v('gpuCtrs')}.map(c, {_limits('c')}.filter(k, !(k in {v('known')}) && "
                    f"k.startsWith('{GPU_PREFIX}') && {_count('c.resources.limits[k]')} > 0)).filter(l, l.size() > 0)"),
        ("asks", f"{v('requested')}.size() > 0 || {v('unknown')}.size() > 0"),
        ("overOneRes", f"{v('strictAnywhere')}.filter(r, {v('gpuCtrs')}.exists(c, {amount('c', 'r')} > 1))"),
    ]


def _row(c: str) -> str:
    """Container ``c``'s count of every known resource, in the order of ``known``."""
    return f"{v('idx')}.map(i, {amount(c, v('known') + '[i]')})"


def _init_rows(containers: str, names: str) -> str:
    """[position among the init containers, 1 for a sidecar else 0, counts...] per GPU init container."""
    return (f"{containers}.map(c, [{names}.indexOf(c.name), c.?restartPolicy.orValue('') == 'Always' ? 1 : 0] + "
            f"{_row('c')})")


def _tolerates(o: str, t: str) -> str:
    """Toleration ``o`` tolerates taint ``t`` ([key, value, effect]) as workloads.Toleration.tolerates does; an
    operator it does not know tolerates everything (workloads.TOLERATE_ALL), Lt and Gt are left undecided."""
    op = f"{o}.?operator.orValue('')"
    return (f"(!({op} in ['', 'Equal', 'Exists', 'Lt', 'Gt']) || (({o}.?effect.orValue('') == '' || "
            f"{o}.effect == {t}[2]) && ({o}.?key.orValue('') == '' || {o}.key == {t}[0]) && "
            f"({op} in ['', 'Equal'] ? {o}.?value.orValue('') == {t}[1] : true)))")


def _placement(facts: _Facts) -> list[tuple[str, str]]:
    """Where the pod may land: classes its nodeSelector and required affinity allow, minus those whose taints it
    does not tolerate (rules.placement_conflict), then the candidates that fit the request."""
    found = [
        ("sel", f"{v('spec')}.?nodeSelector.orValue({{}})"),
        ("terms", f"{v('spec')}.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
                  ".?nodeSelectorTerms.orValue([])"),
        ("tols", f"{v('spec')}.?tolerations.orValue([])"),
        ("reachable", f"{v('classes')}.filter(n, !{_selector_excludes('n')} && !{_terms_exclude('n')})"),
    ]
    if facts.tainted:
        # A pod naming its node meets only the kubelet, which reads NoExecute taints (rules.KUBELET_EFFECTS); a
        # pod tolerates {key: <resource>, operator: Exists, effect: NoSchedule} for every resource it requests
        # (the ExtendedResourceToleration plugin, engine._with_implied_tolerations).
        untolerated = (f"{v('taints')}[n].exists(t, t[2] in {v('effects')} && !(t[2] == 'NoSchedule' && t[0] in "
                       f"{v('impliedKeys')}) && !{v('tols')}.exists(o, {_tolerates('o', 't')}))")
        found += [
            ("effects", f"{v('spec')}.?nodeName.orValue('') != '' ? ['NoExecute'] : ['NoSchedule', 'NoExecute']"),
            ("impliedKeys", f"{v('taintResources')}.filter(k, k in {v('known')} ? {v('totals')}[{v('known')}"
                            f".indexOf(k)] > 0 : {v('unknown')}.exists(l, k in l))"),
            ("untolerated", f"{v('classes')}.filter(n, {untolerated})"),
            ("placeable", f"{v('reachable')}.filter(n, !(n in {v('untolerated')}))"),
        ]
    else:
        found.append(("placeable", v("reachable")))
    placeable_fits = (f"{v('placeable')}.exists(n, {v('known')}[i] in {v('offers')}[n] && "
                      f"{v('offers')}[n][{v('known')}[i]] >= {v('totals')}[i])")
    # A resource no placeable class offers names a MIG strategy mismatch, unless a class offering it is kept
    # away by its taints alone (rules._resource_problem: the toleration is the answer, before any MIG naming).
    fits_one = f"(r in {v('offers')}[n] && {v('offers')}[n][r] >= {v('totals')}[{v('known')}.indexOf(r)])"
    only_taints = (f" && !{v('classes')}.exists(n, {fits_one} && n in {v('untolerated')} && n in {v('reachable')})"
                   if facts.tainted else "")
    return [
        *found,
        ("candidates", f"{v('placeable')}.filter(n, {_fits('n')})"),
        # Where the pod may land as far as each resource goes (rules.Facts.landing): the candidates or, when no
        # class can run the whole request, every placeable class (those offering the resource, where used).
        ("landing", f"{v('candidates')}.size() > 0 ? {v('candidates')} : {v('placeable')}"),
        # What MIG strategy the placeable classes advertise under, once (rules._is_mig_mismatch).
        ("placeableGpu", f"{v('placeable')}.exists(n, '{GPU}' in {v('offers')}[n])"),
        ("placeableMig", f"{v('placeable')}.exists(n, {v('offers')}[n].exists(k, k.startsWith('{MIG_PREFIX}'))"
                         + (f" || n in {lit(list(facts.claim_only_mig))})" if facts.claim_only_mig else ")")),
        ("placeableMixed", f"{v('placeable')}.exists(n, n in {v('mixed')})"),
        # Requested resources no placeable class offers enough of (a resource no class offers, in ``unknown``,
        # never fits), and those of them that name MIG devices the other strategy's way.
        ("failing", f"{v('requested')}.filter(i, !{placeable_fits}).map(i, {v('known')}[i])"),
        ("mismatched", f"{v('failing')}.filter(r, !{v('placeable')}.exists(n, r in {v('offers')}[n]){only_taints} "
                       f"&& {_mig_mismatch('r')})"),
        ("unknownMismatched", f"{v('unknown')}.map(l, l.filter(r, {_mig_mismatch('r')})).filter(l, l.size() > 0)"),
    ]


def _ratchet(path: PodSpecPath) -> list[tuple[str, str]]:
    old_init = f"{v('oldSpec')}.?initContainers.orValue([])"
    return [
        ("oldSpec", f"oldObject == null ? {{}} : {path.optional_spec('oldObject')}.orValue({{}})"),
        ("oldGpuInit", f"{old_init}.filter(c, {_requests_gpu('c')})"),
        ("oldGpuApp", f"{v('oldSpec')}.?containers.orValue([]).filter(c, {_requests_gpu('c')})"),
        ("oldInitNames", f"{old_init}.map(c, c.name)"),
        ("unchanged", _unchanged()),
    ]


def _decision(facts: _Facts) -> list[tuple[str, str]]:
    """Whether CEL decides at all, and the classes a pin would clear of every rule."""
    undecided = [v("invalid"), v("interleaved"), f"{v('tols')}.exists(o, o.?operator.orValue('') in ['Lt', 'Gt'])"]
    if facts.pinned_left:
        undecided.append(f"{v('spec')}.?nodeName.orValue('') != ''")
    found = []
    if facts.hami is not None:
        found.append(("hamiTakes", _hami_takes(facts.hami)))
        undecided.insert(1, v("hamiTakes"))
    # A pin merges the class's nodeSelector into the pod's and drops what keeps the pod off the class (the
    # nodeSelector entries and the required affinity that exclude it; tolerations for its taints are added), so
    # the class becomes a candidate; every class the pin still reaches that fits the request must then pass every
    # rule there (rules.Facts.candidates after the edit). Pins needing nothing beyond the nodeSelector come first.
    solves = (f"{v('classes')}.filter(n, {_fits('n')} && {_clear_on('n')} && "
              f"{v('pinReach')}[n].all(other, !{_fits('other')} || {_clear_on('other')}))")
    edits = f"({_dropped('n')}.size() > 0 || {_terms_exclude('n')}" + (
        f" || n in {v('untolerated')})" if facts.tainted else ")")
    ordered = f"{v('solves')}.filter(n, !{edits}) + {v('solves')}.filter(n, {edits})"
    return [
        *found,
        ("undecided", " || ".join(undecided)),
        # Nothing to decide: an UPDATE keeping GPUs and placement, or only zero counts (engine: allowed).
        ("skip", f"{v('undecided')} || {v('unchanged')} || !{v('asks')}"),
        ("solves", solves),
        ("solutions", ordered),
    ]


def _hami_takes(hami: HamiAdmission) -> str:
    """HamiAdmission.takes: a per-vGPU resource anywhere, or HAMi's count resource where its webhook reaches."""
    def asks(names: Iterable[str]) -> str:
        return (f"({v('spec')}.containers + {v('init')}).exists(c, {lit(sorted(names))}.exists(r, r in "
                f"{_limits('c')} || r in {_requests('c')}))")
    count = asks([hami.doc.count])
    if hami.doc.scoped and hami.plugin_offers_count:
        count = f"({count} && 'vgpu' in {v('allowed')})"
    return f"{asks(hami.attributes)} || {count}"


def _fits(n: str) -> str:
    return (f"({v('unknown')}.size() == 0 && {v('requested')}.all(i, {v('known')}[i] in {v('offers')}[{n}] && "
            f"{v('offers')}[{n}][{v('known')}[i]] >= {v('totals')}[i]))")


def _lacks(n: str, key: str) -> str:
    """No node of the class carries the label (rules.ClassView.lacks)."""
    return f"(!({key} in {v('labels')}[{n}]) && {v('absent')}[{n}].exists(p, {key}.startsWith(p)))"


def _entry_excludes(n: str, k: str) -> str:
    """The nodeSelector entry ``k`` no node of the class can satisfy (rules.excludes for key In [value])."""
    labels = f"{v('labels')}[{n}]"
    return f"({k} in {labels} ? !({v('sel')}[{k}] in {labels}[{k}]) : {_lacks(n, k)})"


def _selector_excludes(n: str) -> str:
    return f"{v('sel')}.exists(k, {_entry_excludes(n, 'k')})"


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
    return (f"(({r}.startsWith('{MIG_PREFIX}') && {v('placeableGpu')} && !{v('placeableMig')}) || "
            f"({r} == '{GPU}' && {v('placeableMixed')}))")


def _unchanged() -> str:
    """An UPDATE keeping every GPU request and the placement (engine._unchanged), or one the engine may see as
    changed where this does not (never the other way round, so the ratchet is never stricter than the engine's).

    Compared: the placement fields, the names of the GPU containers of each section in order, the init containers'
    rows (position, sidecar, counts) and the regular containers' counts, for every resource a class offers (an
    amount of another resource may change unseen). Rows compare as lists, whose equality costs their length
    (cel-go interpreter/runtimecost.go), so the ratchet stays linear in the containers."""
    terms = ".?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution.?nodeSelectorTerms.orValue([])"
    new, old = v("spec"), v("oldSpec")
    same_fields = " && ".join(f"{new}{field} == {old}{field}" for field in (
        ".?nodeSelector.orValue({})", terms, ".?tolerations.orValue([])", ".?nodeName.orValue('')"))
    return (f"request.operation == 'UPDATE' && oldObject != null && {same_fields} && "
            f"{v('gpuInit')}.map(c, c.name) == {v('oldGpuInit')}.map(c, c.name) && "
            f"{v('gpuApp')}.map(c, c.name) == {v('oldGpuApp')}.map(c, c.name) && "
            f"{v('initRows')} == {_init_rows(v('oldGpuInit'), v('oldInitNames'))} && "
            f"{v('appRows')} == {v('oldGpuApp')}.map(c, {_row('c')})")


def _tenancy() -> list[tuple[str, str]]:
    """The namespace's tenants from namespaceObject's labels (engine.tenants_for), and what they allow together."""
    requirement = tenant_requirement("variables.nsLabels")
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
    return (f"({v('requested')}.all(i, {v('modes')}[{n}][{v('known')}[i]].all(mode, mode in {v('allowed')})) && "
            f"{v('limitedBy')}.all(t, {n} in {v('tenantClasses')}[t]))")


def _denies(n: str) -> str:
    """The tenants may not use the class for some requested resource it offers (rules.check_tenant_access)."""
    return (f"{v('requested')}.exists(i, {v('known')}[i] in {v('offers')}[{n}] && (!{v('modes')}[{n}]"
            f"[{v('known')}[i]].all(mode, mode in {v('allowed')}) || {v('limitedBy')}.exists(t, !({n} in "
            f"{v('tenantClasses')}[t]))))")


def _clear_on(n: str) -> str:
    """A candidate class on which neither the tenant rule nor the shared-replica rule would fire."""
    return f"({_access_ok(n)} && !{v('overOneRes')}.exists(r, r in {v('strict')}[{n}]))"


# ---------------------------------------------------------------- one entry per rule


@dataclass(frozen=True)
class CelRule:
    """One engine rule in CEL: when the object passes it, and the message (rule id, subject, what, fix)."""

    holds: str
    message: str
    reason: str = "Forbidden"


_SUBJECT = "object.kind + ' ' + object.metadata.?name.orValue('')"


def _dropped(n: str) -> str:
    """The pod's nodeSelector entries that exclude the class, other than the class's own keys."""
    return f"{v('sel')}.filter(k, !(k in {v('selectorKeys')}[{n}]) && {_entry_excludes(n, 'k')})"


def _message(rule: RuleId, what: str, fallback: str, tainted: bool) -> str:
    """``[rule] Kind name: what. Fix: pin ...`` where a pin clears every rule, else the rule's own advice."""
    first = f"{v('solutions')}[0]"
    dropped = _dropped(first)
    tolerate = (f" + ({first} in {v('untolerated')} ? ', tolerating its taints ' + {v('taintText')}[{first}] : '')"
                if tainted else "")
    pin = (f"'pin the pod to class ' + {first} + ' with ' + {v('pins')}[{first}] + ({dropped}.size() > 0 ? "
           f"', removing nodeSelector ' + {dropped}.join(', ') : '') + ({_terms_exclude(first)} ? ', removing its "
           f"required node affinity' : ''){tolerate}")
    return (f"'[{rule}] ' + {_SUBJECT} + ': ' + {what} + '. Fix: ' + ({v('solutions')}.size() > 0 ? {pin} : "
            f"{fallback})")


def _stays() -> str:
    node = f"{v('spec')}.?nodeName.orValue('')"
    return f"({node} != '' ? 'so the kubelet of node ' + {node} + ' would refuse it' : 'so it would stay Pending')"


def _may_land(classes: str, capital: bool = False) -> str:
    node = f"{v('spec')}.?nodeName.orValue('')"
    the = "The" if capital else "the"
    return (f"({node} != '' ? '{the} pod names node ' + {node} + ', which may be of class ' : "
            f"'{the} scheduler may place the pod on class ') + {classes}")


def _request_text() -> str:
    return (f"({v('requested')}.map(i, string({v('totals')}[i]) + ' ' + {v('known')}[i]) + ({v('unknown')}.size() > 0 "
            f"? [{v('unknown')}[0][0]] : [])).join(' and ')")


def _unsatisfiable_fallback() -> str:
    failing, placeable, offers_ = v("failing"), v("placeable"), v("offers")
    too_few = f"{failing}.filter(r, {placeable}.exists(n, r in {offers_}[n]))"
    most = f"{placeable}.filter(n, {too_few}[0] in {offers_}[n]).map(n, {offers_}[n][{too_few}[0]]).max()"
    offered = f"{v('known')}.join(', ')"
    return (f"({v('unknown')}.size() > 0 ? 'request one of ' + {offered} + ' instead of ' + "
            f"{v('unknown')}[0][0] : {too_few}.size() > 0 ? 'request at most ' + "
            f"string({most}) + ' ' + {too_few}[0] + ' per pod, or split the work across pods' : "
            f"'split the pod into pods that each request what one node class offers')")


def _mismatch_fallback() -> str:
    placeable = v("placeable")
    mig = (f"{placeable}.filter(n, n in {v('mixed')}).map(n, {v('offers')}[n].filter(k, k.startsWith("
           f"'{MIG_PREFIX}')).join(', ')).join(', ')")
    single = f"{placeable}.filter(n, n in {v('single')})"
    gpu = f"{v('mismatched')}.size() > 0 && {v('mismatched')}[0] == '{GPU}'"
    return (f"({gpu} ? 'request one of ' + {mig} + ' instead' : "
            f"'request {GPU} instead' + ({single}.size() > 0 ? ', which class ' + {single}[0] + "
            f"' advertises its MIG devices as' : ''))")


def _shared_rule(tainted: bool) -> CelRule:
    landing_strict = f"{v('landing')}.filter(n, r in {v('strict')}[n])"
    resource = f"{v('overOneRes')}.filter(r, {landing_strict}.size() > 0)[0]"
    over = f"{v('gpuCtrs')}.filter(c, {amount('c', resource)} > 1)[0]"
    where = f"{v('landing')}.filter(n, {resource} in {v('strict')}[n]).join(' or ')"
    what = (f"'container ' + {over}.name + ' requests more than 1 ' + {resource} + '; shared devices allow 1 per "
            f"container. ' + {_may_land(where, capital=True)} + ', where the device plugin refuses more than 1 shared "
            "replica per container (failRequestsGreaterThanOne) and the kubelet fails the pod with "
            "UnexpectedAdmissionError'")
    fallback = (f"'request ' + {resource} + ': 1 per container: more shared replicas of one device add no "
                f"compute'")
    return CelRule(f"{v('skip')} || !{v('overOneRes')}.exists(r, {landing_strict}.size() > 0)",
                   _message("shared-gpu-request-above-one", what, fallback, tainted))


def _tenant_rule(tainted: bool) -> CelRule:
    denied = f"{v('landing')}.filter(n, {_denies('n')})"
    what = (f"{v('who')} + ' may use ' + ({v('allowed')}.size() > 0 ? 'only ' + {v('allowed')}.join(', ') : "
            f"'no sharing mode') + ({v('limitedBy')}.size() > 0 ? ' on its classes' : '') + ', but ' + "
            f"{_may_land(denied + '.join(' + lit(' or ') + ')')}")
    # The namespace picks the tenant: the fix stays inside it (the engine's hints never move a workload), so with no
    # class of the tenant to pin to, what is left is the ask (remedies.py names the spec field to change).
    fallback = (f"'no change to this object within the policy admits it: ask the platform team to allow the sharing "
                f"mode of class ' + {denied}.join(' or ') + ' for ' + {v('who')}")
    return CelRule(f"{v('skip')} || {denied}.size() == 0",
                   _message("tenant-sharing-mode-denied", what, fallback, tainted))


def cel_rules(tainted: bool = False) -> dict[RuleId, CelRule]:
    """The engine rules CEL decides (policy/admission/rules.py RULES minus `NOT_COMPILED`), in the engine's order."""
    no_candidate = f"{v('skip')} || {v('candidates')}.size() > 0"
    first_mismatch = (f"({v('mismatched')}.size() > 0 ? {v('mismatched')}[0] : "
                      f"{v('unknownMismatched')}[0][0])")
    taint_note = (f" + ({v('untolerated')}.filter(n, n in {v('reachable')} && {_fits('n')}).size() > 0 ? "
                  f"' (it does not tolerate the taints of class ' + {v('untolerated')}.filter(n, n in "
                  f"{v('reachable')} && {_fits('n')}).join(', ') + ')' : '')" if tainted else "")
    table: dict[RuleId, CelRule] = {
        "mig-strategy-mismatch": CelRule(
            f"{no_candidate} || ({v('mismatched')}.size() == 0 && {v('unknownMismatched')}.size() == 0)",
            _message("mig-strategy-mismatch", f"'the pod requests ' + {first_mismatch} + ', a name the nodes "
                     f"it may run on do not advertise under their MIG strategy, ' + {_stays()}",
                     _mismatch_fallback(), tainted)),
        "gpu-request-unsatisfiable": CelRule(
            f"{no_candidate} || (({v('failing')}.size() > 0 || {v('unknown')}.size() > 0) && {v('failing')}.all(r, "
            f"r in {v('mismatched')}) && {v('unknown')}.all(l, l.all(r, {_mig_mismatch('r')})))",
            _message("gpu-request-unsatisfiable", f"'no node class this pod may run on offers ' + "
                     f"{_request_text()} + ' on one node, ' + {_stays()}{taint_note}",
                     _unsatisfiable_fallback(), tainted)),
        "shared-gpu-request-above-one": _shared_rule(tainted),
        "tenant-sharing-mode-denied": _tenant_rule(tainted),
    }
    return {rule.id: table[rule.id] for rule in RULES if rule.id in table}


# ---------------------------------------------------------------- objects


def variables_of(policy: offers.AdmissionPolicy, path: PodSpecPath,
                 data: list[tuple[str, str]] | None = None, *, pinned_left: bool = False) -> list[tuple[str, str]]:
    """Every variable of the policy for ``path``, in evaluation order (data first: pass ``_data(policy)`` when
    it is already built, since every path and mode shares it); ``pinned_left``: `leaves_pinned_pods`."""
    facts = _Facts.of(policy, pinned_left=pinned_left)
    return ((_data(policy) if data is None else data) + _request(path) + _tenancy() + _placement(facts) + _ratchet(path)
            + _decision(facts))


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


def _policy_object(resolved: ResolvedPolicy, document: offers.AdmissionPolicy, data: list[tuple[str, str]],
                   path: PodSpecPath, mode: RuleMode, rules: Iterable[RuleId]) -> Obj:
    policy = resolved.policy
    table = cel_rules(_Facts.of(document).tainted)
    validations = [{"expression": table[r].holds, "messageExpression": table[r].message,
                    "message": f"[{r}] {_summary(r)}", "reason": table[r].reason} for r in rules]
    spec: Obj = {
        "failurePolicy": failure_policy(policy.spec),
        "matchConstraints": {
            "matchPolicy": "Equivalent",
            "namespaceSelector": {"matchExpressions": [objects.selector_expression(excluded_namespaces(policy))]},
            "resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(ops),
                               "resources": list(res), "scope": "Namespaced"} for group, res, ops in path.rules]
            + [{"apiGroups": [group], "apiVersions": list(versions), "operations": list(WORKLOAD_OPERATIONS),
                "resources": list(res), "scope": "Namespaced"} for group, versions, res in path.custom],
        },
        "matchConditions": _match_conditions(path),
        "variables": [{"name": n, "expression": e}
                      for n, e in variables_of(document, path, data, pinned_left=leaves_pinned_pods(policy.spec))],
        "validations": validations,
    }
    if mode == "audit":
        # The webhook's audit annotations are keyed by rule id; here they publish as <policy name>/<rule id>.
        spec["auditAnnotations"] = [{"key": r, "valueExpression": f"{table[r].holds} ? '' : {table[r].message}"}
                                    for r in rules]
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
            "metadata": _metadata(policy, _name(path, mode)), "spec": spec}


def failure_policy(spec: Spec) -> str:
    """Ignore beside the webhook (an evaluation error, such as a pod beyond the cost budget, is left to it, so the
    policies are never stricter); alone, admission.failurePolicy, as the webhook would have had."""
    return "Ignore" if spec.admission_engine == "both" else spec.admission.failure_policy


def _binding(policy: ClusterGPUPolicy, path: PodSpecPath, mode: RuleMode) -> Obj:
    name = _name(path, mode)
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": _metadata(policy, name),
            "spec": {"policyName": name, "validationActions": list(ACTIONS[mode])}}


def rules_by_mode(document: offers.AdmissionPolicy) -> dict[RuleMode, list[RuleId]]:
    """The rules CEL decides, grouped by their mode in the policy (one policy and binding per mode and path)."""
    by_mode: dict[RuleMode, list[RuleId]] = {}
    for rule in RULES:
        if rule.id not in NOT_COMPILED:
            by_mode.setdefault(document.rules[rule.id], []).append(rule.id)
    return by_mode


def render_admission_policies(resolved: ResolvedPolicy) -> list[Obj]:
    """The policies and bindings for admission.engine vap or both, sorted by (kind, name); empty otherwise.

    Rendered once per resolved policy (the tree, its monitoring and REPORT.md's cost note all read them): the
    objects are shared, so a caller that changes one copies it first."""
    return list(resolved.derived(_render))


def _render(resolved: ResolvedPolicy) -> list[Obj]:
    spec = resolved.spec
    if not spec.admission.enabled or spec.admission_engine == "webhook":
        return []
    document = offers.build_admission_policy(resolved)
    data = _data(document)
    out: list[Obj] = []
    for path in paths_for(document.workload_kinds):
        for mode, rules in rules_by_mode(document).items():
            out.append(_policy_object(resolved, document, data, path, mode, rules))
            out.append(_binding(resolved.policy, path, mode))
    return sorted(out, key=lambda obj: (obj["kind"], obj["metadata"]["name"]))


def policy_names(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """The names of the ValidatingAdmissionPolicies `render_admission_policies` emits (monitoring watches them)."""
    return tuple(o["metadata"]["name"] for o in render_admission_policies(resolved)
                 if o["kind"] == "ValidatingAdmissionPolicy")


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
    cost = _cost_note(resolved)
    rules = ", ".join(NOT_COMPILED)
    cases = "; ".join(what for what, _ in NOT_DECIDED)
    if engine == "both":
        return ("Admission: the webhook and ValidatingAdmissionPolicies (admission/validatingadmissionpolicy-*, "
                "failurePolicy Ignore). The API server runs the policies first, inside itself: the rules they decide "
                "hold while the webhook is down, and their denial is the one users see.",
                f"Only the webhook decides the rules {rules} (the API server refuses amounts it cannot take itself, "
                f"before admission), and, where the policies allow, these cases: {cases} "
                "(docs/validating-admission-policy.md says why).", cost)
    return ("Admission: ValidatingAdmissionPolicies only (admission.engine: vap): no webhook is deployed, and the "
            "policies follow admission.failurePolicy.",
            f"Not enforced without the webhook: the rules {rules}; the cases the policies allow ({cases}); and "
            + "; ".join(WEBHOOK_ONLY) + " (docs/validating-admission-policy.md).", cost)


def _cost_note(resolved: ResolvedPolicy) -> str:
    """The estimated CEL cost of the costliest policy, against the API server's limits."""
    paths = {path.name: path.path for path in PATHS}
    worst: list[tuple[int, str, str, int]] = []
    for obj in render_admission_policies(resolved):
        if obj["kind"] == "ValidatingAdmissionPolicy":
            found = admission_policy_cost.estimate_policy(obj, paths[obj["metadata"]["name"].split("-")[1]])
            name, largest = found.largest
            worst.append((largest, name, obj["metadata"]["name"], found.total))
    largest, name, policy, _ = max(worst)
    total = max(row[3] for row in worst)
    note = (f"Estimated CEL cost of the ValidatingAdmissionPolicies, worked out from their expressions before they run "
            f"(no API server bounds a pod's lists, so it is for pods within the envelope: "
            f"{admission_policy_cost.ENVELOPE.describe()}): the costliest expression, {name} in {policy}, "
            f"{largest:,} of the {admission_policy_cost.PER_CALL_LIMIT:,} the API server allows one expression; one "
            f"policy evaluation at most {total:,} of its {admission_policy_cost.POLICY_BUDGET:,} "
            "(docs/validating-admission-policy.md, Cost).")
    if largest > admission_policy_cost.PER_CALL_LIMIT or total > admission_policy_cost.POLICY_BUDGET:
        # The estimate grows with the classes and tenants the literals hold; the API server stops an evaluation
        # that runs out of budget, and failurePolicy then decides.
        failure = failure_policy(resolved.spec)
        outcome = "admits it unchecked by the policies" if failure == "Ignore" else "refuses it"
        note += (f" That is over the API server's limit: a large pod may run out of budget, and failurePolicy "
                 f"{failure} then {outcome}{' (the webhook still decides)' if resolved.spec.runs_webhook else ''}.")
    return note


def _summary(rule: RuleId) -> str:
    return next(r.summary for r in RULES if r.id == rule)


def _metadata(policy: ClusterGPUPolicy, name: str) -> Obj:
    # The policies need nothing running, so Argo CD applies them with the workloads, not after the webhook.
    return objects.metadata(name, labels=objects.labels(policy, COMPONENT),
                            annotations={objects.SYNC_WAVE: objects.SYNC_WAVE_WORKLOAD})
