"""The Kubernetes-flavoured CEL evaluator and the webhook's GPU matchCondition."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import cel_k8s
import pytest
from cel_k8s import GPU_MATCH_CONDITIONS, CelError, canonical_quantity, evaluate
from hypothesis import given, settings
from hypothesis import strategies as st

# ---------------------------------------------------------------- object builders


def container(
    name: str = "main",
    *,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    resources: bool = True,
) -> dict[str, Any]:
    """A container with `resources: {}` plus the maps given; resources=False leaves the key out."""
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if resources:
        out["resources"] = {}
        if limits is not None:
            out["resources"]["limits"] = limits
        if requests is not None:
            out["resources"]["requests"] = requests
    return out


def pod_spec(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return spec


def template(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "x"}}, "spec": spec}


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def workload(api_version: str, kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def build(spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"},
                "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template(spec)}}
    return build


def cronjob(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template(spec)}}}}


KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "Pod": pod,
    "Deployment": workload("apps/v1", "Deployment"),
    "ReplicaSet": workload("apps/v1", "ReplicaSet"),
    "StatefulSet": workload("apps/v1", "StatefulSet"),
    "DaemonSet": workload("apps/v1", "DaemonSet"),
    "Job": workload("batch/v1", "Job"),
    "ReplicationController": workload("v1", "ReplicationController"),
    "CronJob": cronjob,
}

GPU_CONDITION = GPU_MATCH_CONDITIONS[0][1]


def matches(obj: dict[str, Any] | None, old: dict[str, Any] | None = None) -> bool:
    """Every shipped condition must hold for the apiserver to call the webhook."""
    operation = "CREATE" if old is None else "UPDATE"
    return all(evaluate(expression, object=obj, old_object=old, request={"operation": operation})
               for _, expression in GPU_MATCH_CONDITIONS)


# ---------------------------------------------------------------- the evaluator


def test_has_is_true_for_a_present_field_and_false_for_an_absent_one() -> None:
    obj = {"spec": {"containers": []}}
    assert evaluate("has(object.spec.containers)", object=obj)
    assert not evaluate("has(object.spec.initContainers)", object=obj)


def test_has_on_a_missing_intermediate_field_is_an_error_not_false() -> None:
    with pytest.raises(CelError, match="evaluation error"):
        evaluate("has(object.spec.template.spec)", object={"spec": {}})


def test_selecting_a_missing_field_is_an_error() -> None:
    with pytest.raises(CelError, match=r"not found|no such key"):
        evaluate("object.spec.nodeName == 'n1'", object={"spec": {}})


def test_has_cannot_take_a_map_index_so_it_fails_to_compile() -> None:
    with pytest.raises(CelError, match="compile error"):
        evaluate("has(object.limits['nvidia.com/gpu'])", object={"limits": {}})


def test_in_tests_map_keys_that_contain_dots_and_slashes() -> None:
    limits = {"limits": {"nvidia.com/gpu": 1, "cpu": "1"}}
    assert evaluate("'nvidia.com/gpu' in object.limits", object=limits)
    assert not evaluate("'nvidia.com/mig-1g.12gb' in object.limits", object=limits)


def test_comprehension_macros_work_over_lists_and_map_keys() -> None:
    obj = {"items": [1, 2, 3], "labels": {"a": "x", "b": "y"}}
    assert evaluate("object.items.exists(i, i == 2)", object=obj)
    assert evaluate("object.items.all(i, i > 0)", object=obj)
    assert evaluate("object.items.map(i, i * 2) == [2, 4, 6]", object=obj)
    assert evaluate("object.items.filter(i, i % 2 == 1) == [1, 3]", object=obj)
    assert evaluate("object.labels.exists_one(k, k == 'a')", object=obj)
    assert evaluate("object.labels.all(k, object.labels[k].size() == 1)", object=obj)


def test_string_functions_from_the_standard_and_strings_libraries_are_available() -> None:
    obj = {"name": "nvidia.com/mig-1g.12gb"}
    assert evaluate("object.name.startsWith('nvidia.com/') && object.name.endsWith('gb')", object=obj)
    assert evaluate("object.name.contains('mig') && object.name.matches('^nvidia\\\\.com/mig-')", object=obj)
    assert evaluate("object.name.split('/') == ['nvidia.com', 'mig-1g.12gb']", object=obj)
    assert evaluate("['a', 'b'].join(',') == 'a,b' && 'ABC'.lowerAscii() == 'abc'", object=obj)


def test_optional_field_selection_falls_back_with_or_value() -> None:
    obj = {"spec": {"containers": [{"name": "c"}]}}
    assert evaluate("object.spec.?initContainers.orValue([]).size() == 0", object=obj)
    assert evaluate("object.spec.containers[0].?resources.?limits.orValue({}) == {}", object=obj)
    assert evaluate("{'a': 1}[?'b'].orValue(7) == 7", object=obj)


def test_old_object_is_null_on_create_and_request_is_visible() -> None:
    assert evaluate("oldObject == null && request.operation == 'CREATE'",
                    object={}, request={"operation": "CREATE"})
    assert evaluate("oldObject != null && request.operation == 'UPDATE'",
                    object={}, old_object={}, request={"operation": "UPDATE"})


def test_logical_operators_absorb_an_error_when_the_other_side_decides() -> None:
    assert evaluate("object.missing == 1 || true", object={})
    assert not evaluate("false && object.missing == 1", object={})
    with pytest.raises(CelError):
        evaluate("object.missing == 1 || false", object={})


def test_syntax_errors_are_reported_as_compile_errors() -> None:
    with pytest.raises(CelError, match=r"compile error.*[Ss]yntax"):
        evaluate("object.spec. ==", object={})


def test_undeclared_variables_do_not_compile() -> None:
    with pytest.raises(CelError, match="undeclared reference"):
        evaluate("params.x == 1", object={})


def test_an_expression_that_is_not_boolean_is_rejected() -> None:
    with pytest.raises(CelError, match="must evaluate to bool"):
        evaluate("1 + 1", object={})
    with pytest.raises(CelError, match="not bool"):
        evaluate("object.name", object={"name": "x"})


def test_quantities_reach_cel_as_canonical_strings_like_the_apiserver_shows_them() -> None:
    obj = pod(pod_spec(container(limits={"nvidia.com/gpu": 1000, "memory": "1Gi"}, requests={"cpu": 0.5})))
    path = "object.spec.containers[0].resources"
    assert evaluate(f"{path}.limits['nvidia.com/gpu'] == '1k'", object=obj)
    assert evaluate(f"{path}.limits['memory'] == '1Gi' && {path}.requests['cpu'] == '500m'", object=obj)


def test_the_callers_object_is_not_modified_by_normalisation() -> None:
    obj = pod(pod_spec(container(limits={"nvidia.com/gpu": 2})))
    before = copy.deepcopy(obj)
    evaluate(GPU_CONDITION, object=obj)
    assert obj == before


@pytest.mark.parametrize(
    ("value", "canonical"),
    [(2, "2"), ("2", "2"), (1000, "1k"), (1500, "1500"), (2_000_000, "2M"), (0, "0"), (0.5, "500m"),
     ("0.1234", "123400u"), (10**21, "1000E"), (-3000, "-3k"), ("1Gi", "1Gi"), ("500m", "500m")],
)
def test_canonical_quantity_matches_kubernetes_decimal_si_rendering(
    value: int | float | str, canonical: str
) -> None:
    assert canonical_quantity(value) == canonical


# ---------------------------------------------------------------- the shipped matchCondition


def test_the_shipped_match_conditions_fit_the_apiserver_limits() -> None:
    names = [name for name, _ in GPU_MATCH_CONDITIONS]
    assert 1 <= len(GPU_MATCH_CONDITIONS) <= min(3, cel_k8s.MAX_MATCH_CONDITIONS)
    assert len(set(names)) == len(names)
    # matchCondition names are qualified names: at most 63 characters of [A-Za-z0-9_.-], alphanumeric ends.
    assert all(re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", name) for name in names)
    for _, expression in GPU_MATCH_CONDITIONS:
        cel_k8s.compile_expression(expression)


GPU_SPECS = {
    "gpu limit in an app container": pod_spec(container(limits={"nvidia.com/gpu": 1, "cpu": "1"})),
    "gpu in requests only": pod_spec(container(requests={"nvidia.com/gpu": "1"})),
    "mig slice": pod_spec(container(limits={"nvidia.com/mig-1g.12gb": 1})),
    "non-plugin nvidia resource": pod_spec(container(limits={"nvidia.com/gpumem": 3000})),
    "gpu only in the second container": pod_spec(container("a", resources=False),
                                                 container("b", limits={"nvidia.com/gpu": 2})),
    "gpu only in an init container, no app resources": pod_spec(
        container(resources=False), init=[container("init", limits={"nvidia.com/gpu": 1})]),
    "gpu in a sidecar": pod_spec(
        container(limits={"cpu": "1"}),
        init=[dict(container("side", limits={"nvidia.com/gpu": 1}), restartPolicy="Always")]),
}

PLAIN_SPECS = {
    "cpu and memory only": pod_spec(container(limits={"cpu": "1", "memory": "1Gi"}, requests={"cpu": "1"})),
    "no resources key": pod_spec(container(resources=False)),
    "empty resources": pod_spec(container()),
    "requests but no limits": pod_spec(container(requests={"cpu": "100m"})),
    "limits but no requests": pod_spec(container(limits={"memory": "1Gi"})),
    "empty init container list": pod_spec(container(), init=[]),
    "init container without resources": pod_spec(container(), init=[container("init", resources=False)]),
    "another vendor's gpu": pod_spec(container(limits={"amd.com/gpu": 1, "gpu.intel.com/i915": 1})),
    "nvidia-like name outside the domain": pod_spec(container(limits={"example.com/nvidia.com-gpu": 1})),
    "no containers at all": {},
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", GPU_SPECS)
def test_an_object_requesting_an_nvidia_resource_matches_for_every_kind(kind: str, case: str) -> None:
    assert matches(KINDS[kind](GPU_SPECS[case]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", PLAIN_SPECS)
def test_an_object_without_nvidia_resources_does_not_match_and_never_errors(kind: str, case: str) -> None:
    assert matches(KINDS[kind](PLAIN_SPECS[case])) is False


def test_ephemeral_containers_are_ignored_because_the_api_forbids_their_resources() -> None:
    spec = pod_spec(container())
    spec["ephemeralContainers"] = [container("debug", limits={"nvidia.com/gpu": 1})]
    assert not matches(pod(spec))


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 1}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"template": {}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"}, "spec": {"jobTemplate": {}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"},
         "spec": {"jobTemplate": {"spec": {"template": {"metadata": {}}}}}},
        {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "x"}, "spec": {"replicas": 3}},
    ],
    ids=["no spec", "no template", "template without spec", "jobTemplate without spec",
         "job template without spec", "scale subresource"],
)
def test_objects_missing_intermediate_fields_do_not_match_and_never_error(obj: dict[str, Any]) -> None:
    assert matches(obj) is False
    assert matches(obj, old=obj) is False


@pytest.mark.parametrize("kind", KINDS)
def test_an_update_that_removes_the_gpus_still_matches_so_the_webhook_sees_it(kind: str) -> None:
    old = KINDS[kind](GPU_SPECS["gpu limit in an app container"])
    new = KINDS[kind](PLAIN_SPECS["cpu and memory only"])
    assert matches(new, old=old)
    assert matches(old, old=new)
    assert not matches(new, old=new)


def test_a_delete_with_a_null_object_is_judged_by_the_old_object() -> None:
    gpu_pod = pod(GPU_SPECS["gpu limit in an app container"])
    assert evaluate(GPU_CONDITION, object=None, old_object=gpu_pod)
    assert not evaluate(GPU_CONDITION, object=None, old_object=pod(PLAIN_SPECS["empty resources"]))


# ---------------------------------------------------------------- property: agrees with a Python reference

RESOURCE_NAMES = ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.12gb", "amd.com/gpu", "example.com/x"]
amounts = st.dictionaries(
    st.sampled_from(RESOURCE_NAMES), st.integers(min_value=0, max_value=5000), max_size=3
)
resources = st.fixed_dictionaries({}, optional={"limits": amounts, "requests": amounts})
containers = st.builds(
    lambda name, res: {"name": name, **({} if res is None else {"resources": res})},
    st.sampled_from(["a", "b", "c"]), st.one_of(st.none(), resources),
)
specs = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.lists(containers, max_size=3),
        "initContainers": st.lists(containers, max_size=2),
        "ephemeralContainers": st.lists(containers, max_size=1),
    },
)


def reference_requests_nvidia(spec: dict[str, Any]) -> bool:
    ctrs = spec.get("containers", []) + spec.get("initContainers", [])
    return any(name.startswith("nvidia.com/") for c in ctrs
               for field in ("limits", "requests") for name in c.get("resources", {}).get(field, {}))


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), new=specs, old=st.one_of(st.none(), specs))
def test_the_condition_agrees_with_a_python_reference_on_random_pod_specs(
    kind: str, new: dict[str, Any], old: dict[str, Any] | None,
) -> None:
    build = KINDS[kind]
    expected = reference_requests_nvidia(new) or (old is not None and reference_requests_nvidia(old))
    assert matches(build(new), None if old is None else build(old)) is expected
