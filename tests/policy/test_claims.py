"""Claim admission on the DRA pool of examples/clusters/dra-mixed: templates, claims and the pods naming them.

Objects are NVIDIA's own demo specs (tests/fixtures/dra/README.md), as they are or pointed at the tree's classes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.admission.engine import Engine
from policy.resolved.offers import build_admission_policy
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
H100 = "h100-train.exclusive.gpupolicy.dev"
MPS = "l40s-mps.mps.gpupolicy.dev"


def demo(name: str, kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((FIXTURES / name).read_text(encoding="utf-8")) if d]
    return copy.deepcopy(next(d for d in docs if d["kind"] == kind))


def with_class(template: dict[str, Any], device_class: str) -> dict[str, Any]:
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    return template


@pytest.fixture(scope="module")
def engine() -> Engine:
    from policy.load import load_policy

    text = (Path(__file__).resolve().parents[2] / "examples/clusters/dra-mixed/cluster.yaml").read_text()
    result = load_policy(text, filename="cluster.yaml")
    assert result.policy is not None
    return Engine(build_admission_policy(result.policy))


def codes(decision: Any) -> list[str]:
    return [d.code for d in decision.diagnostics]


def test_the_policy_document_lists_each_tenants_device_classes_from_the_spec(engine: Engine) -> None:
    dra = engine.policy.dra
    assert dra is not None
    assert dra.tenants == {"prod": ("a100-mig.1g.10gb.gpupolicy.dev", H100), "research": (H100, MPS), "dev": ()}


def test_nvidias_own_class_is_denied_as_not_compiled(engine: Engine) -> None:
    decision = engine.evaluate(demo("gpu-test1.yaml", "ResourceClaimTemplate"), tenants=["research"])
    assert not decision.allowed and codes(decision) == ["dra-class-not-compiled"]
    assert "gpu.nvidia.com" in decision.message and H100 in decision.message


def test_a_template_on_a_class_the_tenant_may_use_is_admitted(engine: Engine) -> None:
    template = with_class(demo("gpu-test1.yaml", "ResourceClaimTemplate"), H100)
    assert engine.evaluate(template, tenants=["research"]).allowed


def test_a_template_on_a_class_the_tenant_may_not_use_is_denied_naming_the_class(engine: Engine) -> None:
    template = with_class(demo("gpu-test1.yaml", "ResourceClaimTemplate"), MPS)
    decision = engine.evaluate(template, tenants=["prod"])
    assert not decision.allowed and codes(decision) == ["dra-class-denied"]
    assert f"tenant prod may not use DeviceClass {MPS}" in decision.message


def test_claim_level_mps_config_on_an_mps_class_is_an_override(engine: Engine) -> None:
    template = with_class(demo("gpu-test-mps.yaml", "ResourceClaimTemplate"), MPS)
    decision = engine.evaluate(template, tenants=["research"])
    assert codes(decision) == ["dra-claim-config-override"] and MPS in decision.message


def test_mps_figures_out_of_the_drivers_range_are_named(engine: Engine) -> None:
    template = with_class(demo("gpu-test-mps.yaml", "ResourceClaimTemplate"), MPS)
    mps = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"]["mpsConfig"]
    mps.update(defaultActiveThreadPercentage=150, defaultPinnedDeviceMemoryLimit="100Gi")
    decision = engine.evaluate(template, tenants=["research"])
    assert codes(decision) == ["dra-claim-config-override", "dra-mps-out-of-range", "dra-mps-out-of-range"]


def test_all_admin_access_and_counts_beyond_a_node_are_denied(engine: Engine) -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [
                 {"name": "a", "exactly": {"deviceClassName": H100, "allocationMode": "All"}},
                 {"name": "b", "exactly": {"deviceClassName": H100, "adminAccess": True}},
                 {"name": "c", "firstAvailable": [{"name": "x", "deviceClassName": H100, "count": 9}]}]}}}
    decision = engine.evaluate(claim, tenants=["research"])
    assert codes(decision) == ["dra-allocation-all", "dra-admin-access", "dra-count-above-node"]
    assert [d.path[-1] for d in decision.diagnostics] == ["allocationMode", "adminAccess", "count"]


def test_a_claim_gaining_a_consumer_is_judged_again_and_releasing_one_never_fails(engine: Engine) -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "shared"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": MPS}}]}},
             "status": {"reservedFor": [{"resource": "pods", "name": "a", "uid": "1"}]}}
    grown = copy.deepcopy(claim)
    grown["status"]["reservedFor"].append({"resource": "pods", "name": "b", "uid": "2"})
    # Created when tenant prod could still use it; now prod may not: no new pod may join.
    assert codes(engine.evaluate(grown, tenants=["prod"], operation="UPDATE", old_obj=claim)) == ["dra-class-denied"]
    assert engine.evaluate(claim, tenants=["prod"], operation="UPDATE", old_obj=grown).allowed


def test_a_claim_based_pod_naming_a_template_of_a_class_its_tenant_may_not_use_is_denied(engine: Engine) -> None:
    pod = demo("gpu-test1.yaml", "Pod")
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "h100-train"
    decision = engine.evaluate(pod, tenants=["dev"])
    assert not decision.allowed and codes(decision) == ["dra-class-denied"]
    assert H100 in decision.message and decision.diagnostics[0].path == (
        "spec", "resourceClaims", 0, "resourceClaimTemplateName")
    assert engine.evaluate(pod, tenants=["research"]).allowed


def test_a_pod_naming_a_template_the_review_cannot_see_is_left_to_the_templates_own_review(engine: Engine) -> None:
    pod = demo("gpu-test1.yaml", "Pod")  # single-gpu: a template of the namespace's own, judged at its CREATE
    assert engine.evaluate(pod, tenants=["dev"]).allowed


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                         st.sampled_from(["spec", "devices", "requests", "exactly", "firstAvailable", "config",
                                          "opaque", "driver", "parameters", "sharing", "mpsConfig", "count",
                                          "deviceClassName", "allocationMode", "adminAccess", "status",
                                          "reservedFor", "resourceClaims", "resourceClaimTemplateName"]),
                         inner, max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(body=_JSON, kind=st.sampled_from(["ResourceClaim", "ResourceClaimTemplate", "Pod"]), old=_JSON,
       operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_any_claim_shaped_input_gets_a_decision(engine: Engine, body: Any, kind: str, old: Any,
                                                operation: str) -> None:
    api = "v1" if kind == "Pod" else "resource.k8s.io/v1"
    obj = {"apiVersion": api, "kind": kind, "metadata": {"name": "x"}, "spec": body, "status": body}
    old_obj = {"apiVersion": api, "kind": kind, "metadata": {"name": "x"}, "spec": old, "status": old}
    decision = engine.evaluate(obj, tenants=["research"], operation=operation, old_obj=old_obj)
    assert decision.allowed in (True, False)


def test_a_cluster_without_a_dra_pool_says_no_claim_for_nvidias_driver_is_ever_allocated(example_policy: Load) -> None:
    plain = Engine(build_admission_policy(example_policy("mixed-fleet")))
    decision = plain.evaluate(demo("gpu-test1.yaml", "ResourceClaimTemplate"), tenants=["dev"])
    assert codes(decision) == ["dra-class-not-compiled"]
    assert "compiles no DRA class" in decision.diagnostics[0].hint


# --- capacity requests (consumable shares) and the names constraints and config refer to ---------------------------

TIME_SLICED = """
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: shares}
spec:
  kubernetesVersion: "1.36"
  dra: {version: v0.5.0}
  nodeClasses:
    - name: l4-shared
      allocation: dra
      nodeSelector: {node-pool: l4-shared}
      nodes: 2
      gpu: {model: L4, count: 2}
      sharing:
        timeSlicing: {replicas: 4}
