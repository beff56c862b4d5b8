"""Tests for the admission rules: each rule's deny and allow sides, with whole diagnostics, and placement logic."""

from __future__ import annotations

import typing
from typing import Any
from unittest.mock import ANY

import pytest

from policy.admission import rules
from policy.admission.engine import Engine
from policy.admission.rules import ClassView, placement_conflict
from policy.admission.workloads import find_workload, read_placement
from policy.kube.scheduling import Placement
from policy.load import load_policy
from policy.resolved.offers import ALL_RULES, build_admission_policy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import RuleId

GPU = "nvidia.com/gpu"
LIMIT = ("spec", "containers", 0, "resources", "limits")

UNIT_POLICY = """
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: unit}
spec:
  devicePlugin: {gpuFeatureDiscovery: true}   # the nodes carry GFD's labels, so rules can reason on them
  nodeClasses:
    - name: ts
      nodeSelector: {pool: ts}
      gpu: {model: Tesla-T4, count: 1}
      sharing: {timeSlicing: {replicas: 4}}
    - name: whole
      nodeSelector: {pool: whole}
      gpu: {model: NVIDIA-H100-80GB-HBM3, count: 8}
      sharing: exclusive
    - name: mig
      nodeSelector: {pool: mig}
      gpu: {model: NVIDIA-H100-80GB-HBM3, count: 1}
      sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}
  tenants:
    - name: prod
      namespaceSelector: {matchLabels: {tier: prod}}
      allow: [exclusive, mig]
    - name: dev
      namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [dev]}]}
      allow: [time-slicing, exclusive]
      classes: [ts]
"""


def engine_for(text: str) -> Engine:
    result = load_policy(text, filename="unit.yaml")
    assert result.ok and result.policy is not None, result.diagnostics
    return Engine(build_admission_policy(result.policy))


@pytest.fixture(scope="module")
def engine() -> Engine:
    return engine_for(UNIT_POLICY)


def pod(limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    containers = [{"name": "app", "image": "app:1", "resources": {"limits": limits}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers, **spec}}


def found(engine: Engine, obj: dict[str, Any], tenants: tuple[str, ...] = ()) -> tuple[Diagnostic, ...]:
    return engine.evaluate(obj, tenants=tenants).diagnostics


def codes(engine: Engine, obj: dict[str, Any], tenants: tuple[str, ...] = ()) -> list[str]:
    return [d.code for d in found(engine, obj, tenants)]


# ---- the rule table ------------------------------------------------------------------------------------------------


def test_the_rule_table_covers_every_rule_id_once_and_defaults_to_enforce() -> None:
    ids = [rule.id for rule in rules.RULES]
    assert sorted(ids) == sorted(typing.get_args(RuleId)) == sorted(ALL_RULES)
    assert {rule.default_mode for rule in rules.RULES} == {"enforce"}


# ---- shared-gpu-request-above-one ----------------------------------------------------------------------------------


def test_two_shared_gpus_in_one_container_are_denied_with_a_pin_to_whole_gpus(engine: Engine) -> None:
    assert found(engine, pod({GPU: 2})) == (Diagnostic(
        "shared-gpu-request-above-one",
        'container "app" requests 2 nvidia.com/gpu; shared devices allow 1 per container. The '
        "scheduler may place the pod on class ts (1 GPU x 4 time-slicing replicas per node), where the device "
        "plugin refuses more than 1 shared replica per container (failRequestsGreaterThanOne) and the kubelet "
        "fails the pod with UnexpectedAdmissionError.",
        (*LIMIT, GPU),
        "pin the pod to class whole with nodeSelector {pool: whole}",
        fix=ANY,
    ),)  # fmt: skip


def test_two_gpus_pinned_to_the_exclusive_class_are_allowed(engine: Engine) -> None:
    assert found(engine, pod({GPU: 2}, nodeSelector={"pool": "whole"})) == ()


def test_two_containers_with_one_shared_gpu_each_are_allowed_because_the_limit_is_per_container(
    engine: Engine,
) -> None:
    obj = pod({GPU: 1}, nodeSelector={"pool": "ts"})
    obj["spec"]["containers"].append({"name": "b", "resources": {"limits": {GPU: "1"}}})
    assert found(engine, obj) == ()


def test_an_init_container_asking_two_shared_gpus_is_located_at_its_own_limit(engine: Engine) -> None:
    obj = pod({GPU: 1}, initContainers=[{"name": "prep", "resources": {"limits": {GPU: 2}}}])
    (d,) = found(engine, obj)
    assert (d.code, d.path) == ("shared-gpu-request-above-one",
                                ("spec", "initContainers", 0, "resources", "limits", GPU))
    assert 'container "prep"' in d.message


def test_a_time_sliced_class_without_fail_requests_greater_than_one_lets_two_replicas_through() -> None:
    lenient = UNIT_POLICY.replace("timeSlicing: {replicas: 4}",
                                  "timeSlicing: {replicas: 4, failRequestsGreaterThanOne: false}")
    assert codes(engine_for(lenient), pod({GPU: 2})) == []


def test_without_an_unshared_class_the_fix_is_one_gpu_or_an_exclusive_class() -> None:
    only_shared = engine_for(UNIT_POLICY.replace("sharing: exclusive", "sharing: {mps: {replicas: 2}}"))
    (d,) = found(only_shared, pod({GPU: 2}))
    assert d.hint == ('request nvidia.com/gpu: 1 in container "app" (more shared replicas of one device add no '
                      "compute; 2 whole GPUs need a class with sharing: exclusive)")
    assert "whole (8 GPUs x 2 MPS replicas per node)" in d.message


# ---- tenant-sharing-mode-denied ------------------------------------------------------------------------------------


def test_a_tenant_whose_pod_may_land_on_a_disallowed_mode_is_denied_with_a_pin(engine: Engine) -> None:
    assert found(engine, pod({GPU: 1}), ("prod",)) == (Diagnostic(
        "tenant-sharing-mode-denied",
        "tenant prod may not use time-slicing GPUs, where this pod may run. For nvidia.com/gpu the "
        "scheduler may place the pod on class ts (time-slicing); tenant prod may use exclusive and mig.",
        (*LIMIT, GPU),
        "pin the pod to class whole with nodeSelector {pool: whole}",
        fix=ANY,
    ),)  # fmt: skip


def test_the_same_tenant_pinned_to_an_allowed_class_is_allowed(engine: Engine) -> None:
    assert found(engine, pod({GPU: 1}, nodeSelector={"pool": "whole"}), ("prod",)) == ()
    assert found(engine, pod({"nvidia.com/mig-1g.10gb": 1}), ("prod",)) == ()


def test_a_class_outside_the_tenants_classes_is_denied_even_when_its_mode_is_allowed(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1}), ("dev",))
    assert d.message.startswith("tenant dev may not use class whole, where this pod may run.")
    assert d.hint == "pin the pod to class ts with nodeSelector {pool: ts}"


