"""KAI Scheduler's fractional GPUs (pod annotations): counted as sharing and checked against the tenant's modes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import example_admission
import workload_fixtures

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
    dev = engine.evaluate(pod, tenants=("dev",))
    assert dev.allowed  # dev may time-slice
    pod["metadata"]["annotations"]["mps"] = "true"
    denied = engine.evaluate(pod, tenants=("dev",))
    assert not denied.allowed and "by mps" in denied.diagnostics[0].message


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
