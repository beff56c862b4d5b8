"""Workload custom resources: every pod template found by the table, judged, and named in every finding."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import example_admission
import pytest
import workload_fixtures
from json_patch import apply_patch

from policy.admission.engine import Engine
from policy.admission.templates import KindTable, parse, walk
from policy.resolved.offers import AdmissionPolicy, build_admission_policy
from policy.spec import workload_kinds
from policy.spec.diagnostics import format_path
from policy.spec.model import PodTemplateRef, WorkloadKind

ROOT = Path(__file__).resolve().parents[2]
DENY = ROOT / "tests" / "fixtures" / "workloads" / "deny"
DEV = {"gpu-tier": "dev"}


def mixed_fleet() -> AdmissionPolicy:
    return example_admission.admission_policy("mixed-fleet")


@functools.cache
def engine() -> Engine:
    return Engine(mixed_fleet())


def fixture(name: str) -> dict[str, Any]:
    return next(o for o in workload_fixtures.documents(DENY / name) if o.get("kind") != "ConfigMap")


def judge(obj: dict[str, Any], labels: dict[str, str] = DEV, **kwargs: Any) -> Any:
    return engine().evaluate(obj, tenants=engine().tenants_for(labels), **kwargs)


def test_the_table_names_every_kind_the_issue_lists_with_a_source() -> None:
    kinds = {k.kind for k in workload_kinds.DEFAULT_WORKLOAD_KINDS}
    assert {"InferenceService", "LLMInferenceService", "NIMService", "PyTorchJob", "TFJob", "MPIJob", "TrainJob",
            "ClusterTrainingRuntime", "RayService", "RayJob", "RayCluster", "Workflow", "WorkflowTemplate",
            "Service", "Job", "LeaderWorkerSet", "JobSet", "DynamoGraphDeployment"} <= kinds
    assert all("@" in k.source for k in workload_kinds.DEFAULT_WORKLOAD_KINDS), "each entry cites a tag"


def test_wildcards_walk_lists_and_maps_and_fill_in_the_path() -> None:
    obj = {"spec": {"replicaSpecs": {"Master": {"t": [{"x": 1}]}, "Worker": {"t": [{"x": 2}, {"x": 3}]}}}}
    found = list(walk(obj, parse("spec.replicaSpecs.*.t[*].x")))
    assert found == [(1, ("spec", "replicaSpecs", "Master", "t", 0, "x")),
                     (2, ("spec", "replicaSpecs", "Worker", "t", 0, "x")),
                     (3, ("spec", "replicaSpecs", "Worker", "t", 1, "x"))]


def test_a_leaderworkerset_in_a_tenant_that_may_not_share_is_denied_for_both_templates_naming_each_path() -> None:
    decision = judge(fixture("lws-vllm-gpu-leader-worker-dev-on-mixed-fleet.yaml"))
    assert not decision.allowed
    assert decision.subject == "LeaderWorkerSet vllm"
    named = {d.message.split(":")[0] for d in decision.diagnostics}
    assert named == {"pod template spec.leaderWorkerTemplate.leaderTemplate.spec",
                     "pod template spec.leaderWorkerTemplate.workerTemplate.spec"}
    limits = {format_path(d.path) for d in decision.diagnostics if d.code == "shared-gpu-request-above-one"}
    assert limits == {f'spec.leaderWorkerTemplate.{t}.spec.containers[0].resources.limits["nvidia.com/gpu"]'
                      for t in ("leaderTemplate", "workerTemplate")}


def test_a_gpu_limit_inside_a_real_workflow_templates_yaml_pod_spec_patch_is_read_and_located_at_the_patch() -> None:
    # ai2cm/fv3net's training WorkflowTemplate: the GPU is asked for only in podSpecPatch, as YAML with Argo
    # parameters in the other amounts, and its templates share their container through YAML anchors
    decision = judge(fixture("argo-workflowtemplate-fv3net-training-gpu-podspecpatch-dev-on-mixed-fleet.yaml"))
    assert not decision.allowed and decision.subject == "WorkflowTemplate training"
    assert [(d.code, d.path) for d in decision.diagnostics] == [
        ("tenant-sharing-mode-denied", ("spec", "templates", 1, "podSpecPatch")),
        ("tenant-sharing-mode-denied", ("spec", "templates", 2, "podSpecPatch"))]
    assert [d.message.split(":")[0] for d in decision.diagnostics] == [
        "pod template spec.templates[1]", "pod template spec.templates[2]"]
    assert judge(fixture("argo-workflowtemplate-fv3net-training-gpu-podspecpatch-dev-on-mixed-fleet.yaml"),
                 {"gpu-tier": "research"}).allowed


@pytest.mark.parametrize(("name", "template", "where"), [
    ("volcano-job-mindspore-gpu-dev-on-mixed-fleet.yaml", "spec.tasks[1].template.spec",
     'spec.tasks[1].template.spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    # the trainer's resources are written under resourcesPerNode, and the finding points there
    ("kubeflow-trainer-trainjob-lammps-gpus-dev-on-mixed-fleet.yaml", "spec",
     'spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]'),
])
def test_a_real_volcano_job_and_trainjob_are_denied_in_dev_naming_the_template_and_admitted_in_research(
        name: str, template: str, where: str) -> None:
    obj = fixture(name)
    decision = judge(obj)
    assert not decision.allowed
    assert {d.message.split(": ")[0] for d in decision.diagnostics} == {f"pod template {template}"}
    assert {format_path(d.path) for d in decision.diagnostics} == {where}
    assert judge(obj, {"gpu-tier": "research"}).allowed


def test_a_dynamo_v1beta1_graph_asking_more_gpus_than_any_class_holds_is_denied_at_its_pod_template() -> None:
    # the v1beta1 API writes each component's pod template as a PodTemplateSpec (spec.components[].podTemplate)
    obj = next(o for o in workload_fixtures.documents(DENY / "dynamo-v1beta1-vllm-agg-snapshot-tp8-on-tke-l20-t4.yaml"))
    tke = Engine(example_admission.admission_policy("tke-l20-t4"))
    decision = tke.evaluate(obj)
    assert not decision.allowed and decision.checked
    (found,) = decision.diagnostics
    assert found.path == ("spec", "components", 1, "podTemplate", "spec", "containers", 0, "resources", "limits",
                          "nvidia.com/gpu")
    assert found.message.startswith('pod template spec.components[1].podTemplate.spec: container "main" requests 8 '
                                    "nvidia.com/gpu")


def test_a_dynamo_graph_asking_through_its_own_gpu_key_is_denied_at_the_key() -> None:
    decision = judge(fixture("dynamo-vllm-agg-dev-on-mixed-fleet.yaml"))
    assert not decision.allowed
    found = next(d for d in decision.diagnostics if d.code == "tenant-sharing-mode-denied")
    assert found.path == ("spec", "services", "worker", "resources", "limits", "gpu")
    assert found.message.startswith("pod template spec.services.worker: ")
    # the key is Dynamo's own, but the pin that admits edits extraPodSpec, a PodSpec of the object: a JSON Patch
    assert found.fix is not None
    patch = found.fix.to_dict()["jsonPatch"]
    assert patch == [{"op": "add", "path": "/spec/services/worker/extraPodSpec/nodeSelector",
                      "value": {"node-pool": "t4-dev"}}]
    assert judge(apply_patch(fixture("dynamo-vllm-agg-dev-on-mixed-fleet.yaml"), patch)).diagnostics == ()


def test_a_dynamo_graph_with_one_gpu_in_a_tenant_allowed_exclusive_gpus_and_pinned_there_is_admitted() -> None:
    obj = fixture("dynamo-vllm-agg-dev-on-mixed-fleet.yaml")
    obj["spec"]["services"]["worker"]["extraPodSpec"].update(
        nodeSelector={"node-pool": "h100-train"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}])
    assert judge(obj, {"gpu-tier": "research"}).allowed
    assert not judge(obj, DEV).allowed  # dev may use time-slicing on t4-dev only


def test_a_fix_found_on_a_template_applies_to_the_custom_resource_itself() -> None:
    obj = fixture("kubeflow-pytorchjob-mnist-nccl-dev-on-mixed-fleet.yaml")
    decision = judge(obj, {"gpu-tier": "research"})
    fixes = [d.fix for d in decision.diagnostics if d.fix is not None]
    for fix in fixes:
        assert all(str(op["path"]).startswith("/spec/pytorchReplicaSpecs/") for op in fix.to_dict()["jsonPatch"])


def test_an_update_that_keeps_every_template_as_it_was_is_never_denied() -> None:
    obj = fixture("kuberay-rayservice-stable-diffusion-dev-on-mixed-fleet.yaml")
    assert not judge(obj).allowed
    relabelled = copy.deepcopy(obj)
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert judge(relabelled, operation="UPDATE", old_obj=obj).allowed


def test_a_kind_the_spec_adds_is_checked_and_one_with_a_builtin_name_replaces_it() -> None:
    own = WorkloadKind(group="example.com", kind="Trainer", resource="trainers", versions=("v1",),
                       templates=(PodTemplateRef(path="spec.pods[*]"),))
    replaced = WorkloadKind(group="leaderworkerset.x-k8s.io", kind="LeaderWorkerSet", resource="leaderworkersets",
                            versions=("v1",),
                            templates=(PodTemplateRef(path="spec.leaderWorkerTemplate.workerTemplate.spec"),))
    table = workload_kinds.merged((own, replaced))
    assert table[-1] == own and replaced in table and len(table) == len(workload_kinds.DEFAULT_WORKLOAD_KINDS) + 1
    policy = mixed_fleet().model_copy(update={"workload_kinds": table})
    obj = {"apiVersion": "example.com/v1", "kind": "Trainer", "metadata": {"name": "t"},
           "spec": {"pods": [{"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}]}}
    decision = Engine(policy).evaluate(obj, tenants=("dev",))
    assert not decision.allowed and decision.diagnostics[0].message.startswith("pod template spec.pods[0]:")
    lws = KindTable(table).templates(fixture("lws-vllm-gpu-leader-worker-dev-on-mixed-fleet.yaml"))
    assert [t.label for t in lws or ()] == ["spec.leaderWorkerTemplate.workerTemplate.spec"]


def test_a_table_kind_asking_for_gpus_outside_every_template_still_gets_the_not_checked_notice() -> None:
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "spec": {"other": {"resources": {"limits": {"nvidia.com/gpu": 1}}}}}
    decision = judge(obj)
    assert decision.allowed and [d.code for d in decision.diagnostics] == ["workload-not-checked"]


@pytest.mark.parametrize("pattern", ["spec..x", "spec.[*]", "spec.x[0]", ""])
def test_a_malformed_template_path_is_refused_by_the_spec(pattern: str) -> None:
    with pytest.raises(ValueError):
        PodTemplateRef(path=pattern)


SPEC_KINDS = """\
    workloadKinds:
      - group: example.com
        kind: Trainer
        resource: trainers
        versions: [v1]
        templates:
          - path: {path}