def test_several_tenants_get_only_what_all_of_them_allow(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1}), ("prod", "dev"))
    assert d.message.startswith("tenants prod and dev together may not use time-slicing GPUs")
    # Nothing both tenants allow runs it. Namespaces outside every tenant may use every mode here, but a fix never
    # moves the pod out of its tenants: the hint names what the platform team would have to allow, and where.
    assert d.fix is None
    assert d.hint == ("no change to this object within the policy admits it: ask the platform team to allow "
                      "time-slicing (spec.tenants[0].allow and spec.tenants[1].allow) and class whole "
                      "(spec.tenants[1].classes) for tenants prod and dev together in ClusterGPUPolicy unit")


def test_an_unknown_tenant_may_use_nothing_and_the_message_says_so(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1}, nodeSelector={"pool": "whole"}), ("ghost",))
    assert d.code == "tenant-sharing-mode-denied"
    assert d.message == ("tenant ghost is not in the admission policy, so this pod may use no GPU. For "
                         "nvidia.com/gpu the scheduler may place the pod on class whole; tenant ghost may use no "
                         "sharing mode.")


def test_where_no_change_within_the_policy_admits_the_pod_the_hint_says_so_and_offers_no_fix() -> None:
    # No tenant, and namespaces outside every tenant may use no GPU: nothing the pod could change helps.
    closed = engine_for(UNIT_POLICY.split("  tenants:")[0] + "  admission: {defaultAllow: []}\n")
    (d,) = found(closed, pod({GPU: 1}))
    assert d.code == "tenant-sharing-mode-denied" and d.fix is None
    assert d.hint == ("no change to this object within the policy admits it: ask the platform team to allow "
                      "exclusive and time-slicing (spec.admission.defaultAllow) for namespaces outside every tenant "
                      "in ClusterGPUPolicy unit")


def test_the_default_rules_apply_to_namespaces_of_no_tenant(engine: Engine) -> None:
    assert found(engine, pod({GPU: 1})) == ()  # defaultAllow is every mode


# ---- gpu-request-unsatisfiable -------------------------------------------------------------------------------------


