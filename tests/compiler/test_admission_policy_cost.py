"""The compiled policies within the API server's CEL cost limits on the largest pod the tests use (300 containers)."""

from __future__ import annotations

import functools
from typing import Any

import cel_cost
import cel_vap
import pytest
from test_admission_policy import compiled, namespace_object

from compiler.targets.admission_policy import COST_POD_CONTAINERS, PER_CALL_LIMIT, POLICY_BUDGET

Obj = dict[str, Any]
CLUSTERS = ("tke-l20-t4", "mixed-fleet", "h20-mig")


def largest_pod(resource: str) -> Obj:
    """300 containers, each asking for the resource: 50 sidecars and 50 plain init containers interleaved (the
    scheduler's sidecar arithmetic is the costliest path), 200 regular ones, plus placement to evaluate."""
    def container(name: str, **extra: Any) -> Obj:
        return {"name": name, "image": "app:1", **extra,
                "resources": {"limits": {resource: "1", "cpu": "100m"}, "requests": {resource: "1", "cpu": "100m"}}}
    init = [container(f"init-{i}", **({"restartPolicy": "Always"} if i % 2 else {})) for i in range(100)]
    spec = {"initContainers": init, "containers": [container(f"app-{i}") for i in range(200)],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}]}}}}
    assert len(spec["initContainers"]) + len(spec["containers"]) == COST_POD_CONTAINERS
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "big", "namespace": "apps"},
            "spec": {"template": {"spec": spec}}}


@functools.cache
def measured(cluster: str) -> dict[str, Any]:
    """Per policy: the cost of every variable, validation and message on the largest pod, UPDATE included."""
    _, objects = compiled(cluster)
    resource = "nvidia.com/mig-1g.12gb" if cluster == "h20-mig" else "nvidia.com/gpu"
    pod = largest_pod(resource)
    old = largest_pod(resource)
    old["spec"]["template"]["spec"]["containers"][0]["image"] = "app:0"
    report: dict[str, Any] = {}
    policy = next(o for o in objects if o["metadata"]["name"] == "gpupolicy-templates-deny.gpupolicy.dev"
                  and o["kind"] == "ValidatingAdmissionPolicy")
    namespace = namespace_object("apps", {})
    result = cel_vap.evaluate_policy(policy, object=pod, old_object=old, operation="UPDATE", namespace=namespace)
    assert result.matched and result.variables is not None
    base = {"object": cel_vap.to_unstructured(pod), "oldObject": cel_vap.to_unstructured(old),
            "request": {"operation": "UPDATE"}, "namespaceObject": cel_vap.to_unstructured(namespace),
            "params": None, "variables": {}}
    costs: dict[str, int] = {}
    for variable in policy["spec"]["variables"]:
        found = cel_cost.cost_of(variable["expression"], base)
        assert not found.error, (variable["name"], found.value)
        # The interpreter must compute what cel-cpp computed, or its counts mean nothing (cel-cpp stops at 10,000
        # comprehension iterations, a limit cel-go does not have, so the largest loops are checked here only).
        if variable["name"] in result.variables:
            assert found.value == result.variables[variable["name"]], variable["name"]
        base["variables"][variable["name"]] = found.value
        costs[variable["name"]] = found.cost
    validations = [cel_cost.cost_of(v["expression"], base) for v in policy["spec"]["validations"]]
    messages = [cel_cost.cost_of(v["messageExpression"], base) for v in policy["spec"]["validations"]]
    assert [v.value for v in validations] == [True] * len(validations)
    report["variables"] = costs
    report["validations"] = [v.cost for v in validations]
    report["messages"] = [m.cost for m in messages]
    # Variables are evaluated once per context; the message expressions run in a context of their own, so
    # counting every variable twice bounds what the policy can spend.
    report["total"] = 2 * sum(costs.values()) + sum(report["validations"]) + sum(report["messages"])
    report["largest"] = max([*costs.values(), *report["validations"], *report["messages"]])
    return report


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_expression_and_the_policy_stay_within_the_api_servers_limits(cluster: str) -> None:
    report = measured(cluster)
    assert report["largest"] <= PER_CALL_LIMIT, report
    assert report["total"] <= POLICY_BUDGET, report


def test_the_cost_interpreter_charges_like_cel_go() -> None:
    # cel-go runtime costs: an identifier 1, a field 1, a constant 0, a list literal 10, a map literal 30, a
    # comprehension the sum of its steps, `in` on a list its size, string equality 0.1 per character.
    assert cel_cost.cost_of("1 + 2", {}).cost == 1
    assert cel_cost.cost_of("object.a", {"object": {"a": 1}}).cost == 2
    assert cel_cost.cost_of("[1, 2]", {}).cost == 10
    assert cel_cost.cost_of("{'a': 1}", {}).cost == 30
    assert cel_cost.cost_of("'x' in object", {"object": ["a", "b", "x"]}).cost == 1 + 3
    assert cel_cost.cost_of("object == 'aaaaaaaaaaa'", {"object": "b" * 11}).cost == 1 + 2
    mapped = cel_cost.cost_of("object.map(x, x + 1)", {"object": [1, 2, 3]})
    assert mapped.value == [2, 3, 4] and mapped.cost > 3 * 10


def test_the_interpreter_agrees_with_cel_cpp_on_the_library_functions() -> None:
    for expression in ("[1, 3].sum() == 4", "[1, 3].max() == 3", "['a', 'b'].indexOf('b') == 1",
                       "quantity('1k').asInteger() == 1000", "['a', 'b'].join(', ') == 'a, b'",
                       "'a,b'.split(',') == ['a', 'b']", "'x'.matches('^x$')", "{'a': 1}.?a.orValue(0) == 1"):
        assert cel_cost.cost_of(expression, {}).value is True, expression
