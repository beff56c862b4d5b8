"""docs/spec-reference.md is generated: it must match what scripts/specdoc.py renders now, and its gates must hold."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import get_args

import pytest
import specdoc

from policy.load import load_policy
from policy.spec.diagnostics import Code
from policy.spec.model import RuleId

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "spec-reference.md"


def test_the_committed_spec_reference_is_what_specdoc_renders_now() -> None:
    expected = specdoc.render_spec_reference()
    actual = REFERENCE.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(actual.splitlines(True), expected.splitlines(True),
                                            "docs/spec-reference.md", "rendered", n=1))
        pytest.fail("docs/spec-reference.md is stale; run `python scripts/specdoc.py --write`\n" + diff[:4000])


def test_rendering_twice_gives_the_same_bytes() -> None:
    assert specdoc.render_spec_reference() == specdoc.render_spec_reference()


def test_every_diagnostic_code_has_exactly_one_explanation() -> None:
    assert set(specdoc.CODE_HELP) == set(get_args(Code))


def test_every_admission_rule_id_is_explained() -> None:
    assert set(specdoc.RULE_HELP) == set(get_args(RuleId))


def test_every_code_with_a_fixture_shows_the_fixture_and_the_finding_it_produces() -> None:
    docs = {d.code: d for d in specdoc.code_docs()}
    for code in get_args(Code):
        doc = docs[code]
        assert doc.example_output, f"{code}: no example output (add tests/fixtures/specs/bad/{code}/<case>.yaml)"
        assert f"[{code}]" in doc.example_output


def test_the_reference_lists_every_field_of_every_schema_object() -> None:
    from policy.schemas import schema_for
    from policy.spec.model import ClusterGPUPolicy

    schema = schema_for(ClusterGPUPolicy, "cluster-policy.schema.json", "")
    text = REFERENCE.read_text(encoding="utf-8")
    for name, definition in schema["$defs"].items():
        branch = specdoc._object_branch(definition)
        assert f"### {name}\n" in text, name
        section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        for field in branch.get("properties", {}):
            assert f"| `{field}` |" in section, f"{name}.{field} is missing from the reference"


BASE = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: gate}}
spec:
  kubernetesVersion: "{k8s}"
  hami: {{version: {hami}}}
  dra: {{version: {dra}}}
  devicePlugin:
    deploy: {deploy}
    version: {plugin}
    flags: {{deviceListStrategy: {strategy}}}
    operator: {{version: {operator}}}
  nodeClasses:
  - name: a100
    nodeSelector: {{pool: a100}}
    gpu: {{model: A100-SXM4-80GB, count: 4}}
    sharing: {sharing}
    allocation: {allocation}
  monitoring: {monitoring}
  admission: {admission}
"""

# For every gate: the spec settings that use the feature, and (below, at) versions around its threshold.
GATE_CASES: dict[tuple[str, str | None], tuple[dict[str, str], str, str, str]] = {
    ("spec.devicePlugin.version", None): ({}, "plugin", "v0.11.0", "v0.12.0"),
    ("spec.devicePlugin.flags.deviceListStrategy", "cdi-annotations"):
        ({"strategy": "cdi-annotations"}, "plugin", "v0.13.0", "v0.14.0"),
    ("spec.devicePlugin.flags.deviceListStrategy", "cdi-cri"): ({"strategy": "cdi-cri"}, "plugin", "v0.14.5",
                                                                 "v0.15.0"),
    ("spec.devicePlugin.flags.deviceListStrategy", "[envvar, volume-mounts]"):
        ({"strategy": "[envvar, volume-mounts]"}, "plugin", "v0.13.0", "v0.14.0"),
    ("spec.nodeClasses[].sharing.mps", None): ({"sharing": "{mps: {replicas: 4}}"}, "plugin", "v0.14.5", "v0.15.0"),
    ("spec.nodeClasses[].sharing.mps.failRequestsGreaterThanOne", "false"):
        ({"sharing": "{mps: {replicas: 4, failRequestsGreaterThanOne: false}}"}, "plugin", "v0.19.3", "v0.20.0"),
    ("spec.admission.enabled", "true"): ({"admission": "{engine: webhook}"}, "k8s", "1.27", "1.28"),
    ("spec.admission.engine", "vap"): ({"admission": "{engine: vap}"}, "k8s", "1.29", "1.30"),
    ("spec.hami.version", None): ({"sharing": "{vgpu: {splitCount: 4}}"}, "hami", "v2.9.0", "v2.10.0"),
    ("spec.nodeClasses[].allocation", "dra"): ({"allocation": "dra"}, "k8s", "1.33", "1.34"),
    ("spec.nodeClasses[].sharing.timeSlicing", "allocation: dra"): (
        {"allocation": "dra", "k8s": "1.36", "sharing": "{timeSlicing: {replicas: 4}}"}, "dra", "v0.4.1", "v0.5.0"),
    ("spec.dra.kubernetesFeatureGates", "DRAConsumableCapacity"): (
        {"allocation": "dra", "sharing": "{timeSlicing: {replicas: 4}}"}, "k8s", "1.35", "1.36"),
    ("spec.monitoring.dcgmExporter", None): ({"deploy": "gpu-operator", "monitoring": "{enabled: true}"},
                                              "operator", "v23.3.2", "v23.6.0"),
    ("spec.monitoring.dcgmExporter.perPodMetrics", "true"): (
        {"deploy": "gpu-operator", "monitoring": "{enabled: true, dcgmExporter: {perPodMetrics: true}}"},
        "operator", "v25.3.0", "v25.10.0"),
}


@pytest.mark.parametrize("gate", specdoc.VERSION_GATES, ids=[f"{g.field}={g.value}" for g in specdoc.VERSION_GATES])
def test_each_documented_version_gate_is_enforced_exactly_at_its_version(gate: specdoc.Gate) -> None:
    settings, knob, below, at = GATE_CASES[(gate.field, gate.value)]
    values = {"k8s": "1.30", "plugin": "v0.17.1", "strategy": "envvar", "sharing": "exclusive", "hami": "v2.10.0",
              "deploy": "standalone", "operator": "v26.7.0", "monitoring": "{enabled: false}", "admission": "{}",
              "allocation": "device-plugin", "dra": "v0.5.0", **settings}

    def codes(version: str) -> list[str]:
        text = BASE.format(**{**values, knob: version})
        return [d.code for d in load_policy(text, filename="gate.yaml").diagnostics]

    assert gate.code in codes(below), f"{gate.field}: {below} should be refused with {gate.code}"
    assert gate.code not in codes(at), f"{gate.field}: {at} should be accepted"
    assert gate.since == at


def test_every_gate_has_a_case() -> None:
    assert {(g.field, g.value) for g in specdoc.VERSION_GATES} == set(GATE_CASES)
