"""The webhook in a cluster: policy ConfigMap, Deployment, Service, PDB, NetworkPolicy, VWC and certificates.

`render_admission(policy)` returns finished Kubernetes objects as dicts, sorted by (kind, name), with stable
names and no timestamps; the tree writes each to its own file under ``admission/``. Nothing cluster-scoped
is emitted but the ValidatingWebhookConfiguration and the node cache's ClusterRole (get, list and watch on nodes,
nothing else) with its binding, and no Namespace: the tree's ``namespaces/``
(compiler.targets.namespaces) writes the webhook's, restricted, unless spec.createNamespaces leaves it to the
platform.

Fail-safe scope (design.md §5, reference webhook.md §0 and §4.3-4.4). With ``failurePolicy: Fail`` a webhook
outage blocks exactly what the configuration routes to the webhook, so the routing is narrow:

* rules: Pods on CREATE (GPU requests of a pod cannot change after creation) and the pod controllers on
  CREATE and UPDATE; never DELETE, never a subresource (``*/status``, ``*/scale``);
* namespaceSelector: ``kubernetes.io/metadata.name NotIn`` kube-system, the webhook's own namespace and
  ``admission.excludedNamespaces`` (Kyverno's exclusion);
* matchConditions (`MATCH_CONDITIONS`): only objects whose pod spec asks for an ``nvidia.com/*`` resource
  (object or oldObject), and on UPDATE only when the pod spec changed.

So with the webhook down, non-GPU workloads and everything in the excluded namespaces (the webhook itself
included) are admitted; only new or re-specified GPU workloads elsewhere wait for it.

Tenant routing: one webhook entry per tenant, ``<tenant>.tenants.gpupolicy.dev`` → ``/validate/tenant/<tenant>``,
selected by the tenant's namespaceSelector, and ``default.gpupolicy.dev`` → ``/validate`` for namespaces no
tenant selects (the negation of every tenant's one-requirement selector; policy/checks/tenants.py refuses the rest).

Ordering under GitOps. Argo CD sync waves: content-named ConfigMaps ``-1``; ServiceAccount, Service, PDB,
NetworkPolicy and cert-manager objects ``0``; the Deployment ``1``; the VWC ``2``. Argo waits for each wave
to be healthy (Deployment rolled out, Certificate Ready) before the next, so a Fail webhook is never
registered before a serving pod exists (ecosystem.md §1.5). Flux has no waves: its equivalent is a second
Flux ``Kustomization`` that holds only the ValidatingWebhookConfiguration, with ``dependsOn`` the one that
applies the rest and whose ``healthChecks`` list ``apps/v1 Deployment gpupolicy-webhook`` in the webhook
namespace (or ``wait: true``) (ecosystem.md §1.6).

Certificates. ``source: cert-manager`` (default): a self-signed Issuer signs a CA Certificate, a CA Issuer
signs the serving Certificate ``gpupolicy-webhook-tls``, and cert-manager's CA injector fills every entry's
``caBundle`` from it (annotation ``cert-manager.io/inject-ca-from``). The two-level chain keeps the CA, and so
the injected bundle, stable while the serving certificate renews every 60 days; a self-signed leaf would
change the bundle at each renewal and open the "x509: certificate signed by unknown authority" window
(webhook.md §1.11, open-policy-agent/cert-controller#13). ``source: secret``: the Deployment mounts
``certificates.secretName`` and each entry carries ``certificates.caBundle``; when that is empty the VWC has
no caBundle and an overlay must patch one in (the API server then fails closed for GPU objects only).
No private key is ever part of the output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compiler import objects
from compiler.objects import Obj
from compiler.targets import dra, workload_kinds
from policy.admission import fractions
from policy.checks.tenants import tenant_requirements, tenant_selector_too_complex
from policy.kube import selectors
from policy.resolved import offers
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.diagnostics import PolicyError
from policy.spec.model import Admission, ClusterGPUPolicy, Tenant, WorkloadKind
from policy.spec.workload_kinds import DEFAULT_WORKLOAD_KINDS

__all__ = ["MATCH_CONDITIONS", "RESOURCE_RULES", "excluded_namespaces", "match_conditions", "render_admission"]

NAME = "gpupolicy-webhook"
NODE_READER = "gpupolicy-webhook-nodes"
CONFIGURATION_NAME = "gpupolicy"
POLICY_CONFIGMAP = "gpupolicy-admission-policy"
POLICY_KEY = "admission-policy.json"
POLICY_DIR = "/etc/gpupolicy/policy"
CERT_DIR = "/etc/gpupolicy/tls"
PORT = 8443
#: Plain HTTP, /metrics and the probes only (webhook/worker.py): Prometheus scrapes it from any namespace,
#: also where apiServerCidrs closes the serving port to everyone but the API server.
METRICS_PORT = 9090
DEFAULT_WEBHOOK = "default.gpupolicy.dev"
TENANT_WEBHOOK_SUFFIX = "tenants.gpupolicy.dev"
NAME_LABEL = "app.kubernetes.io/name"
NAMESPACE_NAME_LABEL = selectors.NAMESPACE_NAME_LABEL
RUN_AS = 65532  # the distroless "nonroot" user and group

SYNC_WAVE = objects.SYNC_WAVE
WAVE_SUPPORT, WAVE_DEPLOYMENT = objects.SYNC_WAVE_WORKLOAD, objects.SYNC_WAVE_WEBHOOK
WAVE_REGISTRATION = objects.SYNC_WAVE_REGISTRATION
CA_ISSUER, SELF_SIGNED_ISSUER, CA_CERTIFICATE = "gpupolicy-ca", "gpupolicy-selfsigned", "gpupolicy-webhook-ca"
SERVING_CERTIFICATE = "gpupolicy-webhook-tls"

# ---------------------------------------------------------------- matchConditions

# The pod spec of every kind the webhook registers, chosen by shape because one entry sees all kinds:
# CronJob spec.jobTemplate.spec.template.spec; the other controllers spec.template.spec; Pod spec
# (webhook.md §2.4). Every level is guarded with has(): a missing intermediate field is a CEL error, not
# false, and an erroring condition goes to failurePolicy (cel-monitoring.md §1.3).


def _pod_spec(var: str) -> str:
    return (
        f"has({var}.spec.jobTemplate) && has({var}.spec.jobTemplate.spec)"
        f" && has({var}.spec.jobTemplate.spec.template) && has({var}.spec.jobTemplate.spec.template.spec)"
        f" ? {var}.spec.jobTemplate.spec.template.spec"
        f" : has({var}.spec.template) && has({var}.spec.template.spec) ? {var}.spec.template.spec"
        f" : {var}.spec"
    )


# App and init containers (sidecars included); ephemeral containers may not set resources. Requests are
# read as well as limits because a hand-written object may carry only one of them.
_REQUESTS_NVIDIA = (
    "((has(s.containers) ? s.containers : []) + (has(s.initContainers) ? s.initContainers : []))"
    ".exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('nvidia.com/'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('nvidia.com/')))))"
)

def _pod_metadata(var: str) -> str:
    """The pod's metadata, chosen by shape like _pod_spec (a template's own for a controller)."""
    return (
        f"has({var}.spec.jobTemplate) && has({var}.spec.jobTemplate.spec)"
        f" && has({var}.spec.jobTemplate.spec.template) && has({var}.spec.jobTemplate.spec.template.metadata)"
        f" ? {var}.spec.jobTemplate.spec.template.metadata"
        f" : has({var}.spec.template) && has({var}.spec.template.metadata) ? {var}.spec.template.metadata"
        f" : has({var}.metadata) ? {var}.metadata : {{}}"
    )


# KAI Scheduler's fractional GPUs are asked by pod annotation, not by resource (policy/admission/fractions.py).
_ASKS_KAI = (f"[{_pod_metadata('o')}].exists(m, has(m.annotations) && "
             f"{workload_kinds.KAI_ANNOTATIONS.replace('@', 'm.annotations')})")


def match_conditions(kinds: Sequence[WorkloadKind]) -> tuple[tuple[str, str], ...]:
    """(name, CEL expression) pairs; the API server calls the webhook only when all are true (webhook.md §1.9).
    Only has() guards and standard macros: they compile on every API server with matchConditions (beta 1.28,
    GA 1.30), before optionals (1.29) and cel.bind. A one-element list plus exists() binds the pod spec; an
    object of a workload kind asks for a GPU where one of its templates does (compiler/targets/workload_kinds.py)."""
    return (
        # object or oldObject, so an UPDATE that removes the GPUs still reaches the webhook; oldObject is null
        # on CREATE.
        (
            dra.ASKS_CONDITION,
            "[object, oldObject].exists(o, o != null && has(o.spec) && "
            f"([{_pod_spec('o')}].exists(s, {_REQUESTS_NVIDIA}) || {_ASKS_KAI}"
            f" || {workload_kinds.asks_for_gpu('o', kinds)}))",
        ),
        _UNCHANGED,
    )


def _gpu_annotations(var: str) -> str:
    """The pod's annotations some rule reads (policy/admission/fractions.py gpu_annotations), as a list of
    [key, value] pairs inside a one-element list: what an UPDATE must leave alone to be left unsent."""
    keys = ", ".join(f"'{key}'" for key in sorted(fractions.RULE_ANNOTATIONS))
    prefixes = " || ".join(f"k.startsWith('{prefix}')" for prefix in fractions.KNOWN_GPU_PREFIXES)
    return (f"[{_pod_metadata(var)}].map(m, has(m.annotations) ? m.annotations.filter(k, k in [{keys}] || "
            f"{prefixes}).map(k, [k, m.annotations[k]]) : [])")


# The engine never denies an UPDATE that leaves the pod spec and its GPU annotations alone (design.md §4), so
# such UPDATEs are not sent at all. It keeps controllers working during an outage: the Deployment controller scales and
# annotates ReplicaSets with plain UPDATEs of the main resource (pkg/controller/deployment/sync.go,
# scaleReplicaSet), and the garbage collector edits ownerReferences and finalizers the same way. A workload
# custom resource's templates are under its spec, so a change of its spec is sent.
_UNCHANGED = (
    "pod-spec-created-or-changed",
    "request.operation != 'UPDATE' || object == null || oldObject == null"
    " || !has(object.spec) || !has(oldObject.spec)"
    f" || [{_pod_spec('object')}] != [{_pod_spec('oldObject')}]"
    f" || {_gpu_annotations('object')} != {_gpu_annotations('oldObject')}",
)
#: The conditions for the built-in workload-kinds table (a spec that adds kinds gets match_conditions of its own).
MATCH_CONDITIONS = match_conditions(DEFAULT_WORKLOAD_KINDS)

# Pods are checked on CREATE only: a pod's containers and extended-resource requests cannot change after
# creation (in-place resize covers cpu and memory only). Pod controllers are checked on CREATE and UPDATE
# so `kubectl apply` of a bad template fails at once instead of leaving FailedCreate events (webhook.md §2.1).
RESOURCE_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("", ("pods",), ("CREATE",)),
    ("", ("replicationcontrollers",), ("CREATE", "UPDATE")),
    ("apps", ("daemonsets", "deployments", "replicasets", "statefulsets"), ("CREATE", "UPDATE")),
    ("batch", ("cronjobs", "jobs"), ("CREATE", "UPDATE")),
)


# ---------------------------------------------------------------- entry point


def render_admission(resolved: ResolvedPolicy) -> list[Obj]:
    """Every object the webhook needs, sorted by (kind, name); empty when admission is disabled.

    Raises PolicyError (tenant-selector-too-complex) when a tenant's namespaceSelector has no negation the
    API server can evaluate; ``gpupolicy validate`` reports the same finding first.
    """
    policy = resolved.policy
    admission = policy.spec.admission
    if not admission.enabled:
        return []
    policy_map = objects.config_map(
        POLICY_CONFIGMAP,
        {POLICY_KEY: offers.build_admission_policy(resolved).to_json()},
        namespace=admission.namespace,
        labels=_labels(policy),
    )
    out = [
        _service_account(policy),
        *(_node_reader(policy) if admission.node_cache else ()),
        policy_map,
        _deployment(policy, policy_map["metadata"]["name"]),
        _service(policy),
        _disruption_budget(policy),
        _network_policy(policy),
        _webhook_configuration(policy),
        *(_cert_manager_objects(policy) if admission.certificates.source == "cert-manager" else ()),
    ]
    return sorted(out, key=lambda obj: (obj["kind"], obj["metadata"]["name"]))


# ---------------------------------------------------------------- shared pieces


def _labels(policy: ClusterGPUPolicy) -> dict[str, str]:
    return objects.labels(policy, "webhook", **{NAME_LABEL: NAME})


def _selector() -> dict[str, str]:
    # Fixed forever: a Deployment's selector is immutable, so it never includes the user's labels.
    return {NAME_LABEL: NAME}


def _meta(policy: ClusterGPUPolicy, name: str, wave: str, **annotations: str) -> Obj:
    return objects.metadata(
        name,
        namespace=policy.spec.admission.namespace,
        labels=_labels(policy),
        annotations={SYNC_WAVE: wave, **annotations},
    )


# ---------------------------------------------------------------- workload


def _service_account(policy: ClusterGPUPolicy) -> Obj:
    # The webhook reads its policy and certificate from volumes; its one API call is the node cache's list and watch
    # of Nodes, so only its pod mounts a token (automountServiceAccountToken there), never another pod using this
    # account by mistake.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(policy, NAME, WAVE_SUPPORT),
        "automountServiceAccountToken": False,
    }


def _node_reader(policy: ClusterGPUPolicy) -> list[Obj]:
    """The node cache's RBAC (webhook/settings.py node_cache, cluster/nodes.py): get, list and watch on nodes, and
    nothing else: no pods, no secrets, no nodes/status, no write. A ClusterRole, as Nodes are cluster-scoped."""
    rbac = "rbac.authorization.k8s.io"
    metadata = objects.metadata(NODE_READER, labels=_labels(policy), annotations={SYNC_WAVE: WAVE_SUPPORT})
    return [
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": metadata,
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": metadata,
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": NODE_READER},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": policy.spec.admission.namespace}]},
    ]


def _deployment(policy: ClusterGPUPolicy, policy_configmap: str) -> Obj:
    admission = policy.spec.admission
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(policy, NAME, WAVE_DEPLOYMENT),
        "spec": {
            "replicas": admission.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": _selector()},
            # Surge before removing a pod: every serving replica stays up during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": _labels(policy)},
                "spec": _pod_spec_of_webhook(policy, policy_configmap),
            },
        },
    }


def _pod_spec_of_webhook(policy: ClusterGPUPolicy, policy_configmap: str) -> Obj:
    admission = policy.spec.admission
    return {
        "serviceAccountName": NAME,
        # The node cache's token (a bound, rotated one: the kubelet refreshes it and the client re-reads it); with
        # no cache the webhook never calls the API server and holds no token.
        "automountServiceAccountToken": admission.node_cache,
        "enableServiceLinks": False,
        # Gatekeeper's choice for a Fail webhook: it must not be preempted by the workloads it admits.
        "priorityClassName": "system-cluster-critical",
        "terminationGracePeriodSeconds": 30,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": _spread(),
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": _selector()},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
        "containers": [_container(policy)],
        "volumes": [
            {"name": "policy", "configMap": {"name": policy_configmap}},
            # 0440 plus fsGroup: only the webhook's group can read the key. Mounted whole, never with
            # subPath, so a renewed certificate reaches the pod (a subPath mount never updates, k8s #50345).
            {"name": "tls", "secret": {"secretName": admission.certificates.secret_name, "defaultMode": 0o440}},
            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "32Mi"}},
            {"name": "prometheus", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        ],
    }


def _spread() -> list[Obj]:
    # matchLabelKeys pod-template-hash: spread each revision on its own, so a rollout's surge pod is not
    # held back by the old pods. nodeTaintsPolicy Honor: tainted GPU nodes the pod cannot use are not
    # counted as empty domains (they would make maxSkew unsatisfiable on small clusters).
    def constraint(key: str, when_unsatisfiable: str) -> Obj:
        return {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": when_unsatisfiable,
            "labelSelector": {"matchLabels": _selector()},
            "matchLabelKeys": ["pod-template-hash"],
            "nodeTaintsPolicy": "Honor",
        }

    return [
        constraint("topology.kubernetes.io/zone", "ScheduleAnyway"),
        constraint("kubernetes.io/hostname", "DoNotSchedule"),
    ]


def review_budget(timeout_seconds: int) -> str:
    """The webhook's --review-budget for the API server's timeoutSeconds: a third of it, as seconds."""
    return f"{timeout_seconds / 3:.2f}".rstrip("0").rstrip(".")


def _container(policy: ClusterGPUPolicy) -> Obj:
    admission = policy.spec.admission

    def probe(path: str, period: int, failures: int) -> Obj:
        # Over HTTPS on the serving port, so a probe also exercises the certificate (Kyverno's choice);
        # the kubelet does not verify it.
        return {
            "httpGet": {"path": path, "port": "https", "scheme": "HTTPS"},
            "periodSeconds": period,
            "timeoutSeconds": 2,
            "failureThreshold": failures,
        }

    return {
        "name": "webhook",
        "image": admission.image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "webhook", "serve",
            "--policy", f"{POLICY_DIR}/{POLICY_KEY}",
            "--cert-dir", CERT_DIR,
            "--port", str(PORT),
            "--metrics-port", str(METRICS_PORT),
            # A third of the API server's wait: a review out of time is denied by us, well before the API server
            # gives up and applies the failurePolicy (under Ignore, an unanswered review is admitted unchecked).
            "--review-budget", review_budget(admission.timeout_seconds),
        ],
        "env": [
            # prometheus_client's directory for per-worker metrics under gunicorn (the root is read-only).
            {"name": "PROMETHEUS_MULTIPROC_DIR", "value": "/var/run/gpupolicy/prometheus"},
            # Pinned pods (spec.nodeName) judged on their node's classes (docs/admission.md §5).
            {"name": "GPUPOLICY_NODE_CACHE", "value": "true" if admission.node_cache else "false"},
        ],
        "ports": [
            {"name": "https", "containerPort": PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "startupProbe": probe("/healthz", 2, 30),
        "readinessProbe": probe("/readyz", 5, 2),
        "livenessProbe": probe("/healthz", 10, 3),
        # No CPU limit: throttling turns into admission latency against a 3 s timeout.
        # Measured with scripts/memory.py (docs/reliability.md): 85 MiB idle, 152 MiB settled and 185 MiB at
        # peak under hostile bodies, ~27 MiB more for a full connection table (2 x 500): 211 MiB at worst.
        # The limit leaves 109 MiB (a third) of headroom over that; the request covers the settled figure.
        "resources": {"requests": {"cpu": "100m", "memory": "160Mi"}, "limits": {"memory": "320Mi"}},
        "lifecycle": {"preStop": _pre_stop(policy)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
        "volumeMounts": [
            {"name": "policy", "mountPath": POLICY_DIR, "readOnly": True},
            {"name": "tls", "mountPath": CERT_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "prometheus", "mountPath": "/var/run/gpupolicy/prometheus"},
        ],
    }


def _pre_stop(policy: ClusterGPUPolicy) -> Obj:
    # Keep serving while the endpoint removal reaches kube-proxy and the API server; SIGTERM (drain) comes
    # after. The sleep action needs no binary in the image (KEP-3960, beta and on by default in 1.30).
    if policy.spec.kubernetes_minor >= 30:
        return {"sleep": {"seconds": 10}}
    return {"exec": {"command": ["python3", "-c", "import time; time.sleep(10)"]}}


def _service(policy: ClusterGPUPolicy) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(policy, NAME, WAVE_SUPPORT),
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(),
            "ports": [
                {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def _disruption_budget(policy: ClusterGPUPolicy) -> Obj:
    # maxUnavailable 1 keeps N-1 replicas through node drains and, unlike minAvailable 1, never blocks a
    # drain when a single replica is configured. AlwaysAllow: a crash-looping pod never blocks a drain.
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(policy, NAME, WAVE_SUPPORT),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": _selector()},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _network_policy(policy: ClusterGPUPolicy) -> Obj:
    # The API server's source addresses depend on the distribution (host network, a managed control plane,
    # konnectivity) and cannot be named portably, so by default the serving port admits any source. Where
    # the spec names them (admission.apiServerCidrs), only those blocks may reach it: any other pod could
    # otherwise open connections to a webhook that fails closed. Probes need no rule: traffic from the
    # pod's own node is always allowed (Kubernetes docs, "Network Policies"). The metrics port admits any
    # pod of the cluster (an empty namespaceSelector), so Prometheus scrapes wherever it runs; it serves
    # /metrics and the probes only. Egress: only to the API server, for the node cache's list and watch (policy and
    # certificates arrive as volumes; the client dials KUBERNETES_SERVICE_HOST, an address, so no DNS). Its
    # address is the kubernetes Service's endpoint after kube-proxy's DNAT, which cannot be named portably
    # (apiServerCidrs says where the API server's calls come from, which behind konnectivity or a managed control
    # plane is not where it listens), so the rule is by port: 443 (managed control planes, the Service's port) and
    # 6443 (kubeadm's secure port). Without the node cache (admission.nodeCache: false) no egress at all: `Egress` in
    # policyTypes with no `egress` field denies all (k8s.io/api networking/v1 NetworkPolicySpec), and the field is
    # left out rather than written `[]`, which the API server stores as none (every sync would write it again).
    rule: Obj = {"ports": [{"port": PORT, "protocol": "TCP"}]}
    cidrs = policy.spec.admission.api_server_cidrs
    if cidrs:
        rule = {"from": [{"ipBlock": {"cidr": cidr}} for cidr in cidrs], **rule}
    scrape: Obj = {"from": [{"namespaceSelector": {}}], "ports": [{"port": METRICS_PORT, "protocol": "TCP"}]}
    api_server: Obj = {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(policy, NAME, WAVE_SUPPORT),
        "spec": {
            "podSelector": {"matchLabels": _selector()},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [rule, scrape],
            **({"egress": [api_server]} if policy.spec.admission.node_cache else {}),
        },
    }


# ---------------------------------------------------------------- registration


def _webhook_configuration(policy: ClusterGPUPolicy) -> Obj:
    admission = policy.spec.admission
    annotations = {SYNC_WAVE: WAVE_REGISTRATION}
    if admission.certificates.source == "cert-manager":
        annotations["cert-manager.io/inject-ca-from"] = f"{admission.namespace}/{SERVING_CERTIFICATE}"
    excluded = excluded_namespaces(policy)
    # Sorted by name, so reordering tenants in the spec changes no byte; the index locates diagnostics.
    tenants = sorted(enumerate(policy.spec.tenants), key=lambda item: item[1].name)
    default = [excluded, *(_negation(tenant, index) for index, tenant in tenants)]
    kinds = workload_kinds.kinds_of(policy)
    entries = [_webhook(admission, DEFAULT_WEBHOOK, "/validate", default, kinds)]
    entries += [
        _webhook(admission, f"{t.name}.{TENANT_WEBHOOK_SUFFIX}", f"/validate/tenant/{t.name}",
                 [excluded, *tenant_requirements(t)], kinds)
        for _, t in tenants
    ]
    entries += dra.claim_webhooks(policy, entries)  # DRA claims and templates (compiler/targets/dra.py)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": objects.metadata(CONFIGURATION_NAME, labels=_labels(policy), annotations=annotations),
        "webhooks": entries,
    }


def excluded_namespaces(policy: ClusterGPUPolicy) -> selectors.Requirement:
    """The namespaces admission never checks, as one NotIn requirement (the webhook's and the VAP's scope)."""
    admission = policy.spec.admission
    names = {"kube-system", admission.namespace, *admission.excluded_namespaces}
    if policy.spec.device_plugin.deploy == "gpu-operator":
        # The operator's validator pods request nvidia.com/gpu; a webhook outage must not block them.
        names.add(policy.spec.device_plugin.operator.namespace)
    return selectors.Requirement(NAMESPACE_NAME_LABEL, "NotIn", frozenset(names))


def _negation(tenant: Tenant, index: int) -> selectors.Requirement:
    negated = selectors.negate(tenant_requirements(tenant))
    if negated is None:  # validate refuses such a spec; this guards callers that compile unchecked policies
        raise PolicyError([tenant_selector_too_complex(tenant, index)])
    return negated


def _webhook(
    admission: Admission, name: str, path: str, namespace_requirements: list[selectors.Requirement],
    kinds: Sequence[WorkloadKind],
) -> Obj:
    client: Obj = {"service": {"name": NAME, "namespace": admission.namespace, "path": path, "port": 443}}
    if admission.certificates.source == "secret" and admission.certificates.ca_bundle:
        client["caBundle"] = admission.certificates.ca_bundle
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "failurePolicy": admission.failure_policy,
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchExpressions": [objects.selector_expression(r) for r in namespace_requirements]},
        "objectSelector": {},
        "rules": [
            {"apiGroups": [group], "apiVersions": ["v1"], "operations": list(operations),
             "resources": list(resources), "scope": "Namespaced"}
            for group, resources, operations in RESOURCE_RULES
        ] + [
            # Workload custom resources on CREATE and UPDATE, like the pod controllers. Namespaced only: a
            # cluster-scoped kind (ClusterTrainingRuntime) has no namespace, so no tenant, and every entry would
            # see it; `gpupolicy admit` checks those offline.
            {"apiGroups": [group], "apiVersions": list(versions), "operations": list(workload_kinds.OPERATIONS),
             "resources": list(resources), "scope": "Namespaced"}
            for group, versions, resources in workload_kinds.resource_rules(kinds)
        ],
        "sideEffects": "None",
        "timeoutSeconds": admission.timeout_seconds,
        "matchConditions": [{"name": n, "expression": e} for n, e in match_conditions(kinds)],
    }


# ---------------------------------------------------------------- cert-manager


def _cert_manager_objects(policy: ClusterGPUPolicy) -> list[Obj]:
    namespace = policy.spec.admission.namespace
    secret_name = policy.spec.admission.certificates.secret_name
    # CA 10 years and serving certificate 90 days, renewed 30 days ahead: cert-manager's default of renewing
    # at two thirds of the lifetime (a 15-day or 60-hour window drew complaints, kyverno/kyverno#8441).
    return [
        _issuer(policy, SELF_SIGNED_ISSUER, {"selfSigned": {}}),
        _certificate(policy, CA_CERTIFICATE, SELF_SIGNED_ISSUER, {
            "secretName": CA_CERTIFICATE,
            "isCA": True,
            "commonName": CA_CERTIFICATE,
            "duration": "87600h",
            "renewBefore": "720h",
            # The CA keeps its key when renewed, so certificates it signed before still verify against
            # the renewed CA and the injected bundle (no unknown-authority window, cert-controller#13).
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Never"},
        }),
        _issuer(policy, CA_ISSUER, {"ca": {"secretName": CA_CERTIFICATE}}),
        _certificate(policy, SERVING_CERTIFICATE, CA_ISSUER, {
            "secretName": secret_name,
            "dnsNames": [f"{NAME}.{namespace}.svc", f"{NAME}.{namespace}.svc.cluster.local"],
            "duration": "2160h",
            "renewBefore": "720h",
            "usages": ["server auth", "digital signature"],
            # A fresh key at every renewal (cert-manager's default since v1.18; explicit for older ones).
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        }),
    ]


def _issuer(policy: ClusterGPUPolicy, name: str, spec: Mapping[str, Any]) -> Obj:
    return {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": _meta(policy, name, WAVE_SUPPORT),
            "spec": dict(spec)}


def _certificate(policy: ClusterGPUPolicy, name: str, issuer: str, spec: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": _meta(policy, name, WAVE_SUPPORT),
        "spec": {
            **spec,
            "issuerRef": {"group": "cert-manager.io", "kind": "Issuer", "name": issuer},
            "revisionHistoryLimit": 1,
        },
    }