def test_a_mig_profile_no_class_offers_is_unsatisfiable_with_the_nearest_profile(engine: Engine) -> None:
    assert found(engine, pod({"nvidia.com/mig-1g.5gb": 1})) == (Diagnostic(
        "gpu-request-unsatisfiable",
        "the pod requests nvidia.com/mig-1g.5gb, which no node class offers, so it would stay Pending. Per class: "
        "ts: offers nvidia.com/gpu, not nvidia.com/mig-1g.5gb; whole: offers nvidia.com/gpu, not "
        "nvidia.com/mig-1g.5gb; mig: offers nvidia.com/mig-1g.10gb, not nvidia.com/mig-1g.5gb. Its scheduling events "
        'would read "Insufficient nvidia.com/mig-1g.5gb".',
        (*LIMIT, "nvidia.com/mig-1g.5gb"),
        'request nvidia.com/mig-1g.10gb: 1 instead of nvidia.com/mig-1g.5gb in container "app"',
        fix=ANY,
    ),)  # fmt: skip


def test_more_gpus_than_any_node_offers_is_unsatisfiable_and_suggests_the_largest_node(engine: Engine) -> None:
    unsatisfiable, shared = found(engine, pod({GPU: 9}))
    assert (unsatisfiable.code, shared.code) == ("gpu-request-unsatisfiable", "shared-gpu-request-above-one")
    assert "whole: offers at most 8 nvidia.com/gpu per node (8 GPUs per node)" in unsatisfiable.message
    # 8 fits only the whole-GPU class, so the pod then lands there alone and no shared class is in play.
    assert unsatisfiable.hint == shared.hint == 'request nvidia.com/gpu: 8 in container "app"'


def test_without_feature_discovery_a_gpu_label_selector_matches_no_node() -> None:
    # A bare device plugin writes no nvidia.com/gpu.* labels: such a selector would pend forever.
    engine = engine_for(UNIT_POLICY.replace("gpuFeatureDiscovery: true", "gpuFeatureDiscovery: false"))
    (d,) = found(engine, pod({GPU: 1}, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}))
    assert (d.code, d.path) == ("gpu-request-unsatisfiable", ("spec", "nodeSelector", "nvidia.com/gpu.product"))
    assert "its nodes carry no nvidia.com/gpu.product: GPU Feature Discovery does not label them" in d.message
    assert found(engine, pod({GPU: 1}, nodeSelector={"pool": "ts"})) == ()


def test_a_selector_excluding_every_offering_class_is_located_at_the_selector(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1}, nodeSelector={"nvidia.com/gpu.product": "Tesla-T4"}))
    assert (d.code, d.path) == ("gpu-request-unsatisfiable", ("spec", "nodeSelector", "nvidia.com/gpu.product"))
    assert d.hint == ("set nodeSelector nvidia.com/gpu.product: Tesla-T4-SHARED (GPU Feature Discovery appends "
                      "-SHARED to the product of shared GPUs)")


def test_hamis_memory_resource_is_unsatisfiable_and_named_as_hamis(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1, "nvidia.com/gpumem": 4000}))
    assert (d.code, d.path) == ("gpu-request-unsatisfiable", (*LIMIT, "nvidia.com/gpumem"))
    assert "nvidia.com/gpumem is HAMi's resource, not advertised by the NVIDIA device plugin" in d.message
    assert d.hint == 'remove nvidia.com/gpumem from container "app"'


def test_resources_no_single_class_offers_together_are_unsatisfiable(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1, "nvidia.com/mig-1g.10gb": 1}))
    assert d.code == "gpu-request-unsatisfiable"
    assert d.message.startswith("no node class offers 1 nvidia.com/gpu and 1 nvidia.com/mig-1g.10gb on one node")


def test_an_empty_required_affinity_term_matches_no_node(engine: Engine) -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    (d,) = found(engine, pod({GPU: 1}, affinity=affinity))
    assert d.code == "gpu-request-unsatisfiable"
    assert d.path == ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                      "nodeSelectorTerms", 0)


def test_a_selector_on_a_label_no_class_knows_cannot_exclude(engine: Engine) -> None:
    assert found(engine, pod({GPU: 1}, nodeSelector={"cloud.google.com/gke-accelerator": "nvidia-l4"})) == ()


# ---- mig-strategy-mismatch -----------------------------------------------------------------------------------------


def test_plain_gpus_on_mixed_mig_nodes_are_a_strategy_mismatch(engine: Engine) -> None:
    (d,) = found(engine, pod({GPU: 1}, nodeSelector={"pool": "mig"}))
    assert (d.code, d.path, d.hint) == ("mig-strategy-mismatch", (*LIMIT, GPU),
                                        'request nvidia.com/mig-1g.10gb: 1 instead of nvidia.com/gpu in container '
                                        '"app"')


