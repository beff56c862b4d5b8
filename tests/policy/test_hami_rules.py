"""HAMi vGPU pods through the rule engine: which classes they reach, and every HAMi rule on both sides.

Pods are given as the API server sends them to a validating webhook, after HAMi's mutating webhook (schedulerName
hami-scheduler, the vGPU count HAMi adds); pod controllers and offline manifests as they are written, since HAMi
never mutates them. tests/webhook/test_hami_https.py sends the same kinds of reviews to the real server.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.admission.engine import Decision, Engine
from policy.admission.vgpu import HamiAdmission
from policy.load import load_policy_or_raise
from policy.resolved.offers import build_admission_policy

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = ("platform",)

# Two vgpu classes (L40S and A100 80GB), a time-sliced T4 class; HAMi's default names, so the vgpu tenants'
# namespaces are HAMi's and the others NVIDIA's.
SPEC = """
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: hami}
spec:
  hami: {memoryFactor: 1, defaultGpuNum: 1}
  nodeClasses:
    - name: l40s
      nodeSelector: {pool: l40s}
      gpu: {model: L40S, count: 4}
      sharing: {vgpu: {splitCount: 6}}
    - name: a100
      nodeSelector: {pool: a100}
      gpu: {model: A100-SXM4-80GB, count: 8}
      sharing: {vgpu: {splitCount: 10, memoryScaling: 0.9}}
    - name: t4
      nodeSelector: {pool: t4}
      gpu: {model: T4, count: 1}
      sharing: {timeSlicing: {sizing: {memoryPerReplica: 3Gi, reserve: 10%}}}
  tenants:
    - name: platform
      namespaceSelector: {matchLabels: {tier: platform}}
      allow: [vgpu]
    - name: dev
      namespaceSelector: {matchLabels: {tier: dev}}
      allow: [time-slicing]
  admission:
    defaultAllow: [time-slicing]
"""


def engine(text: str = SPEC, *edits: tuple[str, str]) -> Engine:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return Engine(build_admission_policy(load_policy_or_raise(text, filename="hami.yaml")))


def container(name: str = "app", privileged: bool = False, **limits: Any) -> dict[str, Any]:
    names = {"gpu": "nvidia.com/gpu", "gpumem": "nvidia.com/gpumem", "percent": "nvidia.com/gpumem-percentage",
             "cores": "nvidia.com/gpucores", "priority": "nvidia.com/priority", "vgpu": "nvidia.com/vgpu"}
    out: dict[str, Any] = {"name": name, "image": "app:1",
                           "resources": {"limits": {names[k]: v for k, v in limits.items()}}}
    if privileged:
        out["securityContext"] = {"privileged": True}
    return out


def pod(*containers: dict[str, Any], scheduler: str | None = "hami-scheduler",
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod as a validating webhook sees it: HAMi's webhook set hami-scheduler (None: an offline manifest)."""
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if scheduler is not None:
        body["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": annotations or {}},
            "spec": body}


