"""Realistic AdmissionReview bodies for the benchmarks, shaped like what kube-apiserver sends.

A validating webhook sees the object after defaulting and mutating admission, with everything the API
server keeps on it: managedFields (one entry per field manager, fieldsV1 mirroring every field set),
kubectl's last-applied-configuration annotation, the service-account token volume, default tolerations,
probes and env. That is why real bodies are 5-20 KB while test fixtures are 1-2 KB (the shared fixtures
in tests/fixtures/admission-reviews have managedFields trimmed), and parsing them is part of the cost.

Every body targets the mixed-fleet example policy (examples/clusters/mixed-fleet); the path says which
webhook entry (tenant) the API server would call.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Body:
    """One request the load generator replays."""

    name: str
    path: str
    """The webhook path, tenant included (/validate/tenant/<name>), with the API server's timeout query."""
    review: Obj
    allowed: bool
    """The verdict the mixed-fleet policy gives (checked by the benchmark before it measures)."""

    @property
    def data(self) -> bytes:
        return json.dumps(self.review, separators=(",", ":")).encode()


# --- building blocks --------------------------------------------------------------------------------------


def _fields_v1(value: Any) -> Any:
    """A fieldsV1 set mirroring ``value`` (structured-merge-diff: f:<field>, k:<key> for keyed lists)."""
    if isinstance(value, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return {f'k:{{"name":"{v["name"]}"}}': {".": {}, **_fields_v1(v)} for v in value}
    return {}


def _managed(manager: str, operation: str, fields: Obj, *, subresource: str | None = None) -> Obj:
    entry: Obj = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": "2026-11-29T10:15:42Z",
                  "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(fields)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def _container(name: str, image: str, *, gpus: dict[str, int] | None = None, port: int | None = None) -> Obj:
    limits: Obj = {"cpu": "4", "memory": "16Gi", **(gpus or {})}
    requests: Obj = {"cpu": "2", "memory": "8Gi", **(gpus or {})}
    out: Obj = {
        "name": name,
        "image": image,
        "command": ["python3", "-m", "server"],
        "args": ["--model=/models/current", "--max-batch-size=16", "--port=8000", "--log-format=json"],
        "env": [{"name": "MODEL_NAME", "value": "llama-3-8b-instruct"},
                {"name": "HF_HOME", "value": "/cache/huggingface"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"}],
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": [{"name": "model-cache", "mountPath": "/cache"},
                         {"name": "kube-api-access-7x2kq", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if port:
        out["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        probe = {"httpGet": {"path": "/health", "port": port, "scheme": "HTTP"}, "timeoutSeconds": 1,
                 "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
        out["livenessProbe"] = {**probe, "initialDelaySeconds": 60}
        out["readinessProbe"] = {**probe, "initialDelaySeconds": 10}
    return out


def _sidecar() -> Obj:
    sidecar = _container("log-shipper", "registry.example/fluent-bit:3.1.4")
    sidecar["resources"] = {"limits": {"memory": "128Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}}
    sidecar["command"] = ["/fluent-bit/bin/fluent-bit", "-c", "/fluent-bit/etc/fluent-bit.conf"]
    sidecar["args"] = []
    return sidecar


def _pod_spec(containers: list[Obj], *, node_selector: dict[str, str] | None = None,
              restart_policy: str = "Always") -> Obj:
    spec: Obj = {
        "volumes": [
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}},
            {"name": "kube-api-access-7x2kq", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
        ],
        "containers": containers,
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "inference",
        "serviceAccount": "inference",
        "securityContext": {"fsGroup": 1000},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return spec


def _metadata(name: str, namespace: str, labels: dict[str, str], managed: list[Obj], **extra: Any) -> Obj:
    return {"name": name, "namespace": namespace, "uid": "5f0c1d2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f",
            "creationTimestamp": "2026-11-29T10:15:42Z", "labels": labels, **extra, "managedFields": managed}


def _review(kind: str, group: str, resource: str, obj: Obj, *, user: str, uid: str, manager: str) -> Obj:
    gvk = {"group": group, "version": "v1", "kind": kind}
    gvr = {"group": group, "version": "v1", "resource": resource}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": obj["metadata"].get("name", ""), "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": user, "uid": "0b1c2d3e-4f50-4a6b-9c7d-8e9fa0b1c2d3",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                    "system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": manager},
        },
    }


# --- the four bodies ---------------------------------------------------------------------------------------


def gpu_pod() -> Body:
    """A Pod the ReplicaSet controller creates, pinned to the MIG class, one 1g.10gb slice (tenant prod)."""
    labels = {"app.kubernetes.io/name": "ranker", "app.kubernetes.io/component": "inference",
              "pod-template-hash": "7d9f8b6c5"}
    main = _container("ranker", "registry.example/ranker:3.2.1", gpus={"nvidia.com/mig-1g.10gb": 1}, port=8000)
    spec = _pod_spec([main, _sidecar()], node_selector={"node-pool": "h100-mig"})
    obj: Obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {}, "spec": spec,
                "status": {"phase": "Pending", "qosClass": "Burstable"}}
    obj["metadata"] = _metadata(
        "ranker-7d9f8b6c5-x8k2p", "search-prod", labels,
        [_managed("kube-controller-manager", "Update", {"metadata": {"labels": labels, "generateName": "",
                                                                     "ownerReferences": {}}, "spec": spec})],
        generateName="ranker-7d9f8b6c5-",
        ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "ranker-7d9f8b6c5",
                          "uid": "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d", "controller": True,
                          "blockOwnerDeletion": True}])
    review = _review("Pod", "", "pods", obj, user="system:serviceaccount:kube-system:replicaset-controller",
                     uid="2b6f0cc9-f3e4-4ac1-9f55-1a2b3c4d5e6f", manager="kube-controller-manager")
    return Body("gpu-pod", "/validate/tenant/prod?timeout=3s", review, True)


def deployment() -> Body:
    """A Deployment applied with kubectl, time-sliced T4 (no tenant: the default rules)."""
    labels = {"app.kubernetes.io/name": "notebook-api", "app.kubernetes.io/part-of": "dev-tools"}
    template_spec = _pod_spec([_container("api", "registry.example/notebook-api:1.4.0",
                                          gpus={"nvidia.com/gpu": 1}, port=8000), _sidecar()],
                              node_selector={"node-pool": "t4-dev"})
    spec: Obj = {"replicas": 3, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                 "selector": {"matchLabels": labels},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
                 "template": {"metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true"}},
                              "spec": template_spec}}
    applied = {"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "notebook-api", "namespace": "dev-tools", "labels": labels}, "spec": spec}
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied, separators=(",", ":")),
                   "deployment.kubernetes.io/revision": "1"}
    obj: Obj = {"kind": "Deployment", "apiVersion": "apps/v1", "spec": spec, "status": {}}
    obj["metadata"] = _metadata(
        "notebook-api", "dev-tools", labels,
        [_managed("kubectl-client-side-apply", "Update",
                  {"metadata": {"annotations": annotations, "labels": labels}, "spec": spec})],
        generation=1, annotations=annotations)
    review = _review("Deployment", "apps", "deployments", obj, user="alice@example.com",
                     uid="9e3d7a41-0c2b-4f6e-8d1a-2b3c4d5e6f70", manager="kubectl-client-side-apply")
    return Body("deployment", "/validate?timeout=3s", review, True)


