"""The webhook's matchConditions, evaluated by a real CEL engine over objects of every registered kind."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

# cel_k8s lives in tests/ (a test helper, not product code); pytest puts only this file's directory on the path.
import cel_k8s
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.targets.admission_webhook import MATCH_CONDITIONS

Obj = dict[str, Any]

# ---------------------------------------------------------------- object builders


def container(name: str = "main", *, limits: Obj | None = None, requests: Obj | None = None,
              resources: bool = True) -> Obj:
    """A container; resources=False leaves the `resources` key out entirely."""
    out: Obj = {"name": name, "image": "busybox"}
    if resources:
        out["resources"] = {}
        if limits is not None:
            out["resources"]["limits"] = limits
        if requests is not None:
            out["resources"]["requests"] = requests
    return out


def pod_spec(*containers: Obj, init: list[Obj] | None = None) -> Obj:
    spec: Obj = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return spec


def pod(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"}, "spec": spec}


def controller(api_version: str, kind: str) -> Callable[[Obj], Obj]:
    def build(spec: Obj) -> Obj:
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "team"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w"}},
                         "template": {"metadata": {"labels": {"app": "w"}}, "spec": spec}}}
    return build


def cronjob(spec: Obj) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "team"},
            "spec": {"schedule": "0 * * * *",
                     "jobTemplate": {"spec": {"template": {"metadata": {}, "spec": spec}}}}}


KINDS: dict[str, Callable[[Obj], Obj]] = {
    "Pod": pod,
    "Deployment": controller("apps/v1", "Deployment"),
    "ReplicaSet": controller("apps/v1", "ReplicaSet"),
    "StatefulSet": controller("apps/v1", "StatefulSet"),
    "DaemonSet": controller("apps/v1", "DaemonSet"),
    "Job": controller("batch/v1", "Job"),
    "CronJob": cronjob,
    "ReplicationController": controller("v1", "ReplicationController"),
}
CONTROLLERS = [kind for kind in KINDS if kind != "Pod"]

GPU_SPECS: dict[str, Obj] = {
    "whole gpu limit": pod_spec(container(limits={"nvidia.com/gpu": 1, "cpu": "1"})),
    "gpu in requests only": pod_spec(container(requests={"nvidia.com/gpu": "1"})),
    "mig profile": pod_spec(container(limits={"nvidia.com/mig-1g.12gb": 1})),
    "renamed shared gpu": pod_spec(container(limits={"nvidia.com/gpu.shared": 1})),
    "gpu in the second container only": pod_spec(container("a", resources=False),
                                                 container("b", limits={"nvidia.com/gpu": 2})),
    "gpu in an init container only": pod_spec(container(resources=False),
                                              init=[container("init", limits={"nvidia.com/gpu": 1})]),
    "gpu in a restartable sidecar": pod_spec(
        container(limits={"cpu": "1"}),
        init=[{**container("side", limits={"nvidia.com/gpu": 1}), "restartPolicy": "Always"}]),
}

PLAIN_SPECS: dict[str, Obj] = {
    "cpu and memory only": pod_spec(container(limits={"cpu": "1", "memory": "1Gi"}, requests={"cpu": "1"})),
    "no resources key": pod_spec(container(resources=False)),
    "empty resources": pod_spec(container()),
    "requests but no limits": pod_spec(container(requests={"cpu": "100m"})),
    "limits but no requests": pod_spec(container(limits={"memory": "1Gi"})),
    "no init containers key": pod_spec(container(limits={"cpu": "1"})),
    "empty init containers": pod_spec(container(), init=[]),
    "init container without resources": pod_spec(container(), init=[container("init", resources=False)]),
    "another vendor's gpu": pod_spec(container(limits={"amd.com/gpu": 1, "gpu.intel.com/i915": 1})),
    "nvidia in the middle of a name": pod_spec(container(limits={"example.com/nvidia.com-gpu": 1})),
    "no containers key": {},
}


def verdicts(obj: Obj | None, old: Obj | None = None) -> list[bool]:
    """Every condition's value; evaluating them all proves none errors, even after another is false."""
    operation = "CREATE" if old is None else "UPDATE"
    shown = obj if obj is not None else old or {}
    group, _, version = str(shown.get("apiVersion", "v1")).rpartition("/")
    request = {"operation": operation, "namespace": "team", "dryRun": False,
               "kind": {"group": group, "version": version, "kind": shown.get("kind", "")}}
    return [cel_k8s.evaluate(expression, object=obj, old_object=old, request=request)
            for _, expression in MATCH_CONDITIONS]


