"""The ValidatingAdmissionPolicy that holds the node-label reconciler to its plan: its CEL evaluated the way the API
server does (tests/cel_k8s.py), against what the reconciler really sends and against what it must never do."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cel_k8s import evaluate

from cluster import reconciler
from compiler import compile_policy
from compiler.targets import node_labels
from policy.resolved.node_labels import build_plan
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
Obj = dict[str, Any]
MIG = "nvidia.com/mig.config"
MPS = "nvidia.com/mps.capable"
RECONCILER = {"username": "system:serviceaccount:gpupolicy-system:gpupolicy-node-labels"}
# mixed-fleet without GPU Feature Discovery: the reconciler owns nvidia.com/mps.capable too, so the plan has two keys.
NO_GFD = ("gpuFeatureDiscovery: true", "gpuFeatureDiscovery: false")


def admission_policy(policy: ClusterGPUPolicy) -> Obj:
    document: Obj = yaml.safe_load(compile_policy(policy)["node-labels/validatingadmissionpolicy.yaml"])
    return document


def node(labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    meta: Obj = {"name": "gpu-1", "annotations": {"node.alpha.kubernetes.io/ttl": "0"}}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"podCIDR": "10.0.1.0/24", **spec}}


def denied(policy: Obj, old: Obj, new: Obj, user: dict[str, str] = RECONCILER) -> list[str]:
    """The messages of the validations the update fails, or ["not matched"] if the policy does not apply."""
    request = {"operation": "UPDATE", "userInfo": user}
    conditions = policy["spec"]["matchConditions"]
    if not all(evaluate(c["expression"], object=new, old_object=old, request=request) for c in conditions):
        return ["not matched"]
    return [v["message"] for v in policy["spec"]["validations"]
            if not evaluate(v["expression"], object=new, old_object=old, request=request)]


def relabelled(old: Obj, **changes: str | None) -> Obj:
    new = copy.deepcopy(old)
    labels = new["metadata"].setdefault("labels", {})
    for key, value in changes.items():
        key = {"mig": MIG, "mps": MPS}.get(key, key)
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return new


POOL = {"kubernetes.io/hostname": "gpu-1", "node-pool": "h100-mig"}


def test_the_reconciler_may_set_remove_and_keep_the_labels_it_owns(example_policy: Load) -> None:
    policy = admission_policy(example_policy("mixed-fleet"))
    old = node(dict(POOL))
    assert denied(policy, old, relabelled(old, mig="h100-mig")) == []
    assert denied(policy, relabelled(old, mig="h100-mig"), old) == []  # the node left its class
    assert denied(policy, relabelled(old, mig="h100-mig"), relabelled(old, mig="all-disabled")) == []
    assert denied(policy, node(None), node({MIG: "all-disabled"})) == []  # a node with no labels at all


def test_what_the_reconciler_sends_for_every_class_passes_the_policy(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet", NO_GFD)
    plan = build_plan(resolve(policy))
    vap = admission_policy(policy)
    for entry in plan.classes:
        old = node({"kubernetes.io/hostname": "gpu-1", **entry.node_selector, MPS: "false"})
        action = reconciler.plan_node(plan, {"metadata": old["metadata"]})
        assert action.apply is not None, entry.name
        new = copy.deepcopy(old)
        new["metadata"]["labels"].update(action.apply)
        assert denied(vap, old, new) == [], entry.name


@pytest.mark.parametrize(("change", "message"), [
    ({"node-pool": "a100-mps"}, "may add, change or remove only the labels it owns"),
    ({"team": "ml"}, "may add, change or remove only the labels it owns"),
    ({"node-pool": None}, "may add, change or remove only the labels it owns"),
    ({"mig": "all-7g.80gb"}, "only to values its label plan gives them"),
    ({"mig": "h100-train"}, "only to values its label plan gives them"),
], ids=["retarget-pool", "add-foreign", "remove-foreign", "value-outside-plan", "class-without-mig"])
def test_the_reconciler_may_not_touch_other_labels_or_set_values_outside_its_plan(
        example_policy: Load, change: dict[str, str | None], message: str) -> None:
    policy = admission_policy(example_policy("mixed-fleet"))
    old = node(dict(POOL))
    (found,) = denied(policy, old, relabelled(old, **change))
    assert message in found


def test_a_value_another_writer_set_on_an_owned_key_may_stay_while_the_reconciler_applies_the_other(
        example_policy: Load) -> None:
    policy = admission_policy(example_policy("mixed-fleet", NO_GFD))
    old = node({**POOL, MIG: "all-1g.10gb"})  # a person's value, which the reconciler leaves alone
    assert denied(policy, old, relabelled(old, mps="true")) == []


@pytest.mark.parametrize("edit", ["taint", "cordon", "annotation", "finalizer"])
def test_the_reconciler_may_change_nothing_of_a_node_but_labels(example_policy: Load, edit: str) -> None:
    policy = admission_policy(example_policy("mixed-fleet"))
    old = node(dict(POOL))
    new = relabelled(old, mig="h100-mig")
    if edit == "taint":
        new["spec"]["taints"] = [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]
    elif edit == "cordon":
        new["spec"]["unschedulable"] = True
    elif edit == "annotation":
        new["metadata"]["annotations"]["gpupolicy.dev/x"] = "1"
    else:
        new["metadata"]["finalizers"] = ["example.com/hold"]
    (found,) = denied(policy, old, new)
    assert "may change only labels" in found


def test_only_the_reconcilers_own_requests_are_judged(example_policy: Load) -> None:
    policy = admission_policy(example_policy("mixed-fleet"))
    old = node(dict(POOL))
    for user in ({"username": "kubernetes-admin"}, {"username": "system:node:gpu-1"},
                 {"username": "system:serviceaccount:kube-system:gpupolicy-node-labels"}):
        assert denied(policy, old, relabelled(old, team="ml"), user) == ["not matched"]


def test_the_policy_is_bound_denying_and_in_place_before_the_reconciler_starts(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet")
    tree = compile_policy(policy)
    vap = yaml.safe_load(tree["node-labels/validatingadmissionpolicy.yaml"])
    binding = yaml.safe_load(tree["node-labels/validatingadmissionpolicybinding.yaml"])
    deployment = yaml.safe_load(tree["node-labels/deployment.yaml"])
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert vap["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}]
    wave = "argocd.argoproj.io/sync-wave"
    assert int(vap["metadata"]["annotations"][wave]) < int(deployment["metadata"]["annotations"][wave])
    assert int(binding["metadata"]["annotations"][wave]) < int(deployment["metadata"]["annotations"][wave])
    for obj in (vap, binding):
        kubernetes_validate.validate(obj, policy.spec.kubernetes_version, strict=True)


def test_below_kubernetes_1_30_there_is_no_policy_and_the_report_says_what_rbac_allows(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet", ('kubernetesVersion: "1.31"', 'kubernetesVersion: "1.29"'))
    tree = compile_policy(policy)
    assert not [path for path in tree if "validatingadmissionpolicy" in path]
    assert "node-labels/deployment.yaml" in tree
    report = tree["REPORT.md"].decode()
    assert "patch any label of any node" in report and "1.30" in report


def test_the_service_account_named_in_the_condition_is_the_reconcilers(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet")
    tree = compile_policy(policy)
    account = yaml.safe_load(tree["node-labels/serviceaccount.yaml"])["metadata"]
    assert node_labels.service_account_user(account["namespace"]) == RECONCILER["username"]
    assert account["name"] == node_labels.NAME