def test_a_mig_resource_where_mig_uses_the_single_strategy_is_a_strategy_mismatch() -> None:
    single = engine_for(UNIT_POLICY.replace("strategy: mixed", "strategy: single"))
    (d,) = found(single, pod({"nvidia.com/mig-1g.10gb": 1}))
    assert d.code == "mig-strategy-mismatch"
    assert "Class mig uses the MIG single strategy" in d.message
    assert d.hint == 'request nvidia.com/gpu: 1 instead of nvidia.com/mig-1g.10gb in container "app"'


def test_a_mig_resource_where_no_class_runs_mig_is_a_strategy_mismatch() -> None:
    no_mig = engine_for(UNIT_POLICY.replace(
        "sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}", "sharing: exclusive"))
    (d,) = found(no_mig, pod({"nvidia.com/mig-3g.20gb": 1}))
    assert d.code == "mig-strategy-mismatch"
    assert d.hint == 'request nvidia.com/gpu: 1 instead of nvidia.com/mig-3g.20gb in container "app"'


# ---- placement against a class's known labels ----------------------------------------------------------------------


def view(engine: Engine, name: str) -> ClassView:
    return next(c for c in engine.classes if c.name == name)


def placement(**spec: Any) -> Placement:
    workload = find_workload(pod({GPU: 1}, **spec))
    assert workload is not None
    return read_placement(workload)


def affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    term = {"matchExpressions": list(expressions)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize(("expression", "excluded"), [
    ({"key": "pool", "operator": "In", "values": ["ts", "x"]}, False),
    ({"key": "pool", "operator": "In", "values": ["x"]}, True),
    ({"key": "pool", "operator": "NotIn", "values": ["ts"]}, True),
    ({"key": "pool", "operator": "Exists"}, False),
    ({"key": "pool", "operator": "DoesNotExist"}, True),
    ({"key": "nvidia.com/gpu.replicas", "operator": "Gt", "values": ["3"]}, False),
    ({"key": "nvidia.com/gpu.replicas", "operator": "Lt", "values": ["4"]}, True),
    ({"key": "nvidia.com/gpu.replicas", "operator": "Gt", "values": ["many"]}, False),
    ({"key": "unknown/label", "operator": "In", "values": ["x"]}, False),
    ({"key": "unknown/label", "operator": "Exists"}, False),
    # drivers before R470 drop the NVIDIA- prefix: either spelling may be what the node says
    ({"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-Tesla-T4-SHARED"]}, False),
    ({"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["Tesla-T4-SHARED"]}, False),
])  # fmt: skip
def test_affinity_operators_exclude_a_class_only_when_its_known_labels_prove_it(
    engine: Engine, expression: dict[str, Any], excluded: bool
) -> None:
    conflict = placement_conflict(placement(affinity=affinity(expression)), view(engine, "ts"))
    assert (conflict is not None) == excluded


def test_affinity_terms_are_ored_and_a_class_is_excluded_only_when_every_term_excludes_it(engine: Engine) -> None:
    terms = [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
             {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ts"]}]}]
    spec_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    assert placement_conflict(placement(affinity=spec_affinity), view(engine, "ts")) is None
    assert placement_conflict(placement(affinity=spec_affinity), view(engine, "whole")) is not None


def test_a_conflict_explains_which_requirement_excludes_the_class_and_what_its_nodes_carry(engine: Engine) -> None:
    ts = view(engine, "ts")
    conflict = placement_conflict(placement(nodeSelector={"pool": "whole"}), ts)
    assert conflict is not None
    assert conflict.explain(ts) == "nodeSelector pool=whole excludes it (its nodes carry pool=ts)"


def test_offers_explain_devices_and_replicas_per_node(engine: Engine) -> None:
    assert view(engine, "ts").offers[GPU].explain() == "1 GPU x 4 time-slicing replicas per node"
    assert view(engine, "whole").offers[GPU].explain() == "8 GPUs per node"
    assert view(engine, "mig").offers["nvidia.com/mig-1g.10gb"].explain() == "7 1g.10gb MIG devices per node"


def test_mixed_mig_classes_know_gfds_per_profile_labels(engine: Engine) -> None:
    mig = view(engine, "mig")
    assert mig.known["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert mig.known["nvidia.com/mig-1g.10gb.count"] == "7"
    assert mig.known["nvidia.com/mig.strategy"] == "mixed"