def deployment(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": list(containers), **spec}}}}


def rules(decision: Decision) -> list[str]:
    return sorted(d.code for d in decision.diagnostics)


def test_hamis_webhook_output_is_allowed_for_every_way_to_size_a_vgpu() -> None:
    e = engine()
    for limits in ({"gpu": 1, "gpumem": 8000, "cores": 30}, {"gpu": 2, "percent": 50}, {"gpu": 1, "cores": 100},
                   {"gpu": 8, "gpumem": 70000}, {"gpu": 1, "gpumem": 4000, "priority": 0}):
        decision = e.evaluate(pod(container(**limits)), tenants=PLATFORM)
        assert decision.allowed and decision.diagnostics == (), (limits, decision.render())


def test_a_template_asking_only_for_memory_gets_hamis_count_and_only_vgpu_classes() -> None:
    decision = engine().evaluate(deployment(container(gpumem=8000)), tenants=PLATFORM)
    assert decision.allowed and decision.diagnostics == ()


def test_without_a_default_count_a_memory_only_container_is_left_to_default_scheduler_and_denied() -> None:
    decision = engine(SPEC, ("defaultGpuNum: 1", "defaultGpuNum: 0")).evaluate(
        deployment(container(gpumem=8000)), tenants=PLATFORM)
    assert rules(decision) == ["hami-scheduler-bypassed"]
    assert "HAMi adds no vGPU count (defaultGPUNum is 0)" in decision.message
    assert 'Fix: request nvidia.com/gpu: 1 in container "app"' in decision.message


# ---- which classes a vGPU pod reaches ---------------------------------------------------------------------------


def test_a_vgpu_pod_is_placed_among_vgpu_classes_only() -> None:
    # Pinned to the time-sliced pool: hami-scheduler would never place it there, whatever NVIDIA's plugin offers.
    decision = engine().evaluate(pod(container(gpu=1, gpumem=4000), nodeSelector={"pool": "t4"}), tenants=PLATFORM)
    assert rules(decision) == ["gpu-request-unsatisfiable"]
    assert "Per class: l40s: nodeSelector pool=t4 excludes it" in decision.message
    assert "t4:" not in decision.message.split("Per class:")[1].split(".")[0]


def test_a_count_only_pod_in_a_vgpu_namespace_is_hamis_and_elsewhere_nvidias() -> None:
    e = engine()
    whole = deployment(container(gpu=1))
    assert e.evaluate(whole, tenants=PLATFORM).allowed  # HAMi's webhook takes it: vgpu classes only
    dev = e.evaluate(whole, tenants=("dev",))  # not HAMi's: default-scheduler may pick an L40S or the T4
    assert rules(dev) == ["tenant-sharing-mode-denied"]
    assert "Fix: pin the pod to class t4 with nodeSelector {pool: t4}" in dev.message
    assert e.evaluate(deployment(container(gpu=1), nodeSelector={"pool": "t4"}), tenants=("dev",)).allowed


def test_hami_resources_outside_every_vgpu_tenant_are_a_tenant_denial_not_a_missing_resource() -> None:
    decision = engine().evaluate(deployment(container(gpumem=3000)), tenants=("dev",))
    assert rules(decision) == ["tenant-sharing-mode-denied"]
    assert "tenant dev may not use vgpu GPUs" in decision.message
    # Never another tenant's namespace: the hint names what the platform team would have to allow, and where.
    assert "Fix: no change to this object within the policy admits it: ask the platform team to allow vgpu " \
           "(spec.tenants[1].allow) for tenant dev in ClusterGPUPolicy hami" in decision.message
    assert "tenant platform" not in decision.message


def test_with_a_renamed_count_resource_nvidia_gpu_pods_never_reach_hami() -> None:
    e = engine(SPEC, ("hami: {memoryFactor: 1, defaultGpuNum: 1}",
                      "hami: {resourceNames: {count: nvidia.com/vgpu}}"),
               ("allow: [vgpu]", "allow: [vgpu, time-slicing]"))
    assert e.evaluate(deployment(container(gpu=1)), tenants=PLATFORM).allowed  # only the T4 offers nvidia.com/gpu
    assert e.evaluate(pod(container(vgpu=1, gpumem=4000)), tenants=PLATFORM).allowed
    decision = e.evaluate(pod(container(vgpu=1, gpumem=4000), nodeSelector={"pool": "t4"}), tenants=PLATFORM)
    assert rules(decision) == ["gpu-request-unsatisfiable"]


def test_a_policy_without_vgpu_keeps_its_hint_for_hami_resources() -> None:
    last_vgpu = "      sharing: {vgpu: {splitCount: 10, memoryScaling: 0.9}}\n"
    text = SPEC.split("    - name: l40s")[0] + SPEC.split(last_vgpu)[1]
    text = text.replace("allow: [vgpu]", "allow: [time-slicing]")
    e = engine(text)
    assert HamiAdmission.build(build_admission_policy(load_policy_or_raise(text, filename="x.yaml"))) is None
    decision = e.evaluate(deployment(container(gpumem=3000)), tenants=PLATFORM)
    assert rules(decision) == ["gpu-request-unsatisfiable"]
    assert "HAMi's resource, not advertised by the NVIDIA device plugin" in decision.message


# ---- hami-scheduler-bypassed ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "part"), [
    (pod(container(gpu=1, gpumem=4000), scheduler="default-scheduler"), "did not send it to hami-scheduler"),
    (pod(container(gpu=1, gpumem=4000), scheduler="volcano"), "names scheduler volcano"),
    (deployment(container(gpumem=4000), schedulerName="volcano"), "names scheduler volcano"),
    (pod(container(gpu=1, gpumem=4000), scheduler=None, nodeName="gpu-7"), "sets spec.nodeName gpu-7"),
], ids=["a Pod HAMi's webhook did not mutate", "another scheduler", "a template naming another scheduler",
        "a preset nodeName"])
