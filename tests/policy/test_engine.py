"""Tests for the rule engine: decisions, modes, tenant routing, ratcheting, real-world fixtures, robustness, speed."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import workload_fixtures
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pod_controllers import CONTROLLERS

from policy.admission.engine import Decision, Engine
from policy.load import load_policy
from policy.resolved.offers import AdmissionPolicy, build_admission_policy
from policy.spec.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"
REVIEWS = ROOT / "tests" / "fixtures" / "admission-reviews"
GPU = "nvidia.com/gpu"


@functools.cache
def admission_policy(cluster: str) -> AdmissionPolicy:
    path = CLUSTERS / cluster / "cluster.yaml"
    result = load_policy(path.read_text(encoding="utf-8"), filename=str(path))
    assert result.ok and result.policy is not None, result.diagnostics
    return build_admission_policy(result.policy)


@functools.cache
def engine_for(cluster: str) -> Engine:
    return Engine(admission_policy(cluster))


def with_modes(cluster: str, **modes: str) -> Engine:
    policy = admission_policy(cluster)
    rules = {**policy.rules, **{k.replace("_", "-"): v for k, v in modes.items()}}
    return Engine(policy.model_copy(update={"rules": rules}))


def deployment(limits: dict[str, Any], name: str = "nlp-inference", **spec: Any) -> dict[str, Any]:
    container = {"name": "server", "image": "inference:1", "resources": {"limits": limits}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "nlp"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [container], **spec}}}}


SEED_PATH = ("spec", "template", "spec", "containers", 0, "resources", "limits", GPU)


# ---- the seed's case, end to end -----------------------------------------------------------------------------------


def test_the_seeds_deployment_asking_two_gpus_on_the_time_sliced_tke_cluster_is_denied_with_why_and_how() -> None:
    decision = engine_for("tke-l20-t4").evaluate(deployment({GPU: 2}))
    assert decision == Decision(False, (Diagnostic(
        "shared-gpu-request-above-one",
        'container "server" requests 2 nvidia.com/gpu; shared devices allow 1 per container. The '
        "scheduler may place the pod on class l20 (1 GPU x 8 time-slicing replicas per node) or t4 (1 GPU x 3 "
        "time-slicing replicas per node), where the device plugin refuses more than 1 shared replica per container "
        "(failRequestsGreaterThanOne) and the kubelet fails the pod with UnexpectedAdmissionError.",
        SEED_PATH,
        'request nvidia.com/gpu: 1 in container "server" (more shared replicas of one device add no compute; 2 '
        "whole GPUs need a class with sharing: exclusive)",
        fix=decision.diagnostics[0].fix,
    ),), "Deployment nlp-inference")  # fmt: skip
    fix = decision.diagnostics[0].fix
    assert fix is not None and fix.to_dict() == {
        "edits": [{"kind": "set-resource", "path": "/spec/template/spec/containers/0", "resource": GPU, "count": 1,
                   "fields": ["limits"]}],
        "jsonPatch": [{"op": "add", "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu",
                       "value": 1}]}
    assert decision.message == (
        "Deployment nlp-inference: [shared-gpu-request-above-one] " + decision.diagnostics[0].message
        + ' (at spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]) Fix: '
        + decision.diagnostics[0].hint
    )


def test_the_seeds_deployment_with_one_gpu_per_replica_is_allowed() -> None:
    assert engine_for("tke-l20-t4").evaluate(deployment({GPU: "1"})) == Decision(True, (), "Deployment nlp-inference")




def nest(path: tuple[str, ...], spec: dict[str, Any]) -> Any:
    for part in reversed(path):
        spec = {part: spec}
    return spec


@pytest.mark.parametrize(("kind", "api_version", "prefix"), CONTROLLERS, ids=[c[0] for c in CONTROLLERS])
def test_every_pod_controller_kind_is_denied_at_its_own_template_path(kind: str, api_version: str,
                                                                      prefix: tuple[str, ...]) -> None:
    spec = {"containers": [{"name": "server", "resources": {"limits": {GPU: 2}}}]}
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, **nest(prefix, spec)}
    decision = engine_for("tke-l20-t4").evaluate(obj)
    assert not decision.allowed and decision.subject == f"{kind} w"
    assert [(d.code, d.path) for d in decision.diagnostics] == [
        ("shared-gpu-request-above-one", (*prefix, "containers", 0, "resources", "limits", GPU))]


# ---- modes: enforce, warn, audit -----------------------------------------------------------------------------------


def test_a_rule_in_warn_mode_allows_and_returns_a_short_warning() -> None:
    decision = with_modes("tke-l20-t4", shared_gpu_request_above_one="warn").evaluate(deployment({GPU: 2}))
    assert decision.allowed and decision.message == ""
    assert [d.severity for d in decision.diagnostics] == ["warning"]
    assert decision.warnings == ('shared-gpu-request-above-one: container "server" requests 2 nvidia.com/gpu; '
                                 "shared devices allow 1 per container",)
    assert decision.audit_annotations == {}


def test_a_rule_in_audit_mode_allows_and_records_an_audit_annotation_keyed_by_rule_id() -> None:
    decision = with_modes("tke-l20-t4", shared_gpu_request_above_one="audit").evaluate(deployment({GPU: 2}))
    assert decision.allowed and decision.warnings == ()
    assert list(decision.audit_annotations) == ["shared-gpu-request-above-one"]
    assert decision.audit_annotations["shared-gpu-request-above-one"].startswith(
        '[shared-gpu-request-above-one] container "server" requests 2 nvidia.com/gpu')


def test_warnings_never_exceed_120_characters() -> None:
    engine = with_modes("mixed-fleet", gpu_request_unsatisfiable="warn", tenant_sharing_mode_denied="warn",
                        mig_strategy_mismatch="warn", shared_gpu_request_above_one="warn")
    long_name = "x" * 63
    obj = deployment({GPU: 2, "nvidia.com/mig-1g.5gb": 1})
    obj["spec"]["template"]["spec"]["containers"][0]["name"] = long_name
    for tenants in ((), ("prod",), ("ghost",)):
        for candidate in (obj, deployment({GPU: 2}), deployment({GPU: 1})):
            decision = engine.evaluate(candidate, tenants=tenants)
            assert all(len(w) <= 120 and not w.startswith("Warning") for w in decision.warnings)


def test_a_denial_quotes_a_megabyte_field_value_in_a_bounded_message() -> None:
    from policy.spec.diagnostics import MAX_QUOTED_CHARS

    engine = engine_for("tke-l20-t4")
    obj = deployment({GPU: 2}, name="n" * 1_000_000)
    obj["spec"]["template"]["spec"]["containers"][0]["name"] = "c" * 1_000_000
    decision = engine.evaluate(obj)
    assert not decision.allowed
    message = decision.message
    assert len(message) <= 2 * 4000
    assert message.startswith("Deployment nnnn") and "[shared-gpu-request-above-one] container \"cccc" in message
    assert "more characters]" in message and "n" * (MAX_QUOTED_CHARS + 1) not in message
    assert "c" * (MAX_QUOTED_CHARS + 1) not in message and message.endswith("sharing: exclusive)")


def test_a_denial_with_thousands_of_findings_is_capped_as_a_whole() -> None:
    finding = Diagnostic("shared-gpu-request-above-one", "x " * 1000, ("spec",), "fix it")
    decision = Decision(False, (finding,) * 5000, "Pod p")
    assert len(decision.message) <= 16_000 and decision.message.startswith("Pod p: [shared-gpu-request-above-one]")


def test_an_honest_denial_is_not_shortened() -> None:
    decision = engine_for("tke-l20-t4").evaluate(deployment({GPU: 2}, name="n" * 253))
    assert "n" * 253 in decision.message and "more characters" not in decision.message


def test_a_policy_document_that_went_through_json_decides_the_same() -> None:
    policy = admission_policy("mixed-fleet")
    reloaded = Engine(AdmissionPolicy.from_json(policy.to_json()))
    for tenants in ((), ("prod",), ("research",), ("dev",)):
        for obj in (deployment({GPU: 2}), deployment({GPU: 1}), deployment({"nvidia.com/mig-1g.10gb": 1})):
            assert reloaded.evaluate(obj, tenants=tenants) == engine_for("mixed-fleet").evaluate(obj, tenants=tenants)


# ---- tenant routing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("labels", "tenants"), [
    ({"gpu-tier": "prod"}, ("prod",)),
    ({"gpu-tier": "research", "team": "x"}, ("research",)),
    ({"gpu-tier": "sandbox"}, ("dev",)),
    ({"gpu-tier": "dev"}, ("dev",)),
    ({"kubernetes.io/metadata.name": "default"}, ()),
    ({}, ()),
])  # fmt: skip
def test_tenants_for_returns_every_tenant_whose_selector_matches(labels: dict[str, str], tenants: tuple) -> None:
    assert engine_for("mixed-fleet").tenants_for(labels) == tenants


def test_a_namespace_two_tenants_select_gets_only_what_both_allow() -> None:
    text = (CLUSTERS / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8").replace(
        "matchLabels: {gpu-tier: research}", "matchLabels: {lab: 'yes'}")
    result = load_policy(text, filename="overlap.yaml")
    assert result.policy is not None
    engine = Engine(build_admission_policy(result.policy))
    tenants = engine.tenants_for({"gpu-tier": "prod", "lab": "yes"})
    assert tenants == ("prod", "research")
    pinned_whole = deployment({GPU: 1}, nodeSelector={"node-pool": "h100-train"},
                              tolerations=[{"key": "dedicated", "operator": "Exists"}])
    pinned_mps = deployment({GPU: 1}, nodeSelector={"node-pool": "a100-mps"})
    assert engine.evaluate(pinned_whole, tenants=tenants).allowed  # exclusive: both allow it
    denied = engine.evaluate(pinned_mps, tenants=tenants)           # mps: research yes, prod no
    assert [d.code for d in denied.diagnostics] == ["tenant-sharing-mode-denied"]
    assert denied.diagnostics[0].message.startswith("tenants prod and research together may not use mps GPUs")


def test_tenants_given_as_a_lone_string_or_with_duplicates_are_read_as_names() -> None:
    engine = engine_for("mixed-fleet")
    obj = deployment({GPU: 1})
    assert engine.evaluate(obj, tenants="prod") == engine.evaluate(obj, tenants=("prod",))  # type: ignore[arg-type]
    assert engine.evaluate(obj, tenants=["prod", "prod"]) == engine.evaluate(obj, tenants=("prod",))


# ---- operations and ratcheting -------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_unchecked(operation: str) -> None:
    assert engine_for("tke-l20-t4").evaluate(deployment({GPU: 2}), operation=operation) == Decision(True)


def test_an_update_that_only_scales_a_violating_deployment_is_allowed() -> None:
    old = deployment({GPU: 2})
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 10
    new["metadata"]["labels"] = {"rolled": "yes"}
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "inference:2"
    decision = engine_for("tke-l20-t4").evaluate(new, operation="UPDATE", old_obj=old)
    assert decision == Decision(True, (), "Deployment nlp-inference")


@pytest.mark.parametrize(("field", "value"), [("tolerations", [{"key": GPU, "operator": "Exists"}]),
                                              ("nodeName", "gpu-node-1")])
def test_an_update_that_changes_tolerations_or_the_node_is_evaluated(field: str, value: Any) -> None:
    # Tolerations decide which tainted classes the pod reaches, and nodeName bypasses the scheduler.
    old = deployment({GPU: 2})
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"][field] = value
    assert not engine_for("tke-l20-t4").evaluate(new, operation="UPDATE", old_obj=old).allowed


def test_an_update_that_moves_a_vgpu_workload_off_hamis_scheduler_is_evaluated() -> None:
    # HAMi allocates its vGPUs only through its own scheduler: a new schedulerName changes what the pods get.
    old = deployment({GPU: 1, "nvidia.com/gpumem": 4000})
    new = deployment({GPU: 1, "nvidia.com/gpumem": 4000}, schedulerName="volcano")
    engine = engine_for("vgpu-platform")
    assert engine.evaluate(old, tenants=("platform",)).allowed
    decision = engine.evaluate(new, tenants=("platform",), operation="UPDATE", old_obj=old)
    assert [d.code for d in decision.diagnostics] == ["hami-scheduler-bypassed"]


def test_an_update_that_adds_a_kai_fraction_to_a_template_without_gpu_resources_is_evaluated() -> None:
    old = deployment({"cpu": "1"})
    new = copy.deepcopy(old)
    new["spec"]["template"]["metadata"] = {"annotations": {"gpu-fraction": "0.5"}}
    engine = engine_for("mixed-fleet")
    assert not engine.evaluate(new, tenants=("prod",)).allowed  # prod may not share
    assert not engine.evaluate(new, tenants=("prod",), operation="UPDATE", old_obj=old).allowed
    assert engine.evaluate(new, tenants=("prod",), operation="UPDATE", old_obj=copy.deepcopy(new)).allowed


def test_an_update_that_changes_the_gpu_request_is_evaluated() -> None:
    decision = engine_for("tke-l20-t4").evaluate(deployment({GPU: 2}), operation="UPDATE",
                                                 old_obj=deployment({GPU: 1}))
    assert [d.code for d in decision.diagnostics] == ["shared-gpu-request-above-one"]


def test_an_update_that_changes_placement_is_evaluated() -> None:
    old = deployment({GPU: 1})
    new = deployment({GPU: 1}, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"})
    decision = engine_for("tke-l20-t4").evaluate(new, operation="UPDATE", old_obj=old)
    assert [d.code for d in decision.diagnostics] == ["gpu-request-unsatisfiable"]


@pytest.mark.parametrize("old", [None, {}, {"kind": "Scale"}, "garbage"])
def test_an_update_without_a_readable_old_object_is_evaluated_like_a_create(old: Any) -> None:
    decision = engine_for("tke-l20-t4").evaluate(deployment({GPU: 2}), operation="UPDATE", old_obj=old)
    assert not decision.allowed


# ---- objects that are not checked ----------------------------------------------------------------------------------


@pytest.mark.parametrize("obj", [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": []}},
    {"apiVersion": "ray.io/v1", "kind": "RayCluster",
     "spec": {"workerGroupSpecs": [{"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": 9}}}]}}}]}},
    deployment({"cpu": "1"}),
    {"apiVersion": "autoscaling/v1", "kind": "Scale"},
])  # fmt: skip
def test_objects_without_a_checked_gpu_request_are_allowed_without_findings(obj: dict[str, Any]) -> None:
    assert engine_for("tke-l20-t4").evaluate(obj) == Decision(True)


def review_objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    assert list(REVIEWS.glob("*.json")), f"the real-world AdmissionReviews are missing from {REVIEWS}"
    for path in sorted(REVIEWS.glob("*.json")):
        body = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[1])
        request = body.get("request", body)
        out.append((path.name, request))
    return out


@pytest.mark.parametrize(("name", "request_"), review_objects())
def test_the_real_world_admission_reviews_carry_no_gpu_request_and_are_allowed(name: str, request_: Any) -> None:
    for cluster in ("tke-l20-t4", "h20-mig", "mixed-fleet"):
        decision = engine_for(cluster).evaluate(request_["object"], operation=request_["operation"],
                                                old_obj=request_.get("oldObject"))
        assert decision.allowed and decision.diagnostics == (), name


# ---- workload fixtures: discovered, self-describing ----------------------------------------------------------------


FIXTURE_FILES = workload_fixtures.FILES


def test_workload_fixtures_exist_for_both_verdicts() -> None:
    assert {p.parent.name for p in FIXTURE_FILES} == {"allow", "deny"}


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_workload_fixture_gets_the_verdict_its_header_states(path: Path) -> None:
    header = workload_fixtures.header(path)
    verdict, *expected = header["expect"].split()
    assert verdict == path.parent.name, "the directory and the # expect: line disagree"
    engine = engine_for(header["cluster"])
    labels = workload_fixtures.namespace_labels(header)
    decisions = [engine.evaluate(obj, tenants=engine.tenants_for(labels))
                 for obj in workload_fixtures.documents(path)]
    fired = sorted({d.code for decision in decisions for d in decision.diagnostics})
    assert all(d.allowed for d in decisions) == (verdict == "allow"), [d.message for d in decisions]
    assert fired == sorted(expected), [d.render() for d in decisions]


# ---- robustness: any JSON, never an exception ----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12)
    | st.sampled_from(["1", "2", "1k", "1.5", "-1", "Always", "In", "NotIn", "Gt", "Exists", "nvidia.com/gpu"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["containers", "initContainers", "resources", "limits", "requests", "name", "spec",
                         "template", "nodeSelector", "affinity", "nodeAffinity", "nodeSelectorTerms",
                         "matchExpressions", "key", "operator", "values", "restartPolicy", GPU,
                         "nvidia.com/mig-1g.10gb", "node-pool", "requiredDuringSchedulingIgnoredDuringExecution"])
        | st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)
KINDS = st.sampled_from(["Pod", "Deployment", "CronJob", "Job", "StatefulSet", "Service", 7, None])


def shaped(kind: Any, body: Any) -> dict[str, Any]:
    return {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, "spec": body,
            "metadata": body if isinstance(body, dict) else {}}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=JSON, kind=KINDS, body=JSON, old=JSON, tenants=st.lists(st.text(max_size=6), max_size=3),
       operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", "", 3]))
def test_evaluate_returns_a_decision_for_any_json_like_input(obj: Any, kind: Any, body: Any, old: Any,
                                                            tenants: list[str], operation: Any) -> None:
    engine = engine_for("mixed-fleet")
    for candidate in (obj, shaped(kind, body), shaped(kind, {"template": {"spec": body}})):
        decision = engine.evaluate(candidate, tenants=tenants, operation=operation, old_obj=old)
        assert isinstance(decision, Decision)
        assert isinstance(decision.message, str) and isinstance(decision.audit_annotations, dict)
        assert all(len(w) <= 120 for w in decision.warnings)


@settings(max_examples=150, deadline=None)
@given(labels=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4) | JSON)
def test_tenants_for_accepts_any_labels(labels: Any) -> None:
    assert isinstance(engine_for("mixed-fleet").tenants_for(labels), tuple)
