"""HAMi vGPU pods through the real server over HTTPS, as the API server sends them after HAMi's mutating webhook.

The validating webhook is called after every mutating one, so each Pod below first goes through `hami_mutation`,
which does to it what HAMi v2.10.0's webhook does (pkg/scheduler/webhook.go Handle; pkg/device/nvidia/device.go
MutateAdmission): schedulerName hami-scheduler, nvidia.com/gpu: 1 added to a container that asks only for memory,
cores or a percentage, nvidia.com/gpucores: 100 added to a whole-memory vGPU, CUDA_TASK_PRIORITY for a priority;
then the API server's defaulting copies the new limits into requests. Pod controllers are not mutated by HAMi.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_https import Server, start_server, stop_server
from webhook_support import admission_review, compiled_policy

pytestmark = pytest.mark.slow

PLATFORM = "/validate/tenant/platform"
DEV = "/validate/tenant/dev"
COUNT, MEMORY, PERCENT, CORES, PRIORITY = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                                           "nvidia.com/gpucores", "nvidia.com/priority")


def hami_mutation(pod: dict[str, Any]) -> dict[str, Any]:
    """The Pod as HAMi's webhook (defaultGPUNum 1, forceOverwriteDefaultScheduler true) and the API server's
    defaulting leave it; pods naming another scheduler are left alone, as HAMi leaves them."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    if spec.get("schedulerName", "default-scheduler") not in ("default-scheduler", "hami-scheduler"):
        return out
    found = False
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        limits = container.setdefault("resources", {}).setdefault("limits", {})
        if COUNT not in limits and any(k in limits for k in (MEMORY, PERCENT, CORES)):
            limits[COUNT] = 1
        if COUNT in limits and CORES not in limits and (limits.get(PERCENT) == 100 or (
                PERCENT not in limits and MEMORY not in limits)):
            limits[CORES] = 100
        if PRIORITY in limits:
            container.setdefault("env", []).append({"name": "CUDA_TASK_PRIORITY", "value": str(limits[PRIORITY])})
        if COUNT in limits:
            found = True
            container["resources"]["requests"] = {**limits, **container["resources"].get("requests", {})}
    if found:
        spec["schedulerName"] = "hami-scheduler"
    return out


def pod(*containers: dict[str, Any], name: str = "vgpu", namespace: str = "inference",
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {"schedulerName": "default-scheduler", "containers": list(containers), **spec}}


def gpu(name: str = "app", **limits: Any) -> dict[str, Any]:
    resources = {{"gpu": COUNT, "gpumem": MEMORY, "percent": PERCENT, "cores": CORES, "priority": PRIORITY}[k]: v
                 for k, v in limits.items()}
    return {"name": name, "image": "registry.example/vgpu:1", "resources": {"limits": resources}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("hami-webhook"), compiled_policy("vgpu-platform"))
    yield running
    assert stop_server(running) == 0, running.log_tail()


def verdict(server: Server, obj: dict[str, Any], path: str = PLATFORM) -> dict[str, Any]:
    return server.review(admission_review(obj), path)


def denied_by(answer: dict[str, Any]) -> set[str]:
    assert answer["allowed"] is False and answer["status"]["code"] == 403, answer
    message = answer["status"]["message"]
    return {rule for rule in ("hami-scheduler-bypassed", "vgpu-memory-unsatisfiable", "vgpu-count-above-gpus",
                              "hami-resource-out-of-range", "hami-privileged-container", "hami-annotation-invalid",
                              "tenant-sharing-mode-denied", "gpu-request-unsatisfiable") if f"[{rule}]" in message}


def test_the_mutation_helper_does_what_hamis_webhook_does() -> None:
    mutated = hami_mutation(pod(gpu(gpumem=4000), gpu("whole", gpu=1)))
    first, whole = mutated["spec"]["containers"]
    assert mutated["spec"]["schedulerName"] == "hami-scheduler"
    assert first["resources"]["limits"] == {MEMORY: 4000, COUNT: 1}
    assert whole["resources"]["limits"] == whole["resources"]["requests"] == {COUNT: 1, CORES: 100}
    assert hami_mutation(pod(gpu(gpumem=4000), schedulerName="volcano"))["spec"]["schedulerName"] == "volcano"


@pytest.mark.parametrize("containers", [
    [gpu(gpumem=6144, cores=25)],
    [gpu(gpu=1)],
    [gpu(gpu=2, percent=50, cores=30)],
    [gpu(gpumem=4000, priority=0)],
], ids=["memory and cores", "a whole GPU", "two half GPUs", "high priority"])
def test_a_vgpu_pod_hami_mutated_is_allowed(server: Server, containers: list[dict[str, Any]]) -> None:
    answer = verdict(server, hami_mutation(pod(*containers)))
    assert answer["allowed"] is True, answer


