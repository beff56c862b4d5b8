"""The node-label reconciler against the real API server: Nodes created and relabelled by the tests under the field
managers a cluster has (tests/kube/kube_nodes.py: the kubelet registering a node, a person's kubectl, the GPU
Operator), so ownership, conflicts, forced applies, watches and events are the API server's own.

API errors cannot be asked of a healthy API server: those tests wrap the client in `FailingFirst`, which fails the
first calls of a verb before the real server answers the rest (the only stand-in left here)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI
from kube_nodes import Nodes
from kubernetes.client.exceptions import ApiException
from polling import poll

from cli.main import main
from cluster import reconciler, snapshot
from compiler import compile_policy
from policy.load import load_policy_or_raise
from policy.resolved.node_labels import FIELD_MANAGER, ClassLabels, LabelPlan, build_plan, plan_from_json

pytestmark = pytest.mark.kube_api

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
OPERATOR_SPEC = ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml"
MIG = "nvidia.com/mig.config"
OPERATOR = "gpu-operator"  # the field manager the API server records for the operator's node writes
Obj = dict[str, Any]


def fleet_plan(text: str | None = None) -> LabelPlan:
    policy = load_policy_or_raise(text or FLEET.read_text(), filename=str(FLEET))
    configmap = yaml.safe_load(compile_policy(policy)["node-labels/configmap.yaml"])
    plan = plan_from_json(configmap["data"]["plan.json"])
    from policy.resolved.resolve import resolve

    assert plan == build_plan(resolve(policy))  # the ConfigMap carries exactly the plan policy/ computes
    return plan


def operator_plan() -> LabelPlan:
    policy = load_policy_or_raise(OPERATOR_SPEC.read_text(), filename=str(OPERATOR_SPEC))
    plan = plan_from_json(yaml.safe_load(compile_policy(policy)["node-labels/configmap.yaml"])["data"]["plan.json"])
    assert plan.operator_defaults == {MIG: "all-disabled"}
    return plan


def node(name: str, pool: str | None, **labels: str) -> Obj:
    found = {"kubernetes.io/hostname": name, **labels}
    if pool:
        found["node-pool"] = pool
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": found}}


FLEET_NODES = [node("h100-mig-1", "h100-mig"), node("h100-mig-2", "h100-mig"), node("a100-1", "a100-mps"),
               node("t4-1", "t4-dev"), node("cpu-1", None)]
H20_NODES = [node(name, None, **{"gpu-pool": "h20"}) for name in ("h20-1", "h20-2")]


def start_with(api: KubeAPI, nodes: list[Obj]) -> Iterator[Nodes]:
    written = Nodes(api)
    written.clear()
    for obj in nodes:
        written.add(obj)
    yield written
    written.clear()


@pytest.fixture
def fleet(kube_api: KubeAPI) -> Iterator[Nodes]:
    yield from start_with(kube_api, FLEET_NODES)


@pytest.fixture
def h20(kube_api: KubeAPI) -> Iterator[Nodes]:
    yield from start_with(kube_api, H20_NODES)


class Recording:
    """The client as the reconciler gets it, with every call it makes recorded (verb, positional arguments,
    keywords): the only way to see from outside that no write was sent where none was needed."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, verb: str) -> Callable[..., Any]:
        method = getattr(self._api, verb)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((verb, args, kwargs))
            return method(*args, **kwargs)

        return call

    def patched(self) -> list[tuple[str, bool]]:
        """(node, forced) of every apply sent."""
        return [(args[0], bool(kwargs.get("force"))) for verb, args, kwargs in self.calls if verb == "patch_node"]