"""


def spec_with_kind(path: str) -> str:
    spec = (ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8")
    marker = "  admission:\n"
    assert marker in spec
    return spec.replace(marker, marker + SPEC_KINDS.format(path=path), 1)


def test_a_kind_added_in_the_spec_file_reaches_the_admission_policy_after_the_built_in_ones() -> None:
    from policy.load import load_policy

    result = load_policy(spec_with_kind("spec.pods[*].template.spec"), filename="cluster.yaml")
    assert result.ok and result.policy is not None, result.diagnostics
    kinds = build_admission_policy(result.policy).workload_kinds
    assert kinds[-1].kind == "Trainer" and kinds[-1].templates[0].path == "spec.pods[*].template.spec"


def test_a_malformed_path_in_the_spec_file_is_an_error_at_its_line_and_column() -> None:
    from policy.load import load_policy

    text = spec_with_kind("spec..pods")
    result = load_policy(text, filename="cluster.yaml")
    assert not result.ok
    (found,) = [d for d in result.diagnostics if d.severity == "error"]
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "spec..pods" in row)
    assert found.span is not None and (found.span.file, found.span.line) == ("cluster.yaml", line)
    assert found.path[-3:] == ("templates", 0, "path")


def _argo_with_patch(patch: str) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
            "spec": {"templates": [{"name": "t", "container": {"name": "main", "image": "x"}, "podSpecPatch": patch}]}}


def test_a_pod_spec_patch_with_yaml_aliases_is_read_as_meant_and_an_alias_bomb_costs_a_bounded_walk() -> None:
    # a few aliases mean what their anchors say (the GPU limit is read through one)
    small = ("limits: &gpu {nvidia.com/gpu: 2}\n"
             "containers: [{name: main, resources: {limits: *gpu}}]\n")
    found = judge(_argo_with_patch(small)).diagnostics
    assert any(d.code == "shared-gpu-request-above-one" for d in found), found
    # a billion-laughs patch expands past any pod spec: read as nothing, as Argo's parser refuses it too, after a
    # walk bounded by the patch's own size budget instead of the expansion's
    levels = zip("abcdefgh", "bcdefghi", strict=True)
    bomb = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 8)}]\n" for p, c in levels)
    bomb += "containers: [{name: main, resources: {limits: {nvidia.com/gpu: 1}}, env: *i}]\n"
    templates = engine().kinds.templates(_argo_with_patch(bomb)) or ()
    assert [t.pod["spec"].get("containers") for t in templates] == [[{"name": "main", "image": "x", "resources": None}]]


def test_a_pod_spec_behind_a_wildcard_and_a_patch_merged_with_it_keep_their_own_paths_and_placement() -> None:
    kind = WorkloadKind(group="example.com", kind="Trainer", resource="trainers", versions=("v1",),
                        templates=(PodTemplateRef(path="spec.stages[*]", pod_spec="variants.*",
                                                  pod_spec_patch="patch"),))
    obj = {"apiVersion": "example.com/v1", "kind": "Trainer", "metadata": {"name": "t"},
           "spec": {"stages": [{"patch": '{"nodeSelector": {"zone": "a"}}', "variants": {"big": {
               "nodeSelector": {"node-pool": "t4-dev"},
               "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}]}}
    [template] = KindTable((kind,)).templates(obj) or ()
    assert template.spec_path == ("spec", "stages", 0, "variants", "big")
    assert template.pod["spec"]["nodeSelector"] == {"node-pool": "t4-dev", "zone": "a"}  # merged with the pod spec's


def test_a_container_written_outside_the_lists_keeps_the_fields_the_rules_read() -> None:
    kind = WorkloadKind(group="example.com", kind="Runner", resource="runners", versions=("v1",),
                        templates=(PodTemplateRef(path="spec",
                                                  containers=({"path": "main", "resources": "compute"},)),))
    obj = {"apiVersion": "example.com/v1", "kind": "Runner", "metadata": {"name": "r"},
           "spec": {"main": {"name": "m", "securityContext": {"privileged": True},
                             "compute": {"limits": {"nvidia.com/gpu": 1}}}}}
    [template] = KindTable((kind,)).templates(obj) or ()
    [container] = template.pod["spec"]["containers"]
    assert container == {"name": "m", "securityContext": {"privileged": True},
                         "resources": {"limits": {"nvidia.com/gpu": 1}}}


def test_kai_annotations_on_a_list_indexed_template_are_read_from_that_templates_metadata() -> None:
    # a RayCluster worker group's template.metadata (behind a list index) carries the pod's annotations
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "spec": {"workerGroupSpecs": [{"template": {"metadata": {"annotations": {"gpu-fraction": "0.5"}},
                                                       "spec": {"containers": [{"name": "w"}]}}}]}}
    decision = judge(obj, {"gpu-tier": "prod"})  # prod may not share GPUs
    assert not decision.allowed
    (found,) = decision.diagnostics
    assert found.path == ("spec", "workerGroupSpecs", 0, "template", "metadata", "annotations", "gpu-fraction")