def cronjob() -> Body:
    """A nightly batch-inference CronJob on the MPS class (tenant research)."""
    labels = {"app.kubernetes.io/name": "nightly-embeddings", "team": "research"}
    pod = _pod_spec([_container("embed", "registry.example/embedder:0.9.2", gpus={"nvidia.com/gpu": 1})],
                    node_selector={"node-pool": "a100-mps"}, restart_policy="OnFailure")
    spec: Obj = {"schedule": "0 2 * * *", "concurrencyPolicy": "Forbid", "suspend": False,
                 "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                 "jobTemplate": {"metadata": {"labels": labels},
                                 "spec": {"backoffLimit": 2, "activeDeadlineSeconds": 14400,
                                          "template": {"metadata": {"labels": labels}, "spec": pod}}}}
    obj: Obj = {"kind": "CronJob", "apiVersion": "batch/v1", "spec": spec, "status": {}}
    obj["metadata"] = _metadata(
        "nightly-embeddings", "research-batch", labels,
        [_managed("argocd-controller", "Apply", {"metadata": {"labels": labels}, "spec": spec})],
        generation=1, annotations={"argocd.argoproj.io/tracking-id": "research:batch/CronJob:research-batch/"
                                                                     "nightly-embeddings"})
    review = _review("CronJob", "batch", "cronjobs", obj, user="system:serviceaccount:argocd:argocd-application-"
                                                              "controller",
                     uid="c4a1e2f3-5b6d-4e7f-9a0b-1c2d3e4f5a6b", manager="argocd-controller")
    return Body("cronjob", "/validate/tenant/research?timeout=3s", review, True)


