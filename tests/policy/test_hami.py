"""The vgpu mode in the policy core: HAMi's facts, a vgpu class resolved, the checks, and where HAMi's webhook acts."""

from __future__ import annotations

import json

import pytest

from policy.kube import selectors
from policy.load import load_policy
from policy.resolved.resolve import ResolvedPolicy, resolve
from policy.resolved.vgpu_scope import NO_NAMESPACE, hami_scope
from policy.vgpu import hami

BASE = """
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: demo}
spec:
  nodeClasses:
    - name: platform
      nodeSelector: {pool: platform}
      nodes: 3
      gpu: {model: L40S, count: 4}
      sharing:
        vgpu: {splitCount: 6, memoryScaling: 0.8, coreScaling: 1.5}
"""
TS_CLASS = """    - name: dev
      nodeSelector: {pool: dev}
      gpu: {model: T4, count: 1}
      sharing: {timeSlicing: {sizing: {memoryPerReplica: 3Gi, reserve: 10%}}}
"""


def loaded(text: str) -> ResolvedPolicy:
    result = load_policy(text, filename="demo.yaml")
    assert result.resolved is not None, result.diagnostics
    return result.resolved


def codes(text: str) -> list[str]:
    return [d.code for d in load_policy(text, filename="demo.yaml").diagnostics]


# ---- HAMi's own facts ---------------------------------------------------------------------------------------------


def test_the_registration_annotation_reads_in_both_formats() -> None:
    # JSON since v2.8.0 (a real v2.8.0 node: index, numa 0 and an empty mode are omitted) and the legacy text.
    modern = hami.parse_register('[{"id":"GPU-32f8","count":10,"devmem":12288,"devcore":100,'
                                 '"type":"NVIDIA GeForce RTX 3060","numa":0,"health":true}]')
    legacy = hami.parse_register("GPU-b7c4,10,40960,100,NVIDIA-NVIDIA A100-PCIE-40GB,0,true:"
                                 "GPU-c1d2,10,40960,100,NVIDIA-NVIDIA A100-PCIE-40GB,0,false,1,mig:")
    assert modern == (hami.RegisteredGpu("GPU-32f8", 10, 12288, 100, "NVIDIA GeForce RTX 3060", "hami-core", True),)
    assert legacy is not None and [(g.id, g.mode, g.health) for g in legacy] == [
        ("GPU-b7c4", "hami-core", True), ("GPU-c1d2", "mig", False)]


@pytest.mark.parametrize("value", ["", "[", '{"id": 1}', "[1, 2]", "GPU-1,10", "a,b,c,d,e,f,g:", "nonsense"])
def test_an_unreadable_registration_is_none(value: str) -> None:
    assert hami.parse_register(value) is None


def test_registered_figures_truncate_as_go_converts() -> None:
    assert hami.registered_memory(46068, 1.0) == 46068
    assert hami.registered_memory(46068, 0.8) == 36854  # int32(46068 * 0.8 = 36854.4)
    assert hami.registered_cores(1.5) == 150
    assert hami.registered_cores(0.29) == 28  # 0.29 * 100 is 28.999999999999996 in float64


def test_gpu_types_match_by_case_insensitive_substring_with_spaces_as_dashes() -> None:
    assert hami.device_type("Tesla-T4") == "NVIDIA-Tesla-T4"
    assert hami.device_type("NVIDIA-L40S") == "NVIDIA-L40S"
    assert hami.type_matches("l40s", "NVIDIA-L40S")
    assert hami.type_matches("A10", "NVIDIA-A100-SXM4-80GB")  # HAMi's own pitfall, mirrored
    assert hami.type_matches("H100, NVIDIA A100-SXM4", "NVIDIA-A100-SXM4-80GB")
    assert not hami.type_matches("H100,, ", "NVIDIA-A100-SXM4-80GB")


# ---- a vgpu class, resolved -------------------------------------------------------------------------------------


def test_a_vgpu_class_offers_gpus_times_split_of_hamis_count_resource() -> None:
    (platform,) = loaded(BASE).classes
    (offer,) = platform.offers
    assert (offer.resource, offer.per_node, offer.modes, offer.isolation) == ("nvidia.com/gpu", 24, ("vgpu",),
                                                                               "hami-core")
    assert offer.fail_requests_greater_than_one is False  # N vGPUs are N GPUs: asking for several is legitimate
    assert platform.vgpu is not None
    assert (platform.vgpu.card_memory_mib, platform.vgpu.cores) == (36854, 150)
    assert offer.memory_mib == 36854 // 6
    assert platform.gfd_labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"  # GFD never sees HAMi's sharing
    assert "nvidia.com/gpu.replicas" not in platform.gfd_labels


