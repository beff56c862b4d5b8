"""Tests for `gpupolicy test`: table-driven admission suites, their results, located suite errors, exit codes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import get_args

import jsonschema
import pytest
import yaml

from cli.main import main
from policy.schemas import render_schemas
from policy.spec.model import RuleId

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "clusters").glob("*/admission-tests.yaml"))

POD = """\
      apiVersion: v1
      kind: Pod
      metadata: {name: p}
      spec:
        containers:
          - {name: app, resources: {limits: {nvidia.com/gpu: 2}}}
"""


def suite(tmp_path: Path, cases: str, *, policy: str = "cluster.yaml", name: str = "suite.yaml") -> str:
    shutil.copy(ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml", tmp_path / "cluster.yaml")
    text = f"apiVersion: gpupolicy.dev/v1alpha1\nkind: AdmissionTestSuite\npolicy: {policy}\ncases:\n{cases}"
    (tmp_path / name).write_text(text, encoding="utf-8")
    return str(tmp_path / name)


DENIED_CASE = f"""\
  - name: two shared gpus are denied
    object:
{POD}    expect: {{allowed: false, rules: [shared-gpu-request-above-one], message: UnexpectedAdmissionError}}
"""


def test_every_example_cluster_has_a_suite_and_they_all_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert {p.parent.name for p in EXAMPLES} == {"tke-l20-t4", "h20-mig", "mixed-fleet", "vgpu-platform"}
    assert main(["test", *map(str, EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert re.fullmatch(r"\d+ passed, 0 failed", out.splitlines()[-1])


def test_the_example_suites_cover_every_rule_on_both_sides() -> None:
    denied, allowed = set(), 0
    for path in EXAMPLES:
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]:
            denied.update(case["expect"].get("rules", []))
            allowed += case["expect"]["allowed"]
    assert denied == {*get_args(RuleId), "workload-not-checked"}
    assert allowed >= 10


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_the_example_suites_validate_against_the_generated_schema(path: Path) -> None:
    schema = json.loads(render_schemas()["admission-test-suite.schema.json"])
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)


def test_a_passing_case_prints_pass_with_its_line_and_the_summary(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, DENIED_CASE)
    assert main(["test", path]) == 0
    assert capsys.readouterr().out == f"PASS {path}:5 two shared gpus are denied\n1 passed, 0 failed\n"


def test_a_failing_case_says_what_differed_and_shows_the_decision(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cases = f"""\
  - name: wrongly expected to pass
    object:
{POD}    expect: {{allowed: true, rules: [], message: 'nothing like this'}}
"""
    path = suite(tmp_path, cases)
    assert main(["test", path]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == [
        f"FAIL {path}:5 wrongly expected to pass",
        "  expected allowed=true, got allowed=false",
        "  expected rules [], fired ['shared-gpu-request-above-one']",
        "  message /nothing like this/ not found",
    ]
    assert lines[4].startswith("  | Pod p: [shared-gpu-request-above-one] container \"app\" requests 2")
    assert lines[-1] == "0 passed, 1 failed"


def test_cases_can_name_a_manifest_file_relative_to_the_suite_and_pick_a_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    service = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n" \
          "    - {name: app, resources: {limits: {nvidia.com/gpu: 2}}}\n"
    (manifests / "app.yaml").write_text(f"{service}---\n{pod}", encoding="utf-8")
    cases = """\
  - name: the first workload of the file is checked
    file: manifests/app.yaml
    expect: {allowed: false, rules: [shared-gpu-request-above-one]}
  - name: an index picks a document
    file: manifests/app.yaml
    index: 0
    expect: {allowed: true, rules: []}
"""
    assert main(["test", suite(tmp_path, cases)]) == 0
    assert capsys.readouterr().out.endswith("2 passed, 0 failed\n")


def test_namespaces_and_update_operations_reach_the_engine(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml", tmp_path / "mixed.yaml")
    cases = f"""\
  - name: prod unpinned is denied
    namespace: checkout
    object:
{POD.replace("gpu: 2", "gpu: 1")}    expect: {{allowed: false, rules: [tenant-sharing-mode-denied]}}
  - name: the same labels given inline
    namespaceLabels: {{gpu-tier: prod}}
    object:
{POD.replace("gpu: 2", "gpu: 1")}    expect: {{allowed: false, rules: [tenant-sharing-mode-denied]}}
  - name: an unchanged update is ratcheted
    namespace: checkout
    operation: UPDATE
    object:
{POD.replace("gpu: 2", "gpu: 1")}    oldObject:
{POD.replace("gpu: 2", "gpu: 1")}    expect: {{allowed: true, rules: []}}
"""
    path = suite(tmp_path, cases, policy="mixed.yaml")
    text = Path(path).read_text(encoding="utf-8").replace(
        "cases:\n", "namespaces:\n  checkout: {gpu-tier: prod}\ncases:\n")
    Path(path).write_text(text, encoding="utf-8")
    assert main(["test", path]) == 0
    assert capsys.readouterr().out.endswith("3 passed, 0 failed\n")


def test_run_selects_cases_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, DENIED_CASE + DENIED_CASE.replace("two shared gpus are denied", "other"))
    assert main(["test", path, "--run", "^other$"]) == 0
    assert capsys.readouterr().out.endswith(":14 other\n1 passed, 0 failed\n")


def test_json_output_lists_every_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", suite(tmp_path, DENIED_CASE), "-O", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["summary"] == {"passed": 1, "failed": 0, "errors": 0, "exitCode": 0}
    assert document["cases"][0]["rules"] == ["shared-gpu-request-above-one"]


@pytest.mark.parametrize(("cases", "expected"), [
    ("  - name: x\n    expect: {allowed: true}\n",
     ":5:5: error[invalid-value]: cases[0]: give exactly one of object or file"),
    ("  - name: x\n    object: {}\n    expect: {allowed: true, rulez: []}\n",
     ":7:29: error[unknown-field]: unknown field 'rulez' in cases[0].expect"),
    ("  - name: x\n    file: nowhere.yaml\n    expect: {allowed: true}\n",
     ":6:11: error[unreadable-file]"),
    ("  - name: x\n    object: {}\n    expect: {allowed: true, rules: [no-such-rule]}\n",
     ":7:37: error[invalid-value]: cases[0].expect.rules[0] must be one of"),
])  # fmt: skip
def test_bad_suite_files_exit_two_with_located_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      cases: str, expected: str) -> None:
    path = suite(tmp_path, cases)
    assert main(["test", path]) == 2
    out = capsys.readouterr().out
    assert out.startswith(path + expected), out


def test_a_suite_whose_policy_is_missing_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = suite(tmp_path, DENIED_CASE, policy="absent.yaml")
    assert main(["test", path]) == 2
    assert capsys.readouterr().out.startswith(f"{path}:3:9: error[unreadable-file]")


def test_a_bad_run_pattern_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", suite(tmp_path, DENIED_CASE), "--run", "("]) == 2
    assert "is not a regular expression" in capsys.readouterr().err


def test_a_suite_of_claims_and_templates_names_the_claim_rules(capsys: pytest.CaptureFixture[str]) -> None:
    from policy.admission.claims import ClaimRule

    path = ROOT / "tests" / "fixtures" / "dra" / "claims-suite.yaml"
    assert main(["test", str(path)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "FAIL" not in out and out.splitlines()[-1] == "14 passed, 0 failed"
    cases = yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]
    assert {r for case in cases for r in case["expect"].get("rules", [])} >= set(get_args(ClaimRule))
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")),
                        json.loads(render_schemas()["admission-test-suite.schema.json"]))