"""
SHARED = "l4-shared.time-slicing.gpupolicy.dev"


def claim(device_class: str, **exactly: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "probe", "namespace": "research"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class,
                                                                          **exactly}}]}}}


@pytest.fixture(scope="module")
def shared() -> Engine:
    from policy.load import load_policy

    result = load_policy(TIME_SLICED, filename="shares.yaml")
    assert result.ok and result.policy is not None, result.diagnostics
    return Engine(build_admission_policy(result.policy))


def test_the_time_sliced_class_takes_its_replicas_as_consumable_shares(shared: Engine) -> None:
    assert shared.policy.dra is not None
    assert {c.name: c.consumable_shares for c in shared.policy.dra.classes} == {SHARED: 4}
    assert shared.evaluate(claim(SHARED, capacity={"requests": {"shares": "2", "memory": "10Gi"}})).allowed
    assert shared.evaluate(claim(SHARED, capacity={"requests": {"gpu.nvidia.com/shares": 4}})).allowed


@pytest.mark.parametrize(("requests", "said"), [
    ({"shares": "5"}, "shares '5': a device of l4-shared.time-slicing.gpupolicy.dev has 4 shares, and a claim "
                      "takes 1 to 4 of them"),
    ({"shares": "0"}, "shares '0'"),
    ({"memory": "23Gi"}, "memory '23Gi' must be a quantity of at most the device's 23034Mi"),
    ({"multiprocessors": "10"}, "capacity multiprocessors, which NVIDIA's driver does not publish (only memory and "
                                "shares)"),
])
def test_capacity_no_device_of_the_class_has_is_denied(shared: Engine, requests: dict[str, str], said: str) -> None:
    decision = shared.evaluate(claim(SHARED, capacity={"requests": requests}))
    assert codes(decision) == ["dra-capacity-request-invalid"] and said in decision.message, decision.message
    [finding] = decision.diagnostics
    assert finding.path[-3:-1] == ("capacity", "requests")


def test_shares_of_a_class_without_consumable_shares_are_denied(engine: Engine) -> None:
    decision = engine.evaluate(claim(H100, capacity={"requests": {"shares": "1"}}), tenants=["research"])
    assert codes(decision) == ["dra-capacity-request-invalid"]
    assert f"shares of DeviceClass {H100} (exclusive), whose devices publish none" in decision.message
    # memory within one H100 is a request the device meets
    assert engine.evaluate(claim(H100, capacity={"requests": {"memory": "40Gi"}}), tenants=["research"]).allowed


def test_constraints_and_config_naming_requests_the_claim_lacks_are_denied(engine: Engine) -> None:
    obj = claim(H100, count=2)
    obj["spec"]["devices"]["requests"].append({"name": "pick", "firstAvailable": [
        {"name": "big", "deviceClassName": H100}, {"name": "small", "deviceClassName": MPS}]})
    obj["spec"]["devices"]["constraints"] = [
        {"requests": ["gpu", "pick/big"], "matchAttribute": "gpu.nvidia.com/productName"},
        {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/parentUUID"},
    ]
    obj["spec"]["devices"]["config"] = [{"requests": ["pick/tiny"], "opaque": {
        "driver": "example.com", "parameters": {"apiVersion": "v1", "kind": "X"}}}]
    decision = engine.evaluate(obj, tenants=["research"])
    assert codes(decision) == ["dra-request-unknown", "dra-request-unknown"]
    first, second = decision.diagnostics
    assert first.message == ("constraints[1] names request 'gpus', which the claim does not have (its requests: "
                             "gpu, pick)")
    assert first.path == ("spec", "devices", "constraints", 1, "requests", 0)
    assert second.path == ("spec", "devices", "config", 0, "requests", 0) and "'pick/tiny'" in second.message


def test_a_constraint_on_an_attribute_the_driver_does_not_publish_is_denied(engine: Engine) -> None:
    obj = claim(H100, count=2)
    obj["spec"]["devices"]["constraints"] = [{"requests": ["gpu"], "matchAttribute": "gpu.nvidia.com/index"},
                                             {"distinctAttribute": "gpu.nvidia.com/uuid"},
                                             {"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    decision = engine.evaluate(obj, tenants=["research"])
    assert codes(decision) == ["dra-constraint-attribute-unknown"]
    assert decision.diagnostics[0].path == ("spec", "devices", "constraints", 0, "matchAttribute")