def test_hami_scheduler_bypassed(obj: dict[str, Any], part: str) -> None:
    decision = engine().evaluate(obj, tenants=PLATFORM)
    assert rules(decision) == ["hami-scheduler-bypassed"], decision.render()
    assert part in decision.message


@pytest.mark.parametrize("obj", [
    pod(container(gpu=1, gpumem=4000), scheduler=None),  # an offline manifest: HAMi's webhook will mutate it
    deployment(container(gpumem=4000), schedulerName="default-scheduler"),  # templates are defaulted, never mutated
    pod(container(gpu=1, gpumem=4000), scheduler="hami-scheduler"),
], ids=["offline Pod", "template on default-scheduler", "mutated Pod"])
def test_hami_scheduler_not_bypassed(obj: dict[str, Any]) -> None:
    assert engine().evaluate(obj, tenants=PLATFORM).allowed


# ---- vgpu-memory-unsatisfiable ------------------------------------------------------------------------------------


def test_memory_above_every_reachable_card_is_pending_and_the_hint_names_the_most() -> None:
    decision = engine().evaluate(pod(container(gpu=1, gpumem=80000)), tenants=PLATFORM)
    assert rules(decision) == ["vgpu-memory-unsatisfiable"]
    # The A100 registers 81920 x 0.9 = 73728 MiB, the L40S 46068.
    assert "l40s: 46068 MiB (NVIDIA-L40S); a100: 73728 MiB (NVIDIA-A100-SXM4-80GB)" in decision.message
    assert 'Fix: request nvidia.com/gpumem: 73728 in container "app"' in decision.message


def test_memory_one_class_holds_is_allowed_and_pinning_away_from_it_is_not() -> None:
    e = engine()
    assert e.evaluate(pod(container(gpu=1, gpumem=60000)), tenants=PLATFORM).allowed
    pinned = e.evaluate(pod(container(gpu=1, gpumem=60000), nodeSelector={"pool": "l40s"}), tenants=PLATFORM)
    assert rules(pinned) == ["vgpu-memory-unsatisfiable"]
    # The amount asked for is kept where a class of the tenant holds it: the fix replaces the selector value.
    assert "Fix: pin the pod to class a100 with nodeSelector {pool: a100}" in pinned.message


def test_memory_with_a_unit_is_read_as_mib_and_dropped() -> None:
    decision = engine().evaluate(deployment(container(gpu=1, gpumem="8Gi")), tenants=PLATFORM)
    assert rules(decision) == ["vgpu-memory-unsatisfiable"]
    assert "HAMi reads as 8589934592 MiB" in decision.message
    assert "Fix: request nvidia.com/gpumem: 8192 in container \"app\" (nvidia.com/gpumem counts MiB: 8192 is 8Gi)" \
        in decision.message


def test_a_small_suffixed_memory_fits_int32_but_not_a_card() -> None:
    decision = engine().evaluate(deployment(container(gpu=1, gpumem="100Mi")), tenants=PLATFORM)
    assert rules(decision) == ["vgpu-memory-unsatisfiable"]
    assert "request nvidia.com/gpumem: 100 in container \"app\" (nvidia.com/gpumem counts MiB: 100 is 100Mi)" \
        in decision.message


def test_memory_factor_multiplies_the_request() -> None:
    e = engine(SPEC, ("hami: {memoryFactor: 1, defaultGpuNum: 1}", "hami: {memoryFactor: 1024}"))
    assert e.evaluate(pod(container(gpu=1, gpumem=45)), tenants=PLATFORM).allowed  # 46080 MiB: the A100
    decision = e.evaluate(pod(container(gpu=1, gpumem=80)), tenants=PLATFORM)
    assert rules(decision) == ["vgpu-memory-unsatisfiable"]
    assert "81920 MiB per vGPU (nvidia.com/gpumem: 80 x memoryFactor 1024)" in decision.message


