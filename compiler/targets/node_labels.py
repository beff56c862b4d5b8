"""The node-label reconciler's Deployment: `gpupolicy cluster reconcile-labels` in the webhook's image, reading
the label plan (policy.resolved.node_labels) from a content-named ConfigMap, with RBAC to read and patch nodes and to
report conflicts as events, and nothing else. Pod Security "restricted" like the webhook.

RBAC cannot narrow a patch to some label keys: `patch nodes` lets its holder change any label, taint or annotation of
any node. Where the cluster has ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30)
the tree adds one that holds the reconciler's ServiceAccount to what the plan allows: the label keys it owns, set to
values the plan gives them, and nothing else of a Node. It matches that ServiceAccount only (a matchCondition on
request.userInfo.username), so no other writer is ever judged by it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from compiler import objects
from compiler.objects import Obj
from policy.resolved import node_labels
from policy.resolved.node_labels import LabelPlan
from policy.resolved.resolve import ResolvedPolicy

NAME = "gpupolicy-node-labels"
PLAN_KEY = "plan.json"
PLAN_DIR = "/etc/gpupolicy/node-labels"
METRICS_PORT = 9090
#: Events about nodes live in the default namespace (where the kubelet records node events).
EVENTS_NAMESPACE = "default"
ADMISSION_API = "admissionregistration.k8s.io/v1"


def render_node_labels(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> object; empty when no class has a label the reconciler owns."""
    plan = node_labels.build_plan(resolved)
    if not plan.classes:
        return {}
    policy = resolved.policy
    namespace = policy.spec.admission.namespace
    labels = objects.labels(policy, "node-labels", **{"app.kubernetes.io/name": NAME})
    plan_map = objects.config_map(NAME, {PLAN_KEY: plan.to_json()}, namespace=namespace, labels=labels)
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]
    rbac = "rbac.authorization.k8s.io"
    return {
        "configmap": plan_map,
        "serviceaccount": {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": objects.metadata(NAME, namespace=namespace, labels=labels)},
        # Nodes: list and watch to see them, patch to apply its labels (server-side apply); never update,
        # never nodes/status. RBAC cannot narrow a patch to label keys: the field manager and the plan do.
        "clusterrole": {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole",
                        "metadata": objects.metadata(NAME, labels=labels),
                        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch",
                                                                                          "watch"]}]},
        "clusterrolebinding": {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding",
                               "metadata": objects.metadata(NAME, labels=labels),
                               "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": NAME},
                               "subjects": subject},
        "role": {"apiVersion": f"{rbac}/v1", "kind": "Role",
                 "metadata": objects.metadata(NAME, namespace=EVENTS_NAMESPACE, labels=labels),
                 "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]},
        "rolebinding": {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
                        "metadata": objects.metadata(NAME, namespace=EVENTS_NAMESPACE, labels=labels),
                        "roleRef": {"apiGroup": rbac, "kind": "Role", "name": NAME}, "subjects": subject},
        "deployment": _deployment(resolved, plan_map["metadata"]["name"], labels),
        **(_admission_policy(plan, namespace, labels) if policy.spec.vap_available else {}),
    }


def service_account_user(namespace: str) -> str:
    """The username the API server gives the reconciler's requests (its ServiceAccount's)."""
    return f"system:serviceaccount:{namespace}:{NAME}"


def _admission_policy(plan: LabelPlan, namespace: str, labels: Mapping[str, str]) -> dict[str, Obj]:
    """A ValidatingAdmissionPolicy and its binding: the reconciler may change the labels it owns, to the values the
    plan gives them, and nothing else of a Node. Applied before the reconciler starts (sync wave -1)."""
    annotations = {objects.SYNC_WAVE: objects.SYNC_WAVE_CONFIG}
    match = f"request.userInfo.username == {_cel(service_account_user(namespace))}"
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": objects.metadata(NAME, labels=labels, annotations=annotations),
        "spec": {
            # A failing expression denies the reconciler's write; it never reaches anyone else's.
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"], "resources": ["nodes"]}]},
            "matchConditions": [{"name": "node-label-reconciler", "expression": match}],
            "validations": [{"expression": expression, "message": message, "reason": "Forbidden"}
                            for expression, message in validations(plan)],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": objects.metadata(NAME, labels=labels, annotations=annotations),
        "spec": {"policyName": NAME, "validationActions": ["Deny"]},
    }
    return {"validatingadmissionpolicy": policy, "validatingadmissionpolicybinding": binding}


