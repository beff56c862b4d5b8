"""Builders for the Kubernetes objects gpupolicy emits: names, labels, hashes and metadata set once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from policy.hardware.labels import (
    GPU_DEPLOY_PREFIX,
    MIG_CONFIG_STATE,
    MIG_STATE_FAILED,
    MIG_STATE_SUCCESS,
    PAUSED_FOR_MIG_CHANGE,
)
from policy.kube import selectors
from policy.kube.scheduling import Toleration as PodToleration
from policy.resolved.resolve import ResolvedClass
from policy.spec.model import ClusterGPUPolicy, Taint, Toleration

MANAGED_BY = "gpupolicy"
PART_OF = "gpupolicy"
Obj = dict[str, Any]

# Argo CD applies lower waves first and waits for them to be healthy (ecosystem.md §1.5): namespaces first, config
# before the workloads that mount it, then the webhook's Deployment, and its registration only after its pods.
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
SYNC_WAVE_NAMESPACE = "-2"
SYNC_WAVE_CONFIG = "-1"
SYNC_WAVE_WORKLOAD = "0"
SYNC_WAVE_WEBHOOK = "1"
SYNC_WAVE_REGISTRATION = "2"
# Prometheus rules, ServiceMonitors and dashboards last: their CRDs and admission webhook belong to the
# monitoring stack, and a failure there must not hold back the GPU configuration in the waves before.
SYNC_WAVE_MONITORING = "3"

# Generated, content-named ConfigMaps: the old name must outlive the rollout that stops using it,
# so GitOps tools must not prune it mid-rollout (Argo CD sync-options, Flux prune annotations).
HASHED_CONFIGMAP_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false",
    SYNC_WAVE: SYNC_WAVE_CONFIG,
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


def content_hash(data: Mapping[str, str]) -> str:
    """Ten hex characters of sha256 over the sorted data: the suffix of content-named ConfigMaps."""
    digest = hashlib.sha256(json.dumps(dict(data), sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()[:10]


def labels(policy: ClusterGPUPolicy, component: str, **extra: str) -> dict[str, str]:
    """The standard labels every emitted object carries (app.kubernetes.io/*) plus the user's own."""
    out = dict(policy.metadata.labels)
    out.update(
        {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/component": component,
            "gpupolicy.dev/cluster": policy.metadata.name,
        }
    )
    out.update(extra)
    return out


def metadata(
    name: str,
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """ObjectMeta; cluster-scoped objects pass no namespace (Kustomize must not add one)."""
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


#: The non-root user gpupolicy's own pods run as (the image's, distroless "nonroot").
NONROOT_UID = 65532


def restricted_container_security() -> Obj:
    """A container's securityContext under Pod Security "restricted", with a read-only root filesystem: what the
    tree's own API clients (the label reconciler, the audit) run with; they write no file."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
            "readOnlyRootFilesystem": True, "runAsNonRoot": True}


def restricted_pod_security() -> Obj:
    """The pod securityContext that goes with it: non-root UID and GID, seccomp RuntimeDefault."""
    return {"runAsNonRoot": True, "runAsUser": NONROOT_UID, "runAsGroup": NONROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"}}


def service_account_pod(name: str, containers: list[Obj], volumes: list[Obj]) -> Obj:
    """The pod spec of one of the tree's own API clients: its ServiceAccount's token mounted (it talks to the API
    server), no service links, restricted."""
    return {"serviceAccountName": name, "automountServiceAccountToken": True, "enableServiceLinks": False,
            "securityContext": restricted_pod_security(), "containers": containers, "volumes": volumes}


def config_map(
    base_name: str,
    data: Mapping[str, str],
    *,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A content-named ConfigMap: its name ends in the hash of its data, so any change renames it
    and every workload that mounts it rolls out (no manual rollout restart)."""
    name = f"{base_name}-{content_hash(data)}"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            name,
            namespace=namespace,
            labels=labels,
            annotations={**HASHED_CONFIGMAP_ANNOTATIONS, **(annotations or {})},
        ),
        "data": dict(data),
    }



NODE_CLASS_LABEL = "gpupolicy.dev/node-class"
KUSTOMIZE_API_VERSION = "kustomize.config.k8s.io/v1beta1"
CLUSTER_POLICY_API_VERSION = "nvidia.com/v1"  # GPU Operator CRD (device-plugin.md §7)

# A ClusterPolicy we only patch: apply our fields server-side and never prune the object, because whoever
# created it owns it (Argo CD sync-options "ServerSideApply", Flux prune annotation and ssa Merge).
PARTIAL_OBJECT_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "ServerSideApply=true,Prune=false",
    SYNC_WAVE: SYNC_WAVE_WORKLOAD,
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
    "kustomize.toolkit.fluxcd.io/ssa": "Merge",
}


def selector_labels(app: str, node_class: str) -> dict[str, str]:
    """The immutable selector of a per-class workload: app name and class, nothing that can ever change."""
    return {"app.kubernetes.io/name": app, NODE_CLASS_LABEL: node_class}


def daemon_set(
    name: str,
    *,
    namespace: str,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    pod_spec: Obj,
    template_labels: Mapping[str, str] | None = None,
) -> Obj:
    """A RollingUpdate DaemonSet whose pod template carries only its selector labels (so a change of the
    cluster's labels never rolls the pods), plus fixed ``template_labels`` others select its pods by."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(name, namespace=namespace, labels={**labels, **selector},
                             annotations={SYNC_WAVE: SYNC_WAVE_WORKLOAD}),
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": {**(template_labels or {}), **selector}}, "spec": pod_spec},
        },
    }


def host_path_volume(name: str, path: str, kind: str | None = None) -> Obj:
    host_path: Obj = {"path": path}
    if kind:
        host_path["type"] = kind
    return {"name": name, "hostPath": host_path}


def config_file_volume(name: str, config_map_name: str, key: str, path: str) -> Obj:
    """A ConfigMap volume projecting exactly one key as one file, so the mount holds a file we can name
    with --config-file (a directory crashes the plugin: device-plugin.md §3, seed 003 pitfall 3)."""
    return {"name": name, "configMap": {"name": config_map_name, "items": [{"key": key, "path": path}]}}


def cluster_policy_patch(name: str, spec: Obj) -> Obj:
    """The fields of the GPU Operator's ClusterPolicy we own, as a partial object for server-side apply.
    Cluster-scoped: no namespace. No labels: they would become fields we own on an object someone else made."""
    return {
        "apiVersion": CLUSTER_POLICY_API_VERSION,
        "kind": "ClusterPolicy",
        "metadata": metadata(name, annotations=PARTIAL_OBJECT_ANNOTATIONS),
        "spec": spec,
    }


def kustomization(
    resources: list[str],
    *,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A kustomization.yaml: sorted resources, `labels` that never touch selectors (never the deprecated
    commonLabels, which rewrites immutable selectors: ecosystem.md §1.1), no namespace."""
    doc: Obj = {
        "apiVersion": KUSTOMIZE_API_VERSION,
        "kind": "Kustomization",
        "resources": sorted(resources),
    }
    if labels:
        doc["labels"] = [{"pairs": dict(labels), "includeSelectors": False, "includeTemplates": False}]
    return doc



# ----------------------------------------------------------------------- stepping aside for the MIG manager

#: Pod labels the MIG manager waits on (mig-parted pkg/mig/reconfigure: it lists pods with these app labels in
#: its DEFAULT_GPU_CLIENTS_NAMESPACE on the node and waits until they are gone), per gpu.deploy component.
MIG_CLIENT_APPS = {"device-plugin": "nvidia-device-plugin-daemonset",
                   "gpu-feature-discovery": "gpu-feature-discovery"}


def mig_client(component: str) -> tuple[Obj, dict[str, str]]:
    """(node affinity, pod template labels) of a GPU client DaemonSet on a node the tree's MIG manager serves.

    The pod runs only where nvidia.com/mig.config.state is success or failed, i.e. once the MIG manager has run
    on the node (no client sees the unpartitioned GPU of a node that just joined). After a failed run the clients
    come back, as NVIDIA's own flow brings them back by restoring the deploy labels (mig-parted@v0.12.1
    deployments/container/reconfigure-mig.sh:208-220): the MIG manager acts only when the label changes, so
    requiring success would keep a node with no GPU client after one transient error. The pod leaves while
    nvidia.com/gpu.deploy.<component> is
    paused-for-mig-change or false, the MIG manager's pause (mig.md §5); NotIn also matches a node without the
    label, so nothing has to pre-set it. The DaemonSet controller removes a pod whose node stops matching, and
    the pod label lets the MIG manager see it go. One helper for every client: device plugin, MPS daemon, GFD.
    """
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [
            {"key": f"{GPU_DEPLOY_PREFIX}{component}", "operator": "NotIn",
             "values": [PAUSED_FOR_MIG_CHANGE, "false"]},
            mig_manager_has_run(),
        ]}]}}}
    app = MIG_CLIENT_APPS.get(component)
    return affinity, ({"app": app} if app else {})


def mig_manager_has_run() -> Obj:
    """The node requirement of a GPU client that must not see a node's GPUs before the MIG manager partitioned them,
    nor while it re-partitions: nvidia.com/mig.config.state is pending from the start of a change and success or
    failed at its end (mig.md §5), and the DaemonSet controller removes a pod whose node stops matching and brings
    it back once the node matches again, so the client also restarts after every change."""
    return {"key": MIG_CONFIG_STATE, "operator": "In", "values": [MIG_STATE_SUCCESS, MIG_STATE_FAILED]}


def class_tolerations(tolerations: Sequence[Toleration], node_class: ResolvedClass) -> list[Obj]:
    """A node agent's tolerations, plus one per taint of the class's nodes they do not already tolerate: a
    DaemonSet pod that does not tolerate its nodes' taints never runs there (the DaemonSet controller adds only
    the node.kubernetes.io/* ones). One helper for every per-class agent: device plugin, MPS daemon, GFD, MIG
    manager, HAMi's device plugin."""
    return tolerating(tolerations, node_class.taints)


def tolerating(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> list[Obj]:
    """``tolerations``, plus one toleration per taint they do not already tolerate (in the taints' order)."""
    found = [t.model_dump(exclude_none=True) for t in tolerations]
    given = [PodToleration(t.key or "", t.operator, t.value or "", t.effect or "") for t in tolerations]
    for taint in taints:
        if not any(t.tolerates(taint.key, taint.value, taint.effect) for t in given):
            found.append({"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
                         if taint.value else {"key": taint.key, "operator": "Exists", "effect": taint.effect})
            given.append(PodToleration(taint.key, "Equal" if taint.value else "Exists", taint.value, taint.effect))
    return found


def selector_expression(requirement: selectors.Requirement) -> Obj:
    """A label-selector requirement as a matchExpressions entry (values sorted; none for Exists/DoesNotExist)."""
    out: Obj = {"key": requirement.key, "operator": requirement.operator}
    if requirement.operator in ("In", "NotIn"):
        out["values"] = sorted(requirement.values)
    return out