def test_a_deployment_asking_only_for_memory_is_allowed_before_hami_sees_its_pods(server: Server) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "svc", "namespace": "etl"},
                  "spec": {"selector": {"matchLabels": {"app": "svc"}}, "template": {
                      "metadata": {"labels": {"app": "svc"}}, "spec": {"containers": [gpu(gpumem=8000)]}}}}
    assert verdict(server, deployment, "/validate/tenant/batch")["allowed"] is True


@pytest.mark.parametrize(("obj", "rule", "part"), [
    (hami_mutation(pod(gpu(gpumem=60000))), "vgpu-memory-unsatisfiable", "platform-vgpu: 46068 MiB"),
    (hami_mutation(pod(gpu(gpumem="8Gi"))), "vgpu-memory-unsatisfiable", "request nvidia.com/gpumem: 8192"),
    (hami_mutation(pod(gpu(gpu=5, gpumem=4000))), "vgpu-count-above-gpus", "request nvidia.com/gpu: 4"),
    (hami_mutation(pod(gpu(gpumem=4000, cores=150))), "hami-resource-out-of-range", "clamps it to 100"),
    (hami_mutation(pod(gpu(gpumem=4000, priority=5))), "hami-resource-out-of-range", "0 (high) and 1 (low)"),
    (hami_mutation(pod(gpu(gpumem=4000, percent=40))), "hami-resource-out-of-range", "uses nvidia.com/gpumem alone"),
    (hami_mutation(pod({**gpu(gpumem=4000), "securityContext": {"privileged": True}})),
     "hami-privileged-container", 'container "app" is privileged'),
    (hami_mutation(pod(gpu(gpumem=4000), annotations={"nvidia.com/use-gputype": "A100,V100"})),
     "hami-annotation-invalid", "e.g. L40S"),
    (hami_mutation(pod(gpu(gpumem=4000), annotations={"nvidia.com/vgpu-mode": "mig"})),
     "hami-annotation-invalid", "set annotation nvidia.com/vgpu-mode to hami-core"),
    (hami_mutation(pod(gpu(gpumem=4000), annotations={"hami.io/node-scheduler-policy": "spreed"})),
     "hami-annotation-invalid", "set annotation hami.io/node-scheduler-policy to spread"),
    (hami_mutation(pod(gpu(gpumem=4000), schedulerName="volcano")), "hami-scheduler-bypassed",
     "names scheduler volcano"),
    (pod(gpu(gpu=1, gpumem=4000)), "hami-scheduler-bypassed", "did not send it to hami-scheduler"),
    (pod(gpu(gpu=1, gpumem=4000), nodeName="node-7"), "hami-scheduler-bypassed", "sets spec.nodeName node-7"),
], ids=["memory above the card", "memory with a unit", "five vGPUs on four GPUs", "cores above 100",
        "priority 5", "memory and percentage", "privileged", "GPU type absent", "vgpu-mode mig",
        "unknown node policy", "another scheduler", "HAMi's webhook failed open", "preset nodeName"])
def test_each_hami_rule_denies_over_https_with_its_reason(server: Server, obj: dict[str, Any], rule: str,
                                                          part: str) -> None:
    answer = verdict(server, obj)
    assert denied_by(answer) == {rule}, answer["status"]["message"]
    assert part in answer["status"]["message"]


def test_a_percentage_hami_would_answer_with_http_500_gets_a_403_with_the_reason(server: Server) -> None:
    # HAMi's webhook errors before mutating (validateMemoryPercentage), so the Pod reaches us unmutated only
    # when HAMi is bypassed; a Deployment's template is where the mistake is caught first.
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pct", "namespace": "inference"},
                  "spec": {"selector": {"matchLabels": {"app": "pct"}}, "template": {
                      "metadata": {"labels": {"app": "pct"}}, "spec": {"containers": [gpu(percent=150)]}}}}
    answer = verdict(server, deployment)
    assert denied_by(answer) == {"hami-resource-out-of-range"}
    assert "HTTP 500" in answer["status"]["message"]


def test_a_tenant_not_allowed_vgpu_is_denied_for_hami_resources(server: Server) -> None:
    answer = verdict(server, hami_mutation(pod(gpu(gpumem=3000), namespace="notebooks")), DEV)
    assert denied_by(answer) == {"tenant-sharing-mode-denied"}
    assert "tenant dev may not use vgpu GPUs" in answer["status"]["message"]


def test_the_server_never_answers_500_to_malformed_hami_values(server: Server) -> None:
    for value in ("lots", -3, "1.5", None, {"x": 1}, "99999999999999999999Gi"):
        answer = verdict(server, hami_mutation(pod(gpu(gpu=1, gpumem=value, percent=value))))
        assert isinstance(answer["allowed"], bool)


def test_the_policy_file_the_server_loads_is_the_compiled_one(server: Server) -> None:
    text = (Path(server.policy_dir) / "admission-policy.json").read_text()
    assert '"scheduler_name": "hami-scheduler"' in text and '"scoped": true' in text
