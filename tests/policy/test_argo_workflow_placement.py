"""Argo Workflows: a template's pod is built as Argo's controller builds it, with the workflow's own placement.

argoproj/argo-workflows v4.1.2 workflow/controller/workflowpod.go: addSchedulingConstraints takes nodeSelector,
affinity and tolerations each from the template where it sets it, else from the steps or DAG template running it,
else from spec (whole: never merged); schedulerName from the template, else spec; addMetadata puts
spec.podMetadata under the template's metadata; processPodSpecPatch applies spec.podSpecPatch, then the
template's; operator.go mergedTemplateDefaultsInto merges each template onto spec.templateDefaults first. Findings
on what came from the workflow point at the workflow's field; every fix given is a JSON Patch that admits the
object (tests/policy/test_fix_corpus.py check_every_fix_admits).
"""

from __future__ import annotations

import copy
import functools
import time
from typing import Any

import example_admission
import pytest
from test_fix_corpus import check_every_fix_admits

from policy.admission.engine import Decision, Engine

DEV = {"gpu-tier": "dev"}
RESEARCH = {"gpu-tier": "research"}
PROD = {"gpu-tier": "prod"}
T4 = {"node-pool": "t4-dev"}  # mixed-fleet: t4-dev is time-sliced, the only class of tenant dev
TRAIN = {"node-pool": "h100-train"}  # whole GPUs, tainted dedicated=training:NoSchedule
TRAINING = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
NAMESPACE = "apps"


@functools.cache
def engine() -> Engine:
    return Engine(example_admission.admission_policy("mixed-fleet"))


def judge(obj: dict[str, Any], labels: dict[str, str], **kwargs: Any) -> Decision:
    return engine().evaluate(obj, tenants=engine().tenants_for(labels, namespace=NAMESPACE), **kwargs)


def checked(obj: dict[str, Any], labels: dict[str, str]) -> Decision:
    """The decision, every fix of which was applied as a client applies it and found to admit the object."""
    return check_every_fix_admits(engine(), obj, labels, NAMESPACE)


def step(name: str = "train", gpus: int = 1, resource: str = "nvidia.com/gpu", **fields: Any) -> dict[str, Any]:
    return {"name": name, "container": {"image": "trainer:1", "resources": {"limits": {resource: gpus}}}, **fields}


def workflow(*templates: dict[str, Any], kind: str = "Workflow", **spec: Any) -> dict[str, Any]:
    body = {"entrypoint": templates[0]["name"], "templates": list(templates), **spec}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": kind, "metadata": {"name": "w", "namespace": NAMESPACE},
            "spec": {"schedule": "0 * * * *", "workflowSpec": body} if kind == "CronWorkflow" else body}


def pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod spec of each pod template, as the rules see it."""
    return [t.pod["spec"] for t in engine().kinds.templates(obj) or ()]


def dag(name: str, *called: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "dag": {"tasks": [{"name": f"t{i}", "template": c} for i, c in enumerate(called)]},
            **fields}


# --- the workflow's nodeSelector -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"])
def test_a_workflow_level_node_selector_pins_a_step_that_unpinned_would_be_denied(kind: str) -> None:
    unpinned = checked(workflow(step(), kind=kind), DEV)
    assert not unpinned.allowed and [d.code for d in unpinned.diagnostics] == ["tenant-sharing-mode-denied"]
    assert checked(workflow(step(), kind=kind, nodeSelector=T4), DEV).allowed


@pytest.mark.parametrize("kind", ["Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"])
def test_a_templates_own_node_selector_pins_its_pod_in_every_kind(kind: str) -> None:
    # A CronWorkflow's templates are a Workflow's (spec.workflowSpec): their own nodeSelector is read there too.
    assert pods(workflow(step(nodeSelector=T4), kind=kind))[0]["nodeSelector"] == T4
    assert checked(workflow(step(nodeSelector=T4), kind=kind), DEV).allowed


def test_the_templates_own_node_selector_wins_over_the_workflows_whole() -> None:
    # the template's key wins over the workflow's value of it
    assert not judge(workflow(step(), nodeSelector=TRAIN), DEV).allowed
    assert checked(workflow(step(nodeSelector=T4), nodeSelector=TRAIN), DEV).allowed
    # and the workflow's other keys do not reach the pod: Argo takes the template's nodeSelector whole
    obj = workflow(step(nodeSelector={"zone": "a"}), nodeSelector={**T4, "zone": "b"})
    assert pods(obj)[0]["nodeSelector"] == {"zone": "a"}
    denied = checked(obj, DEV)
    assert not denied.allowed and [d.code for d in denied.diagnostics] == ["tenant-sharing-mode-denied"]
    # the fix pins the template's own nodeSelector, which is the pod's
    assert [op["path"] for op in denied.diagnostics[0].fix.to_dict()["jsonPatch"]] == \
        ["/spec/templates/0/nodeSelector/node-pool"]  # type: ignore[union-attr]


def test_a_conflict_in_the_workflows_node_selector_is_found_and_located_there() -> None:
    obj = workflow(step(), nodeSelector={"node-pool": "v100"})  # no class has it
    decision = checked(obj, RESEARCH)
    assert not decision.allowed
    [found] = decision.diagnostics
    assert found.code == "gpu-request-unsatisfiable" and found.path == ("spec", "nodeSelector", "node-pool")
    assert found.message.startswith("pod template spec.templates[0]: ")
    # the template's own nodeSelector (which replaces the workflow's whole) would lose the workflow's other
    # entries: no JSON Patch, the hint says it in words
    assert found.fix is None and found.hint.startswith("pin the pod to class t4-dev")
    # the same selector on the template is the template's own: there, and fixed by a JSON Patch
    own = checked(workflow(step(nodeSelector={"node-pool": "v100"})), RESEARCH)
    assert own.diagnostics[0].path == ("spec", "templates", 0, "nodeSelector", "node-pool")
    assert own.diagnostics[0].fix is not None


def test_a_fix_of_a_step_pinned_at_workflow_level_is_a_json_patch_rechecked_with_the_workflows_pin() -> None:
    # two shared GPUs on the workflow's class t4-dev: ask for one (the pin stays the workflow's)
    decision = checked(workflow(step(gpus=2), nodeSelector=T4), DEV)
    [found] = decision.diagnostics
    assert found.code == "shared-gpu-request-above-one"
    assert found.fix is not None and found.fix.to_dict()["jsonPatch"] == [
        {"op": "add", "path": "/spec/templates/0/container/resources/limits/nvidia.com~1gpu", "value": 1}]
    # a MIG device on t4-dev: the fix renames it to what t4-dev offers
    decision = checked(workflow(step(resource="nvidia.com/mig-1g.10gb"), nodeSelector=T4), RESEARCH)
    [found] = decision.diagnostics
    assert found.code == "mig-strategy-mismatch" and found.fix is not None


# --- the workflow's tolerations and affinity --------------------------------------------------------------------------


def test_workflow_level_tolerations_reach_the_pod_of_a_step_pinned_to_a_tainted_class() -> None:
    untolerated = checked(workflow(step(nodeSelector=TRAIN)), RESEARCH)
    assert not untolerated.allowed
    assert untolerated.diagnostics[0].path == ("spec", "templates", 0, "tolerations")
    assert checked(workflow(step(nodeSelector=TRAIN), tolerations=[TRAINING]), RESEARCH).allowed
    # a template's own tolerations replace the workflow's whole
    other = {"key": "spot", "operator": "Exists"}
    replaced = workflow(step(nodeSelector=TRAIN, tolerations=[other]), tolerations=[TRAINING])
    assert pods(replaced)[0]["tolerations"] == [other]
    denied = checked(replaced, RESEARCH)
    assert not denied.allowed and denied.diagnostics[0].path == ("spec", "templates", 0, "tolerations")


def test_an_unpinned_step_of_a_workflow_tolerating_the_taint_is_fixed_by_a_pin_alone() -> None:
    eight = step(gpus=8)
    alone = checked(workflow(eight), RESEARCH).diagnostics[0]
    assert "tolerate the taint dedicated=training:NoSchedule" in alone.hint
    tolerated = checked(workflow(eight, tolerations=[TRAINING]), RESEARCH).diagnostics[0]
    assert tolerated.fix is not None and tolerated.fix.to_dict()["jsonPatch"] == [
        {"op": "add", "path": "/spec/templates/0/nodeSelector", "value": TRAIN}]


def test_workflow_tolerations_missing_the_taint_are_the_field_at_fault_and_no_patch_drops_them() -> None:
    spot = {"key": "spot", "operator": "Exists"}
    decision = checked(workflow(step(), nodeSelector=TRAIN, tolerations=[spot]), RESEARCH)
    [found] = decision.diagnostics
    assert found.path == ("spec", "tolerations")
    # tolerations of the template's own would replace the workflow's (spot among them): said in words only
    assert found.fix is None and found.hint.startswith("tolerate the taint dedicated=training:NoSchedule")


def test_a_workflow_level_required_node_affinity_reaches_the_pod() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-pool", "operator": "In", "values": ["a100-mps"]}]}]}}}
    decision = checked(workflow(step(nodeSelector=T4, affinity=None), affinity=affinity), DEV)
    assert not decision.allowed  # t4-dev, and affinity to a100-mps only: no node
    assert pods(workflow(step(affinity={}), affinity=affinity))[0]["affinity"] == {}  # the template's, though empty


def test_a_workflow_level_scheduler_name_reaches_the_pod_and_a_templates_own_wins() -> None:
    assert pods(workflow(step(), schedulerName="kai-scheduler"))[0]["schedulerName"] == "kai-scheduler"
    assert pods(workflow(step(schedulerName="volcano"), schedulerName="kai-scheduler"))[0]["schedulerName"] == \
        "volcano"


# --- UPDATE -----------------------------------------------------------------------------------------------------------


def test_an_update_that_changes_only_workflow_level_placement_is_judged_again() -> None:
    old = workflow(step(), nodeSelector=T4)
    assert judge(old, DEV).allowed
    moved = copy.deepcopy(old)
    moved["spec"]["nodeSelector"] = TRAIN
    update = judge(moved, DEV, operation="UPDATE", old_obj=old)
    assert not update.allowed and update.diagnostics
    # tolerations dropped at workflow level: the step, pinned to the tainted class, is judged again too
    old = workflow(step(nodeSelector=TRAIN), tolerations=[TRAINING])
    untolerated = copy.deepcopy(old)
    del untolerated["spec"]["tolerations"]
    assert not judge(untolerated, RESEARCH, operation="UPDATE", old_obj=old).allowed
    # an UPDATE leaving the workflow's placement as it was is not (a denied workflow relabelled stays admitted)
    denied = workflow(step(), nodeSelector=TRAIN)
    relabelled = copy.deepcopy(denied)
    relabelled["metadata"]["labels"] = {"workflows.argoproj.io/phase": "Running"}
    assert judge(relabelled, DEV, operation="UPDATE", old_obj=denied).allowed


# --- the steps or DAG template running a step ---------------------------------------------------------------------


def test_the_dag_running_a_step_places_its_pod_before_the_workflow_does() -> None:
    obj = workflow(dag("main", "train", nodeSelector=T4), step(), nodeSelector=TRAIN)
    assert checked(obj, DEV).allowed
    assert [p.get("nodeSelector") for p in pods(obj)] == [T4, T4]  # the DAG's own (it runs no pod) and its step's


def test_a_step_run_by_dags_of_different_placements_is_judged_once_for_each_and_names_the_one_at_fault() -> None:
    obj = workflow(dag("main", "pinned", "pool"), dag("pinned", "train", nodeSelector=T4),
                   dag("pool", "train", nodeSelector={"node-pool": "v100"}), step())
    templates = engine().kinds.templates(obj) or ()
    assert [t.label for t in templates if t.path == ("spec", "templates", 3)] == [
        "spec.templates[3] (run by spec.templates[1])", "spec.templates[3] (run by spec.templates[2])"]
    decision = checked(obj, RESEARCH)
    [found] = decision.diagnostics
    assert found.path == ("spec", "templates", 2, "nodeSelector", "node-pool")
    assert found.message.startswith("pod template spec.templates[3] (run by spec.templates[2]): ")


def test_a_step_whose_callers_set_no_placement_is_one_pod() -> None:
    obj = workflow(dag("main", *["train"] * 50), step(), nodeSelector=T4)
    assert len(engine().kinds.templates(obj) or ()) == 2
    assert checked(obj, DEV).allowed


# --- templateDefaults, podMetadata, podSpecPatch --------------------------------------------------------------------


def test_template_defaults_merge_into_the_templates_own_placement_key_by_key() -> None:
    defaults = {"nodeSelector": T4, "tolerations": [TRAINING]}
    obj = workflow(step(nodeSelector={"zone": "a"}, tolerations=[{"key": "spot", "operator": "Exists"}]),
                   templateDefaults=defaults, nodeSelector=TRAIN)
    [pod] = pods(obj)
    assert pod["nodeSelector"] == {**T4, "zone": "a"}  # unlike the workflow's nodeSelector, merged
    assert pod["tolerations"] == [TRAINING, {"key": "spot", "operator": "Exists"}]
    assert checked(obj, DEV).allowed
    # a defaults' entry at fault is found at templateDefaults
    decision = checked(workflow(step(), templateDefaults={"nodeSelector": {"node-pool": "v100"}}), RESEARCH)
    assert decision.diagnostics[0].path == ("spec", "templateDefaults", "nodeSelector", "node-pool")


@pytest.mark.parametrize("kind", ["container", "script"])
def test_template_defaults_give_the_main_container_of_a_template_of_their_type_its_resources(kind: str) -> None:
    """Argo merges templateDefaults' container into a container template's and script into a script template's
    (operator.go mergedTemplateDefaultsInto, then SetType): a GPU limit there reaches every step's pod."""
    main = {"image": "trainer:1", **({"source": "train()"} if kind == "script" else {})}
    defaults = {kind: {"resources": {"limits": {"nvidia.com/gpu": 2}}, "securityContext": {"runAsNonRoot": True}}}
    obj = workflow({"name": "train", kind: main}, templateDefaults=defaults, nodeSelector=T4)
    [pod] = pods(obj)
    assert pod["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert pod["containers"][0]["securityContext"] == {"runAsNonRoot": True}
    decision = checked(obj, DEV)  # t4-dev shares its GPUs: 2 of them are refused
    [found] = decision.diagnostics
    assert found.code == "shared-gpu-request-above-one"
    assert found.path == ("spec", "templateDefaults", kind, "resources", "limits", "nvidia.com/gpu")
    # the template's own limit wins over the defaults' (a strategic merge patch of the template onto them), so the
    # fix writes it there
    assert found.fix is not None and found.fix.patch == ({"op": "add", "path": ("spec", "templates", 0, kind,
                                                                                "resources"),
                                                           "value": {"limits": {"nvidia.com/gpu": 1}}},)
    own = workflow({"name": "train", kind: {**main, "resources": {"limits": {"nvidia.com/gpu": 1}}}},
                   templateDefaults=defaults, nodeSelector=T4)
    assert checked(own, DEV).allowed


def test_template_defaults_of_another_type_reach_no_pod() -> None:
    defaults = {"container": {"resources": {"limits": {"nvidia.com/gpu": 2}}}}
    script = workflow({"name": "s", "script": {"image": "x", "source": "x"}}, templateDefaults=defaults,
                      nodeSelector=T4)
    [pod] = pods(script)
    assert "resources" not in pod["containers"][0] or not pod["containers"][0]["resources"]
    assert not any(d.severity == "error" for d in judge(script, DEV).diagnostics)


def test_workflow_pod_metadata_annotations_reach_every_pod_and_are_found_there() -> None:
    obj = workflow(step(gpus=0), podMetadata={"annotations": {"gpu-fraction": "0.5"}})
    decision = checked(obj, PROD)  # prod may not share GPUs
    assert not decision.allowed
    assert decision.diagnostics[0].path == ("spec", "podMetadata", "annotations", "gpu-fraction")


def test_a_workflow_level_pod_spec_patch_reaches_every_pod_template_and_is_found_at_the_patch() -> None:
    patch = "containers:\n- name: main\n  resources: {limits: {nvidia.com/gpu: 2}}\n"
    obj = workflow({"name": "main", "steps": [[{"name": "a", "template": "one"}]]},
                   {"name": "one", "container": {"image": "x"}}, podSpecPatch=patch, nodeSelector=T4)
    decision = checked(obj, DEV)
    [found] = decision.diagnostics  # the steps template runs no pod: its own is not judged
    assert found.code == "shared-gpu-request-above-one" and found.path == ("spec", "podSpecPatch")
    assert found.message.startswith("pod template spec.templates[1]: ")


def test_a_pod_spec_patch_replaces_the_tolerations_and_merges_the_node_selector_as_a_strategic_merge_patch() -> None:
    patch = '{"nodeSelector": {"zone": "a"}, "tolerations": [{"key": "spot", "operator": "Exists"}]}'
    obj = workflow(step(podSpecPatch=patch), nodeSelector=T4, tolerations=[TRAINING])
    [pod] = pods(obj)
    assert pod["nodeSelector"] == {**T4, "zone": "a"}
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists"}]  # core/v1 tolerations: no patchStrategy
    # the template's patch comes after the workflow's
    obj = workflow(step(podSpecPatch='{"nodeSelector": {"node-pool": "t4-dev"}}'),
                   podSpecPatch='{"nodeSelector": {"node-pool": "h100-train"}}')
    assert pods(obj)[0]["nodeSelector"] == T4
    assert checked(obj, DEV).allowed


# --- cost -------------------------------------------------------------------------------------------------------------


def test_building_the_pods_stays_linear_in_the_workflow() -> None:
    def build(n: int) -> float:
        # n DAGs of two tasks, each DAG with a placement of its own, all running the same step
        dags = [dag(f"d{i}", "train", "train", nodeSelector={"zone": str(i)}) for i in range(n)]
        obj = workflow(dag("main", *(d["name"] for d in dags)), *dags, step())
        start = time.perf_counter()
        found = engine().kinds.templates(obj) or ()
        assert len(found) == n + 1 + n  # main, the DAGs, and one pod of the step per DAG
        return time.perf_counter() - start

    build(100)
    small, large = min(build(250) for _ in range(3)), min(build(2000) for _ in range(3))
    # eight times the object: eight times the time, not 64 (a walk over the templates for each template)
    assert large < small * 24, (small, large)


def test_templates_sharing_a_name_which_argo_refuses_get_no_caller_each() -> None:
    twins = [step() for _ in range(300)]
    obj = workflow(dag("main", *["train"] * 300, nodeSelector=T4), *twins)
    assert len(engine().kinds.templates(obj) or ()) == 301
