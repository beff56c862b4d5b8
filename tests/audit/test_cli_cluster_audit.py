"""`gpupolicy cluster audit --from-file`: outputs, exit codes and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import build_audit_dumps
import pytest
import yaml
from test_audit_scan import MIXED, head_text

from cli.main import main

DUMP = str(build_audit_dumps.DUMPS / "mixed-fleet.yaml")


@pytest.fixture
def head(tmp_path: Path) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(head_text(), encoding="utf-8")
    return str(path)


def test_a_cluster_that_keeps_the_policy_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "audit", "-p", str(MIXED), "-f", DUMP]) == 0
    out, err = capsys.readouterr()
    assert out.count("PASS ") == 6 and "FAIL" not in out
    assert "20 object(s) read, 6 GPU workload(s): 0 failing" in err


def test_workloads_that_break_the_policy_exit_one_and_json_names_each_owner_once(
        head: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "audit", "-p", head, "-f", DUMP, "-O", "json", "--fail-only"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["summary"] == {"fail": 4, "pass": 2, "skip": 0, "warn": 0}
    assert [(r["kind"], r["name"]) for r in document["results"]] == [  # sorted by namespace, kind, name
        ("Deployment", "time-slicing-verification"), ("Job", "j-e2e-1"), ("Pod", "mps-borrower"),
        ("Pod", "mps-stowaway")]
    assert [len(r["folded"]) for r in document["results"]] == [5, 1, 0, 0]
    assert document["total"] == 4 and document["truncated"] is False and len(document["policyHash"]) == 16


def test_the_cap_counts_what_it_leaves_out(head: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "audit", "-p", head, "-f", DUMP, "-O", "json", "--fail-only", "--max-results", "1"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert len(document["results"]) == 1 and document["total"] == 4 and document["truncated"] is True


def test_github_output_is_one_error_annotation_per_finding(head: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "audit", "-p", head, "-f", DUMP, "-O", "github"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(line.startswith("::error title=tenant-sharing-mode-denied::") for line in lines)
    assert any("Deployment time-slicing-verification (namespace research-nlp): tenant research" in line
               for line in lines)


@pytest.mark.parametrize(("output", "kinds"), [("policy-report", ["PolicyReport"] * 3 + ["ClusterPolicyReport"]),
                                                ("openreports", ["Report"] * 3 + ["ClusterReport"])])
def test_report_objects_are_yaml_documents_kubectl_can_apply(head: str, capsys: pytest.CaptureFixture[str],
                                                             output: str, kinds: list[str]) -> None:
    assert main(["cluster", "audit", "-p", head, "-f", DUMP, "-O", output]) == 1
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == kinds


def test_a_broken_spec_or_an_unreadable_dump_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: gpupolicy.dev/v1alpha1\nkind: ClusterGPUPolicy\nspec: {}\n", encoding="utf-8")
    assert main(["cluster", "audit", "-p", str(broken), "-f", DUMP]) == 2
    assert main(["cluster", "audit", "-p", str(MIXED), "-f", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: error: does not exist" in capsys.readouterr().err
    assert main(["cluster", "audit", "-p", str(MIXED), "-f", DUMP, "--max-results", "-1"]) == 2


def test_a_json_dump_is_read_like_the_yaml_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], head: str) -> None:
    dump = tmp_path / "objects.json"
    dump.write_text(json.dumps(yaml.safe_load(Path(DUMP).read_text(encoding="utf-8"))), encoding="utf-8")
    assert main(["cluster", "audit", "-p", head, "-f", str(dump), "-O", "json", "--fail-only"]) == 1
    assert json.loads(capsys.readouterr().out)["total"] == 4


def test_yaml_aliases_and_syntax_errors_are_refused_with_their_place(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    aliased = tmp_path / "aliased.yaml"
    aliased.write_text("apiVersion: v1\nkind: List\nitems:\n- &pod {apiVersion: v1, kind: Pod, metadata: {name: a}}\n"
                       "- *pod\n", encoding="utf-8")
    assert main(["cluster", "audit", "-p", str(MIXED), "-f", str(aliased)]) == 2
    assert "aliased.yaml: error: holds a YAML anchor and alias" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("items:\n  - {kind: Pod\n", encoding="utf-8")
    assert main(["cluster", "audit", "-p", str(MIXED), "-f", str(broken)]) == 2
    assert "broken.yaml:3:1: error: not valid YAML" in capsys.readouterr().err


def test_a_typed_list_whose_items_omit_their_kind_is_audited_like_a_list(
        head: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # kubectl get --raw /api/v1/pods writes a PodList whose items carry no kind: each is still a Pod
    pods = [o for o in yaml.safe_load(Path(DUMP).read_text(encoding="utf-8"))["items"]
            if o.get("kind") == "Pod" and o["metadata"]["name"] in ("mps-borrower", "mps-stowaway")]
    typed = tmp_path / "pods.json"
    typed.write_text(json.dumps({"apiVersion": "v1", "kind": "PodList",
                                 "items": [{k: v for k, v in p.items() if k != "kind"} for p in pods]}))
    assert len(pods) == 2
    namespaces = tmp_path / "namespaces.json"  # their labels choose the tenant
    namespaces.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        o for o in yaml.safe_load(Path(DUMP).read_text(encoding="utf-8"))["items"] if o.get("kind") == "Namespace"]}))
    assert main(["cluster", "audit", "-p", head, "-f", str(namespaces), "-f", str(typed), "-O", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert sorted((r["kind"], r["name"]) for r in document["results"]) == [("Pod", "mps-borrower"),
                                                                            ("Pod", "mps-stowaway")]


def test_write_reports_writes_to_the_cluster_it_reads_not_to_files(
        head: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "audit", "-p", head, "-f", DUMP, "--write-reports"]) == 2
    assert capsys.readouterr().err == (
        "gpupolicy cluster audit: error: --write-reports writes to the cluster it reads, not to files\n"
        "  hint: drop --from-file (or --write-reports, and apply the -O policy-report output yourself)\n")


def test_write_reports_writes_report_objects_only(head: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "audit", "-p", head, "--write-reports", "-O", "json"]) == 2
    assert capsys.readouterr().err == (
        "gpupolicy cluster audit: error: --write-reports writes report objects, not json\n"
        "  hint: pass -O policy-report (the default with --write-reports) or -O openreports\n")
