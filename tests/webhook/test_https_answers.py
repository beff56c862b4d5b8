"""What the live webhook answers, over HTTPS, for requests a platform team tried: every answer true, complete and
actionable. A denial's fix (status.details.causes) applied as a client would, JSON Patch and namespace move, is
admitted by the same server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from json_patch import apply_patch
from polling import poll
from test_https import Server, start_server, stop_server
from webhook_support import KubeletVolume, admission_review, compiled_policy

from webhook.review import FIX_CAUSE

pytestmark = pytest.mark.slow

CLUSTERS = {"mixed-fleet": "mixed-fleet", "h20-mig": "h20-inference", "tke-l20-t4": "tke-prod"}
GPU = "nvidia.com/gpu"


_VOLUMES: dict[int, KubeletVolume] = {}  # one writer per mounted policy, as the kubelet is


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("answers"), compiled_policy("mixed-fleet"))
    _VOLUMES[id(running)] = KubeletVolume(running.policy_dir)
    yield running
    assert stop_server(running) == 0, running.log_tail()


def use(server: Server, example: str) -> Server:
    """Serve examples/clusters/<example>'s admission policy (hot reload), once the server says it does."""
    if server.request("GET", "/readyz").body.get("cluster") != CLUSTERS[example]:
        _VOLUMES[id(server)].write({"admission-policy.json": compiled_policy(example).to_json()})
        poll(lambda: server.request("GET", "/readyz").body.get("cluster") == CLUSTERS[example] or None,
             what=f"the {example} policy")
    return server


def pod(*containers: dict[str, Any], namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"containers": list(containers), **spec}}


def job(limits: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    container = {"name": "train", "image": "train:1", "resources": {"limits": limits}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "big", "namespace": namespace},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def gpus(n: Any, name: str = "app", field: str = "limits") -> dict[str, Any]:
    return {"name": name, "image": "app:1", "resources": {field: {GPU: n}}}


def review(server: Server, obj: dict[str, Any], tenant: str | None = None, uid: str = "answers") -> dict[str, Any]:
    path = f"/validate/tenant/{tenant}" if tenant else "/validate"
    return server.review(admission_review(obj, uid=uid), path=path)


def fixes(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(c["message"]) for c in answer["status"]["details"]["causes"] if c["reason"] == FIX_CAUSE]


def admitted_after_fix(server: Server, obj: dict[str, Any], answer: dict[str, Any], tenant: str | None = None
                       ) -> dict[str, Any]:
    """The first fix the denial carries, applied and sent again to the same tenant's entry (a fix never moves the
    object to another namespace)."""
    fix = fixes(answer)[0]
    assert "namespace" not in fix
    again = review(server, apply_patch(obj, fix["jsonPatch"]), tenant=tenant, uid="after-fix")
    assert again["allowed"] is True and "warnings" not in again, again
    return fix


# --- 1: hints that admit ----------------------------------------------------------------------------------------


def test_a_whole_gpu_job_of_a_tenant_that_may_use_whole_gpus_is_told_the_class_that_admits_it(server: Server) -> None:
    obj = job({GPU: 8})
    answer = review(use(server, "mixed-fleet"), obj, tenant="research")
    message = answer["status"]["message"]
    assert answer["allowed"] is False and "pin the pod to class a100-mps" not in message
    assert ("Fix: pin the pod to class h100-train with nodeSelector {node-pool: h100-train}, tolerate the taint "
            "dedicated=training:NoSchedule") in message
    assert "namespace of tenant" not in message
    admitted_after_fix(server, obj, answer, tenant="research")


def test_a_time_sliced_mig_slot_outside_the_inference_tenant_is_told_what_to_ask_for_not_sent_there(
        server: Server) -> None:
    obj = pod({"name": "vllm", "image": "vllm:1", "resources": {"limits": {"nvidia.com/mig-1g.12gb": 1}}})
    answer = review(use(server, "h20-mig"), obj)
    message = answer["status"]["message"]
    # 6: one name for the class's mode, the one explain prints.
    assert "namespaces outside every tenant may not use mig+time-slicing GPUs" in message
    assert ("Fix: no change to this object within the policy admits it: ask the platform team to allow mig and "
            "time-slicing (spec.admission.defaultAllow) for namespaces outside every tenant") in message
    assert "tenant inference" not in message and fixes(answer) == []


# --- 2: every violation at once ---------------------------------------------------------------------------------


def test_hami_resources_and_two_shared_gpus_are_reported_together(server: Server) -> None:
    obj = pod({"name": "app", "image": "app:1", "resources": {"limits": {GPU: 2, "nvidia.com/gpumem": 3000}}},
              namespace="nlp")
    answer = review(use(server, "tke-l20-t4"), obj)
    rules = [c["reason"] for c in answer["status"]["details"]["causes"] if c["reason"] != FIX_CAUSE]
    assert rules == ["gpu-request-unsatisfiable", "shared-gpu-request-above-one"]
    fix = admitted_after_fix(server, obj, answer)
    assert sorted(e["kind"] for e in fix["edits"]) == ["remove-resource", "set-resource"]


# --- 3: objects not checked say so ------------------------------------------------------------------------------


def test_a_custom_resource_of_an_unknown_kind_asking_for_gpus_is_admitted_with_a_notice(server: Server) -> None:
    seldon = {"apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "metadata": {"name": "sd"},
              "spec": {"predictors": [{"componentSpecs": [{"spec": {"containers": [
                  {"name": "m", "resources": {"limits": {GPU: 1}}}]}}]}]}}
    answer = review(use(server, "tke-l20-t4"), seldon)
    assert answer["allowed"] is True
    assert answer["auditAnnotations"]["workload-not-checked"].startswith(
        "[workload-not-checked] SeldonDeployment sd (machinelearning.seldon.io API group) asks for nvidia.com/gpu")


def test_a_pytorchjob_is_denied_at_apply_time_naming_the_template_and_where_its_limit_is(server: Server) -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mnist", "namespace": "nlp"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
               {"name": "pytorch", "image": "pytorch:2", "resources": {"limits": {GPU: 2}}}]}}}}}}
    answer = review(use(server, "tke-l20-t4"), job)
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    message = answer["status"]["message"]
    assert message.startswith("PyTorchJob mnist: [shared-gpu-request-above-one] pod template "
                              "spec.pytorchReplicaSpecs.Worker.template.spec: container \"pytorch\" requests 2")
    assert "(at spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits" in message


