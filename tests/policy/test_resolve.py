"""Each class is resolved once per policy, and every consumer reads that one value."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import compile_policy
from policy.load import load_policy
from policy.resolved import resolve as resolve_module
from policy.resolved.offers import build_admission_policy
from policy.resolved.resolve import resolve

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "clusters").glob("*/cluster.yaml"))


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_loading_compiling_and_building_the_admission_policy_resolves_each_class_once(
        spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = resolve_module._resolve_class

    def counting(spec_, node_class, *rest):  # type: ignore[no-untyped-def]
        calls.append(node_class.name)
        return real(spec_, node_class, *rest)

    monkeypatch.setattr(resolve_module, "_resolve_class", counting)
    result = load_policy(spec.read_text(), filename=str(spec))
    assert result.ok and result.resolved is not None
    compile_policy(result.resolved)  # renderers, report, checks and advice in the report, admission policy
    build_admission_policy(result.resolved)
    assert sorted(calls) == sorted(nc.name for nc in result.resolved.spec.node_classes)


def test_the_admission_policy_carries_gfd_labels_only_where_feature_discovery_runs() -> None:
    spec = next(p for p in EXAMPLES if p.parent.name == "tke-l20-t4")
    policy = load_policy(spec.read_text(), filename=str(spec)).policy
    assert policy is not None and not policy.spec.device_plugin.labels_nodes
    resolved = resolve(policy)
    l20 = resolved.classes[0]
    assert l20.gfd_labels["nvidia.com/gpu.product"] == "NVIDIA-L20-SHARED"
    assert l20.node_labels == l20.node_selector
    doc = build_admission_policy(resolved).classes[0]
    assert (doc.node_labels, doc.feature_discovery) == (l20.node_selector, False)


def test_a_reserve_larger_than_the_gpu_resolves_without_sizing_instead_of_raising() -> None:
    text = (Path(__file__).parents[1] / "fixtures" / "specs" / "bad" / "sizing-exceeds-memory"
            / "l20-reserve-above-gpu-memory.yaml").read_text()
    result = load_policy(text, filename="reserve.yaml")
    assert result.resolved is not None
    l20 = result.resolved.classes[0]
    assert (l20.sizing, l20.replicas, l20.memory_mib) == (None, 1, 46068)
    assert [d.code for d in result.diagnostics] == ["sizing-exceeds-memory"]