class FailingFirst(Recording):
    """Fails the first `times` calls of each kind ("list nodes", "watch nodes", "patch nodes", "create events")
    with the status an overloaded API server answers, then lets the real server answer."""

    def __init__(self, api: Any, failures: Mapping[str, tuple[int, int]]) -> None:
        super().__init__(api)
        self.left = {kind: times for kind, (_, times) in failures.items()}
        self.status = {kind: status for kind, (status, _) in failures.items()}

    def __getattr__(self, verb: str) -> Callable[..., Any]:
        passed = super().__getattr__(verb)

        def call(*args: Any, **kwargs: Any) -> Any:
            kind = {"patch_node": "patch nodes", "create_namespaced_event": "create events"}.get(
                verb, "watch nodes" if kwargs.get("watch") else "list nodes")
            if self.left.get(kind, 0) > 0:
                self.left[kind] -= 1
                raise ApiException(status=self.status[kind], reason="Internal Server Error")
            return passed(*args, **kwargs)

        return call


@contextmanager
def running(api: KubeAPI, plan: LabelPlan,
            wrap: Callable[[Any], Recording] = Recording) -> Iterator[tuple[reconciler.Reconciler, Recording]]:
    client = wrap(snapshot.core_api(snapshot.Access(str(api.kubeconfig), None, 10.0)))
    worker = reconciler.Reconciler(client, plan, reconciler.Metrics(), watch_timeout_seconds=1,
                                   backoff_seconds=0.05, max_backoff_seconds=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker, client
    finally:
        worker.stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


def eventually(check: Callable[[], bool], what: str = "the reconciler") -> None:
    poll(lambda: check() or None, timeout=30, what=what)


def conflicts(worker: reconciler.Reconciler, name: str, key: str = MIG) -> float | None:
    value: float | None = worker.metrics.registry.get_sample_value("gpupolicy_node_label_conflicts",
                                                                    {"node": name, "key": key})
    return value


def test_every_class_node_gets_its_labels_and_nothing_else_changes(fleet: Nodes) -> None:
    before = {name: fleet.labels(name) for name in fleet.names()}
    with running(fleet.api, fleet_plan()) as (_, client):
        eventually(lambda: fleet.label_of(MIG) == {"a100-1": "all-disabled", "cpu-1": None, "h100-mig-1": "h100-mig",
                                           "h100-mig-2": "h100-mig", "t4-1": None})
    for name, labels in before.items():
        assert {k: v for k, v in fleet.labels(name).items() if k != MIG} == labels  # no other key touched
    assert reconciler.label_owners(fleet.get("h100-mig-1"))[MIG] == {FIELD_MANAGER}
    assert {name for name, _ in client.patched()} == {"a100-1", "h100-mig-1", "h100-mig-2"}  # none elsewhere


def test_a_node_joining_a_pool_later_gets_its_labels(fleet: Nodes) -> None:
    with running(fleet.api, fleet_plan()):
        eventually(lambda: fleet.labels("h100-mig-1").get(MIG) == "h100-mig")
        fleet.add(node("h100-mig-3", "h100-mig"))
        eventually(lambda: fleet.labels("h100-mig-3").get(MIG) == "h100-mig")


def test_a_label_edited_by_hand_is_reported_never_reverted(fleet: Nodes) -> None:
    with running(fleet.api, fleet_plan()) as (worker, client):
        eventually(lambda: fleet.labels("h100-mig-1").get(MIG) == "h100-mig")
        fleet.change("h100-mig-1", {MIG: "all-1g.10gb"}, manager="kubectl-label")
        eventually(lambda: conflicts(worker, "h100-mig-1") == 1)
        eventually(lambda: len(fleet.events("LabelConflict", FIELD_MANAGER)) == 1)
        # another change to the node (a watch event of its own) reports nothing more and reverts nothing
        fleet.change("h100-mig-1", {"team": "ml"}, manager="kubectl-label")
        eventually(lambda: sum(1 for verb, args, kwargs in client.calls if verb == "list_node" and kwargs.get("watch"))
                   >= 3, what="two more watches")
        assert fleet.labels("h100-mig-1")[MIG] == "all-1g.10gb"  # the person's value stands
        [event] = fleet.events("LabelConflict", FIELD_MANAGER)  # one event, not one per watch event
        assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "h100-mig-1",
                                           "uid": "h100-mig-1"}
        assert event["type"] == "Warning"
        assert "kubectl-label" in event["message"] and "'h100-mig'" in event["message"]
        fleet.change("h100-mig-1", {MIG: "h100-mig"}, manager="kubectl-label")
        eventually(lambda: conflicts(worker, "h100-mig-1") is None)


