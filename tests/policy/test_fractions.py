"""KAI Scheduler's fractional GPUs (pod annotations): counted as sharing and checked against the tenant's modes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import example_admission
import pytest
import workload_fixtures
from json_patch import apply_patch

from policy.admission import fractions
from policy.admission.engine import Engine
from policy.admission.workloads import find_workload
from policy.resolved.offers import AdmissionPolicy, TenantDoc

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "workloads"


def mixed_fleet() -> AdmissionPolicy:
    return example_admission.admission_policy("mixed-fleet")


@functools.cache
def exclusive_only() -> Engine:
    """mixed-fleet with a tenant train that may use whole GPUs only."""
    train = TenantDoc(name="train", match_labels={"gpu-tier": "train"}, allow=("exclusive",))
    return Engine(mixed_fleet().model_copy(update={"tenants": (*mixed_fleet().tenants, train)}))


def kai_pod(name: str) -> dict[str, Any]:
    (pod,) = workload_fixtures.documents(FIXTURES / name)
    return pod


def test_a_kai_gpu_fraction_pod_in_an_exclusive_only_tenant_is_denied_with_the_mode_and_the_tenant() -> None:
    decision = exclusive_only().evaluate(kai_pod("deny/kai-gpu-sharing-fraction-prod-on-mixed-fleet.yaml"),
                                         tenants=("train",))
    assert not decision.allowed
    (found,) = decision.diagnostics
    assert (found.code, found.path) == ("tenant-sharing-mode-denied", ("metadata", "annotations", "gpu-fraction"))
    assert found.message == ("the pod asks KAI Scheduler for a fractional GPU (gpu-fraction: '0.5', for container "
                             "'gpu-workload'): KAI shares one GPU among such pods by time-slicing, with no memory "
                             "isolation, and tenant train may use exclusive only")
    assert found.hint == ("no change to this object within the policy admits it as a KAI fractional-GPU pod: ask "
                          "the platform team to allow time-slicing for tenant train, or remove the annotation and "
                          "request whole GPUs (nvidia.com/gpu) in container 'gpu-workload', on a class tenant train "
                          "may use")


def test_a_kai_pod_in_a_tenant_that_may_time_slice_is_admitted_and_with_the_mps_annotation_needs_mps() -> None:
    pod = kai_pod("allow/kai-gpu-sharing-non-default-container-research-on-mixed-fleet.yaml")
    engine = Engine(mixed_fleet())
    assert engine.evaluate(pod, tenants=("research",)).allowed
    pod["spec"]["nodeSelector"] = {"node-pool": "t4-dev"}  # dev may time-slice, on t4-dev only
    assert engine.evaluate(pod, tenants=("dev",)).allowed
    pod["metadata"]["annotations"]["mps"] = "true"
    denied = engine.evaluate(pod, tenants=("dev",))
    assert not denied.allowed and "by mps" in denied.diagnostics[0].message


def test_an_unpinned_kai_pod_of_a_tenant_limited_to_a_class_is_denied_and_pinned_there_by_a_checked_patch() -> None:
    pod = kai_pod("allow/kai-gpu-sharing-non-default-container-research-on-mixed-fleet.yaml")
    engine = Engine(mixed_fleet())
    decision = engine.evaluate(pod, tenants=("dev",))  # time-slicing is dev's mode, but only on t4-dev
    assert not decision.allowed
    (found,) = decision.diagnostics
    assert (found.code, found.path) == ("tenant-sharing-mode-denied", ("metadata", "annotations", "gpu-fraction"))
    # h100-train is tainted: the pod does not tolerate it, so KAI cannot place it there either
    assert found.message.endswith("class a100-mps, which tenant dev may not use (tenant dev may use class t4-dev only)")
    assert found.hint == "pin the pod to class t4-dev with nodeSelector {node-pool: t4-dev}"
    assert found.fix is not None
    patch = found.fix.to_dict()["jsonPatch"]
    assert patch == [{"op": "add", "path": "/spec/nodeSelector", "value": {"node-pool": "t4-dev"}}]
    fixed = apply_patch(pod, patch)
    assert engine.evaluate(fixed, tenants=("dev",)).diagnostics == ()


# NVIDIA/KAI-Scheduler @72de64fc pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator_test.go: the cases
# its validator refuses (annotations and the container's GPU limit as the test table writes them), with its words.
KAI_REFUSES = [
    ("forbid fraction limit (1500 milli)", {"gpu-fraction": "1.5"}, None,
     "gpu-fraction annotation value must be a positive number smaller than 1.0", "gpu-fraction"),
    ("forbid negative GPU fraction annotation", {"gpu-fraction": "-1"}, None,
     "gpu-fraction annotation value must be a positive number smaller than 1.0", "gpu-fraction"),
    ("forbid negative GPU memory annotation", {"gpu-memory": "-1"}, None,
     "gpu-memory annotation value must be a positive integer greater than 0", "gpu-memory"),
    ("forbid GPU fraction with GPU Memory fraction annotation", {"gpu-fraction": "0.5", "gpu-memory": "1"}, None,
     "cannot request both GPU and GPU memory", "gpu-memory"),
    ("forbid GPU annotation and GPU request mismatch (fractional)", {"gpu-fraction": "0.5"}, "2m",
     "cannot have both GPU fraction request and whole GPU resource request/limit", "gpu-fraction"),
    ("forbid GPU fraction count without fractions or memory", {"gpu-fraction-num-devices": "1"}, None,
     "cannot request multiple fractional devices without specifying fraction portion or gpu-memory",
     "gpu-fraction-num-devices"),
    ("forbid GPU fraction count without fractions or memory (1.2)",
     {"gpu-fraction-num-devices": "1.2", "gpu-fraction": "0.2"}, None,
     "fraction count annotation value must be a positive integer greater than 0", "gpu-fraction-num-devices"),
]


@pytest.mark.parametrize(("case", "annotations", "gpu_limit", "words", "key"), KAI_REFUSES,
                         ids=[c[0] for c in KAI_REFUSES])
def test_what_kais_validator_refuses_is_denied_at_the_annotation_with_kais_reason(
        case: str, annotations: dict[str, str], gpu_limit: str | None, words: str, key: str) -> None:
    resources = {"limits": {"nvidia.com/gpu": gpu_limit}} if gpu_limit else {}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations},
           "spec": {"containers": [{"name": "c", "resources": resources}]}}
    decision = Engine(mixed_fleet()).evaluate(pod, tenants=("research",))
    assert not decision.allowed
    refused = [d for d in decision.diagnostics if d.code == "kai-annotation-invalid"]
    assert refused and refused[0].path == ("metadata", "annotations", key), decision.render()
    assert any(words in d.message for d in refused), decision.render()


def test_a_fraction_of_one_whole_gpu_and_a_value_written_as_a_number_are_refused_a_container_name_must_exist() -> None:
    def pod(written: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": written},
                "spec": {"containers": [{"name": "main"}], "nodeSelector": {"node-pool": "t4-dev"}}}

    engine = Engine(mixed_fleet())
    for written, key, words in (
            ({"gpu-fraction": "1"}, "gpu-fraction", "is not a portion of one GPU"),  # KAI: >= 1.0 is refused
            ({"gpu-fraction": 0.5}, "gpu-fraction", "written as float 0.5"),
            ({"gpu-memory": "2Gi"}, "gpu-memory", "is not a whole number of MiB"),
            ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "sidecar"}, "gpu-fraction-container-name",
             "container with name sidecar not found for fraction request")):
        (found,) = engine.evaluate(pod(written), tenants=("dev",)).diagnostics
        assert (found.code, found.path[-1]) == ("kai-annotation-invalid", key)
        assert words in found.message and found.fix is None
    assert engine.evaluate(pod({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}), tenants=("dev",)).allowed


def test_the_container_kai_gives_the_gpu_is_the_named_init_container() -> None:
    pod = kai_pod("deny/kai-gpu-sharing-init-container-prod-on-mixed-fleet.yaml")
    found = fractions.read(pod, find_workload(pod))  # type: ignore[arg-type]
    assert found is not None and (found.container, found.init, found.mode) == ("gpu-init", True, "time-slicing")


def test_a_deployment_template_annotation_is_read_where_the_template_writes_it() -> None:
    pod = kai_pod("deny/kai-gpu-memory-prod-on-mixed-fleet.yaml")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"template": {"metadata": pod["metadata"], "spec": pod["spec"]}}}
    decision = Engine(mixed_fleet()).evaluate(deployment, tenants=("prod",))
    assert not decision.allowed
    assert decision.diagnostics[0].path == ("spec", "template", "metadata", "annotations", "gpu-memory")


def test_gpu_looking_annotations_nothing_reads_are_listed_and_known_ones_are_not() -> None:
    pod = kai_pod("deny/kai-gpu-memory-prod-on-mixed-fleet.yaml")
    pod["metadata"]["annotations"].update({"gpu_fraction": "0.5", "nvidia.com/use-gputype": "A100",
                                           "example.com/team": "x", "hami.io/gpu-scheduler-policy": "binpack"})
    found = fractions.unknown_gpu_annotations(pod, find_workload(pod))  # type: ignore[arg-type]
    assert found == (("gpu_fraction", ("metadata", "annotations", "gpu_fraction")),)
