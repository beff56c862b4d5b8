"""The node-label reconciler's Deployment: `gpupolicy cluster reconcile-labels` in the webhook's image, reading
the label plan (policy.node_labels) from a content-named ConfigMap, with RBAC to read and patch nodes and to
report conflicts as events, and nothing else. Pod Security "restricted" like the webhook."""

from __future__ import annotations

from compiler import objects
from compiler.objects import Obj
from policy import node_labels
from policy.resolve import ResolvedPolicy

NAME = "gpupolicy-node-labels"
PLAN_KEY = "plan.json"
PLAN_DIR = "/etc/gpupolicy/node-labels"
METRICS_PORT = 9090
RUN_AS = 65532
#: Events about nodes live in the default namespace (where the kubelet records node events).
EVENTS_NAMESPACE = "default"


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
    }


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
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "privileged": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True},
        "volumeMounts": [{"name": "plan", "mountPath": PLAN_DIR, "readOnly": True}],
    }
    pod_spec = {
        "serviceAccountName": NAME,
        "automountServiceAccountToken": True,  # it talks to the API server
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "plan", "configMap": {"name": plan_map}}],
    }
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
