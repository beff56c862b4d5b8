"""policy.audit.reports: PolicyReports that validate against the pinned wg-policy and OpenReports CRD schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from test_audit_scan import base_text, dump, engine, head_text

from policy.audit import reports, scan

CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "policy-reports"


def crd_schema(file: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / file).read_text(encoding="utf-8"))
    return next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)


SCHEMAS = {
    ("wgpolicyk8s.io/v1alpha2", "PolicyReport"): crd_schema("wgpolicyk8s.io_policyreports.yaml", "v1alpha2"),
    ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"): crd_schema("wgpolicyk8s.io_clusterpolicyreports.yaml",
                                                                    "v1alpha2"),
    ("openreports.io/v1alpha1", "Report"): crd_schema("openreports.io_reports.yaml", "v1alpha1"),
    ("openreports.io/v1alpha1", "ClusterReport"): crd_schema("openreports.io_clusterreports.yaml", "v1alpha1"),
}


def build(text: str, **options: Any) -> list[dict[str, Any]]:
    e = engine(text)
    objects = dump()
    return reports.build_reports(scan.audit(e, objects, scan.namespace_labels(objects)), e.policy,
                                 reports.Options(**options))


def validate(report: dict[str, Any]) -> None:
    schema = SCHEMAS[(report["apiVersion"], report["kind"])]
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(report), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


@pytest.mark.parametrize("flavor", ["wgpolicy", "openreports"])
@pytest.mark.parametrize("spec", ["base", "head"])
def test_every_report_validates_against_the_pinned_crd_schema(flavor: str, spec: str) -> None:
    found = build(base_text() if spec == "base" else head_text(), flavor=flavor)
    for report in found:
        validate(report)
    kinds = [r["kind"] for r in found]
    assert kinds[-1] in ("ClusterPolicyReport", "ClusterReport") and len(kinds) == 4


def test_one_report_per_namespace_with_a_summary_and_one_result_per_finding() -> None:
    found = {r["metadata"].get("namespace", ""): r for r in build(head_text())}
    assert sorted(found) == ["", "dev-alice", "prod-search", "research-nlp"]
    research = found["research-nlp"]
    assert research["summary"] == {"pass": 0, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    first = research["results"][0]
    assert first["policy"] == "mixed-fleet" and first["rule"] == "tenant-sharing-mode-denied"
    assert (first["result"], first["severity"]) == ("fail", "high")
    assert first["resources"][0]["kind"] == "Deployment" and first["resources"][0]["uid"]
    assert first["properties"]["folded"] == "5" and first["properties"]["tenants"] == "research"
    assert found["dev-alice"]["summary"]["pass"] == 1 and found["dev-alice"]["results"][0]["result"] == "pass"
    assert found[""]["results"] == [] and found[""]["summary"]["fail"] == 0


def test_every_report_carries_the_policy_hash_and_a_change_of_policy_changes_it() -> None:
    before = {r["metadata"]["labels"][reports.HASH_LABEL] for r in build(base_text())}
    after = {r["metadata"]["labels"][reports.HASH_LABEL] for r in build(head_text())}
    assert len(before) == len(after) == 1 and before != after


def test_fail_only_drops_passes_from_results_but_not_from_the_summary() -> None:
    dev = next(r for r in build(base_text(), fail_only=True) if r["metadata"].get("namespace") == "dev-alice")
    assert dev["results"] == [] and dev["summary"]["pass"] == 1


def test_the_cap_keeps_the_first_results_and_counts_them_all() -> None:
    research = next(r for r in build(head_text(), max_results=1) if r["metadata"].get("namespace") == "research-nlp")
    assert len(research["results"]) == 1 and research["summary"]["fail"] == 4
    assert research["metadata"]["annotations"][reports.TRUNCATED_ANNOTATION] == "1 of 4 results kept"
    validate(research)


def test_the_same_audit_gives_the_same_reports() -> None:
    assert build(head_text()) == build(head_text())


def test_the_schema_check_refuses_what_the_crd_refuses() -> None:
    report = build(head_text())[0]
    report["results"][0]["result"] = "denied"  # not in the CRD's enum (pass, fail, warn, error, skip)
    with pytest.raises(AssertionError, match="denied"):
        validate(report)


# --- the write plan of the in-cluster audit ----------------------------------------------------------------------


def stored(report: dict[str, Any], **changes: str) -> reports.StoredReport:
    meta = report["metadata"]
    found = reports.StoredReport(report["kind"], meta.get("namespace", ""), meta["name"],
                                 meta["labels"][reports.HASH_LABEL], "7")
    return reports.StoredReport(**{**found.__dict__, **changes})


def test_a_first_run_applies_every_report_and_deletes_nothing() -> None:
    built = build(head_text())
    plan = reports.plan_writes(built, ())
    assert plan.apply == tuple(built) and plan.delete == () and plan.replaced == ()


def test_a_run_under_a_changed_policy_replaces_the_reports_it_writes_again() -> None:
    before, after = build(base_text()), build(head_text())
    plan = reports.plan_writes(after, [stored(r) for r in before])
    assert plan.apply == tuple(after)
    # the namespaces with results are the same in both: each report is replaced under the new hash, none deleted
    assert plan.delete == ()
    assert plan.replaced == tuple(sorted(stored(r) for r in before))
    assert {r["metadata"]["labels"][reports.HASH_LABEL] for r in after} != {s.policy_hash for s in plan.replaced}


def test_a_report_of_a_namespace_without_results_now_is_deleted() -> None:
    built = build(head_text())
    gone = reports.StoredReport("PolicyReport", "retired-team", reports.report_name("mixed-fleet"), "0123", "9")
    renamed = reports.StoredReport("PolicyReport", "research-nlp", "gpupolicy-old-name", "0123", "3")
    current = [stored(r) for r in built]
    plan = reports.plan_writes(built, [*current, gone, renamed])
    assert plan.delete == (renamed, gone)  # sorted: kind, namespace, name
    assert plan.replaced == ()


def test_the_owned_selector_names_the_tool_and_the_policy() -> None:
    assert reports.owned_selector("mixed-fleet") == (
        "app.kubernetes.io/managed-by=gpupolicy,gpupolicy.dev/cluster=mixed-fleet")
    built = build(head_text())
    assert all(r["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpupolicy"
               and r["metadata"]["labels"]["gpupolicy.dev/cluster"] == "mixed-fleet" for r in built)


def test_every_report_kind_has_its_resource() -> None:
    for flavor in ("wgpolicy", "openreports"):
        namespaced, cluster_scoped = reports.report_kinds(flavor)
        assert reports.RESOURCES[namespaced][2] and not reports.RESOURCES[cluster_scoped][2]
        api_version = reports.API_VERSIONS[flavor][0]
        assert {reports.RESOURCES[k][0] for k in (namespaced, cluster_scoped)} == {api_version.partition("/")[0]}
