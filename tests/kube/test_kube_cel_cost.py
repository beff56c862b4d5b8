"""compiler/cel_estimate.py against the real API server's cost limit, at the limit itself.

The API server estimates no cost for a ValidatingAdmissionPolicy when it is created (`object` is dyn); it charges
each evaluation as it runs and cancels one past 1,000,000 units per expression (PerCallLimit).  So the check is
two-sided at the boundary: for an expression the estimator costs over a pod's declared bounds, the largest pod the
estimate keeps within the limit (containers whose names are exactly the bound's length) is evaluated to a
verdict, and the same pod with one container more is cancelled by the API server for its cost.  An estimate that
undercounts lets the first fail; one that overcounts by a single container's cost lets the second pass.

Each expression walks every pair of containers with a predicate that never ends the walk early, so what runs is
the worst case the estimate describes (an `all` whose predicate holds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_api import KubeAPI
from kube_cases import ensure_namespace, poll

from compiler.cel_estimate import estimate, list_of, record, text
from compiler.targets.admission_policy_cost import PER_CALL_LIMIT

pytestmark = pytest.mark.kube_api

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
NAMESPACE = "gpupolicy-cel-cost"
NAME_LENGTH = 20
EXPRESSIONS = {
    "size": "object.spec.containers.all(c, object.spec.containers.all(d, d.name.size() > 0))",
    "concatenation": "object.spec.containers.all(c, object.spec.containers.all(d, d.name != c.name + 'x'))",
    "regex": "object.spec.containers.all(c, object.spec.containers.all(d, d.name.matches('^[a-z0-9-]+$')))",
}
CANCELLED = "resulted in error: operation cancelled: actual cost limit exceeded"


def cost(expression: str, containers: int) -> int:
    scope = {"object": record(spec=record(containers=list_of(record(name=text(NAME_LENGTH)), containers)))}
    return estimate(expression, scope).cost


def most_containers_within_the_limit(expression: str) -> int:
    low, high = 1, 2
    while cost(expression, high) <= PER_CALL_LIMIT:
        low, high = high, high * 2
    while low + 1 < high:
        middle = (low + high) // 2
        low, high = (middle, high) if cost(expression, middle) <= PER_CALL_LIMIT else (low, middle)
    return low


def pod(containers: int) -> dict[str, Any]:
    names = [f"c{i}-".ljust(NAME_LENGTH, "a") for i in range(containers)]
    assert all(len(n) == NAME_LENGTH for n in names)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "costly", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": n, "image": "registry.example/app:1"} for n in names]}}


def send(api: KubeAPI, containers: int) -> Any:
    return api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All", pod(containers))


@pytest.fixture(params=sorted(EXPRESSIONS))
def policy(request: pytest.FixtureRequest, kube_api: KubeAPI) -> Iterator[tuple[KubeAPI, str]]:
    """A policy holding the one expression, bound to this test's namespace only (other tests' pods never meet it)."""
    ensure_namespace(kube_api, NAMESPACE, {})
    name = f"gpupolicy-test-cost-{request.param}"
    expression = EXPRESSIONS[request.param]
    created = [
        kube_api.request("POST", f"{ADMISSION}/validatingadmissionpolicies", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"failurePolicy": "Fail", "validations": [{"expression": expression, "message": "judged"}],
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}]}}}),
        kube_api.request("POST", f"{ADMISSION}/validatingadmissionpolicybindings", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}}}),
    ]
    assert [a.status for a in created] == [201, 201], [a.body for a in created]
    # in effect once a pod far past the limit is cancelled (the binding reaches admission through informers)
    over = 2 * most_containers_within_the_limit(expression)
    poll(lambda: CANCELLED in send(kube_api, over).message or None, what=f"policy {name} to take effect")
    yield kube_api, expression
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        path = f"{ADMISSION}/{kind}/{name}"
        assert kube_api.request("DELETE", path).status == 200
    # gone from admission only once the informers see the deletion: the next case's pods must not meet it
    poll(lambda: name not in send(kube_api, over).message or None, what=f"policy {name} to be gone")


def test_the_largest_pod_the_estimate_allows_runs_and_one_container_more_is_cancelled(
        policy: tuple[KubeAPI, str]) -> None:
    api, expression = policy
    most = most_containers_within_the_limit(expression)
    assert cost(expression, most) <= PER_CALL_LIMIT < cost(expression, most + 1)
    within = send(api, most)
    assert within.status == 201, within.message  # evaluated to a verdict (the predicate holds): admitted
    beyond = send(api, most + 1)
    assert beyond.status == 422 and CANCELLED in beyond.message, beyond.message


def test_creating_a_policy_bounds_no_cost(kube_api: KubeAPI) -> None:
    # Why the compiler estimates at all: a five-deep walk over the containers, which no pod of any size could
    # afford, is accepted when created (`object` is dyn, so nothing bounds the lists it holds).
    walk = "object.spec.containers.all(a, " * 5 + "a.name != ''" + ")" * 5
    assert cost(walk, 20) > PER_CALL_LIMIT  # twenty containers would already exceed the limit
    name = "gpupolicy-test-cost-unbounded"
    answer = kube_api.request("POST", f"{ADMISSION}/validatingadmissionpolicies", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"validations": [{"expression": walk}], "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}}})
    assert answer.status == 201, answer.message
    assert kube_api.request("DELETE", f"{ADMISSION}/validatingadmissionpolicies/{name}").status == 200
