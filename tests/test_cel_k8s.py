"""The Kubernetes-flavoured CEL evaluator the matchCondition tests rely on."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cel_k8s import CelError, canonical_quantity, evaluate

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


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


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
    evaluate("object.spec.containers.exists(c, 'nvidia.com/gpu' in c.resources.limits)", object=obj)
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