def test_a_node_leaving_its_class_loses_only_the_labels_gpupolicy_set(fleet: Nodes) -> None:
    fleet.change("t4-1", {"team": "ml"}, manager="provisioning")
    with running(fleet.api, fleet_plan()):
        eventually(lambda: fleet.labels("h100-mig-2").get(MIG) == "h100-mig")
        fleet.change("h100-mig-2", {"node-pool": "retired"}, manager="kubectl-label")
        # the API server removes a key its applier owned alone and no longer sends
        eventually(lambda: MIG not in fleet.labels("h100-mig-2"))
    assert fleet.labels("h100-mig-2")["node-pool"] == "retired" and fleet.labels("t4-1")["team"] == "ml"


def test_two_classes_swapping_selectors_move_their_labels_on_the_next_plan(fleet: Nodes) -> None:
    with running(fleet.api, fleet_plan()):
        eventually(lambda: fleet.labels("a100-1").get(MIG) == "all-disabled")
    text = FLEET.read_text().replace("node-pool: a100-mps", "node-pool: SWAP").replace(
        "node-pool: h100-mig", "node-pool: a100-mps").replace("node-pool: SWAP", "node-pool: h100-mig")
    with running(fleet.api, fleet_plan(text)):
        eventually(lambda: fleet.label_of(MIG) == {"a100-1": "h100-mig", "cpu-1": None, "h100-mig-1": "all-disabled",
                                           "h100-mig-2": "all-disabled", "t4-1": None})


def test_api_errors_are_retried_and_the_labels_arrive(fleet: Nodes) -> None:
    failures = {"list nodes": (500, 2), "patch nodes": (500, 3), "watch nodes": (503, 1), "create events": (500, 1)}
    with running(fleet.api, fleet_plan(), wrap=lambda api: FailingFirst(api, failures)) as (worker, _):
        eventually(lambda: fleet.labels("h100-mig-2").get(MIG) == "h100-mig"
                   and fleet.labels("a100-1").get(MIG) is not None)
        assert worker.metrics.registry.get_sample_value("gpupolicy_node_label_errors_total", {"verb": "patch"}) == 3
        assert worker.metrics.registry.get_sample_value(
            "gpupolicy_node_label_errors_total", {"verb": "list/watch"}) >= 2


def test_a_restarted_reconciler_finds_nothing_to_do(fleet: Nodes) -> None:
    with running(fleet.api, fleet_plan()):
        eventually(lambda: fleet.labels("h100-mig-2").get(MIG) == "h100-mig"
                   and fleet.labels("a100-1").get(MIG) is not None)
    versions = {name: fleet.get(name)["metadata"]["resourceVersion"] for name in fleet.names()}
    with running(fleet.api, fleet_plan()) as (_, client):
        eventually(lambda: sum(1 for verb, _, kwargs in client.calls if verb == "list_node" and kwargs.get("watch"))
                   >= 2, what="two watches")
    assert client.patched() == []
    assert {name: fleet.get(name)["metadata"]["resourceVersion"] for name in fleet.names()} == versions


def test_nodes_two_classes_select_are_left_alone_and_reported(fleet: Nodes) -> None:
    plan = fleet_plan()
    overlapping = LabelPlan(plan.cluster, (*plan.classes, ClassLabels(
        "extra", {"kubernetes.io/hostname": "h100-mig-1"}, {MIG: "all-disabled"})))
    with running(fleet.api, overlapping):
        eventually(lambda: fleet.labels("h100-mig-2").get(MIG) == "h100-mig")
        eventually(lambda: len(fleet.events("OverlappingClasses", FIELD_MANAGER)) == 1)
    assert MIG not in fleet.labels("h100-mig-1")
    assert fleet.events("OverlappingClasses", FIELD_MANAGER)[0]["involvedObject"]["name"] == "h100-mig-1"


