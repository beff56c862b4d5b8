"""Bounded review: the engine's work is linear in the object, a pod no class can ever hold is refused before any
rule runs, and a review whose time is up raises OverBudget (never an allow).

Linearity is asserted on the count of Python function calls the engine makes (sys.setprofile), not on time:
the same on any machine, and it sees a loop in a loop over containers that a timing would hide in noise.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from policy.admission.budget import OverBudget
from policy.admission.engine import Engine
from policy.load import load_policy_or_raise
from policy.resolved.offers import AdmissionPolicy, build_admission_policy

ROOT = Path(__file__).resolve().parents[2]
TKE = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
MIXED = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"


@functools.cache
def policy(path: Path = TKE) -> AdmissionPolicy:
    return build_admission_policy(load_policy_or_raise(path.read_text(encoding="utf-8"), filename=str(path)))


def container(i: int, limits: dict[str, str]) -> dict[str, Any]:
    return {"name": f"c{i}", "image": "registry.example/infer:1.0", "resources": {"limits": limits}}


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "default"}, "spec": spec}


def gpu_each(n: int) -> dict[str, Any]:
    return pod({"containers": [container(i, {"nvidia.com/gpu": "2"}) for i in range(n)]})


def one_gpu(n: int) -> dict[str, Any]:
    """One container asking for two shared GPUs (denied, so the fix search runs), the rest CPU sidecars."""
    return pod({"containers": [container(0, {"nvidia.com/gpu": "2"}),
                               *(container(i, {"cpu": "1"}) for i in range(1, n))]})


def many_resources(n: int) -> dict[str, Any]:
    """One container asking for n GPU resources no class offers: every one named, with a did-you-mean."""
    return pod({"containers": [container(0, {f"nvidia.com/mig-{i}g.5gb": "1" for i in range(n)})]})


def affinity(n: int) -> dict[str, Any]:
    terms = [{"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                    "values": ["PNV5b.8XLARGE96", f"other-{i}"]}]} for i in range(n)]
    return pod({"containers": [container(0, {"nvidia.com/gpu": "1"})], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})


def init_containers(n: int) -> dict[str, Any]:
    return pod({"initContainers": [container(i, {"nvidia.com/gpu": "2"}) for i in range(n)],
                "containers": [container(n, {"nvidia.com/gpu": "1"})]})


def calls(obj: dict[str, Any]) -> int:
    """Python function calls the engine makes to judge obj afresh."""
    engine = Engine(policy(), memo_size=0)
    engine.evaluate(obj)  # warms the per-policy caches, so the count below is the review's own work
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        Engine.evaluate(engine, obj)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("shape", [gpu_each, one_gpu, many_resources, affinity, init_containers],
                         ids=lambda shape: shape.__name__)
def test_the_engines_work_grows_linearly_with_the_object(shape: Callable[[int], dict[str, Any]]) -> None:
    small, large = calls(shape(100)), calls(shape(1000))
    # 10x the object: at most 11x the calls (an exponent of 1.04); a loop in a loop over containers made 100x.
    assert large <= 11 * small, (small, large)


def test_a_pod_with_more_gpu_containers_than_any_node_holds_is_refused_before_the_rules_run() -> None:
    decision = Engine(policy()).evaluate(gpu_each(5000))
    assert not decision.allowed
    [finding] = decision.diagnostics
    assert finding.code == "gpu-request-unsatisfiable"
    assert finding.path == ("spec", "containers")
    # tke-l20-t4: class l20 is one L20 time-sliced 8 ways, the most GPU devices one node offers.
    assert "the pod has 5000 containers that ask for GPUs" in finding.message
    assert "the largest node class, l20, holds 8 GPU devices per node" in finding.message
    assert "split the work into pods of at most 8 GPU containers" in finding.hint
    assert finding.fix is None  # no edit of this pod admits it, and none is claimed


def test_a_pod_exactly_at_the_largest_nodes_capacity_is_judged_by_the_rules() -> None:
    at_capacity = pod({"containers": [container(i, {"nvidia.com/gpu": "1"}) for i in range(8)],
                       "nodeSelector": {"node.kubernetes.io/instance-type": "PNV5b.8XLARGE96"}})
    decision = Engine(policy()).evaluate(at_capacity)
    assert decision.allowed, decision.message


def test_the_early_refusal_follows_the_rules_mode() -> None:
    warned = policy().model_copy(update={"rules": {**policy().rules, "gpu-request-unsatisfiable": "warn"}})
    decision = Engine(warned).evaluate(gpu_each(1000))
    assert decision.allowed and [d.severity for d in decision.diagnostics] == ["warning"]


def test_init_containers_run_one_at_a_time_and_do_not_count_towards_the_early_refusal() -> None:
    decision = Engine(policy()).evaluate(init_containers(50))
    assert "containers that ask for GPUs" not in decision.message


def test_a_review_out_of_time_raises_over_budget_and_is_not_remembered() -> None:
    engine = Engine(policy())
    with pytest.raises(OverBudget, match="time budget ran out while applying the rules"):
        engine.evaluate(one_gpu(3), expired=lambda: True)
    # Nothing was remembered: the same object, with time, gets its real verdict.
    decision = engine.evaluate(one_gpu(3))
    assert not decision.allowed and decision.diagnostics[0].code == "shared-gpu-request-above-one"


def test_the_fix_search_stops_when_the_time_is_up() -> None:
    asked = 0

    def expires_after_the_rules() -> bool:
        nonlocal asked
        asked += 1
        return asked > 1  # the rules ran; the first fix candidate finds the time up

    with pytest.raises(OverBudget, match="searching for a fix"):
        Engine(policy(), memo_size=0).evaluate(one_gpu(3), expired=expires_after_the_rules)


def test_objects_that_ask_for_no_gpu_never_consult_the_budget() -> None:
    def fail() -> bool:
        raise AssertionError("asked")

    assert Engine(policy()).evaluate(pod({"containers": [container(0, {"cpu": "1"})]}), expired=fail).allowed


def test_admit_decides_a_pod_of_5000_gpu_containers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "big.json"
    manifest.write_text(json.dumps(gpu_each(5000)))
    assert main(["admit", "-p", str(TKE), str(manifest), "--output", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    text = json.dumps(report)
    assert "gpu-request-unsatisfiable" in text and "5000 containers that ask for GPUs" in text
