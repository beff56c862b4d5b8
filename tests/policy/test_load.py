"""The load pipeline over whole documents: examples, several documents, the seed's arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from policy.load import load_policies, load_policy, load_policy_or_raise
from policy.resolved.resolve import resolve
from policy.spec.diagnostics import PolicyError

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "clusters").glob("*/cluster.yaml"))


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_every_bundled_example_is_valid_with_no_warnings(spec: Path) -> None:
    result = load_policy(spec.read_text(), filename=str(spec))
    assert result.ok and result.diagnostics == ()


def test_the_seed_cluster_sizes_l20_to_8_replicas_and_t4_to_3() -> None:
    spec = Path(__file__).parents[2] / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
    policy = load_policy_or_raise(spec.read_text(), filename=str(spec))
    l20, t4 = resolve(policy).classes
    assert (l20.offers[0].resource, l20.offers[0].per_node, l20.sizing.reserve_mib) == ("nvidia.com/gpu", 8, 4606)
    assert (t4.offers[0].resource, t4.offers[0].per_node) == ("nvidia.com/gpu", 3)
    assert l20.gfd_labels["nvidia.com/gpu.product"] == "NVIDIA-L20-SHARED"


MINIMAL = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: %s}
spec:
  nodeClasses:
    - {name: t4, nodeSelector: {pool: t4}, gpu: {model: T4, count: 1}}
"""


def test_a_file_with_two_clusters_loads_both_for_validation() -> None:
    results = load_policies(MINIMAL % "one" + "---\n" + MINIMAL % "two", filename="two.yaml")
    assert [r.policy.metadata.name for r in results if r.policy] == ["one", "two"]


def test_a_file_with_two_clusters_is_refused_where_one_is_compiled() -> None:
    result = load_policy(MINIMAL % "one" + "---\n" + MINIMAL % "two", filename="two.yaml")
    assert result.policy is None
    [refusal] = [d for d in result.diagnostics if d.code == "multiple-documents"]
    assert refusal.span is not None and refusal.span.line == 8
    assert "own file" in refusal.hint


def test_errors_raise_policy_error_carrying_every_diagnostic() -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_or_raise((MINIMAL % "x").replace("count: 1", "count: 0").replace("T4", "T5"), filename="x.yaml")
    assert {d.code for d in info.value.diagnostics} == {"invalid-value"}


def test_an_unknown_model_with_its_memory_stated_is_accepted_without_mig() -> None:
    text = (MINIMAL % "x").replace("model: T4, count: 1", "model: RTX-A6000, count: 2, memory: 49140Mi")
    result = load_policy(text, filename="x.yaml")
    assert result.ok
    assert resolve(result.policy).classes[0].memory_mib == 49140


def test_time_slicing_on_mig_devices_under_the_single_strategy_is_accepted() -> None:
    # The GPU Operator documents it: MIG devices are nvidia.com/gpu, which time-slicing supports, and GFD labels
    # the product A100-SXM4-40GB-MIG-1g.5gb-SHARED (device-plugin.md §2.3, ecosystem.md §2.1).
    text = (MINIMAL % "x").replace(
        "gpu: {model: T4, count: 1}}",
        "gpu: {model: A100-SXM4-40GB, count: 8}, sharing: {mig: {strategy: single, layout: {1g.5gb: 7}, "
        "timeSlicing: {1g.5gb: 2}}}}",
    )
    result = load_policy(text, filename="x.yaml")
    assert result.ok, result.diagnostics
    resolved = resolve(result.policy).classes[0]
    offer = resolved.offers[0]
    assert (offer.resource, offer.per_node, offer.shared) == ("nvidia.com/gpu", 112, True)
    assert resolved.gfd_labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"


def test_a_mixed_mig_class_may_select_by_product_because_gfd_leaves_full_gpu_labels_alone() -> None:
    text = (MINIMAL % "x").replace(
        "{name: t4, nodeSelector: {pool: t4}, gpu: {model: T4, count: 1}}",
        "{name: h20, nodeSelector: {nvidia.com/gpu.product: NVIDIA-H20}, gpu: {model: H20, count: 8}, "
        "sharing: {mig: {strategy: mixed, layout: {1g.12gb: 7}}}}",
    )
    assert load_policy(text, filename="x.yaml").ok