# A Node's labels as CEL sees them: the map, or an empty one when the object has none (has() guards every level: a
# missing field is an error in CEL, not an absent value). A one-element list and all() bind a value to a name
# without cel.bind, which only newer API servers have.
_NEW_LABELS = "(has(object.metadata.labels) ? object.metadata.labels : {})"
_OLD_LABELS = "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})"


def _same(field: str, empty: str) -> str:
    """object's and oldObject's ``field`` are equal (a missing one counts as ``empty``)."""
    head, _, last = field.rpartition(".")
    new = f"(has(object{head}.{last}) ? object{field} : {empty})"
    old = f"(has(oldObject{head}.{last}) ? oldObject{field} : {empty})"
    return f"{new} == {old}"


def validations(plan: LabelPlan) -> tuple[tuple[str, str], ...]:
    """(CEL expression, message) pairs the reconciler's every Node update must satisfy."""
    owned = _cel(list(plan.owned_keys))
    allowed = _cel({key: sorted({c.labels[key] for c in plan.classes if key in c.labels})
                    for key in plan.owned_keys})
    unchanged = "(k in old && old[k] == new[k])"
    keys = (f"[{_OLD_LABELS}].all(old, [{_NEW_LABELS}].all(new, new.all(k, k in {owned} || {unchanged}) && "
            f"old.all(k, k in {owned} || k in new)))")
    values = (f"[{_OLD_LABELS}].all(old, [{_NEW_LABELS}].all(new, new.all(k, !(k in {owned}) || {unchanged} || "
              f"new[k] in {allowed}[k])))")
    rest = " && ".join(_same(field, empty) for field, empty in (
        (".spec", "{}"), (".metadata.annotations", "{}"), (".metadata.finalizers", "[]"),
        (".metadata.ownerReferences", "[]")))
    keys_text = ", ".join(plan.owned_keys)
    return (
        (keys, f"gpupolicy's node-label reconciler may add, change or remove only the labels it owns ({keys_text})"),
        (values, "gpupolicy's node-label reconciler may set its labels only to values its label plan gives them"),
        (rest, "gpupolicy's node-label reconciler may change only labels: not a Node's spec (taints, "
               "unschedulable), annotations, finalizers or owners"),
    )


def _cel(value: object) -> str:
    """A CEL literal for a string, a list of strings or a map of them (JSON's double-quoted strings are CEL's)."""
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def _deployment(resolved: ResolvedPolicy, plan_map: str, labels: dict[str, str]) -> Obj:
    policy = resolved.policy
    admission = policy.spec.admission
    selector = {"app.kubernetes.io/name": NAME}
    container = {
        "name": "reconciler",
        "image": admission.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["cluster", "reconcile-labels", "--plan", f"{PLAN_DIR}/{PLAN_KEY}",
                 "--metrics-port", str(METRICS_PORT)],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 20,
                          "timeoutSeconds": 2, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
                           "timeoutSeconds": 2},
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": objects.restricted_container_security(),
        "volumeMounts": [{"name": "plan", "mountPath": PLAN_DIR, "readOnly": True}],
    }
    pod_spec = objects.service_account_pod(NAME, [container], [{"name": "plan", "configMap": {"name": plan_map}}])
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": objects.metadata(NAME, namespace=admission.namespace, labels=labels,
                                     annotations={objects.SYNC_WAVE: objects.SYNC_WAVE_WORKLOAD}),
        "spec": {
            # One writer at a time: a new plan replaces the old reconciler instead of running beside it.
            "replicas": 1,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