def sent(obj: Obj | None, old: Obj | None = None) -> bool:
    """Whether the API server would call the webhook: every matchCondition is true."""
    return all(verdicts(obj, old))


# ---------------------------------------------------------------- shape


def test_the_conditions_are_valid_for_the_api_server_and_all_compile_to_booleans() -> None:
    names = [name for name, _ in MATCH_CONDITIONS]
    assert 1 <= len(names) <= cel_k8s.MAX_MATCH_CONDITIONS
    assert len(set(names)) == len(names)
    # matchCondition names are qualified names (admissionregistration validation).
    assert all(re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", name) for name in names)
    for _, expression in MATCH_CONDITIONS:
        cel_k8s.compile_expression(expression)


def test_the_conditions_use_no_optionals_or_bind_so_they_compile_on_kubernetes_1_28() -> None:
    for _, expression in MATCH_CONDITIONS:
        assert ".?" not in expression and "[?" not in expression and "cel.bind" not in expression


# ---------------------------------------------------------------- CREATE


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", GPU_SPECS)
def test_a_new_object_requesting_an_nvidia_resource_is_sent_for_every_kind(kind: str, case: str) -> None:
    assert sent(KINDS[kind](GPU_SPECS[case]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", PLAIN_SPECS)
def test_a_new_object_without_nvidia_resources_is_not_sent_and_nothing_errors(kind: str, case: str) -> None:
    assert sent(KINDS[kind](PLAIN_SPECS[case])) is False


def test_quantities_in_any_form_do_not_change_the_verdict() -> None:
    for amount in (1, "1", 1000, "500m", 0):
        assert sent(pod(pod_spec(container(limits={"nvidia.com/gpu": amount}))))


def test_ephemeral_containers_are_ignored_because_the_api_forbids_their_resources() -> None:
    spec = pod_spec(container())
    spec["ephemeralContainers"] = [container("debug", limits={"nvidia.com/gpu": 1})]
    assert not sent(pod(spec))


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 1}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"template": {}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"}, "spec": {"jobTemplate": {}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"},
         "spec": {"jobTemplate": {"spec": {"template": {"metadata": {}}}}}},
    ],
    ids=["no spec", "no template", "template without spec", "jobTemplate without spec", "template without spec"],
)
def test_objects_missing_intermediate_fields_are_not_sent_and_never_error(obj: Obj) -> None:
    assert sent(obj) is False
    assert sent(obj, old=obj) is False


