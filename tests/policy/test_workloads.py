"""Tests for workloads and quantities: finding pod specs, adding up GPU requests, reading placement."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from pod_controllers import CONTROLLERS

from policy.admission import workloads
from policy.admission.workloads import (
    Amount,
    ContainerRequest,
    GpuRequest,
    RequestProblem,
    find_workload,
    read_gpu_request,
    read_placement,
)
from policy.kube.quantity import (
    FORMAT_ERROR,
    NEGATIVE_ERROR,
    NOT_INTEGER_ERROR,
    SUFFIX_ERROR,
    count_problem,
    parse_count,
    parse_quantity,
)
from policy.kube.scheduling import AffinityTerm, NodeRequirement, Placement

GPU = "nvidia.com/gpu"


def pod_spec(**spec: Any) -> dict[str, Any]:
    return {"containers": [{"name": "app", "resources": {"limits": {GPU: 1}}}], **spec}


def wrap(kind: str, api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    """An object of ``kind`` carrying ``spec`` where that kind keeps its pod spec."""
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "ns"}}
    if kind == "Pod":
        obj["spec"] = spec
    elif kind == "CronJob":
        obj["spec"] = {"jobTemplate": {"spec": {"template": {"spec": spec}}}}
    elif kind == "PodTemplate":
        obj["template"] = {"spec": spec}
    else:
        obj["spec"] = {"template": {"spec": spec}}
    return obj


def request_of(spec: dict[str, Any]) -> GpuRequest:
    found = find_workload(wrap("Pod", "v1", spec))
    assert found is not None
    return read_gpu_request(found)


# ---- quantities -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "count"), [
    (1, 1), ("1", 1), ("2", 2), (" 3 ", 3), (1.0, 1), ("1k", 1000), ("1000m", 1), ("2e1", 20), ("1Ki", 1024),
    ("0", 0), ("+4", 4), ("1E", 10**18), ("1e+3", 1000), ("1.", 1), (".5k", 500), ("\u00a01\n", 1),
    # JSON null is a zero quantity (Quantity.UnmarshalJSON); huge amounts are amounts, refused by no node only.
    (None, 0), ("1e31", 10**31), (1e31, int(1e31)), ("9" * 100, int("9" * 100)),
])  # fmt: skip
def test_gpu_counts_are_read_from_numbers_and_kubernetes_quantities(value: Any, count: int) -> None:
    assert parse_count(value) == count


@pytest.mark.parametrize("value", [
    "1.5", 0.5, "-1", -2, "one", "", "1x", True, [], {}, float("nan"), float("inf"), "1e-10", "1ki", "1e",
    "1.2.3", "\u0662", "\uff11", "1m5", "0x10", "x" * 300,
])  # fmt: skip
def test_values_the_api_server_would_refuse_as_device_counts_are_not_counted(value: Any) -> None:
    assert parse_count(value) is None


@pytest.mark.parametrize(("value", "reason"), [
    ("\u0662", FORMAT_ERROR),  # Arabic-Indic two: the grammar is ASCII digits only
    ("two", FORMAT_ERROR), (True, FORMAT_ERROR), ([1], FORMAT_ERROR), ("1.2.3", FORMAT_ERROR),
    ("1ki", SUFFIX_ERROR), ("1e", SUFFIX_ERROR), ("1e99999999999999999999", SUFFIX_ERROR),
    ("0.5", NOT_INTEGER_ERROR), (0.5, NOT_INTEGER_ERROR), ("1500m", NOT_INTEGER_ERROR), ("-1", NEGATIVE_ERROR),
])  # fmt: skip
def test_each_refused_amount_carries_the_api_servers_reason(value: Any, reason: str) -> None:
    assert count_problem(value) == (None, reason)


def test_an_exponent_wraps_to_32_bits_as_parse_quantity_keeps_it() -> None:
    assert parse_count(f"1e{2**32 + 2}") == 100  # int32(4294967298) == 2


def test_quantities_keep_their_exact_fractional_value() -> None:
    assert parse_quantity("1500m") == Fraction(3, 2)
    assert parse_quantity("2.5Mi") == Fraction(5 * 2**20, 2)


# ---- finding the pod spec ---------------------------------------------------------------------------------------

CONTROLLERS_AND_TEMPLATES = [*CONTROLLERS,
    ("PodTemplate", "v1", ("template", "spec")),
]


@pytest.mark.parametrize(("kind", "api_version", "path"), CONTROLLERS_AND_TEMPLATES)
def test_every_pod_controller_kind_yields_its_pod_spec_and_path(kind: str, api_version: str, path: tuple) -> None:
    spec = pod_spec()
    found = find_workload(wrap(kind, api_version, spec))
    assert found == workloads.Workload(kind, "w", "ns", path, spec)
    assert found.subject == f"{kind} w"


@pytest.mark.parametrize(("kind", "api_version"), [
    ("Service", "serving.knative.dev/v1"),   # Knative reuses the name of a core kind
    ("Job", "batch.volcano.sh/v1alpha1"),     # so does Volcano
    ("RayCluster", "ray.io/v1"),
    ("PyTorchJob", "kubeflow.org/v1"),
    ("Service", "v1"),
    ("Scale", "autoscaling/v1"),
])  # fmt: skip
def test_custom_resources_and_other_kinds_are_not_workloads(kind: str, api_version: str) -> None:
    assert find_workload(wrap(kind, api_version, pod_spec())) is None


def test_an_object_without_api_version_is_recognised_by_its_kind_alone() -> None:
    obj = {"kind": "Deployment", "spec": {"template": {"spec": pod_spec()}}}
    found = find_workload(obj)
    assert found is not None and found.spec_path == ("spec", "template", "spec")


def test_a_controller_pod_without_a_name_is_named_by_its_generate_name() -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-767df6d6b-"}, "spec": pod_spec()}
    found = find_workload(obj)
    assert found is not None and found.subject == "Pod web-767df6d6b-*" and found.namespace is None


@pytest.mark.parametrize("obj", [
    None, [], "Pod", {"kind": "Pod"}, {"kind": "Pod", "spec": []}, {"kind": 3}, {"kind": "Deployment", "spec": "x"},
    {"kind": "Deployment", "spec": {"template": None}}, {"kind": "CronJob", "spec": {"jobTemplate": [1]}},
])  # fmt: skip
def test_malformed_objects_have_no_pod_spec(obj: Any) -> None:
    assert find_workload(obj) is None


def test_gpu_requests_are_found_anywhere_in_an_object_of_any_kind() -> None:
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
           "spec": {"workerGroupSpecs": [{"template": {"spec": pod_spec()}}]}}
    argo = {"kind": "Workflow", "spec": {"templates": [{"script": {"resources": {"requests": {
        "nvidia.com/mig-1g.10gb": 1}, "limits": {GPU: 1}}}}]}}
    assert workloads.gpu_resources_anywhere(ray) == (GPU,)
    assert workloads.gpu_resources_anywhere(argo) == (GPU, "nvidia.com/mig-1g.10gb")
    assert workloads.gpu_resources_anywhere({"resources": {"limits": {"cpu": "1"}}}) == ()
    assert workloads.gpu_resources_anywhere({"nodeSelector": {"nvidia.com/gpu.product": "x"}}) == ()


# ---- GPU requests ------------------------------------------------------------------------------------------------


def test_a_container_request_records_count_and_the_path_of_its_limit_key() -> None:
    request = request_of(pod_spec())
    path = ("spec", "containers", 0, "resources", "limits", GPU)
    assert request == GpuRequest((ContainerRequest("app", "containers", False, (Amount(GPU, 1, path),)),),
                                 ((GPU, 1),))
    assert request.first_path(GPU) == path


def test_regular_containers_add_up_and_non_gpu_containers_are_ignored() -> None:
    request = request_of({"containers": [
        {"name": "a", "resources": {"limits": {GPU: "1", "cpu": "2"}}},
        {"name": "b", "resources": {"limits": {"memory": "1Gi"}}},
        {"name": "c", "resources": {"limits": {GPU: 2}}},
    ]})  # fmt: skip
    assert request.totals == ((GPU, 3),)
    assert [c.name for c in request.containers] == ["a", "c"]


def test_the_largest_init_container_wins_over_the_sum_of_app_containers() -> None:
    request = request_of({
        "initContainers": [{"name": "i", "resources": {"limits": {GPU: 4}}}],
        "containers": [{"name": "a", "resources": {"limits": {GPU: 1}}},
                       {"name": "b", "resources": {"limits": {GPU: 1}}}],
    })  # fmt: skip
    assert request.totals == ((GPU, 4),)


def test_sidecars_run_beside_later_init_containers_and_the_app_containers() -> None:
    # k8s resourcehelper.PodRequests: sidecar 1 + init 2 = 3 while the init runs; sidecar 1 + app 1 = 2 after.
    request = request_of({
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"limits": {GPU: 1}}},
            {"name": "init", "resources": {"limits": {GPU: 2}}},
        ],
        "containers": [{"name": "app", "resources": {"limits": {GPU: 1}}}],
    })  # fmt: skip
    assert request.totals == ((GPU, 3),)
    assert [(c.name, c.sidecar) for c in request.containers] == [("side", True), ("init", False), ("app", False)]


def test_a_sidecar_alone_counts_toward_the_regular_sum() -> None:
    request = request_of({
        "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": {"limits": {GPU: 1}}}],
        "containers": [{"name": "app", "resources": {"limits": {GPU: 1}}}],
    })  # fmt: skip
    assert request.totals == ((GPU, 2),)


def test_requests_alone_are_read_and_limits_win_when_both_are_given() -> None:
    only_requests = request_of({"containers": [{"name": "a", "resources": {"requests": {GPU: "2"}}}]})
    assert only_requests.containers[0].amounts == (Amount(GPU, 2, ("spec", "containers", 0, "resources", "requests",
                                                                      GPU)),)
    both = request_of({"containers": [{"name": "a", "resources": {"requests": {GPU: 1}, "limits": {GPU: 3}}}]})
    assert both.totals == ((GPU, 3),)


CONTAINER = ("spec", "containers", 0)


@pytest.mark.parametrize(("resources", "problem"), [
    ({"requests": {GPU: "2"}},
     RequestProblem("limit-missing", "a", CONTAINER, GPU, "requests", "2",
                    "Limit must be set for non overcommitable resources")),
    ({"requests": {GPU: 2}, "limits": {GPU: 1}},
     RequestProblem("request-differs", "a", CONTAINER, GPU, "requests", 2,
                    "must be equal to nvidia.com/gpu limit of 1", 1)),
    ({"limits": {GPU: "0.5"}},
     RequestProblem("not-integer", "a", CONTAINER, GPU, "limits", "0.5", "must be an integer")),
    ({"limits": {GPU: "\u0662"}},
     RequestProblem("unreadable", "a", CONTAINER, GPU, "limits", "\u0662", FORMAT_ERROR)),
    ({"limits": {GPU: -1}},
     RequestProblem("negative", "a", CONTAINER, GPU, "limits", -1, "must be greater than or equal to 0")),
])  # fmt: skip
def test_amounts_the_api_server_refuses_are_recorded_with_its_reason_and_never_dropped(
        resources: dict[str, Any], problem: RequestProblem) -> None:
    request = request_of({"containers": [{"name": "a", "resources": resources}]})
    assert request.problems == (problem,) and not request.empty
    assert problem.path == (*CONTAINER, "resources", problem.field, GPU)


def test_a_valid_limit_still_counts_beside_a_refused_request() -> None:
    request = request_of({"containers": [{"name": "a", "resources": {"requests": {GPU: "x"}, "limits": {GPU: 2}}}]})
    assert request.totals == ((GPU, 2),) and [p.kind for p in request.problems] == ["unreadable"]


def test_only_nvidia_resources_are_counted_and_zero_requests_drop_out() -> None:
    request = request_of({"containers": [{"name": "a", "resources": {"limits": {
        "amd.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/gpumem": "3000", GPU: 0}}}]})
    assert request.totals == (("nvidia.com/gpumem", 3000), ("nvidia.com/mig-1g.10gb", 1))


@pytest.mark.parametrize("spec", [
    {"containers": "app"},
    {"containers": [None, 3, "x", {"resources": "lots"}, {"resources": {"limits": [1]}}]},
    {"containers": [{"resources": {"limits": {5: 1, "cpu": "x"}}}]},
    {"initContainers": {"a": 1}, "containers": [{"resources": None}]},
    {},
])  # fmt: skip
def test_malformed_containers_and_keys_that_are_not_nvidia_resources_are_skipped(spec: dict[str, Any]) -> None:
    assert request_of(spec).empty


def test_a_container_without_a_name_is_named_by_its_index() -> None:
    request = request_of({"containers": [{"resources": {"limits": {GPU: 1}}}]})
    assert request.containers[0].name == "#0"


# ---- placement ---------------------------------------------------------------------------------------------------


def placement_of(spec: dict[str, Any]) -> Placement:
    found = find_workload(wrap("Deployment", "apps/v1", spec))
    assert found is not None
    return read_placement(found)


PREFIX = ("spec", "template", "spec")
REQUIRED = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


def test_node_selector_entries_become_in_requirements_located_at_their_keys() -> None:
    placement = placement_of(pod_spec(nodeSelector={"node-pool": "a", "bad": 3}))
    assert placement == Placement((NodeRequirement("node-pool", "In", ("a",), (*PREFIX, "nodeSelector", "node-pool")),),
                                  ())
    assert placement.node_selector[0].describe() == "node-pool=a"


def test_required_node_affinity_terms_are_read_with_every_operator() -> None:
    terms = [{"matchExpressions": [
        {"key": "pool", "operator": "NotIn", "values": ["x", 1]},
        {"key": "gpus", "operator": "Gt", "values": ["3"]},
        {"key": "odd", "operator": "Near", "values": ["y"]},
        {"key": "gone", "operator": "DoesNotExist"},
    ]}, {}]  # fmt: skip
    placement = placement_of(pod_spec(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}))
    base = (*PREFIX, *REQUIRED)
    assert placement.terms == (
        AffinityTerm((
            NodeRequirement("pool", "NotIn", ("x",), (*base, 0, "matchExpressions", 0)),
            NodeRequirement("gpus", "Gt", ("3",), (*base, 0, "matchExpressions", 1)),
            NodeRequirement("gone", "DoesNotExist", (), (*base, 0, "matchExpressions", 3)),
        ), False, (*base, 0), 4),
        AffinityTerm((), True, (*base, 1), 0),
    )  # fmt: skip


def test_an_unreadable_affinity_term_drops_the_affinity_so_it_cannot_exclude() -> None:
    placement = placement_of(pod_spec(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}, "x"]}}}))
    assert placement.terms == () and placement.unconstrained