# --- 4: what the API server refuses ------------------------------------------------------------------------------


@pytest.mark.parametrize(("container", "reason"), [
    (gpus("0.5"), "must be an integer"),
    (gpus("\u0662"), "quantities must match the regular expression"),
    (gpus(1, field="requests"), "Limit must be set for non overcommitable resources"),
    ({"name": "app", "image": "app:1", "resources": {"requests": {GPU: 2}, "limits": {GPU: 1}}},
     "must be equal to nvidia.com/gpu limit of 1"),
])  # fmt: skip
def test_an_amount_the_api_server_refuses_is_denied_with_its_reason_and_a_fix(server: Server,
                                                                              container: dict[str, Any],
                                                                              reason: str) -> None:
    obj = pod(container, namespace="nlp")
    answer = review(use(server, "tke-l20-t4"), obj)
    assert answer["allowed"] is False and "[gpu-request-invalid]" in answer["status"]["message"]
    assert reason in answer["status"]["message"]
    admitted_after_fix(server, obj, answer)


@pytest.mark.parametrize("amount", ["1e31", "1e30", 1e31])
def test_an_astronomical_amount_is_denied_never_read_as_no_gpu(server: Server, amount: Any) -> None:
    answer = review(use(server, "tke-l20-t4"), pod(gpus(amount), namespace="nlp"))
    assert answer["allowed"] is False
    assert "[gpu-request-unsatisfiable]" in answer["status"]["message"]


# --- 5: a pod naming its node ------------------------------------------------------------------------------------


def test_a_pod_naming_its_node_is_not_told_the_scheduler_places_it(server: Server) -> None:
    obj = pod(gpus(1), nodeName="gpu-node-1", tolerations=[{"operator": "Exists"}])
    answer = review(use(server, "mixed-fleet"), obj)
    message = answer["status"]["message"]
    assert "the scheduler may" not in message
    assert ("the pod names node gpu-node-1 (spec.nodeName bypasses the scheduler), and that node may be of class "
            "h100-train (exclusive) as far as gpupolicy can tell") in message
    admitted_after_fix(server, obj, answer)


# --- 7: taints ------------------------------------------------------------------------------------------------------


def test_tainted_whole_gpu_nodes_count_only_for_pods_that_tolerate_them(server: Server) -> None:
    use(server, "mixed-fleet")
    assert review(server, pod(gpus(1)))["allowed"] is True
    tolerant = review(server, pod(gpus(1), tolerations=[{"key": "dedicated", "operator": "Exists"}]))
    assert tolerant["allowed"] is False
    assert "For nvidia.com/gpu the scheduler may place the pod on class h100-train (exclusive)" in \
        tolerant["status"]["message"]


# --- bounded answers --------------------------------------------------------------------------------------------


def test_a_megabyte_name_and_resource_key_are_quoted_shortened_in_every_cause(server: Server) -> None:
    obj = pod({"name": "c" * 1_000_000, "image": "app:1",
               "resources": {"limits": {GPU: 2, "nvidia.com/" + "k" * 200_000: 1}}}, namespace="nlp")
    obj["metadata"]["name"] = "n" * 300_000
    answer = review(use(server, "tke-l20-t4"), obj)
    assert answer["allowed"] is False
    causes = answer["status"]["details"]["causes"]
    assert [c["reason"] for c in causes] == ["gpu-request-unsatisfiable", "shared-gpu-request-above-one"]
    assert all(len(c["message"]) <= 4000 and len(c["field"]) <= 4000 for c in causes)  # was 6.2 MB in all
    assert len(json.dumps(answer)) < 20_000