def test_a_sized_vgpu_class_takes_its_split_from_the_physical_memory() -> None:
    text = BASE.replace("splitCount: 6, memoryScaling: 0.8", "sizing: {memoryPerReplica: 8Gi, reserve: 10%}, "
                                                             "memoryScaling: 2.0")
    (platform,) = loaded(text).classes
    assert platform.replicas == 5 and platform.offers[0].memory_mib == 8192
    assert platform.vgpu is not None and platform.vgpu.card_memory_mib == 92136


def test_under_the_gpu_operator_a_vgpu_class_turns_the_operators_plugin_off_on_its_nodes() -> None:
    text = BASE.replace("spec:\n", "spec:\n  devicePlugin: {deploy: gpu-operator}\n", 1)
    (platform,) = loaded(text).classes
    assert platform.required_labels == {"nvidia.com/gpu.deploy.device-plugin": "false"}


def test_the_renamed_count_resource_is_what_the_class_offers() -> None:
    text = BASE.replace("spec:\n", "spec:\n  hami: {resourceNames: {count: nvidia.com/vgpu}}\n", 1)
    assert loaded(text).classes[0].offers[0].resource == "nvidia.com/vgpu"


# ---- checks --------------------------------------------------------------------------------------------------------


def test_a_split_count_or_sizing_but_not_both() -> None:
    assert codes(BASE.replace("splitCount: 6,", "")) == ["replicas-or-sizing"]
    both = BASE.replace("splitCount: 6,", "splitCount: 6, sizing: {memoryPerReplica: 8Gi},")
    assert codes(both) == ["replicas-or-sizing"]


def test_sizing_a_vgpu_class_reports_what_time_slicing_sizing_reports() -> None:
    assert codes(BASE.replace("splitCount: 6,", "sizing: {memoryPerReplica: 44Gi, reserve: 10%},")) == [
        "sizing-exceeds-memory"]
    assert codes(BASE.replace("splitCount: 6,", "sizing: {memoryPerReplica: 30Gi},")) == [
        "sizing-below-two-replicas"]


@pytest.mark.parametrize(("version", "severity"), [("v2.9.0", "error"), ("v2.11.0", "warning"), ("v2.10.3", None)])
def test_hami_versions_other_than_2_10_are_refused_or_flagged(version: str, severity: str | None) -> None:
    found = [d for d in load_policy(BASE.replace("spec:\n", f"spec:\n  hami: {{version: {version}}}\n", 1),
                                    filename="x.yaml").diagnostics if d.code == "hami-unsupported-version"]
    assert [d.severity for d in found] == ([severity] if severity else [])


@pytest.mark.parametrize(("cluster", "cls", "refused"), [
    ("default", "disable", False), ("default", "force", True), ("force", "force", False),
    ("force", "disable", True), ("disable", "default", True), ("disable", "disable", False),
])
def test_only_disable_differs_from_the_clusters_core_policy(cluster: str, cls: str, refused: bool) -> None:
    text = BASE.replace("spec:\n", f"spec:\n  hami: {{corePolicy: {cluster}}}\n", 1).replace(
        "coreScaling: 1.5}", f"coreScaling: 1.5, corePolicy: {cls}}}")
    assert ("hami-setting-cluster-wide" in codes(text)) is refused


def test_a_vgpu_class_is_not_a_shared_product_selector_case() -> None:
    text = BASE.replace("{pool: platform}", "{nvidia.com/gpu.product: NVIDIA-L40S}")
    assert "shared-product-selector" not in codes(text)


# ---- where HAMi's webhook acts ---------------------------------------------------------------------------------


def tenants(*entries: str, default: str = "[time-slicing]") -> str:
    # gitOps: none says who labels the namespaces (people, by hand), which the tenancy checks otherwise ask.
    return BASE + TS_CLASS + "  tenants:\n" + "".join(entries) + (f"  admission:\n    defaultAllow: {default}\n"
                                                                   "    tenancy: {gitOps: none}\n")


