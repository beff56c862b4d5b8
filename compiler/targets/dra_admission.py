"""The claim rules CEL can decide, as ValidatingAdmissionPolicies the API server runs itself (docs/dra.md).

They mirror policy/admission/claims.py over what CEL sees of one claim or template and the namespace's labels:
the DeviceClass against the tenant's compiled ones, allocationMode All, adminAccess and the count one node holds.
Claim-level opaque config, a claim's new consumers and the pods naming templates stay with the webhook. One policy
per kind, so the API server's type checking sees one shape per policy (compiler/targets/admission_policy.py).
"""

from __future__ import annotations

from compiler import objects
from compiler.objects import Obj
from compiler.targets import admission_policy, admission_webhook
from compiler.targets.dra import COMPONENT
from policy.resolved import offers
from policy.resolved.resolve import ResolvedPolicy

VAP_NAME = "gpupolicy-claims.gpupolicy.dev"
_KINDS = (("resourceclaimtemplates", "object.spec.spec.devices"), ("resourceclaims", "object.spec.devices"))


def _exact_ok(x: str) -> str:
    """One exact request or subrequest passes the CEL rules: a DeviceClass the namespace may use (or one that is
    neither compiled nor NVIDIA's), no All, no adminAccess, a count one node of the class holds."""
    cls = f"{x}.deviceClassName"
    compiled = f"({cls} in variables.perNode)"
    # gpu.nvidia.com, the driver's own class, ends so too
    return (f"(({cls} in variables.allowed) || (!{compiled} && !{cls}.endsWith('.nvidia.com')))"
            f" && (!{compiled} || ((!has({x}.allocationMode) || {x}.allocationMode != 'All')"
            f" && (!has({x}.adminAccess) || !{x}.adminAccess)"
            f" && (!has({x}.count) || {x}.count <= variables.perNode[{cls}])))")


def claims_policy(resolved: ResolvedPolicy, document: offers.AdmissionPolicy, resource: str, devices: str) -> Obj:
    """The claim rules CEL can decide (policy/admission/claims.py: the DeviceClass, allocationMode, adminAccess,
    count), for one kind: the webhook holds the config and status rules. The tenant is matched from
    namespaceObject's labels with the compiled selectors, as the pod policies do. ``document``: the tree's
    admission policy (offers.build_admission_policy), built once for both kinds."""
    assert document.dra is not None
    tenants = admission_policy.tenant_selectors(document.tenants)
    labels = "variables.labels"
    request_ok = (f"r, (!has(r.exactly) || {_exact_ok('r.exactly')}) && (!has(r.firstAvailable) || "
                  f"r.firstAvailable.all(s, {_exact_ok('s')}))")
    variables = [
        ("labels", "has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {'': ''}"),
        ("tenantSelectors", admission_policy.lit(tenants)),
        ("mine", f"variables.tenantSelectors.filter(t, variables.tenantSelectors[t].all(e, "
                 f"{admission_policy.tenant_requirement(labels)}))"),
        ("byTenant", admission_policy.lit({t: list(c) for t, c in document.dra.tenants.items()})),
        ("perNode", admission_policy.lit({c.name: c.devices_per_node for c in document.dra.classes})),
        ("allowed", f"variables.mine.size() == 0 ? {admission_policy.lit(list(document.dra.default))} : "
                    "variables.perNode.filter(c, variables.mine.all(t, c in variables.byTenant[t]))"),
        ("requests", f"has({devices}.requests) ? {devices}.requests : []"),
    ]
    policy = resolved.policy
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": objects.metadata(f"{resource}.{VAP_NAME}", labels=objects.labels(policy, COMPONENT)),
        "spec": {
            "failurePolicy": admission_policy.failure_policy(resolved.spec),
            "matchConstraints": {"matchPolicy": "Equivalent", "resourceRules": [
                {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": [resource], "scope": "Namespaced"}]},
            "variables": [{"name": n, "expression": e} for n, e in variables],
            "validations": [{
                "expression": f"variables.requests.all({request_ok})",
                "message": "[dra-class-denied] the claim asks for a DeviceClass this namespace may not use, one the "
                           "policy does not compile, allocationMode All, adminAccess, or more devices than one node "
                           "holds (docs/dra.md)",
                "messageExpression": "'[dra-class-denied] ' + object.kind + ' ' + object.metadata.name + ' asks for "
                                     "a DeviceClass outside ' + (variables.allowed.size() == 0 ? 'none' : "
                                     "variables.allowed.join(', ')) + ', allocationMode All, adminAccess or more "
                                     "devices than one node holds (docs/dra.md)'",
                "reason": "Forbidden",
            }],
        },
    }


def _compiled(resolved: ResolvedPolicy) -> bool:
    """Whether the tree holds the claims' policies: a DRA pool, admission on, and VAP among its engines."""
    spec = resolved.spec
    return bool(resolved.dra_classes) and spec.admission.enabled and spec.admission_engine != "webhook"


def policy_names(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """The claims' ValidatingAdmissionPolicies the tree holds (monitoring watches them)."""
    return tuple(f"{resource}.{VAP_NAME}" for resource, _ in _KINDS) if _compiled(resolved) else ()


def render_claims_policies(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> the claims' policies and bindings, where the API server has VAP and admission is on."""
    if not _compiled(resolved):
        return {}
    out: dict[str, Obj] = {}
    excluded = admission_webhook.excluded_namespaces(resolved.policy)
    document = offers.build_admission_policy(resolved)
    for resource, devices in _KINDS:
        policy = claims_policy(resolved, document, resource, devices)
        name = policy["metadata"]["name"]
        binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                   "metadata": objects.metadata(name, labels=objects.labels(resolved.policy, COMPONENT)),
                   "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {
                       "namespaceSelector": {"matchExpressions": [objects.selector_expression(excluded)]}}}}
        out[f"validatingadmissionpolicy-{name}"] = policy
        out[f"validatingadmissionpolicybinding-{name}"] = binding
    return out
