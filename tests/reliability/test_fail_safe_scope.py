"""Fail-safe scope, the cases test_admission_manifests.py leaves out: a webhook outage never blocks the cluster."""

# tests/compiler/test_admission_manifests.py evaluates the compiled ValidatingWebhookConfiguration (rules,
# namespaceSelector, and matchConditions in a real CEL engine) for GPU and CPU workloads in team, tenant,
# kube-system and webhook namespaces. Here: what broke clusters in webhook.md §4.3-4.4. A CNI whose
# controller cannot restart while the webhook it serves is down (HAMi #83), GPU infrastructure that asks
# for no GPU itself, the webhook redeploying itself, and objects no rule should ever reach. With
# failurePolicy Fail, "blocked" means "some entry would be called".

from __future__ import annotations

import copy
from typing import Any

import pytest
from harness import manifests

Obj = dict[str, Any]


def daemonset(name: str, namespace: str, *, image: str, gpus: int = 0, host: bool = True) -> Obj:
    limits = {"cpu": "250m", "memory": "256Mi", **({"nvidia.com/gpu": gpus} if gpus else {})}
    spec: Obj = {
        "containers": [{"name": name, "image": image, "resources": {"limits": limits},
                        "securityContext": {"privileged": host}}],
        "tolerations": [{"operator": "Exists"}], "priorityClassName": "system-node-critical",
    }
    if host:
        spec["hostNetwork"] = True
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"k8s-app": name}},
                     "template": {"metadata": {"labels": {"k8s-app": name}}, "spec": spec}}}


def deployment(name: str, namespace: str, *, image: str) -> Obj:
    obj = daemonset(name, namespace, image=image, host=False)
    obj["kind"] = "Deployment"
    obj["spec"]["replicas"] = 1
    return obj


def updated(obj: Obj, image: str) -> Obj:
    new = copy.deepcopy(obj)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return new


CALICO = daemonset("calico-node", "kube-system", image="docker.io/calico/node:v3.27.0")
CALICO_OPERATOR = daemonset("calico-node", "calico-system", image="docker.io/calico/node:v3.27.0")
CILIUM = daemonset("cilium", "cilium", image="quay.io/cilium/cilium:v1.15.0")
KUBE_CONTROLLERS = deployment("calico-kube-controllers", "kube-system", image="docker.io/calico/kube-controllers")
DEVICE_PLUGIN = daemonset("nvidia-device-plugin-daemonset", "gpu-operator",
                          image="nvcr.io/nvidia/k8s-device-plugin:v0.15.0")
DCGM = daemonset("nvidia-dcgm-exporter", "gpu-operator", image="nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5")
MIG_MANAGER = daemonset("nvidia-mig-manager", "gpu-operator", image="nvcr.io/nvidia/cloud-native/k8s-mig-manager")
labels = manifests.namespace_labels

NEVER_BLOCKED: dict[str, tuple[dict[str, str], str, Obj | None, Obj | None]] = {
    # case: (namespace labels, operation, object, oldObject)
    "calico-node created in kube-system": (labels("kube-system"), "CREATE", CALICO, None),
    "calico-node rolled to a new image in kube-system": (
        labels("kube-system"), "UPDATE", updated(CALICO, "docker.io/calico/node:v3.27.1"), CALICO),
    "calico-node created by the operator in calico-system": (labels("calico-system"), "CREATE", CALICO_OPERATOR, None),
    "calico-node updated in calico-system": (
        labels("calico-system"), "UPDATE", updated(CALICO_OPERATOR, "docker.io/calico/node:v3.27.1"), CALICO_OPERATOR),
    "cilium created in its own namespace": (labels("cilium"), "CREATE", CILIUM, None),
    "calico-kube-controllers recreated in kube-system (HAMi #83)": (
        labels("kube-system"), "CREATE", KUBE_CONTROLLERS, None),
    "the device plugin, which requests no GPU, in gpu-operator": (
        labels("gpu-operator"), "CREATE", DEVICE_PLUGIN, None),
    "the DCGM exporter updated in gpu-operator": (
        labels("gpu-operator"), "UPDATE", updated(DCGM, "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.6"), DCGM),
    "the MIG manager in gpu-operator": (labels("gpu-operator"), "CREATE", MIG_MANAGER, None),
    "a GPU pod in the webhook's own namespace": (
        labels("gpupolicy-system"), "CREATE",
        manifests.workload("Pod", gpus=1, namespace="gpupolicy-system"), None),
    "a GPU DaemonSet updated in kube-system": (
        labels("kube-system"), "UPDATE",
        manifests.workload("DaemonSet", gpus=2, namespace="kube-system"),
        manifests.workload("DaemonSet", gpus=1, namespace="kube-system")),
    "a GPU Job in kube-system": (labels("kube-system"), "CREATE",
                                manifests.workload("Job", gpus=1, namespace="kube-system"), None),
}


