"""Wrong-type findings: the hint is the corrected line, made from the values the user wrote, wherever the field's
type can hold them; a generic hint only where nothing of the right type can be made from them."""

from __future__ import annotations

import pytest
import yaml

from policy.load import load_policy
from policy.spec.diagnostics import Diagnostic

BASE = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: demo}
spec:
  kubernetesVersion: "1.30"
  nodeClasses:
    - name: a100
      nodeSelector: {pool: a100}
      gpu: {model: NVIDIA-A100-SXM4-80GB, count: 1}
      sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}
"""
LAYOUT = "layout: {1g.10gb: 7}"
CLASSES = "  nodeClasses:\n"


def wrong_type(old: str, new: str) -> Diagnostic:
    """The one wrong-type finding of BASE with `old` replaced by `new`."""
    assert BASE.count(old) == 1, old
    result = load_policy(BASE.replace(old, new), filename="demo.yaml")
    found = [d for d in result.diagnostics if d.code == "wrong-type"]
    assert len(found) == 1, result.diagnostics
    return found[0]


@pytest.mark.parametrize(("old", "new", "hint"), [
    # The issue's case: a MIG layout written as a list of profile and count.
    (LAYOUT, "layout: [{profile: 1g.10gb, count: 7}]", "write layout: {1g.10gb: 7}"),
    (LAYOUT, "layout: [{1g.10gb: 7}, {2g.20gb: 1}]", "write layout: {1g.10gb: 7, 2g.20gb: 1}"),
    (LAYOUT, "layout: [1g.10gb, 1g.10gb, 3g.40gb]", "write layout: {1g.10gb: 2, 3g.40gb: 1}"),
    (LAYOUT, "layout: 1g.10gb=7", "write layout: {1g.10gb: 7}"),
    ("{pool: a100}", "[{key: pool, value: a100}]", "write nodeSelector: {pool: a100}"),
    ("{pool: a100}", "pool=a100,zone=b", "write nodeSelector: {pool: a100, zone: b}"),  # kubectl -l syntax
    ("{pool: a100}", "{pool: true}", 'write pool: "true"'),
    ("count: 1}", 'count: "1"}', "write count: 1"),
    ("count: 1}", "count: 1.0}", "write count: 1"),
    # YAML read 1.30 as the number 1.3: the hint quotes what was written, not what YAML made of it.
    ('kubernetesVersion: "1.30"', "kubernetesVersion: 1.30", 'write kubernetesVersion: "1.30"'),
    ("metadata: {name: demo}", "metadata: demo", "write metadata: {name: demo}"),
    ("gpu: {model: NVIDIA-A100-SXM4-80GB, count: 1}", "gpu: NVIDIA-A100-SXM4-80GB",
     "write gpu: {model: NVIDIA-A100-SXM4-80GB, count: <count>}"),
    ("gpu: {model: NVIDIA-A100-SXM4-80GB, count: 1}", "gpu: 4", "write gpu: {model: <model>, count: 4}"),
    ("sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}", "sharing: {timeSlicing: 4}",
     "write timeSlicing: {replicas: 4}"),
    ("sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}", "sharing: {timeSlicing: 4621Mi}",
     "write timeSlicing: {sizing: {memoryPerReplica: 4621Mi}}"),
    ("sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}", "sharing: {vgpu: 4}", "write vgpu: {splitCount: 4}"),
    ("      sharing:", "      taints: dedicated=train:NoSchedule\n      sharing:",
     "write taints: [{key: dedicated, value: train, effect: NoSchedule}]"),  # kubectl taint syntax
    ("      sharing:", "      taints: {key: dedicated, effect: NoSchedule}\n      sharing:",
     "write taints: [{key: dedicated, effect: NoSchedule}]"),
    (CLASSES, "  admission: false\n" + CLASSES, "write admission: {enabled: false}"),
    (CLASSES, "  admission: {timeoutSeconds: \"5\"}\n" + CLASSES, "write timeoutSeconds: 5"),
    (CLASSES, "  tenants: [{name: prod, namespaceSelector: gpu-tier=prod, allow: [mig]}]\n" + CLASSES,
     "write namespaceSelector: {matchLabels: {gpu-tier: prod}}"),
    (CLASSES, "  tenants: [{name: prod, namespaceSelector: {matchLabels: {a: b}}, allow: 'mig, exclusive'}]\n"
     + CLASSES, "write allow: [mig, exclusive]"),
    (CLASSES, "  tenants: [{name: prod, namespaceSelector: {matchLabels: {a: b}}, allow: mig}]\n" + CLASSES,
     "write allow: [mig]"),
])  # fmt: skip
def test_a_wrong_type_hint_is_the_line_rewritten_from_the_users_own_values(old: str, new: str, hint: str) -> None:
    assert wrong_type(old, new).hint == hint


def test_the_issues_list_layout_is_located_and_its_rewrite_loads() -> None:
    found = wrong_type(LAYOUT, "layout: [{profile: 1g.10gb, count: 7}]")
    assert found.path == ("spec", "nodeClasses", 0, "sharing", "mig", "layout")
    assert found.span is not None and (found.span.line, found.span.column) == (10, 48)  # the list
    fixed = BASE.replace(LAYOUT, found.hint.removeprefix("write "))
    assert load_policy(fixed, filename="demo.yaml").ok


def test_a_class_list_written_as_a_mapping_by_name_becomes_a_list_with_the_names_inside() -> None:
    text = BASE.replace("    - name: a100\n      nodeSelector", "    a100:\n      nodeSelector")
    [found] = [d for d in load_policy(text, filename="demo.yaml").diagnostics if d.code == "wrong-type"]
    assert found.hint == ("write nodeClasses: [{name: a100, nodeSelector: {pool: a100}, gpu: {model: "
                          "NVIDIA-A100-SXM4-80GB, count: 1}, sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}}]")
    # The hint is YAML flow text: what it says is exactly the mapping it names.
    rewritten = yaml.safe_load(found.hint.removeprefix("write "))["nodeClasses"]
    assert rewritten == yaml.safe_load(BASE)["spec"]["nodeClasses"]


def test_where_nothing_of_the_right_type_can_be_made_the_hint_names_the_fields() -> None:
    # mig: mixed is a strategy, but a MIG block also needs its layout, which nothing written gives.
    found = wrong_type("sharing: {mig: {strategy: mixed, layout: {1g.10gb: 7}}}", "sharing: {mig: mixed}")
    assert found.hint == "write it as a mapping of its fields: failRequestsGreaterThanOne, groups, layout, strategy, " \
                         "timeSlicing"
    assert wrong_type("count: 1}", "count: [1, 2]}").hint == "write it as an integer"


def test_a_list_holding_the_whole_policy_is_told_to_drop_the_dash() -> None:
    text = "- " + BASE.replace("\n", "\n  ").rstrip() + "\n"
    [found] = load_policy(text, filename="demo.yaml").diagnostics
    assert found.code == "not-a-mapping"
    assert found.hint == ("the document is a list holding one mapping: remove the '- ' before its first key (and the "
                          "indentation under it), so the document starts with apiVersion:")


def test_an_unknown_field_under_an_optional_block_gets_its_did_you_mean() -> None:
    text = BASE.replace(LAYOUT, "layouts: {1g.10gb: 7}")
    found = [d for d in load_policy(text, filename="demo.yaml").diagnostics if d.code == "unknown-field"]
    assert [d.hint for d in found] == ["did you mean 'layout'?"]
