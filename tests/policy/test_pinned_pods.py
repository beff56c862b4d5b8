"""Pods that name their node (spec.nodeName): judged on the classes the node's labels select, where known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import example_admission
import yaml

from policy.admission.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "tests" / "fixtures" / "nodes" / "mixed-fleet-t4-dev-and-h100-train-nodes.yaml"


def nodes() -> dict[str, dict[str, str]]:
    items = yaml.safe_load(NODES.read_text(encoding="utf-8"))["items"]
    return {i["metadata"]["name"]: i["metadata"]["labels"] for i in items}


def pinned(node: str, gpus: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": "sandbox"},
            "spec": {"nodeName": node, "containers": [
                {"name": "lab", "image": "lab:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


def test_a_pinned_pod_on_a_node_of_a_class_its_tenant_may_use_is_admitted_when_the_node_is_known() -> None:
    policy = example_admission.admission_policy("mixed-fleet")
    assert not Engine(policy).evaluate(pinned("t4-dev-1"), tenants=("dev",)).allowed  # which class? unknown
    assert Engine(policy, nodes=nodes()).evaluate(pinned("t4-dev-1"), tenants=("dev",)).allowed


def test_a_pinned_pod_on_a_node_of_a_class_its_tenant_may_not_use_is_denied_naming_the_node() -> None:
    engine = Engine(example_admission.admission_policy("mixed-fleet"), nodes=nodes())
    decision = engine.evaluate(pinned("h100-train-1"), tenants=("dev",))
    assert not decision.allowed
    assert any("h100-train" in d.message for d in decision.diagnostics), decision.message


def test_a_pinned_pod_on_a_node_no_class_selects_cannot_get_its_gpu() -> None:
    labels = {"cpu-pool": {"node-pool": "cpu"}}
    decision = Engine(example_admission.admission_policy("mixed-fleet"), nodes=labels).evaluate(
        pinned("cpu-pool"), tenants=("research",))
    assert not decision.allowed
    assert [d.code for d in decision.diagnostics] == ["gpu-request-unsatisfiable"]
    assert decision.diagnostics[0].message.startswith(
        "the pod's nodeName cpu-pool (labelled) excludes every node class that offers 1 nvidia.com/gpu")
    assert decision.diagnostics[0].path == ("spec", "nodeName")


def test_nodes_given_per_call_decide_as_the_engines_own_and_are_remembered_with_their_labels() -> None:
    engine = Engine(example_admission.admission_policy("mixed-fleet"))
    known = nodes()
    assert not engine.evaluate(pinned("t4-dev-1"), tenants=("dev",)).allowed  # not known: every class
    assert engine.evaluate(pinned("t4-dev-1"), tenants=("dev",), nodes={"t4-dev-1": known["t4-dev-1"]}).allowed
    # The same pod, the node relabelled into the training pool: judged again, not answered from the memo.
    moved = engine.evaluate(pinned("t4-dev-1"), tenants=("dev",), nodes={"t4-dev-1": known["h100-train-1"]})
    assert not moved.allowed
    assert any("h100-train" in d.message for d in moved.diagnostics), moved.message


def test_a_pinned_pod_on_a_node_known_not_to_exist_is_denied_naming_the_node() -> None:
    decision = Engine(example_admission.admission_policy("mixed-fleet")).evaluate(
        pinned("ghost-1"), tenants=("research",), nodes={"ghost-1": None})
    assert not decision.allowed
    assert [d.code for d in decision.diagnostics] == ["gpu-request-unsatisfiable"]
    assert decision.diagnostics[0].message.startswith(
        "the pod's nodeName ghost-1 (no such Node) excludes every node class that offers 1 nvidia.com/gpu")
    assert decision.diagnostics[0].path == ("spec", "nodeName")


def test_the_engine_names_the_label_keys_a_node_cache_must_keep() -> None:
    keys = Engine(example_admission.admission_policy("mixed-fleet")).selector_keys
    assert keys == tuple(sorted(keys)) and "node-pool" in keys