@pytest.mark.parametrize("case", NEVER_BLOCKED)
def test_with_the_webhook_down_system_and_infrastructure_workloads_are_never_blocked(case: str) -> None:
    namespace, operation, obj, old = NEVER_BLOCKED[case]
    vwc = manifests.webhook_configuration(manifests.policy_with())
    assert {entry["failurePolicy"] for entry in vwc["webhooks"]} == {"Fail"}
    assert manifests.called(vwc, namespace, operation, obj, old) == set()


def test_a_cni_daemonset_that_asks_for_a_gpu_outside_system_namespaces_is_the_one_thing_still_blocked() -> None:
    # The control for the cases above: the same DaemonSet is sent once it requests a GPU in a team namespace.
    vwc = manifests.webhook_configuration(manifests.policy_with())
    gpu_agent = daemonset("gpu-agent", "team-a", image="registry.example/agent:1", gpus=1)
    assert manifests.called(vwc, labels("team-a"), "CREATE", gpu_agent) == {"default.gpupolicy.dev"}


@pytest.mark.parametrize("namespace", ["gpupolicy-system", "gpu-admission"])
def test_the_webhook_can_always_redeploy_itself_while_it_is_down(namespace: str) -> None:
    policy = manifests.policy_with(namespace=namespace)
    objects = manifests.rendered(policy)
    vwc, own = objects["ValidatingWebhookConfiguration"], objects["Deployment"]
    changed = updated(own, own["spec"]["template"]["spec"]["containers"][0]["image"] + "-next")
    assert own["metadata"]["namespace"] == namespace
    assert manifests.called(vwc, labels(namespace), "CREATE", own) == set()
    assert manifests.called(vwc, labels(namespace), "UPDATE", changed, own) == set()
    # Its own pods carry no GPU request, so even a namespace mistakenly left out of the exclusions is safe.
    assert manifests.called(vwc, labels("somewhere-else"), "CREATE", own) == set()


def test_no_rule_reaches_namespaces_nodes_leases_webhook_configurations_or_any_subresource() -> None:
    vwc = manifests.webhook_configuration(manifests.policy_with())
    pairs = {(group, resource) for entry in vwc["webhooks"] for rule in entry["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"]}
    resources = {resource for _, resource in pairs}
    # Knative's serving.knative.dev "services" is a workload kind of the table; the core group's must never be.
    core = {"namespaces", "nodes", "events", "configmaps", "secrets", "services", "endpoints"}
    assert not {(g, r) for g, r in pairs if g == "" and r in core}
    assert resources.isdisjoint({"leases", "validatingwebhookconfigurations", "*"})
    assert "*" not in {group for group, _ in pairs}
    assert not [resource for resource in resources if "/" in resource]  # pods/status, deployments/scale, ...
    operations = {op for entry in vwc["webhooks"] for rule in entry["rules"] for op in rule["operations"]}
    assert operations <= {"CREATE", "UPDATE"}  # never DELETE: PodGC and cleanup always work (Kyverno #4686)