def denied_pod() -> Body:
    """A bare Pod asking for two GPUs with no placement: a shared class could get it (tenant research)."""
    labels = {"app": "finetune", "owner": "bob"}
    spec = _pod_spec([_container("train", "registry.example/trainer:2.0.0", gpus={"nvidia.com/gpu": 2}),
                      _sidecar()], restart_policy="Never")
    obj: Obj = {"kind": "Pod", "apiVersion": "v1", "spec": spec, "status": {}}
    obj["metadata"] = _metadata("finetune", "research-ml", labels,
                                [_managed("kubectl-create", "Update", {"metadata": {"labels": labels},
                                                                      "spec": spec})])
    review = _review("Pod", "", "pods", obj, user="bob@example.com", uid="e7f8a9b0-c1d2-4e3f-8a4b-5c6d7e8f9a0b",
                     manager="kubectl-create")
    return Body("denied-pod", "/validate/tenant/research?timeout=3s", review, False)


def bodies(templates: int = 1) -> tuple[Body, ...]:
    """The four bodies; with ``templates`` above 1, each in that many variants as pods of as many templates would
    be: another image tag in the first container, another name and uid. No two share a remembered verdict, and the
    engine remembers 256 (admission/engine.py), so replaying 4 x 100 of them in turn judges every review afresh."""
    four = (gpu_pod(), deployment(), cronjob(), denied_pod())
    return four if templates <= 1 else tuple(_variant(body, n) for n in range(templates) for body in four)


def add_templates_option(parser: argparse.ArgumentParser) -> None:
    """--templates, for the benchmarks that send these bodies."""
    parser.add_argument("--templates", type=int, default=1,
                        help="bodies per kind of review: 100 makes every review judged afresh, as pods of as many "
                             "templates would be (default 1: replicas of four templates)")


def _variant(body: Body, n: int) -> Body:
    from policy.admission.workloads import find_workload

    review = copy.deepcopy(body.review)
    request = review["request"]
    request["uid"] = f"{request['uid'][:-6]}{n:06d}"
    obj = request["object"]
    obj["metadata"]["name"] = request["name"] = f"{obj['metadata']['name']}-{n}"
    workload = find_workload(obj)
    assert workload is not None
    container = workload.pod_spec["containers"][0]
    container["image"] = f"{container['image']}-build{n}"
    return Body(f"{body.name}-{n}", body.path, review, body.allowed)


if __name__ == "__main__":  # print the sizes: python bench/reviews.py
    for body in bodies():
        print(f"{body.name:12} {len(body.data):6} bytes  {body.path}")
