"""The engine's answers to requests a platform team tried against the examples: true, complete and actionable.

One test per wrong answer they found (hints that led to another denial, findings in instalments, GPU objects
passed in silence, verdicts the API server would never give, the scheduler named for a pod that bypasses it,
a default nobody can use, tainted pools counted as reachable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_engine import engine_for

from policy.admission.engine import Decision, Engine
from policy.load import load_policy
from policy.resolved.offers import build_admission_policy

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"


def evaluate(cluster: str, obj: dict[str, Any], labels: dict[str, str] | None = None) -> Decision:
    engine = engine_for(cluster)
    return engine.evaluate(obj, tenants=engine.tenants_for(labels or {}, namespace="default"))


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": list(containers), **spec}}


def gpus(count: Any, name: str = "app", resource: str = GPU, **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": "app:1", "resources": {"limits": {resource: count}, **resources}}


def hints(decision: Decision) -> list[str]:
    return [d.hint for d in decision.diagnostics]


# --- 1. a hint is a change that admits ---------------------------------------------------------------------------


def test_eight_gpus_outside_every_tenant_are_told_one_shared_gpu_and_never_another_tenant() -> None:
    decision = evaluate("mixed-fleet", pod(gpus(8), tolerations=[{"operator": "Exists"}]))
    assert [d.code for d in decision.diagnostics] == ["shared-gpu-request-above-one", "tenant-sharing-mode-denied"]
    # No class that namespaces outside every tenant may use holds 8 GPUs in one container, and a fix never moves
    # the pod to another tenant's namespaces: one shared GPU, on the class the pod then lands on, is the fix.
    assert set(hints(decision)) == {'request nvidia.com/gpu: 1 in container "app" and pin the pod to class t4-dev '
                                    "with nodeSelector {node-pool: t4-dev}"}
    assert not any("a100-mps" in h or "add a node class" in h for h in hints(decision))


def test_a_pod_on_whole_gpus_with_a_sidecar_and_an_init_container_too_large_is_not_sent_to_mps() -> None:
    obj = pod(gpus(1, "app"), nodeSelector={"node-pool": "h100-train"},
              tolerations=[{"key": "dedicated", "operator": "Exists"}],
              initContainers=[{**gpus(4, "side"), "restartPolicy": "Always"}, gpus(5, "init")])
    decision = evaluate("mixed-fleet", obj, {"gpu-tier": "research"})
    (finding,) = decision.diagnostics
    assert finding.code == "gpu-request-unsatisfiable" and "9 nvidia.com/gpu" in finding.message
    assert "a100-mps" not in finding.hint and finding.fix is not None
    assert finding.hint.startswith("request nvidia.com/gpu: ")


def test_a_tenant_that_may_not_use_a_mig_profile_is_told_what_to_ask_the_platform_team_for() -> None:
    decision = evaluate("h20-mig", pod(gpus(1)))
    assert not decision.allowed
    assert set(hints(decision)) == {
        'no change to this object within the policy admits it: request nvidia.com/mig-1g.12gb: 1 instead of '
        'nvidia.com/gpu in container "app" would leave only the tenant\'s rule, so ask the platform team to allow mig '
        "and time-slicing (spec.admission.defaultAllow) for namespaces outside every tenant in ClusterGPUPolicy "
        "h20-inference"}
    assert all(d.fix is None for d in decision.diagnostics)


# --- 2. every violation at once -----------------------------------------------------------------------------------


def test_hami_resources_and_two_shared_gpus_are_reported_at_once_with_one_fix_for_both() -> None:
    decision = evaluate("tke-l20-t4", pod(gpus(2, **{"requests": {}}) | {
        "resources": {"limits": {GPU: 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}}}))
    assert [d.code for d in decision.diagnostics] == [
        "gpu-request-unsatisfiable", "gpu-request-unsatisfiable", "shared-gpu-request-above-one"]
    assert len(set(hints(decision))) == 1 and all(d.fix for d in decision.diagnostics)


# --- 3. objects asking for GPUs that are not checked say so -------------------------------------------------------


@pytest.mark.parametrize(("kind", "api_version", "spec"), [
    ("SeldonDeployment", "machinelearning.seldon.io/v1",
     {"predictors": [{"componentSpecs": [{"spec": {"containers": [{"resources": {"limits": {GPU: 1}}}]}}]}]}),
    ("Workflow", "argoproj.io/v1alpha1", {"templates": [{"name": "t", "script": {"image": "python:3"}}],
                                          "other": {"resources": {"limits": {GPU: 1}}}}),
])  # fmt: skip
def test_a_custom_resource_asking_for_gpus_outside_every_known_template_gets_a_notice(
        kind: str, api_version: str, spec: dict[str, Any]) -> None:
    decision = evaluate("tke-l20-t4", {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
                                       "spec": spec})
    (notice,) = decision.diagnostics
    assert decision.allowed and (notice.code, notice.severity) == ("workload-not-checked", "info")
    assert notice.message.startswith(f"{kind} x ({api_version.split('/')[0]} API group) asks for nvidia.com/")


@pytest.mark.parametrize(("kind", "api_version", "spec", "allowed", "where"), [
    ("Workflow", "argoproj.io/v1alpha1",
     {"templates": [{"name": "t", "script": {"image": "python:3", "resources": {"limits": {GPU: 1}}}}]}, True, ""),
    ("LLMInferenceService", "serving.kserve.io/v1alpha1",
     {"template": {"containers": [{"name": "main", "resources": {"limits": {GPU: "2"}}}]}}, False, "spec.template"),
    ("Job", "batch.volcano.sh/v1alpha1",
     {"tasks": [{"template": {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/mig-1g.10gb": 1}}}]}}}]},
     False, "spec.tasks[0].template.spec"),
])  # fmt: skip
def test_a_custom_resource_of_a_known_kind_is_judged_through_its_templates(
        kind: str, api_version: str, spec: dict[str, Any], allowed: bool, where: str) -> None:
    decision = evaluate("tke-l20-t4", {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
                                       "spec": spec})
    assert decision.allowed is allowed and decision.subject == f"{kind} x"
    assert all(d.message.startswith(f"pod template {where}: ") for d in decision.diagnostics)
    assert allowed or decision.diagnostics


# --- 4. what the API server refuses, with its reason; never fail open --------------------------------------------


@pytest.mark.parametrize(("container", "reason", "fixed"), [
    ({"name": "app", "resources": {"requests": {GPU: 1}}}, "Limit must be set for non overcommitable resources",
     'request nvidia.com/gpu: 1 in container "app" (limits and requests)'),
    ({"name": "app", "resources": {"requests": {GPU: 2}, "limits": {GPU: 1}}},
     "must be equal to nvidia.com/gpu limit of 1",
     'request nvidia.com/gpu: 1 in container "app" (limits and requests)'),
    (gpus("0.5"), "must be an integer", 'request nvidia.com/gpu: 1 in container "app"'),
    # Two (Arabic-Indic), but the time-sliced classes take one replica per container.
    (gpus("\u0662"), "quantities must match the regular expression", 'request nvidia.com/gpu: 1 in container "app"'),
])  # fmt: skip
def test_amounts_the_api_server_refuses_are_denied_with_its_reason(container: dict[str, Any], reason: str,
                                                                   fixed: str) -> None:
    decision = evaluate("tke-l20-t4", pod(container))
    (finding,) = decision.diagnostics
    assert (decision.allowed, finding.code) == (False, "gpu-request-invalid")
    assert reason in finding.message and finding.hint.startswith(fixed)


def test_a_non_ascii_digit_is_read_as_the_count_it_was_meant_to_be_where_that_count_fits() -> None:
    obj = pod(gpus("\u0662"), nodeSelector={"node-pool": "h100-train"},
              tolerations=[{"key": "dedicated", "operator": "Exists"}])
    (finding,) = evaluate("mixed-fleet", obj, {"gpu-tier": "research"}).diagnostics
    assert finding.hint == 'request nvidia.com/gpu: 2 in container "app"'


@pytest.mark.parametrize("amount", ["1e31", "1e30", "9" * 40, 1e31])
def test_an_amount_too_large_for_any_node_is_unsatisfiable_not_read_as_no_gpu(amount: Any) -> None:
    decision = evaluate("tke-l20-t4", pod(gpus(amount)))
    assert not decision.allowed and decision.diagnostics[0].code == "gpu-request-unsatisfiable"


def test_the_api_servers_refusals_are_enforced_whatever_the_modes_say() -> None:
    text = (ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml").read_text(encoding="utf-8")
    result = load_policy(text.replace("enforcement: enforce", "enforcement: audit"), filename="audit.yaml")
    assert result.policy is not None
    policy = build_admission_policy(result.policy)
    assert policy.rules["gpu-request-invalid"] == "enforce"
    decision = Engine(policy).evaluate(pod(gpus("0.5")))
    assert not decision.allowed and decision.diagnostics[0].severity == "error"


# --- 5. a pod naming its node ---------------------------------------------------------------------------------------


def test_a_pod_naming_its_node_is_told_what_the_kubelet_checks_not_what_the_scheduler_might_do() -> None:
    decision = evaluate("mixed-fleet", pod(gpus(1), nodeName="gpu-node-1"))
    (finding,) = decision.diagnostics
    assert "scheduler may" not in finding.message
    # The scheduler is bypassed, so the NoSchedule taint of the whole-GPU nodes does not keep the pod off them.
    assert "the pod names node gpu-node-1 (spec.nodeName bypasses the scheduler), and that node may be of class " \
           "h100-train (exclusive)" in finding.message
    assert finding.hint == "pin the pod to class t4-dev with nodeSelector {node-pool: t4-dev}"


def test_a_pod_naming_its_node_with_too_many_gpus_is_refused_by_the_kubelet_not_left_pending() -> None:
    (finding,) = evaluate("tke-l20-t4", pod(gpus(9), nodeName="gpu-node-1")).diagnostics[:1]
    assert "so the kubelet of node gpu-node-1 would refuse it" in finding.message
    assert "The pod would fail with reason OutOfnvidia.com/gpu." in finding.message


# --- 6. one name per mode -------------------------------------------------------------------------------------------


def test_time_sliced_mig_is_named_mig_plus_time_slicing_in_denials() -> None:
    decision = evaluate("h20-mig", pod(gpus(1, resource="nvidia.com/mig-1g.12gb")))
    assert decision.diagnostics[0].message.startswith(
        "namespaces outside every tenant may not use mig+time-slicing GPUs")
    assert "class h20 (mig+time-slicing)" in decision.diagnostics[0].message


def test_a_mig_class_with_gpus_left_whole_is_still_named_mig() -> None:
    from policy.resolved.resolve import resolve

    path = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
    text = path.read_text(encoding="utf-8").replace(
        "            - gpus: [0, 1, 2, 3]\n              layout: {1g.10gb: 7}\n", "")
    result = load_policy(text, filename=str(path))
    assert result.ok and result.policy is not None, result.diagnostics
    (h100,) = (c for c in resolve(result.policy).classes if c.name == "h100-mig")
    assert {m for o in h100.offers for m in o.modes} == {"mig", "exclusive"}  # GPUs 0-3 are advertised whole
    assert h100.mode_name == "mig"
    view = next(v for v in Engine(build_admission_policy(result.policy)).classes if v.name == "h100-mig")
    assert view.mode == "mig"


# --- 7. taints ------------------------------------------------------------------------------------------------------


def test_a_plain_gpu_pod_outside_every_tenant_is_admitted_since_the_tainted_pool_is_out_of_its_reach() -> None:
    assert evaluate("mixed-fleet", pod(gpus(1))).allowed
    tolerant = evaluate("mixed-fleet", pod(gpus(1), tolerations=[{"key": "dedicated", "operator": "Equal",
                                                                  "value": "training", "effect": "NoSchedule"}]))
    assert [d.code for d in tolerant.diagnostics] == ["tenant-sharing-mode-denied"]


def test_a_toleration_for_another_value_or_effect_does_not_reach_the_tainted_pool() -> None:
    for toleration in ({"key": "dedicated", "operator": "Equal", "value": "inference"},
                       {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}):
        assert evaluate("mixed-fleet", pod(gpus(1), tolerations=[toleration])).allowed


def test_a_taint_named_after_the_requested_resource_is_tolerated_as_extended_resource_toleration_adds_it() -> None:
    text = (ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8").replace(
        "{key: dedicated, value: training, effect: NoSchedule}", "{key: nvidia.com/gpu, effect: NoSchedule}")
    result = load_policy(text, filename="gke.yaml")
    assert result.policy is not None
    engine = Engine(build_admission_policy(result.policy))
    # ExtendedResourceToleration gives a pod asking for nvidia.com/gpu {key: nvidia.com/gpu, operator: Exists}.
    assert not engine.evaluate(pod(gpus(1))).allowed
