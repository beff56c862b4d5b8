"""The in-cluster audit (spec.audit): a CronJob running `gpupolicy cluster audit --write-reports` in the webhook's
image on the spec it reads from a content-named ConfigMap, with the least RBAC that run needs, Pod Security
"restricted" like the webhook.

Its ClusterRole is compiled from the list the live audit reads (policy.audit.scan.watched_kinds over the policy's
workload-kinds table), so the two cannot drift: ``list`` on each of those kinds (the audit lists them, paged, and
never gets, watches or writes one), and on the report kinds of spec.audit.format ``list`` (its earlier reports, by
label), ``create`` and ``patch`` (server-side apply, field manager gpupolicy-audit) and ``delete`` (stale reports).
The reports go to whichever namespaces have GPU workloads, which no Role fixed in advance can name: the grant is
cluster-wide, on the report kinds only.
"""

from __future__ import annotations

from compiler import objects, serialize
from compiler.objects import Obj
from compiler.targets import workload_kinds
from policy.audit import reports, scan
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.model import ClusterGPUPolicy

COMPONENT = "audit"
NAME = "gpupolicy-audit"
SPEC_KEY = "cluster.yaml"
SPEC_DIR = "/etc/gpupolicy/audit"
#: A run that missed its time by more than this is skipped, not started late (the next one comes within the hour);
#: it also keeps the controller from counting more than 100 missed runs after an outage (kubernetes docs,
#: "CronJob limitations"), which stops the CronJob for good.
STARTING_DEADLINE_SECONDS = 300
HISTORY_LIMIT = 3
#: Per API request: a page of 500 pods (snapshot.PAGE_SIZE) answers well within it on a loaded API server.
REQUEST_TIMEOUT_SECONDS = 30
_FORMAT = {"policy-report": "wgpolicy", "openreports": "openreports"}
_RBAC = "rbac.authorization.k8s.io"


def render_audit(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> object; empty unless spec.audit.enabled."""
    policy = resolved.policy
    spec = policy.spec
    if not spec.audit.enabled:
        return {}
    namespace = spec.audit_namespace
    labels = objects.labels(policy, COMPONENT, **{"app.kubernetes.io/name": NAME})
    spec_map = objects.config_map(f"{NAME}-spec", {SPEC_KEY: spec_text(policy)}, namespace=namespace,
                                  labels=labels)
    return {
        "serviceaccount": {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": objects.metadata(NAME, namespace=namespace, labels=labels)},
        "clusterrole": {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRole",
                        "metadata": objects.metadata(NAME, labels=labels), "rules": rules(policy)},
        "clusterrolebinding": {"apiVersion": f"{_RBAC}/v1", "kind": "ClusterRoleBinding",
                               "metadata": objects.metadata(NAME, labels=labels),
                               "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": NAME},
                               "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]},
        "configmap": spec_map,
        "cronjob": _cron_job(policy, spec_map["metadata"]["name"], labels),
    }


def spec_text(policy: ClusterGPUPolicy) -> str:
    """The spec the audit judges by: the validated policy written back as YAML, which loads to the same policy, so
    the audit's verdicts and policy hash are the webhook's. Every field is written, defaults too: an audit image
    other than the compiler's release (audit.image) then judges by this policy, not by its own defaults."""
    data = policy.model_dump(mode="json", by_alias=True, exclude_none=True)
    return serialize.dump_yaml(data).decode("utf-8")


def rules(policy: ClusterGPUPolicy) -> list[Obj]:
    """The ClusterRole's rules, one per API group, sorted: list on what the audit reads, then the report kinds."""
    read: dict[str, set[str]] = {}
    for watched in scan.watched_kinds(workload_kinds.kinds_of(policy)):
        read.setdefault(watched.group, set()).add(watched.resource)
    out = [{"apiGroups": [group], "resources": sorted(resources), "verbs": ["list"]}
           for group, resources in sorted(read.items())]
    kinds = reports.report_kinds(_FORMAT[policy.spec.audit.format])  # type: ignore[arg-type]
    group = reports.RESOURCES[kinds[0]][0]
    out.append({"apiGroups": [group], "resources": sorted(reports.RESOURCES[k][1] for k in kinds),
                "verbs": ["create", "delete", "list", "patch"]})
    return out


def service_account_user(namespace: str) -> str:
    """The username the API server gives the audit's requests (its ServiceAccount's)."""
    return f"system:serviceaccount:{namespace}:{NAME}"


def command(policy: ClusterGPUPolicy) -> list[str]:
    """The container's arguments: the same `cluster audit` a person runs, writing the reports (in-cluster config:
    the pod has no kubeconfig, so the client takes its ServiceAccount's token)."""
    audit = policy.spec.audit
    return ["cluster", "audit", "-p", f"{SPEC_DIR}/{SPEC_KEY}", "--write-reports", "-O", audit.format,
            "--max-results", str(audit.max_results), "--request-timeout", str(REQUEST_TIMEOUT_SECONDS),
            *(["--fail-only"] if audit.fail_only else [])]


def _cron_job(policy: ClusterGPUPolicy, spec_map: str, labels: dict[str, str]) -> Obj:
    spec = policy.spec
    audit = spec.audit
    container = {
        "name": "audit",
        "image": spec.audit_image,
        "imagePullPolicy": "IfNotPresent",
        "args": command(policy),
        "resources": {"requests": dict(sorted(audit.resources.requests.items())),
                      "limits": dict(sorted(audit.resources.limits.items()))},
        "securityContext": objects.restricted_container_security(),
        "volumeMounts": [{"name": "spec", "mountPath": SPEC_DIR, "readOnly": True}],
    }
    pod_spec = objects.service_account_pod(NAME, [container], [{"name": "spec", "configMap": {"name": spec_map}}])
    pod_spec["restartPolicy"] = "Never"  # a failed run is retried by the Job (backoffLimit), or by the next schedule
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": objects.metadata(NAME, namespace=spec.audit_namespace, labels=labels,
                                     annotations={objects.SYNC_WAVE: objects.SYNC_WAVE_WORKLOAD}),
        "spec": {
            "schedule": audit.schedule,
            # One run at a time: a slow run is never doubled by the next, which would write the same reports.
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": STARTING_DEADLINE_SECONDS,
            "successfulJobsHistoryLimit": HISTORY_LIMIT,
            "failedJobsHistoryLimit": HISTORY_LIMIT,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "activeDeadlineSeconds": audit.active_deadline_seconds,
                    "backoffLimit": 1,
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                },
            },
        },
    }