def test_memory_is_checked_against_the_gpu_types_the_pod_names() -> None:
    decision = engine().evaluate(pod(container(gpu=1, gpumem=60000), annotations={"nvidia.com/use-gputype": "L40S"}),
                                 tenants=PLATFORM)
    assert rules(decision) == ["vgpu-memory-unsatisfiable"]
    assert "a100:" not in decision.message.split("Per class:")[1].split(". ")[0]


# ---- vgpu-count-above-gpus ---------------------------------------------------------------------------------------


def test_more_vgpus_than_gpus_per_node_is_pending_even_where_the_split_advertises_enough() -> None:
    e = engine()
    assert e.evaluate(pod(container(gpu=8, gpumem=1000)), tenants=PLATFORM).allowed  # the A100 nodes have 8
    decision = e.evaluate(pod(container(gpu=6, gpumem=1000), nodeSelector={"pool": "l40s"}), tenants=PLATFORM)
    assert rules(decision) == ["vgpu-count-above-gpus"]  # 4 GPUs x 6 vGPUs = 24 advertised, 4 GPUs
    # The A100 class holds 6 vGPUs in one container: the fix places the pod there rather than cutting it to 4.
    assert "Fix: pin the pod to class a100 with nodeSelector {pool: a100}" in decision.message
    only_l40s = e.evaluate(pod(container(gpu=9, gpumem=1000), nodeSelector={"pool": "l40s"}), tenants=PLATFORM)
    assert rules(only_l40s) == ["vgpu-count-above-gpus"]  # no class holds 9: fewer is the fix
    assert ('Fix: request nvidia.com/gpu: 4 in container "app" (HAMi gives each vGPU of a container a GPU of its '
            "own)") in only_l40s.message


# ---- hami-resource-out-of-range ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("limits", "part"), [
    ({"percent": 101}, "HTTP 500"),
    ({"gpu": 1, "percent": 0}, "reads as no percentage"),
    ({"gpu": 1, "gpumem": 0}, "reads as no memory request"),
    ({"gpu": 1, "gpumem": 4000, "percent": 50}, "uses nvidia.com/gpumem alone"),
    ({"gpu": 1, "gpumem": 4000, "cores": 101}, "clamps it to 100"),
    ({"gpu": 1, "gpumem": 4000, "priority": 2}, "knows only 0 (high) and 1 (low)"),
], ids=["percentage above 100", "percentage 0", "memory 0", "memory and percentage", "cores above 100",
        "priority 2"])
def test_values_hami_rejects_clamps_or_ignores(limits: dict[str, Any], part: str) -> None:
    decision = engine().evaluate(deployment(container(**limits)), tenants=PLATFORM)
    assert rules(decision) == ["hami-resource-out-of-range"], decision.render()
    assert part in decision.message


def test_values_at_the_edges_of_their_ranges_are_allowed() -> None:
    e = engine()
    for limits in ({"gpu": 1, "percent": 100}, {"gpu": 1, "percent": 1}, {"gpu": 1, "cores": 0, "gpumem": 100},
                   {"gpu": 1, "gpumem": 100, "priority": 1}):
        assert e.evaluate(deployment(container(**limits)), tenants=PLATFORM).allowed, limits


# ---- hami-privileged-container ----------------------------------------------------------------------------------


def test_a_privileged_container_anywhere_in_a_vgpu_pod_is_denied() -> None:
    obj = pod(container(gpu=1, gpumem=4000), initContainers=[container("init", privileged=True)])
    decision = engine().evaluate(obj, tenants=PLATFORM)
    assert rules(decision) == ["hami-privileged-container"]
    assert decision.diagnostics[0].path == ("spec", "initContainers", 0, "securityContext", "privileged")


def test_a_privileged_container_without_hami_resources_is_not_hamis_business() -> None:
    obj = deployment(container(gpu=1, privileged=True), nodeSelector={"pool": "t4"})
    assert engine().evaluate(obj, tenants=("dev",)).allowed


