"""The compiled policies within the API server's CEL cost limits: the compiler's static estimate, over the envelope
of pods it declares, stays within them and bounds what the API server charges the largest pod the tests use (300
containers), counted by running every expression over it (tests/cel_cost.py)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import cel_cost
import cel_vap
import pytest
from test_admission_policy import TRAINING, compiled, namespace_object

from compiler.targets.admission_policy import PATHS, PodSpecPath
from compiler.targets.admission_policy_cost import (
    ENVELOPE,
    PER_CALL_LIMIT,
    POLICY_BUDGET,
    PolicyCost,
    estimate_policy,
)
from policy.admission.workloads import find_workload

Obj = dict[str, Any]
CLUSTERS = ("tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform")
RESOURCE = {"h20-mig": "nvidia.com/mig-1g.12gb"}


def largest_pod(resource: str, path: PodSpecPath) -> Obj:
    """300 containers, each asking for the resource: 100 init containers (50 sidecars, then 50 plain ones, the
    costliest order CEL decides) and 200 regular ones, with names as long as the API allows, and placement to
    evaluate: a nodeSelector, a required node-affinity term and tolerations."""
    def container(name: str, **extra: Any) -> Obj:
        amounts = {resource: "1", "cpu": "100m"}
        return {"name": f"{name}-".ljust(63, "x"), "image": "app:1", **extra,
                "resources": {"limits": dict(amounts), "requests": dict(amounts)}}
    init = [container(f"init-{i}", **({"restartPolicy": "Always"} if i < 50 else {})) for i in range(100)]
    spec = {"initContainers": init, "containers": [container(f"app-{i}") for i in range(200)],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [TRAINING, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}]}}}}
    assert len(spec["initContainers"]) + len(spec["containers"]) == 300
    assert len(spec["initContainers"]) <= ENVELOPE.init_containers and len(spec["containers"]) <= ENVELOPE.containers
    obj: Obj = {"metadata": {"name": "big", "namespace": "apps"}}
    for part in reversed(path.path[1:]):
        spec = {part: spec}
    return {"apiVersion": "apps/v1" if path.name == "templates" else "batch/v1" if path.name == "cronjobs" else "v1",
            "kind": {"pods": "Pod", "templates": "Deployment", "cronjobs": "CronJob"}[path.name], **obj,
            path.path[0]: spec}


def policy_of(cluster: str, path: PodSpecPath) -> Obj:
    _, objects = compiled(cluster)
    return next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"] == f"gpupolicy-{path.name}-deny.gpupolicy.dev")


@functools.cache
def measured(cluster: str, path: PodSpecPath, operation: str) -> PolicyCost:
    """What the API server charges one evaluation of the policy on the largest pod (an UPDATE from a copy whose
    first container runs another image: every variable, the ratchet's included, runs to its end)."""
    policy = policy_of(cluster, path)
    pod = largest_pod(RESOURCE.get(cluster, "nvidia.com/gpu"), path)
    old = None
    if operation == "UPDATE":
        old = largest_pod(RESOURCE.get(cluster, "nvidia.com/gpu"), path)
        find_workload(old).pod_spec["containers"][0]["image"] = "app:0"  # type: ignore[union-attr]
    namespace = namespace_object("apps", {})
    result = cel_vap.evaluate_policy(policy, object=pod, old_object=old, operation=operation, namespace=namespace)
    assert result.matched and result.variables is not None
    assert result.variables["undecided"] is False
    base = cel_vap.activation(object=pod, old_object=old, operation=operation, namespace=namespace)
    costs: dict[str, int] = {}
    for variable in policy["spec"]["variables"]:
        found = cel_cost.cost_of(variable["expression"], base)
        assert not found.error, (variable["name"], found.value)
        # The interpreter must compute what cel-cpp computed, or its counts mean nothing.
        assert found.value == result.variables[variable["name"]], variable["name"]
        base["variables"][variable["name"]] = found.value
        costs[variable["name"]] = found.cost

    def each(expressions: list[str]) -> tuple[int, ...]:
        return tuple(cel_cost.cost_of(e, base).cost for e in expressions)

    validations = policy["spec"]["validations"]
    return PolicyCost(costs, each([v["expression"] for v in validations]),
                      each([v["messageExpression"] for v in validations]),
                      each([c["expression"] for c in policy["spec"]["matchConditions"]]))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_estimate_stays_within_the_limits_and_bounds_what_the_largest_pod_costs(cluster: str,
                                                                                    path: PodSpecPath) -> None:
    estimate = estimate_policy(policy_of(cluster, path), path.path)
    assert estimate.largest[1] <= PER_CALL_LIMIT, estimate.largest
    assert estimate.total <= POLICY_BUDGET, estimate.total
    for operation in ("CREATE", "UPDATE"):
        if path.name == "pods" and operation == "UPDATE":
            continue  # Pods are matched on CREATE only
        run = measured(cluster, path, operation)
        for name, cost in run.variables.items():
            assert cost <= estimate.variables[name], (operation, name, cost, estimate.variables[name])
        for kind in ("validations", "messages", "match_conditions"):
            for found, bound in zip(getattr(run, kind), getattr(estimate, kind), strict=True):
                assert found <= bound, (operation, kind, found, bound)
        assert run.total <= estimate.total


def test_the_largest_pod_is_decided_and_denied_for_what_it_asks_of_one_node() -> None:
    # 250 GPUs on one node: every rule's CEL runs to its end, the messages included.
    path = next(p for p in PATHS if p.name == "templates")
    pod = largest_pod("nvidia.com/gpu", path)
    result = cel_vap.evaluate_policy(policy_of("tke-l20-t4", path), object=pod, namespace=namespace_object("apps", {}))
    assert result.variables is not None and result.variables["totals"][result.variables["known"].index(
        "nvidia.com/gpu")] == 250
    assert any(d.message.startswith("[gpu-request-unsatisfiable]") for d in result.decisions)


def test_the_cost_interpreter_charges_like_cel_go() -> None:
    # cel-go runtime costs: an identifier 1, a field 1, a constant 0, a list literal 10, a map literal 30, a
    # comprehension the sum of its steps, `in` on a list its size, string equality 0.1 per character.
    assert cel_cost.cost_of("1 + 2", {}).cost == 1
    assert cel_cost.cost_of("object.a", {"object": {"a": 1}}).cost == 2
    assert cel_cost.cost_of("[1, 2]", {}).cost == 10
    assert cel_cost.cost_of("{'a': 1}", {}).cost == 30
    assert cel_cost.cost_of("'x' in object", {"object": ["a", "b", "x"]}).cost == 1 + 3
    assert cel_cost.cost_of("object == 'aaaaaaaaaaa'", {"object": "b" * 11}).cost == 1 + 2
    # all(): per element @not_strictly_false(r) (2), r && p (1 + p); the result reads r (1)
    assert cel_cost.cost_of("object.all(x, x > 0)", {"object": [1, 2, 3]}).cost == 1 + 1 + 3 * (2 + 1 + 2)
    mapped = cel_cost.cost_of("object.map(x, x + 1)", {"object": [1, 2, 3]})
    assert mapped.value == [2, 3, 4] and mapped.cost == 1 + 10 + 1 + 3 * (1 + 10 + 2 + 1)
    # Kubernetes' list functions: 1 without strict cost enforcement, their traversal with it; the larger.
    assert cel_cost.cost_of("object.sum()", {"object": list(range(40))}).cost == 1 + 40
    assert cel_cost.cost_of("object.indexOf('b')", {"object": ["short", "names"]}).cost == 1 + 1
    assert cel_cost.cost_of("object.indexOf('b')", {"object": ["a" * 63] * 10}).cost == 1 + 10 * 6


def test_the_interpreter_agrees_with_cel_cpp_on_the_library_functions() -> None:
    for expression in ("[1, 3].sum() == 4", "[1, 3].max() == 3", "['a', 'b'].indexOf('b') == 1",
                       "quantity('1k').asInteger() == 1000", "['a', 'b'].join(', ') == 'a, b'",
                       "'a,b'.split(',') == ['a', 'b']", "'x'.matches('^x$')", "{'a': 1}.?a.orValue(0) == 1",
                       "isQuantity('1Gi') && !isQuantity('1,5') && quantity('1500m').isInteger() == false"):
        assert cel_cost.cost_of(expression, {}).value is True, expression
        assert cel_vap.compile_in(expression, 30).eval(data={}).value() is True, expression


def test_the_documentation_gives_the_figures_of_the_compiled_examples() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "validating-admission-policy.md"
    text = " ".join(doc.read_text().split())
    for cluster in CLUSTERS:
        estimates = [estimate_policy(policy_of(cluster, path), path.path) for path in PATHS]
        name, largest = max((e.largest for e in estimates), key=lambda row: row[1])
        total = max(e.total for e in estimates)
        assert f"| {cluster} | {largest:,} (`{name}`) | {total:,} |" in text, cluster
    runs = [measured(cluster, path, operation) for cluster in CLUSTERS for path in PATHS
            for operation in ("CREATE", "UPDATE") if not (path.name == "pods" and operation == "UPDATE")]
    costliest = max(max([*r.variables.values(), *r.validations, *r.messages, *r.match_conditions]) for r in runs)
    assert f"the costliest expression is {costliest:,} and the costliest evaluation " \
           f"{max(r.total for r in runs):,}" in text
