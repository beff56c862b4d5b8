"""Inventories from YAML, CSV, manifests and recorded Prometheus exports, with located errors."""

from __future__ import annotations

from pathlib import Path

from policy.plan import inventory

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prometheus"


def test_yaml_errors_name_file_line_field_and_fix() -> None:
    text = "workloads:\n  - name: svc\n    memory: 4.5GB\n    smActivity: 1.5\n"
    entries, found = inventory.parse_yaml(text, filename="inv.yaml")
    assert entries == ()
    by_field = {d.path[-1]: d for d in found}
    assert by_field["memory"].span.line == 3 and "did you mean 'G'" in by_field["memory"].message
    assert by_field["smActivity"].span.line == 4
    assert all(d.hint for d in found)


def test_a_bare_list_is_an_inventory_and_figures_merge_into_workloads() -> None:
    entries, found = inventory.parse_yaml("- {name: svc, memory: 2Gi, smActivity: 0.2, runtime: 30m}\n",
                                          filename="inv.yaml")
    assert found == ()
    result, problems = inventory.merge((), entries)
    assert problems == ()
    (w,) = result.workloads
    assert (w.label, w.memory_mib, w.runtime_s, w.replicas, w.tenant) == ("default/svc", 2048, 1800.0, 1, "default")


def test_csv_cells_are_located_by_line_and_column() -> None:
    text = "# comment\nname,namespace,replicas,memory,smActivity,production\nsvc,nlp,two,4Gi,0.2,maybe\n"
    entries, found = inventory.parse_csv(text, filename="inv.csv")
    assert entries == ()
    assert {(d.span.line, d.span.column) for d in found} == {(3, 3), (3, 6)}


def test_csv_unknown_columns_are_refused_with_the_known_ones() -> None:
    _, found = inventory.parse_csv("name,mem\nsvc,1Gi\n", filename="inv.csv")
    assert found[0].code == "unknown-field" and "smActivity" in found[0].hint


def test_a_workload_without_memory_is_an_error_saying_where_to_get_it() -> None:
    entries, _ = inventory.parse_yaml("workloads: [{name: svc, smActivity: 0.2}]\n", filename="inv.yaml")
    _, problems = inventory.merge((), entries)
    assert problems[0].code == "incomplete-workload" and "DCGM_FI_DEV_FB_USED" in problems[0].hint


def test_recorded_prometheus_exports_derive_memory_and_activity_per_workload() -> None:
    memory, found, notes = inventory.parse_prometheus((FIXTURES / "fb-used.json").read_text(),
                                                      filename="fb-used.json", metric="memory")
    assert found == ()
    activity, found, _ = inventory.parse_prometheus((FIXTURES / "sm-active.json").read_text(),
                                                    filename="sm-active.json", metric="sm-activity")
    assert found == ()
    assert memory[("batch", "eval-28474620-z9k2m")] == 9830.4  # exported_* labels read too
    assert any("without a pod label" in n for n in notes)
    # A MIG instance's activity is relative to the instance: 0.7 of 1 of the H20's 7 slices is 0.1 of the GPU.
    assert round(activity[("nlp", "pii-detector-5c6d7f8b9-abcde")], 3) == 0.1
    derived = inventory.from_manifests([({"apiVersion": "apps/v1", "kind": "Deployment",
                                          "metadata": {"name": "nlp-inference", "namespace": "nlp"},
                                          "spec": {"replicas": 2, "template": {"spec": {"containers": [
                                              {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}},
                                         None)])
    merged, notes = inventory.with_measurements(derived, inventory.Measurements(memory, activity))
    by_name = {d.name: d for d in merged}
    assert (by_name["nlp-inference"].memory_mib, by_name["nlp-inference"].sm_activity) == (4621, 0.06)
    assert by_name["nlp-inference"].replicas == 2  # the manifest's count, not the pods seen
    assert by_name["eval"].replicas == 1 and any("no manifest" in n for n in notes)


def test_a_range_query_export_is_refused_with_the_fix() -> None:
    text = '{"status":"success","data":{"resultType":"matrix","result":[]}}'
    _, found, _ = inventory.parse_prometheus(text, filename="x.json", metric="memory")
    assert found[0].code == "invalid-export" and "instant query" in found[0].message


def test_pod_names_map_to_their_controllers() -> None:
    assert inventory.pod_owner("nlp-inference-7d9f8b6c4-x2x7k") == "nlp-inference"
    assert inventory.pod_owner("web-0") == "web"
    assert inventory.pod_owner("train-28474620-z9k2m") == "train"
    assert inventory.pod_owner("api-v2-5c6d7f8b9-abcde", ["api", "api-v2"]) == "api-v2"


def test_an_empty_yaml_inventory_is_an_error_not_an_empty_plan() -> None:
    for text in ("", "# nothing yet\n", "---\n"):
        entries, found = inventory.parse_yaml(text, filename="inv.yaml")
        assert entries == () and [d.code for d in found] == ["empty-inventory"], text
        assert found[0].severity == "error" and found[0].hint