def test_the_command_reconciles_once_and_refuses_a_bad_plan(fleet: Nodes, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(fleet_plan().to_json())
    command = ["cluster", "reconcile-labels", "--plan", str(plan), "--once", "--kubeconfig", str(fleet.api.kubeconfig)]
    assert main(command) == 0, capsys.readouterr().err
    assert fleet.labels("h100-mig-1")[MIG] == "h100-mig"
    plan.write_text("{}")
    code, err = main(command), capsys.readouterr().err
    assert code == 2 and "not a version 1 label plan" in err and "Traceback" not in err


# --- the GPU Operator's defaults (deploy: gpu-operator) -----------------------------------------------------------


def test_the_operator_s_default_written_first_is_taken_over_not_reported(h20: Nodes) -> None:
    # The operator labels a MIG-capable node that lacks nvidia.com/mig.config with its default before the
    # reconciler gets to it (migManager.config.default: all-disabled, which the tree sets).
    h20.change("h20-1", {MIG: "all-disabled"}, manager=OPERATOR)
    with running(h20.api, operator_plan()) as (worker, client):
        eventually(lambda: h20.labels("h20-1").get(MIG) == "h20" and h20.labels("h20-2").get(MIG) == "h20")
        # A node joining later, labelled by the operator in the same moment, goes the same way.
        h20.add(node("h20-3", None, **{"gpu-pool": "h20"}))
        h20.change("h20-3", {MIG: "all-disabled"}, manager=OPERATOR)
        eventually(lambda: h20.labels("h20-3").get(MIG) == "h20")
        assert conflicts(worker, "h20-1") is None
    assert h20.events("LabelConflict", FIELD_MANAGER) == []
    for name in ("h20-1", "h20-3"):
        assert reconciler.label_owners(h20.get(name))[MIG] == {FIELD_MANAGER}  # the operator's claim is gone
    forced = {name for name, force in client.patched() if force}
    assert forced and forced <= {"h20-1", "h20-3"}  # never where not needed


def test_the_same_value_set_by_a_person_is_still_a_conflict(h20: Nodes) -> None:
    h20.change("h20-1", {MIG: "all-disabled"}, manager="kubectl-label")
    with running(h20.api, operator_plan()):
        eventually(lambda: h20.labels("h20-2").get(MIG) == "h20")
        eventually(lambda: len(h20.events("LabelConflict", FIELD_MANAGER)) == 1)
    assert h20.labels("h20-1")[MIG] == "all-disabled"
    assert [e["involvedObject"]["name"] for e in h20.events("LabelConflict", FIELD_MANAGER)] == ["h20-1"]


def test_standalone_trees_override_no_operator_value(fleet: Nodes) -> None:
    # No operator runs beside a standalone tree: a writer calling itself gpu-operator is just another writer.
    fleet.change("h100-mig-1", {MIG: "all-disabled"}, manager=OPERATOR)
    plan = fleet_plan()
    assert plan.operator_defaults == {}
    with running(fleet.api, plan):
        eventually(lambda: len(fleet.events("LabelConflict", FIELD_MANAGER)) == 1)
    assert fleet.labels("h100-mig-1")[MIG] == "all-disabled"


def test_the_operator_s_deploy_label_default_is_overridden_too(h20: Nodes) -> None:
    # A vgpu class under the operator needs nvidia.com/gpu.deploy.device-plugin=false; the operator writes true
    # on every GPU node that lacks it (gpuStateLabels) and keeps whatever value it finds afterwards.
    deploy = "nvidia.com/gpu.deploy.device-plugin"
    h20.change("h20-1", {deploy: "true"}, manager=OPERATOR)
    plan = LabelPlan("vgpu", (ClassLabels("vgpu", {"gpu-pool": "h20"}, {deploy: "false"}),), {deploy: "true"})
    with running(h20.api, plan):
        eventually(lambda: h20.labels("h20-1").get(deploy) == "false" == h20.labels("h20-2").get(deploy))
    assert h20.events("LabelConflict", FIELD_MANAGER) == []