def tenant(name: str, selector: str, allow: str) -> str:
    return f"    - name: {name}\n      namespaceSelector: {selector}\n      allow: {allow}\n"


def test_without_a_plugin_class_on_the_same_resource_hamis_webhook_keeps_every_namespace() -> None:
    scope = hami_scope(loaded(BASE))
    assert (scope.scoped, scope.requirements, scope.collisions) == (False, (), ())
    renamed = tenants(tenant("a", "{matchLabels: {t: a}}", "[vgpu, time-slicing]")).replace(
        "spec:\n", "spec:\n  hami: {resourceNames: {count: nvidia.com/vgpu}}\n", 1)
    assert hami_scope(loaded(renamed)).scoped is False and codes(renamed) == []


def test_the_vgpu_tenants_on_one_key_are_one_in_requirement() -> None:
    scope = hami_scope(loaded(tenants(tenant("a", "{matchLabels: {tier: a}}", "[vgpu]"),
                                      tenant("b", "{matchExpressions: [{key: tier, operator: In, values: [b, c]}]}",
                                             "[vgpu]"),
                                      tenant("d", "{matchLabels: {tier: d}}", "[time-slicing]"))))
    assert scope.scoped and scope.collisions == () and scope.inexpressible == ()
    assert scope.requirements == (selectors.Requirement("tier", "In", frozenset({"a", "b", "c"})),)


def test_when_the_default_allows_vgpu_the_other_tenants_are_negated() -> None:
    scope = hami_scope(loaded(tenants(tenant("d", "{matchLabels: {tier: dev}}", "[time-slicing]"),
                                      tenant("e", "{matchExpressions: [{key: x, operator: Exists}]}",
                                             "[time-slicing]"), default="[vgpu]")))
    assert scope.requirements == (selectors.Requirement("tier", "NotIn", frozenset({"dev"})),
                                  selectors.Requirement("x", "DoesNotExist"))


def test_no_vgpu_tenant_means_hamis_webhook_matches_no_namespace() -> None:
    scope = hami_scope(loaded(tenants(tenant("d", "{matchLabels: {tier: dev}}", "[time-slicing]"))))
    assert scope.requirements == (NO_NAMESPACE,)


def test_a_tenant_using_both_sides_of_one_name_is_a_collision_located_at_its_allow() -> None:
    found = load_policy(tenants(tenant("r", "{matchLabels: {tier: r}}", "[vgpu, time-slicing]")),
                        filename="x.yaml").diagnostics
    (collision,) = [d for d in found if d.code == "hami-resource-name-collision"]
    assert collision.path == ("spec", "tenants", 0, "allow")
    assert "vgpu class platform and NVIDIA-plugin class dev (time-slicing)" in collision.message
    assert "spec.hami.resourceNames.count: nvidia.com/vgpu" in collision.hint


def test_a_tenant_limited_to_its_vgpu_classes_does_not_collide() -> None:
    text = tenants(tenant("r", "{matchLabels: {tier: r}}", "[vgpu, time-slicing]\n      classes: [platform]"))
    assert "hami-resource-name-collision" not in codes(text)


def test_the_operator_namespace_is_kept_from_hamis_webhook() -> None:
    text = tenants(tenant("a", "{matchLabels: {tier: a}}", "[vgpu]")).replace(
        "spec:\n", "spec:\n  devicePlugin: {deploy: gpu-operator}\n", 1)
    assert hami_scope(loaded(text)).excluded_namespaces == ("gpu-operator",)


def test_the_admission_policy_carries_what_hamis_scheduler_knows_of_each_class() -> None:
    from policy.resolved.offers import build_admission_policy

    document = json.loads(build_admission_policy(loaded(BASE)).to_json())
    assert document["hami"]["classes"] == [{"card_memory_mib": 36854, "cores": 150, "gpu_type": "NVIDIA-L40S",
                                            "gpus": 4, "name": "platform", "split_count": 6}]
    assert document["hami"]["scoped"] is False and "vgpu" in document["default_allow"]
    assert json.loads(build_admission_policy(resolve(loaded(BASE.replace(
        "vgpu: {splitCount: 6, memoryScaling: 0.8, coreScaling: 1.5}", "exclusive")).policy)).to_json())["hami"] is None
