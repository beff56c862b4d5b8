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