# ---------------------------------------------------------------- UPDATE


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_an_update_that_removes_the_gpus_is_sent_because_the_old_object_had_them(kind: str) -> None:
    old = KINDS[kind](GPU_SPECS["whole gpu limit"])
    new = KINDS[kind](PLAIN_SPECS["cpu and memory only"])
    assert sent(new, old=old)


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_an_update_that_adds_or_changes_gpus_is_sent(kind: str) -> None:
    plain = KINDS[kind](PLAIN_SPECS["cpu and memory only"])
    one = KINDS[kind](GPU_SPECS["whole gpu limit"])
    two = KINDS[kind](pod_spec(container(limits={"nvidia.com/gpu": 2, "cpu": "1"})))
    assert sent(one, old=plain)
    assert sent(two, old=one)


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_an_update_that_moves_a_gpu_workload_to_other_nodes_is_sent(kind: str) -> None:
    old = KINDS[kind](GPU_SPECS["mig profile"])
    new = copy.deepcopy(old)
    template = new["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else new["spec"]["template"]
    template["spec"]["nodeSelector"] = {"gpu-pool": "h20"}
    assert sent(new, old=old)


@pytest.mark.parametrize("kind", CONTROLLERS)
@pytest.mark.parametrize(("key", "value"), [
    ("gpu-fraction", "0.5"), ("gpu-memory", "2000"), ("nvidia.com/vgpu-mode", "mig"),
    ("hami.io/gpu-scheduler-policy", "spread")])
def test_an_update_that_changes_only_a_gpu_annotation_of_the_template_is_sent(kind: str, key: str, value: str) -> None:
    """KAI's fractions and HAMi's choices are annotations of the pod: an UPDATE adding one changes what the pods ask
    for with the pod spec untouched, and the engine judges it (policy/admission/engine.py _unchanged)."""
    old = KINDS[kind](GPU_SPECS["whole gpu limit"] if key.startswith(("nvidia.com/", "hami.io/"))
                      else PLAIN_SPECS["cpu and memory only"])
    new = copy.deepcopy(old)
    template = new["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else new["spec"]["template"]
    template.setdefault("metadata", {})["annotations"] = {key: value}
    assert sent(new, old=old)
    assert not sent(old, old=copy.deepcopy(old))


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_an_update_that_leaves_the_pod_spec_alone_is_not_sent(kind: str) -> None:
    # Scaling, relabelling and a controller's bookkeeping (the Deployment controller's ReplicaSet updates,
    # the garbage collector's finalizers) keep working while the webhook is down.
    old = KINDS[kind](GPU_SPECS["whole gpu limit"])
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "a"}
    new["metadata"]["annotations"] = {"deployment.kubernetes.io/desired-replicas": "3"}
    new["metadata"]["finalizers"] = ["foregroundDeletion"]
    if kind != "CronJob":
        new["spec"]["replicas"] = 3
        new["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "now"}
    else:
        new["spec"]["suspend"] = True
    assert verdicts(new, old=old) == [True, False]


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_an_update_of_a_workload_that_never_had_gpus_is_not_sent(kind: str) -> None:
    old = KINDS[kind](PLAIN_SPECS["cpu and memory only"])
    new = KINDS[kind](PLAIN_SPECS["limits but no requests"])
    assert sent(new, old=old) is False


# ---------------------------------------------------------------- property: agrees with a Python reference

RESOURCE_NAMES = ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.12gb", "amd.com/gpu"]
amounts = st.dictionaries(st.sampled_from(RESOURCE_NAMES), st.integers(min_value=0, max_value=2000), max_size=2)
resources = st.fixed_dictionaries({}, optional={"limits": amounts, "requests": amounts})
containers = st.builds(
    lambda name, res: {"name": name, **({} if res is None else {"resources": res})},
    st.sampled_from(["a", "b"]), st.one_of(st.none(), resources),
)
specs = st.fixed_dictionaries(
    {}, optional={"containers": st.lists(containers, max_size=2), "initContainers": st.lists(containers, max_size=2)}
)


def requests_nvidia(spec: Obj) -> bool:
    ctrs = spec.get("containers", []) + spec.get("initContainers", [])
    return any(name.startswith("nvidia.com/") for c in ctrs
               for field in ("limits", "requests") for name in c.get("resources", {}).get(field, {}))


@settings(max_examples=120, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), new=specs, old=st.one_of(st.none(), specs))
def test_the_conditions_agree_with_a_python_reference_on_random_pod_specs(
    kind: str, new: Obj, old: Obj | None
) -> None:
    gpus = requests_nvidia(new) or (old is not None and requests_nvidia(old))
    changed = old is None or cel_k8s.to_unstructured(new) != cel_k8s.to_unstructured(old)
    build = KINDS[kind]
    assert sent(build(new), None if old is None else build(old)) is (gpus and changed)


# ---------------------------------------------------------------- workload custom resources


def _custom_resources() -> list[Obj]:
    import workload_fixtures

    from policy.admission.templates import KindTable
    from policy.spec.workload_kinds import DEFAULT_WORKLOAD_KINDS

    table = KindTable(DEFAULT_WORKLOAD_KINDS)
    return [obj for path in workload_fixtures.FILES for obj in workload_fixtures.documents(path)
            if table.templates(obj)]


CUSTOM_RESOURCES = _custom_resources()


def _strip_gpus(value: Any) -> Any:
    """The object with every nvidia.com/ amount, Dynamo gpu key and podSpecPatch removed."""
    if isinstance(value, dict):
        return {k: _strip_gpus(v) for k, v in value.items()
                if not (isinstance(k, str) and (k.startswith("nvidia.com/") or k in ("gpu", "podSpecPatch")))}
    if isinstance(value, list):
        return [_strip_gpus(v) for v in value]
    return value


def test_the_fixtures_hold_a_custom_resource_of_a_dozen_kinds() -> None:
    assert len({o["kind"] for o in CUSTOM_RESOURCES}) >= 10


@pytest.mark.parametrize("obj", CUSTOM_RESOURCES, ids=lambda o: f"{o['kind']}-{o['metadata'].get('name', '')}")
def test_a_workload_custom_resource_asking_for_gpus_in_a_template_is_sent_and_without_them_is_not(obj: Obj) -> None:
    assert sent(obj)
    assert not sent(_strip_gpus(obj))


def test_a_custom_resource_of_a_kind_outside_the_table_is_not_sent() -> None:
    spec = pod_spec(container(limits={"nvidia.com/gpu": 1}))
    seldon = {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "metadata": {"name": "s"},
              "spec": {"predictors": [{"componentSpecs": [{"spec": spec}]}]}}
    assert not sent(seldon)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_kai_fractional_gpu_annotation_is_sent_from_a_pod_or_a_template(kind: str) -> None:
    obj = KINDS[kind](pod_spec(container(limits={"cpu": "1"})))
    target = obj if kind == "Pod" else (obj["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob"
                                        else obj["spec"]["template"])
    assert not sent(obj)
    target.setdefault("metadata", {})["annotations"] = {"gpu-fraction": "0.5"}
    assert sent(obj)
    target["metadata"]["annotations"] = {"gpu-memory": "2000"}
    assert sent(obj)


@pytest.mark.parametrize(("obj", "metadata"), [
    ({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
      "spec": {"workerGroupSpecs": [{"template": {"spec": {"containers": [{"name": "w"}]}}}]}},
     ("spec", "workerGroupSpecs", 0, "template")),
    ({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
      "spec": {"templates": [{"name": "t", "container": {"image": "x"}}]}}, ("spec", "templates", 0)),
])
def test_a_kai_annotation_on_a_custom_resources_template_is_sent_where_the_engine_reads_it(
        obj: Obj, metadata: tuple[Any, ...]) -> None:
    assert not sent(obj)
    target: Any = obj
    for part in metadata:
        target = target[part]
    target["metadata"] = {"annotations": {"gpu-fraction": "0.5"}}
    assert sent(obj)
    # the engine judges it there: prod may not share
    assert not _mixed_fleet_engine().evaluate(obj, tenants=("prod",)).allowed


def _mixed_fleet_engine() -> Any:
    from pathlib import Path

    from policy.admission.engine import Engine
    from policy.load import load_policy_or_raise
    from policy.resolved.offers import build_admission_policy

    spec = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
    return Engine(build_admission_policy(load_policy_or_raise(spec.read_text(encoding="utf-8"),
                                                              filename="cluster.yaml")))


def _argo(kind: str, **workflow_spec: Any) -> Obj:
    """An Argo object of ``kind`` whose one container template asks for nothing itself."""
    spec: Obj = {"entrypoint": "t", "templates": [{"name": "t", "container": {"name": "main", "image": "x"}}],
                 **workflow_spec}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": kind, "metadata": {"name": "w", "namespace": "team"},
            "spec": {"schedule": "0 * * * *", "workflowSpec": spec} if kind == "CronWorkflow" else spec}


_GPU_PATCH = '{"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}'
_WORKFLOW_WIDE = {
    "spec.podSpecPatch": {"podSpecPatch": _GPU_PATCH},
    "templateDefaults.podSpecPatch": {"templateDefaults": {"podSpecPatch": _GPU_PATCH}},
    "podMetadata KAI annotation": {"podMetadata": {"annotations": {"gpu-fraction": "0.5"}}},
    "templateDefaults.metadata KAI annotation": {
        "templateDefaults": {"metadata": {"annotations": {"gpu-memory": "2000"}}}},
    "templateDefaults.container resources": {
        "templateDefaults": {"container": {"resources": {"limits": {"nvidia.com/gpu": 2}}}}},
    "a patch spelling nvidia.com with an escape": {
        "podSpecPatch": _GPU_PATCH.replace("nvidia.com", "nvidia\\u002ecom")},
}


@pytest.mark.parametrize("kind", ["Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"])
@pytest.mark.parametrize("case", list(_WORKFLOW_WIDE))
def test_an_argo_workflow_asking_for_gpus_only_in_its_workflow_wide_fields_is_sent(kind: str, case: str) -> None:
    """Argo puts the WorkflowSpec's podSpecPatch, podMetadata and templateDefaults into every template's pod, and the
    engine judges the pod they make: an object asking for GPUs only there must reach it."""
    plain, asking = _argo(kind), _argo(kind, **_WORKFLOW_WIDE[case])
    assert not sent(plain)
    assert sent(asking)
    engine = _mixed_fleet_engine()
    assert engine.evaluate(plain, tenants=("prod",)).allowed
    assert not engine.evaluate(asking, tenants=("prod",)).allowed  # prod may not share: the engine read the GPUs


def test_a_template_s_patch_is_sent_however_it_spells_the_resource() -> None:
    """A podSpecPatch is YAML: an escape spells nvidia.com/gpu without the text holding it, so any patch is sent."""
    obj = _argo("Workflow")
    obj["spec"]["templates"][0]["podSpecPatch"] = _GPU_PATCH.replace("nvidia.com", "nvidia\\u002ecom")
    assert sent(obj)
    assert not _mixed_fleet_engine().evaluate(obj, tenants=("prod",)).allowed


@pytest.mark.parametrize("patch", [{"containers": []}, 7, None, ""])
def test_a_patch_that_is_no_string_is_not_sent_and_nothing_errors(patch: Any) -> None:
    """Argo refuses a podSpecPatch that is not a non-empty string, and the engine reads nothing from it."""
    obj = _argo("Workflow", podSpecPatch=patch, templateDefaults={"podSpecPatch": patch})
    assert not any(verdicts(obj)[:1])


@pytest.mark.parametrize("key", ["worker_groups", "worker-groups", "namespace"])
def test_a_spec_added_kind_is_sent_whatever_its_field_names_are_made_of(key: str) -> None:
    # A custom resource reaches admission CEL as an unstructured map: a key with '_' is a plain identifier, one with
    # '-' or a reserved word is read by index (compiler/targets/workload_kinds.py select); escaping either made the
    # template unreadable, so the kind was never sent
    from compiler.targets.admission_webhook import match_conditions
    from policy.spec.model import WorkloadKind

    kind = WorkloadKind.model_validate({"group": "example.com", "kind": "Trainer", "resource": "trainers",
                                        "versions": ["v1"], "templates": [{"path": f"spec.{key}[*].template",
                                                                           "podSpec": "spec"}]})
    conditions = match_conditions((kind,))

    def sent_here(limits: Obj) -> bool:
        obj = {"apiVersion": "example.com/v1", "kind": "Trainer", "metadata": {"name": "t", "namespace": "team"},
               "spec": {key: [{"template": {"spec": pod_spec(container(limits=limits))}}]}}
        request = {"operation": "CREATE", "namespace": "team", "dryRun": False,
                   "kind": {"group": "example.com", "version": "v1", "kind": "Trainer"}}
        return all(cel_k8s.evaluate(e, object=obj, old_object=None, request=request) for _, e in conditions)

    assert sent_here({"nvidia.com/gpu": 1})
    assert not sent_here({"cpu": "1"})
