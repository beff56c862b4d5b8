"""policy.audit.scan: running workloads judged by the engine and folded per owning workload, on recorded dumps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import build_audit_dumps
import pytest
import yaml

from policy.admission.engine import Engine
from policy.audit import scan
from policy.load import load_policy
from policy.resolved.offers import build_admission_policy

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
#: The spec change of the acceptance test: the research tenant loses MPS.
NO_MPS = ("allow: [exclusive, mps, time-slicing]", "allow: [exclusive, time-slicing]")


def engine(text: str) -> Engine:
    result = load_policy(text, filename="cluster.yaml")
    assert result.ok, result.diagnostics
    return Engine(build_admission_policy(result.resolved))


def base_text() -> str:
    return MIXED.read_text(encoding="utf-8")


def head_text() -> str:
    text = base_text()
    assert NO_MPS[0] in text
    return text.replace(*NO_MPS)


def dump(name: str = "mixed-fleet") -> list[dict[str, Any]]:
    return yaml.safe_load((build_audit_dumps.DUMPS / f"{name}.yaml").read_text(encoding="utf-8"))["items"]


def run(text: str, objects: list[dict[str, Any]]) -> scan.Audit:
    return scan.audit(engine(text), objects, scan.namespace_labels(objects))


def keys(results: tuple[scan.Result, ...]) -> set[tuple[str, str, str]]:
    return {r.key for r in results}


def test_the_recorded_dumps_are_what_the_builder_writes() -> None:
    for path, text in build_audit_dumps.build().items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run python tests/audit/build_audit_dumps.py"


def test_every_workload_of_the_mixed_fleet_passes_the_example_spec_once_per_owner() -> None:
    audit = run(base_text(), dump())
    assert audit.objects == 20
    assert not audit.failed and not audit.violations
    assert keys(audit.results) == {
        ("dev-alice", "Deployment", "notebook"), ("prod-search", "Deployment", "qwen-7b"),
        ("research-nlp", "Deployment", "time-slicing-verification"), ("research-nlp", "Job", "j-e2e-1"),
        ("research-nlp", "Pod", "mps-borrower"), ("research-nlp", "Pod", "mps-stowaway")}


def test_removing_research_mps_makes_exactly_research_workloads_new_violations_folded_per_owner() -> None:
    before, after = run(base_text(), dump()), run(head_text(), dump())
    new = keys(after.violations) - keys(before.violations)
    assert new == {("research-nlp", "Deployment", "time-slicing-verification"), ("research-nlp", "Job", "j-e2e-1"),
                   ("research-nlp", "Pod", "mps-borrower"), ("research-nlp", "Pod", "mps-stowaway")}
    by_key = {r.key: r for r in after.results}
    deployment = by_key[("research-nlp", "Deployment", "time-slicing-verification")]
    assert deployment.outcome == "fail" and deployment.tenants == ("research",)
    assert [d.code for d in deployment.diagnostics] == ["tenant-sharing-mode-denied"]
    assert [(f.kind, f.name) for f in deployment.folded] == [
        ("Pod", "time-slicing-verification-6d4f9c7b8-7x2kq"), ("Pod", "time-slicing-verification-6d4f9c7b8-b9wzl"),
        ("Pod", "time-slicing-verification-6d4f9c7b8-m4rtc"), ("ReplicaSet", "time-slicing-verification-5c8b7d6f4"),
        ("ReplicaSet", "time-slicing-verification-6d4f9c7b8")]
    assert [(f.kind, f.name) for f in by_key[("research-nlp", "Job", "j-e2e-1")].folded] == [("Pod", "j-e2e-1-q8d5n")]


@pytest.mark.parametrize("name", ["mps-borrower", "mps-stowaway"])
def test_a_pod_whose_owner_reference_is_forged_is_reported_by_itself(name: str) -> None:
    after = run(head_text(), dump())
    forged = next(r for r in after.results if r.ref.name == name)
    assert (forged.ref.kind, forged.outcome, forged.folded) == ("Pod", "fail", ())
    deployment = next(r for r in after.results if r.ref.name == "time-slicing-verification")
    assert name not in {f.name for f in deployment.folded}


def test_a_pod_whose_verdict_differs_from_its_real_owner_stands_alone() -> None:
    objects = dump()
    pod = next(o for o in objects if o["metadata"]["name"] == "time-slicing-verification-6d4f9c7b8-7x2kq")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 2  # edited in place after creation
    audit = run(base_text(), objects)
    alone = next(r for r in audit.results if r.ref.name == pod["metadata"]["name"])
    assert alone.outcome == "fail" and "shared-gpu-request-above-one" in {d.code for d in alone.diagnostics}
    deployment = next(r for r in audit.results if r.ref.name == "time-slicing-verification")
    assert deployment.outcome == "pass" and len(deployment.folded) == 4


def test_owner_references_that_form_a_cycle_fold_each_object_once() -> None:
    objects = [o for o in dump() if "research-nlp" in (o["metadata"].get("namespace"), o["metadata"]["name"])]
    pods = [o for o in objects if o["kind"] == "Pod"][:2]
    first, second = pods
    for a, b in ((first, second), (second, first)):
        a["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": b["metadata"]["name"],
                                             "uid": b["metadata"]["uid"], "controller": True}]
    audit = run(base_text(), objects)
    names = [r.ref.name for r in audit.results] + [f.name for r in audit.results for f in r.folded]
    assert sorted(names) == sorted({o["metadata"]["name"] for o in objects if o["kind"] != "Namespace"})


def test_an_old_replicaset_scaled_to_zero_is_left_out_only_when_its_owner_is_read() -> None:
    objects = [o for o in dump() if o["kind"] != "Deployment"]
    audit = run(base_text(), objects)
    names = {r.ref.name for r in audit.results}
    assert "time-slicing-verification-6d4f9c7b8" in names  # the current ReplicaSet, now the top owner
    assert "time-slicing-verification-5c8b7d6f4" in names  # its Deployment is not in the input: reported


def test_namespaces_missing_from_the_input_get_the_default_rules() -> None:
    objects = [o for o in dump() if o["kind"] != "Namespace"]
    audit = run(base_text(), objects)
    research = next(r for r in audit.results if r.ref.name == "time-slicing-verification")
    assert research.tenants == () and research.outcome == "pass"  # mixed-fleet's default rules allow every mode


def test_the_live_audit_lists_every_built_in_kind_the_engine_reads_and_no_pod_template() -> None:
    kinds = {(w.group, w.kind): w for w in scan.watched_kinds()}
    assert {("", "Pod"), ("", "Namespace"), ("apps", "Deployment"), ("batch", "CronJob")} <= set(kinds)
    assert all(kind != "PodTemplate" and group != "extensions" for group, kind in kinds)
    assert kinds["", "Pod"].resource == "pods" and kinds["batch", "CronJob"].resource == "cronjobs"


def test_the_live_audit_lists_finished_pods_out_at_the_api_server() -> None:
    selectors = {w.kind: w.field_selector for w in scan.watched_kinds()}
    assert selectors.pop("Pod") == "status.phase!=Succeeded,status.phase!=Failed"
    assert set(selectors.values()) == {""}


def test_the_live_audit_lists_the_policys_workload_kinds_table() -> None:
    result = load_policy(base_text(), filename="cluster.yaml")
    table = build_admission_policy(result.resolved).workload_kinds
    watched = scan.watched_kinds(table)
    assert {(k.group, k.kind, k.resource) for k in table} <= {(w.group, w.kind, w.resource) for w in watched}
    assert ("ray.io", "RayCluster", "rayclusters", "") in {(w.group, w.kind, w.resource, w.field_selector)
                                                           for w in watched}
    assert list(watched) == sorted(watched)


def test_objects_without_a_gpu_request_have_no_result() -> None:
    text = (ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml").read_text(encoding="utf-8")
    audit = run(text, dump("h20-mig"))
    assert [r.key for r in audit.results] == [("inference", "Deployment", "qwen-7b")]
    assert audit.results[0].outcome == "pass"


def test_a_finished_pod_is_no_running_workload() -> None:
    objects = dump()
    forged = next(o for o in objects if o["metadata"]["name"] == "mps-stowaway")
    forged["status"] = {"phase": "Succeeded"}
    after = run(head_text(), objects)
    assert "mps-stowaway" not in {r.ref.name for r in after.results}
    assert "mps-borrower" in {r.ref.name for r in after.results}


@pytest.mark.parametrize("order", ["owners last", "owners first"])
def test_a_long_owner_chain_folds_into_its_top_whatever_the_order_of_the_objects(order: str) -> None:
    # 20 controllers deep (no real controller goes so deep, but ownerReferences are written by anyone): the chain
    # folds into its top however deep it is and in whatever order the dump lists it
    def pod(i: int) -> dict[str, Any]:
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": f"p{i + 1}", "uid": f"u{i + 1}", "controller": True}]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}",
                             **({"ownerReferences": owner} if i < 19 else {})},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    objects = [pod(i) for i in range(20)]
    result = run(base_text(), objects if order == "owners last" else objects[::-1])
    assert [(r.ref.name, len(r.folded)) for r in result.results] == [("p19", 19)]
