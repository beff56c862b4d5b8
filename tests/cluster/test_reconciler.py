"""The node-label reconciler against a fake API server at the kubernetes-client boundary (HTTP, watch, server-side
apply with field ownership): nodes joining and leaving, hand edits, selector changes, API errors, restarts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import build_recorded
import pytest
import yaml
from cluster_support import ROOT, Result
from fake_apiserver import FakeApiServer, Fault, serve

from cluster import reconciler, snapshot
from compiler import compile_policy
from policy.load import load_policy_or_raise
from policy.resolved.node_labels import FIELD_MANAGER, ClassLabels, LabelPlan, build_plan, plan_from_json

FLEET = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
MIG = "nvidia.com/mig.config"


def fleet_plan(text: str | None = None) -> LabelPlan:
    policy = load_policy_or_raise(text or FLEET.read_text(), filename=str(FLEET))
    tree = compile_policy(policy)
    configmap = yaml.safe_load(tree["node-labels/configmap.yaml"])
    plan = plan_from_json(configmap["data"]["plan.json"])
    from policy.resolved.resolve import resolve

    assert plan == build_plan(resolve(policy))  # the ConfigMap carries exactly the plan policy/ computes
    return plan


def node(name: str, pool: str | None, **labels: str) -> dict:
    found = {"kubernetes.io/hostname": name, **labels}
    if pool:
        found["node-pool"] = pool
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": found}}


NODES = [node("h100-mig-1", "h100-mig"), node("h100-mig-2", "h100-mig"), node("a100-1", "a100-mps"),
         node("t4-1", "t4-dev"), node("cpu-1", None)]


@contextmanager
def running(server: FakeApiServer, tmp_path: Path, plan: LabelPlan) -> Iterator[reconciler.Reconciler]:
    api = snapshot.core_api(snapshot.Access(str(server.kubeconfig(tmp_path)), None, 5.0))
    worker = reconciler.Reconciler(api, plan, reconciler.Metrics(), watch_timeout_seconds=1,
                                   backoff_seconds=0.05, max_backoff_seconds=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()


def eventually(check: Callable[[], bool], timeout: float = 8.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    assert check()


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with serve(FakeApiServer({"nodes": [json.loads(json.dumps(n)) for n in NODES]}, build_recorded.TAKEN_AT)) as s:
        yield s


def applied(server: FakeApiServer) -> dict[str, str | None]:
    return {name: server.labels(name).get(MIG) for name in sorted(server.managed)}


def test_every_class_node_gets_its_labels_and_nothing_else_changes(server: FakeApiServer, tmp_path: Path) -> None:
    before = {name: server.labels(name) for name in server.managed}
    with running(server, tmp_path, fleet_plan()):
        eventually(lambda: applied(server) == {"a100-1": "all-disabled", "cpu-1": None, "h100-mig-1": "h100-mig",
                                                "h100-mig-2": "h100-mig", "t4-1": None})
    for name, labels in before.items():
        after = server.labels(name)
        assert {k: v for k, v in after.items() if k != MIG} == labels  # no other key touched
    owners = reconciler.label_owners(server.node("h100-mig-1"))
    assert owners[MIG] == {FIELD_MANAGER}
    assert all(method != "PATCH" or ("/nodes/cpu-1" not in path and "/nodes/t4-1" not in path)
               for method, path in server.requests)


def test_a_node_joining_a_pool_later_gets_its_labels(server: FakeApiServer, tmp_path: Path) -> None:
    with running(server, tmp_path, fleet_plan()):
        eventually(lambda: applied(server)["h100-mig-1"] == "h100-mig")
        server.add_node(node("h100-mig-3", "h100-mig"))
        eventually(lambda: server.labels("h100-mig-3").get(MIG) == "h100-mig")


def test_a_label_edited_by_hand_is_reported_never_reverted(server: FakeApiServer, tmp_path: Path) -> None:
    with running(server, tmp_path, fleet_plan()) as worker:
        eventually(lambda: applied(server)["h100-mig-1"] == "h100-mig")
        server.change_node("h100-mig-1", {MIG: "all-1g.10gb"}, manager="kubectl-label")
        eventually(lambda: any(e["reason"] == "LabelConflict" for e in server.events))
        time.sleep(0.5)
        assert server.labels("h100-mig-1")[MIG] == "all-1g.10gb"  # the person's value stands
        event = next(e for e in server.events if e["reason"] == "LabelConflict")
        assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "h100-mig-1",
                                           "uid": "h100-mig-1"}
        assert "kubectl-label" in event["message"] and "'h100-mig'" in event["message"]
        conflicts = worker.metrics.registry.get_sample_value(
            "gpupolicy_node_label_conflicts", {"node": "h100-mig-1", "key": MIG})
        assert conflicts == 1
        assert len([e for e in server.events if e["reason"] == "LabelConflict"]) == 1  # one event, not one per watch
        server.change_node("h100-mig-1", {MIG: "h100-mig"}, manager="kubectl-label")
        eventually(lambda: worker.metrics.registry.get_sample_value(
            "gpupolicy_node_label_conflicts", {"node": "h100-mig-1", "key": MIG}) is None)


def test_a_node_leaving_its_class_loses_only_the_labels_gpupolicy_set(server: FakeApiServer, tmp_path: Path) -> None:
    server.change_node("t4-1", {"team": "ml"}, manager="provisioning")
    with running(server, tmp_path, fleet_plan()):
        eventually(lambda: applied(server)["h100-mig-2"] == "h100-mig")
        server.change_node("h100-mig-2", {"node-pool": "retired"}, manager="kubectl-label")
        eventually(lambda: MIG not in server.labels("h100-mig-2"))
    assert server.labels("h100-mig-2")["node-pool"] == "retired" and server.labels("t4-1")["team"] == "ml"


def test_two_classes_swapping_selectors_move_their_labels_on_the_next_plan(server: FakeApiServer,
                                                                          tmp_path: Path) -> None:
    with running(server, tmp_path, fleet_plan()):
        eventually(lambda: applied(server)["a100-1"] == "all-disabled")
    text = FLEET.read_text().replace("node-pool: a100-mps", "node-pool: SWAP").replace(
        "node-pool: h100-mig", "node-pool: a100-mps").replace("node-pool: SWAP", "node-pool: h100-mig")
    with running(server, tmp_path, fleet_plan(text)):
        eventually(lambda: applied(server) == {"a100-1": "h100-mig", "cpu-1": None, "h100-mig-1": "all-disabled",
                                                "h100-mig-2": "all-disabled", "t4-1": None})


def test_api_errors_are_retried_and_the_labels_arrive(server: FakeApiServer, tmp_path: Path) -> None:
    server.faults.update({"list nodes": Fault(status=500, times=2), "patch nodes": Fault(status=500, times=3),
                          "watch nodes": Fault(status=503, times=1), "create events": Fault(status=500, times=1)})
    with running(server, tmp_path, fleet_plan()) as worker:
        eventually(lambda: applied(server)["h100-mig-2"] == "h100-mig" and applied(server)["a100-1"] is not None)
        assert worker.metrics.registry.get_sample_value("gpupolicy_node_label_errors_total", {"verb": "patch"}) == 3
        assert worker.metrics.registry.get_sample_value(
            "gpupolicy_node_label_errors_total", {"verb": "list/watch"}) >= 2


def test_a_restarted_reconciler_finds_nothing_to_do(server: FakeApiServer, tmp_path: Path) -> None:
    with running(server, tmp_path, fleet_plan()):
        eventually(lambda: applied(server)["h100-mig-2"] == "h100-mig" and applied(server)["a100-1"] is not None)
    patches = len([r for r in server.requests if r[0] == "PATCH"])
    with running(server, tmp_path, fleet_plan()):
        eventually(lambda: len([r for r in server.requests if r == ("GET", r[1]) and "watch" in r[1]]) >= 2)
    assert len([r for r in server.requests if r[0] == "PATCH"]) == patches


def test_nodes_two_classes_select_are_left_alone_and_reported(server: FakeApiServer, tmp_path: Path) -> None:
    plan = fleet_plan()
    overlapping = LabelPlan(plan.cluster, (*plan.classes, type(plan.classes[0])(
        "extra", {"kubernetes.io/hostname": "h100-mig-1"}, {MIG: "all-disabled"})))
    with running(server, tmp_path, overlapping):
        eventually(lambda: applied(server)["h100-mig-2"] == "h100-mig")
        eventually(lambda: any(e["reason"] == "OverlappingClasses" for e in server.events))
    assert MIG not in server.labels("h100-mig-1")


def test_the_command_reconciles_once_and_refuses_a_bad_plan(server: FakeApiServer, tmp_path: Path,
                                                           gpupolicy: Callable[..., Result]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(fleet_plan().to_json())
    kubeconfig = server.kubeconfig(tmp_path)
    result = gpupolicy("cluster", "reconcile-labels", "--plan", plan, "--once", "--kubeconfig", kubeconfig)
    assert result.code == 0, result.err
    assert applied(server)["h100-mig-1"] == "h100-mig"
    plan.write_text("{}")
    result = gpupolicy("cluster", "reconcile-labels", "--plan", plan, "--once", "--kubeconfig", kubeconfig)
    assert result.code == 2 and "not a version 1 label plan" in result.err and "Traceback" not in result.err


# --- the GPU Operator's defaults (deploy: gpu-operator) -----------------------------------------------------------

OPERATOR_SPEC = ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml"
OPERATOR = "gpu-operator"  # the field manager the API server records for the operator's node writes


def operator_plan() -> LabelPlan:
    policy = load_policy_or_raise(OPERATOR_SPEC.read_text(), filename=str(OPERATOR_SPEC))
    configmap = yaml.safe_load(compile_policy(policy)["node-labels/configmap.yaml"])
    plan = plan_from_json(configmap["data"]["plan.json"])
    assert plan.operator_defaults == {MIG: "all-disabled"}
    return plan


@pytest.fixture
def operator_server() -> Iterator[FakeApiServer]:
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "gpu-pool": "h20"}}} for name in ("h20-1", "h20-2")]
    with serve(FakeApiServer({"nodes": nodes}, build_recorded.TAKEN_AT)) as s:
        yield s


def test_the_operator_s_default_written_first_is_taken_over_not_reported(operator_server: FakeApiServer,
                                                                        tmp_path: Path) -> None:
    server = operator_server
    # The operator labels a MIG-capable node that lacks nvidia.com/mig.config with its default before the
    # reconciler gets to it (migManager.config.default: all-disabled, which the tree sets).
    server.change_node("h20-1", {MIG: "all-disabled"}, manager=OPERATOR)
    with running(server, tmp_path, operator_plan()) as worker:
        eventually(lambda: server.labels("h20-1").get(MIG) == "h20" and server.labels("h20-2").get(MIG) == "h20")
        # A node joining later, labelled by the operator in the same moment, goes the same way.
        server.add_node(node("h20-3", None, **{"gpu-pool": "h20"}))
        server.change_node("h20-3", {MIG: "all-disabled"}, manager=OPERATOR)
        eventually(lambda: server.labels("h20-3").get(MIG) == "h20")
        assert worker.metrics.registry.get_sample_value(
            "gpupolicy_node_label_conflicts", {"node": "h20-1", "key": MIG}) is None
    assert [e for e in server.events if e["reason"] == "LabelConflict"] == []
    for name in ("h20-1", "h20-3"):
        assert reconciler.label_owners(server.node(name))[MIG] == {FIELD_MANAGER}  # the operator's claim is gone
    forced = [path for method, path in server.requests if method == "PATCH" and "force=true" in path]
    assert forced and all("/nodes/h20-1" in p or "/nodes/h20-3" in p for p in forced)  # never where not needed


def test_the_same_value_set_by_a_person_is_still_a_conflict(operator_server: FakeApiServer, tmp_path: Path) -> None:
    server = operator_server
    server.change_node("h20-1", {MIG: "all-disabled"}, manager="kubectl-label")
    with running(server, tmp_path, operator_plan()):
        eventually(lambda: server.labels("h20-2").get(MIG) == "h20")
        eventually(lambda: any(e["reason"] == "LabelConflict" for e in server.events))
    assert server.labels("h20-1")[MIG] == "all-disabled"
    assert [e["involvedObject"]["name"] for e in server.events if e["reason"] == "LabelConflict"] == ["h20-1"]


def test_standalone_trees_override_no_operator_value(server: FakeApiServer, tmp_path: Path) -> None:
    # No operator runs beside a standalone tree: a writer calling itself gpu-operator is just another writer.
    server.change_node("h100-mig-1", {MIG: "all-disabled"}, manager=OPERATOR)
    plan = fleet_plan()
    assert plan.operator_defaults == {}
    with running(server, tmp_path, plan):
        eventually(lambda: any(e["reason"] == "LabelConflict" for e in server.events))
    assert server.labels("h100-mig-1")[MIG] == "all-disabled"


def test_the_operator_s_deploy_label_default_is_overridden_too(operator_server: FakeApiServer, tmp_path: Path) -> None:
    # A vgpu class under the operator needs nvidia.com/gpu.deploy.device-plugin=false; the operator writes true
    # on every GPU node that lacks it (gpuStateLabels) and keeps whatever value it finds afterwards.
    deploy = "nvidia.com/gpu.deploy.device-plugin"
    server = operator_server
    server.change_node("h20-1", {deploy: "true"}, manager=OPERATOR)
    plan = LabelPlan("vgpu", (ClassLabels("vgpu", {"gpu-pool": "h20"}, {deploy: "false"}),),
                     {deploy: "true"})
    with running(server, tmp_path, plan):
        eventually(lambda: server.labels("h20-1").get(deploy) == "false" == server.labels("h20-2").get(deploy))
    assert [e for e in server.events if e["reason"] == "LabelConflict"] == []