# ---- hami-annotation-invalid --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("annotations", "part"), [
    ({"nvidia.com/use-gputype": "H100"}, "e.g. L40S"),
    ({"nvidia.com/nouse-gputype": "L40S,A100"}, "leaves no GPU"),
    ({"nvidia.com/vgpu-mode": "mig"}, "Fix: set annotation nvidia.com/vgpu-mode to hami-core"),
    ({"hami.io/gpu-scheduler-policy": "binpack,topology"},
     "Fix: set annotation hami.io/gpu-scheduler-policy to binpack,topology-aware"),
    ({"hami.io/node-scheduler-policy": "pack"}, "silently reads as binpack"),
], ids=["use-gputype absent", "nouse-gputype all", "vgpu-mode mig", "unknown gpu policy", "unknown node policy"])
def test_annotations_hami_would_pend_on_or_ignore(annotations: dict[str, str], part: str) -> None:
    decision = engine().evaluate(pod(container(gpu=1, gpumem=4000), annotations=annotations), tenants=PLATFORM)
    assert rules(decision) == ["hami-annotation-invalid"], decision.render()
    assert part in decision.message


@pytest.mark.parametrize("annotations", [
    {"nvidia.com/use-gputype": "a100"},  # case-insensitive
    {"nvidia.com/use-gputype": "A10"},  # a substring: HAMi's A10 also matches the A100 (maintainer, issue #19)
    {"nvidia.com/use-gputype": "NVIDIA L40S"},  # NVML's spaces match GFD's dashes
    {"nvidia.com/nouse-gputype": "A100"},
    {"nvidia.com/vgpu-mode": "hami-core"},
    {"hami.io/gpu-scheduler-policy": "binpack,numa", "hami.io/node-scheduler-policy": "spread"},
])
def test_annotations_that_leave_a_gpu_are_allowed(annotations: dict[str, str]) -> None:
    decision = engine().evaluate(pod(container(gpu=1, gpumem=4000), annotations=annotations), tenants=PLATFORM)
    assert decision.allowed and decision.diagnostics == (), decision.render()


def test_template_annotations_are_read_from_the_pod_template() -> None:
    obj = deployment(container(gpumem=4000))
    obj["spec"]["template"]["metadata"] = {"annotations": {"nvidia.com/use-gputype": "H100"}}
    decision = engine().evaluate(obj, tenants=PLATFORM)
    assert rules(decision) == ["hami-annotation-invalid"]
    assert decision.diagnostics[0].path == ("spec", "template", "metadata", "annotations", "nvidia.com/use-gputype")


# ---- robustness ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "lots", -1, "1.5", [], {"a": 1}, True, "99999999999999999999Gi", 2**70])
def test_unreadable_values_never_raise(value: Any) -> None:
    e = engine()
    for obj in (pod(container(gpu=value, gpumem=value, percent=value, cores=value, priority=value)),
                deployment(container(gpumem=value)), pod(container(gpu=1), annotations={"x": value})):  # type: ignore[dict-item]
        assert isinstance(e.evaluate(obj, tenants=PLATFORM), Decision)


def test_the_vgpu_platform_example_gives_vgpu_to_its_platform_tenants_only() -> None:
    text = (ROOT / "examples" / "clusters" / "vgpu-platform" / "cluster.yaml").read_text()
    e = engine(text)
    assert e.evaluate(deployment(container(gpumem=8000)), tenants=("batch",)).allowed
    assert not e.evaluate(deployment(container(gpumem=8000)), tenants=("prod",)).allowed


HAMI_KEYS = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
             "nvidia.com/priority", "schedulerName", "nodeName", "annotations", "metadata", "securityContext",
             "privileged", "nvidia.com/use-gputype", "nvidia.com/vgpu-mode", "hami.io/gpu-scheduler-policy"]
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.text(max_size=8)
    | st.sampled_from(["hami-scheduler", "default-scheduler", "8Gi", "1.5", "-1", "A100", "mig", "binpack"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from([*HAMI_KEYS, "containers", "initContainers", "resources", "limits", "requests", "name",
                         "spec", "template"]), children, max_size=5),
    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(body=ANY_JSON, tenants=st.sampled_from([(), PLATFORM, ("dev",), ("nobody",)]),
       kind=st.sampled_from(["Pod", "Deployment"]))
def test_any_json_shaped_like_a_vgpu_pod_gets_a_decision(body: Any, tenants: tuple[str, ...], kind: str) -> None:
    e = _ENGINE()
    spec = body if kind == "Pod" else {"template": {"spec": body, "metadata": body}}
    obj = {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, "metadata": body, "spec": spec}
    assert isinstance(e.evaluate(obj, tenants=tenants), Decision)


_ENGINE = functools.cache(engine)
