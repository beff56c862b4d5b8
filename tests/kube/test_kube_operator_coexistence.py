"""deploy gpu-operator beside the operator's own installer, on the real API server: a ClusterPolicy created the way
Helm creates it (field manager `helm`, an Update) or the OpenShift console does (tests/fixtures/gpu-operator, which
cites the sources of each), then gpupolicy's objects server-side applied over it.  Ownership, conflicts and what a
forced apply takes over are the API server's own (its field manager), not a model of them.

The ClusterPolicy CRD is tests/kube/crds.py `cluster_policy`: the release's fields gpupolicy writes, typed as that
release's CRD types them, every object open beside them."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crds
import pytest
import yaml
from gpu_operator_fixtures import cluster_policy, helm_rendered
from kube_api import Answer, KubeAPI
from kube_cases import poll

from compiler import compile_policy
from compiler.targets import gpu_operator
from policy.hardware import operator

pytestmark = pytest.mark.kube_api

ROOT = Path(__file__).resolve().parents[2]
POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
OLM = ("installer: helm ", "installer: olm ")
NO_MONITORING = ("  monitoring:\n    enabled: true\n", "")
Obj = dict[str, Any]

# What gpupolicy emitted before: the partial object with its own labels, applied over Helm's (the root
# kustomization's labels added managed-by and cluster again).
BEFORE: Obj = {
    "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy", "labels": {
        "app.kubernetes.io/component": "gpu-operator", "app.kubernetes.io/managed-by": "gpupolicy",
        "app.kubernetes.io/part-of": "gpupolicy", "gpupolicy.dev/cluster": "h20-inference"}},
    "spec": {"devicePlugin": {"config": {"name": "gpupolicy-device-plugin-configs-5a6d07de77"}},
             "mig": {"strategy": "mixed"},
             "migManager": {"config": {"default": "all-disabled", "name": "gpupolicy-mig-parted-config-853ac4e886"}}},
}


@pytest.fixture(scope="module")
def api(kube_api: KubeAPI) -> Iterator[KubeAPI]:
    definition = crds.cluster_policy(operator.release("v25.3.0"))
    answer = kube_api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", definition)
    assert answer.status in (201, 409), answer.body
    poll(lambda: kube_api.request("GET", POLICIES).status == 200 or None, what="ClusterPolicy to be served")
    yield kube_api
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{definition['metadata']['name']}"
    assert kube_api.request("DELETE", path).status == 200


def installed(api: KubeAPI, name: str, manager: str) -> Obj:
    """The fixture's ClusterPolicy created anew by `manager` (helm install, the console's form)."""
    obj = cluster_policy(name)
    api.request("DELETE", f"{POLICIES}/{obj['metadata']['name']}")
    poll(lambda: api.request("GET", f"{POLICIES}/{obj['metadata']['name']}").status == 404 or None,
         what="the old ClusterPolicy to go")
    answer = api.request("POST", f"{POLICIES}?fieldManager={manager}", obj)
    assert answer.status == 201, answer.body
    created: Obj = answer.body
    return created


def server_side_apply(api: KubeAPI, obj: Obj, manager: str, *, force: bool = False) -> Answer:
    query = f"fieldManager={manager}&force={str(force).lower()}"
    return api.request("PATCH", f"{POLICIES}/{obj['metadata']['name']}?{query}", json.dumps(obj).encode(),
                       content_type="application/apply-patch+yaml")


def conflicts(answer: Answer) -> list[str]:
    """The fields an apply conflicts on, as the API server lists them (details.causes), without the leading dot;
    [] when the apply went through."""
    if answer.status == 200:
        return []
    assert answer.status == 409 and answer.body["reason"] == "Conflict", answer.body
    return sorted(c["field"].removeprefix(".") for c in answer.body["details"]["causes"])


def owners(answer_or_obj: Obj) -> set[str]:
    return {m["manager"] for m in answer_or_obj["metadata"]["managedFields"]}


def test_before_plain_server_side_apply_conflicts_with_helm_on_three_fields(api: KubeAPI) -> None:
    installed(api, "helm-v25.3.0.yaml", "helm")
    answer = server_side_apply(api, copy.deepcopy(BEFORE), "kubectl")
    assert conflicts(answer) == ["metadata.labels.app.kubernetes.io/managed-by", "spec.mig.strategy",
                                 "spec.migManager.config.name"]
    assert 'conflicts with "helm"' in answer.message
    # Forced (Argo CD, Flux), the labels Helm owns are taken over: the Helm release no longer says it manages it.
    forced = server_side_apply(api, copy.deepcopy(BEFORE), "argocd-controller", force=True)
    assert forced.status == 200, forced.body
    assert forced.body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpupolicy"


def test_after_the_helm_release_renders_gpupolicy_values_and_nothing_else_writes_the_object(
        api: KubeAPI, example_policy: Any) -> None:
    tree = compile_policy(example_policy("h20-mig"))
    assert not [p for p in tree if p.endswith(".yaml") and b"kind: ClusterPolicy" in tree[p]]
    values = yaml.safe_load(tree[gpu_operator.VALUES_FILE])
    live = installed(api, "helm-v25.3.0.yaml", "helm")
    # helm upgrade ... -f gpu-operator-values.yaml: Helm 3 writes the rendered object as an update of its own
    upgraded = {**helm_rendered(values), "metadata": {**helm_rendered(values)["metadata"],
                                                     "resourceVersion": live["metadata"]["resourceVersion"]}}
    answer = api.request("PUT", f"{POLICIES}/cluster-policy?fieldManager=helm", upgraded)
    assert answer.status == 200, answer.body
    live = answer.body
    assert live["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert live["spec"]["mig"] == {"strategy": "mixed"} and owners(live) == {"helm"}
    configmaps = {yaml.safe_load(tree[p])["metadata"]["name"] for p in ("device-plugin/configmap.yaml",
                                                                        "mig/configmap.yaml")}
    assert {live["spec"]["devicePlugin"]["config"]["name"], live["spec"]["migManager"]["config"]["name"]} \
        == configmaps
    # Even a patch of the same fields on top (the OLM form) now conflicts with nothing: every value agrees.
    patch = yaml.safe_load(compile_policy(example_policy("h20-mig", OLM))["gpu-operator/clusterpolicy.yaml"])
    patch["metadata"]["name"] = "cluster-policy"
    answer = server_side_apply(api, patch, "gpupolicy")
    assert conflicts(answer) == []
    for field in ("devicePlugin", "mig", "migManager"):  # the values Helm rendered stand; the fields are shared
        assert answer.body["spec"][field] == live["spec"][field], field


def _leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, obj


def test_olm_the_reports_apply_advice_works_as_written(api: KubeAPI, example_policy: Any) -> None:
    tree = compile_policy(example_policy("h20-mig", OLM, NO_MONITORING))
    advice = re.search(r"`(kubectl apply [^`]+)`", tree["REPORT.md"].decode())
    assert advice is not None
    words = advice.group(1).split()
    assert {"--server-side", "--force-conflicts", "--field-manager=gpupolicy"} <= set(words)
    patch = yaml.safe_load(tree["gpu-operator/clusterpolicy.yaml"])
    before = installed(api, "olm-console.yaml", "console")
    changes = ["spec.devicePlugin.config.default", "spec.devicePlugin.config.name", "spec.mig.strategy",
               "spec.migManager.config.name"]
    assert conflicts(server_side_apply(api, copy.deepcopy(patch), "gpupolicy")) == changes
    forced = server_side_apply(api, copy.deepcopy(patch), "gpupolicy", force="--force-conflicts" in words)
    assert forced.status == 200, forced.body
    old, new = dict(_leaves(before["spec"], "spec")), dict(_leaves(forced.body["spec"], "spec"))
    assert sorted(p for p in new if new[p] != old.get(p)) == changes
    assert "labels" not in forced.body["metadata"]
    assert conflicts(server_side_apply(api, copy.deepcopy(patch), "gpupolicy")) == []  # the next sync
