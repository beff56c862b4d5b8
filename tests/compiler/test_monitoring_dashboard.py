"""The compiled Grafana dashboard: valid for the dashboard JSON model as Grafana documents it
(schemas/grafana-dashboard.schema.json), every query valid PromQL to promtool's parser, and every panel showing
data on a healthy synthetic cluster of the example."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from prometheus_cluster import check_queries, fleet, healthy, promtool

from compiler import compile_policy
from compiler.targets.monitoring import dashboard
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schemas" / "grafana-dashboard.schema.json"
EXAMPLES = ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"]
CONFIG_MAP = "monitoring/configmap-gpupolicy-dashboard.yaml"
# Grafana's built-in interval variables, as Grafana substitutes them before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}
# The schema's definitions of each panel plugin's options and field options (None: the dashboard sets none).
PLUGIN_DEFINITIONS = {"timeseries": ("TimeseriesOptions", "TimeseriesFieldConfig"), "stat": ("StatOptions", None),
                      "table": ("TableOptions", None)}
# Panels that show a fault: empty on a healthy cluster, by design.
EMPTY_WHEN_HEALTHY = {("GPU nodes outside every class", "A"), ("Firing alerts", "A"),
                      ("Failed and ignored calls", "A")}


def _validator(definition: str | None = None) -> Draft202012Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    if definition is not None:
        schema = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    return Draft202012Validator(schema)


def board(example_policy: Load, name: str) -> dict[str, Any]:
    config_map = yaml.safe_load(compile_policy(example_policy(name))[CONFIG_MAP])
    (text,) = config_map["data"].values()
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def panels(model: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in model["panels"]:
        if panel["type"] == "row":
            yield from panel["panels"]
        else:
            yield panel


def queries(model: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, PromQL with Grafana's variables substituted)."""
    for panel in panels(model):
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            yield panel["title"], target["refId"], expr


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_dashboard_matches_grafanas_dashboard_schema(example_policy: Load, name: str) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in _validator().iter_errors(board(example_policy, name))]
    assert errors == []


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_panel_matches_its_plugins_schema_and_every_target_the_prometheus_query_schema(
        example_policy: Load, name: str) -> None:
    target_schema = _validator("PrometheusQuery")
    checked = set()
    for panel in panels(board(example_policy, name)):
        kind = panel["type"]
        options, field_options = PLUGIN_DEFINITIONS[kind]
        errors = [f"options{e.json_path[1:]}: {e.message}"
                  for e in _validator(options).iter_errors(panel["options"])]
        custom = panel["fieldConfig"]["defaults"].get("custom")
        if custom is not None:
            assert field_options is not None, f"{panel['title']}: field options the schema does not describe"
            errors += [f"custom: {e.message}" for e in _validator(field_options).iter_errors(custom)]
        errors += [f"target {t['refId']}: {e.message}" for t in panel["targets"] for e in target_schema.iter_errors(t)]
        assert errors == [], panel["title"]
        checked.add(kind)
    assert checked == {"stat", "timeseries", "table"}


def test_the_schema_rejects_what_grafanas_documentation_rules_out() -> None:
    minimal = {"schemaVersion": 41, "templating": {"list": []}, "annotations": {"list": []}}
    validator = _validator()
    assert list(validator.iter_errors(minimal)) == []
    assert list(validator.iter_errors({**minimal, "panelz": []}))  # unknown property
    assert list(validator.iter_errors({k: v for k, v in minimal.items() if k != "schemaVersion"}))
    row_without_panels = {"type": "row", "id": 1, "collapsed": False}
    assert list(validator.iter_errors({**minimal, "panels": [row_without_panels]}))
    assert list(validator.iter_errors({**minimal, "uid": "a" * 41}))
    assert list(validator.iter_errors({**minimal, "templating": {"list": [{"name": "class", "type": "list"}]}}))
    target = {"refId": "A", "expr": "up", "datasource": {"type": "prometheus", "uid": "${datasource}"}}
    panel = {"type": "timeseries", "id": 2, "title": "t", "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
             "targets": [target], "fieldConfig": {"defaults": {}, "overrides": []},
             "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
                         "tooltip": {"mode": "multi", "sort": "desc"}}}
    assert list(validator.iter_errors({**minimal, "panels": [panel]})) == []
    wrong = [{**panel, "gridPos": {**panel["gridPos"], "w": 25}},  # wider than the grid
             {**panel, "targets": [{"expr": "up"}]},  # a query without its refId
             {**panel, "options": {**panel["options"], "tooltip": {"mode": "all", "sort": "desc"}}},
             {**panel, "fieldConfig": {"defaults": {"custom": {"drawStyle": "area"}}, "overrides": []}},
             {**panel, "type": "stat"},  # a time series' options are not a stat's
             {**panel, "heigth": 8}]
    for bad in wrong:
        assert list(validator.iter_errors({**minimal, "panels": [bad]})), bad


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_query_is_valid_promql_to_promtool(example_policy: Load, name: str, tmp_path: Path) -> None:
    found = list(queries(board(example_policy, name)))
    assert all("$" not in expr for _, _, expr in found), "a Grafana variable promtool cannot parse"
    done = check_queries([expr for _, _, expr in found], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(found)} rules found" in done.stdout


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_panel_shows_data_on_a_healthy_cluster(example_policy: Load, name: str, tmp_path: Path) -> None:
    policy = example_policy(name)
    tree = compile_policy(policy)
    model = board(example_policy, name)
    rule = yaml.safe_load(tree["monitoring/prometheusrule-gpupolicy.yaml"])
    recording = [{k: v for k, v in r.items()} for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r]
    found = list(queries(model))
    checks = [{"alert": f"Query{i}", "expr": f"count({expr}) > 0"} for i, (_, _, expr) in enumerate(found)]
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(yaml.safe_dump({"groups": [{"name": "expectations", "rules": recording},
                                                     {"name": "dashboard", "rules": checks}]}, sort_keys=False))
    cluster = healthy(resolve(policy))
    tests = [{
        "interval": "1m",
        "input_series": cluster.promtool_series(),
        "alert_rule_test": [
            {"eval_time": "30m", "alertname": f"Query{i}",
             "exp_alerts": [] if (title, ref) in EMPTY_WHEN_HEALTHY else [{"exp_labels": {}}]}
            for i, (title, ref, _) in enumerate(found)
        ],
    }]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                         "tests": tests}, sort_keys=False))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    names = {f"Query{i}": f"{title} ({ref})" for i, (title, ref, _) in enumerate(found)}
    failed = sorted({names[n] for n in re.findall(r"alertname: (Query\d+),", done.stdout + done.stderr)})
    assert done.returncode == 0, f"empty or failing panels: {failed}\n{done.stdout[-3000:]}{done.stderr[-2000:]}"


# ----------------------------------------------------------------------------------------- layout


@pytest.mark.parametrize("name", EXAMPLES)
def test_one_row_per_class_with_its_slots_allocation_memory_activity_and_state(
        example_policy: Load, name: str) -> None:
    policy = example_policy(name)
    model = board(example_policy, name)
    rows = [p for p in model["panels"] if p["type"] == "row"]
    classes = sorted(c.name for c in policy.spec.node_classes)
    class_rows = rows[-len(classes):]
    assert [r["title"].split(":")[0] for r in class_rows] == classes
    titles = {p["title"] for p in panels({"panels": class_rows})} | {
        p["title"] for p in model["panels"] if p["type"] != "row"}
    assert {"Slots before / after", "Allocation", "Memory per slot against its budget", "SM activity"} <= titles
    assert ("MIG state" in titles) == any(c.sharing.mig is not None for c in policy.spec.node_classes)


@pytest.mark.parametrize("name", EXAMPLES)
def test_panels_never_overlap_and_ids_are_unique(example_policy: Load, name: str) -> None:
    model = board(example_policy, name)
    every = [*model["panels"], *(q for p in model["panels"] if p["type"] == "row" for q in p["panels"])]
    assert len({p["id"] for p in every}) == len(every)
    cells: set[tuple[int, int]] = set()
    for panel in every:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not mine & cells, panel["title"]
        cells |= mine


def test_the_configmap_is_labelled_for_the_grafana_sidecar_and_named_stably(example_policy: Load) -> None:
    edits = (("  monitoring:\n    enabled: true\n", "  monitoring:\n    enabled: true\n    namespace: monitoring\n"
              "    dashboard:\n      labels: {grafana_dashboard: \"1\", team: gpu}\n"
              "      annotations: {grafana_folder: GPU}\n"),)
    config_map = yaml.safe_load(compile_policy(example_policy("tke-l20-t4", *edits))[CONFIG_MAP])
    meta = config_map["metadata"]
    assert meta["name"] == "gpupolicy-dashboard" and meta["namespace"] == "monitoring"
    assert meta["labels"]["grafana_dashboard"] == "1" and meta["labels"]["team"] == "gpu"
    assert meta["annotations"]["grafana_folder"] == "GPU"
    assert "argocd.argoproj.io/sync-options" not in meta["annotations"]  # pruned like any object: no hash
    (key,) = config_map["data"]
    assert key == "gpupolicy-tke-prod.json"
    assert json.loads(config_map["data"][key])["uid"] == "gpupolicy-tke-prod"


def test_dashboard_uids_stay_within_grafanas_limit_and_apart() -> None:
    long_a, long_b = "a" * 40, "a" * 39 + "b"
    assert len(dashboard.dashboard_uid(long_a)) == 40
    assert dashboard.dashboard_uid(long_a) != dashboard.dashboard_uid(long_b)
    assert dashboard.dashboard_uid("tke-prod") == "gpupolicy-tke-prod"


def test_rows_of_large_fleets_start_collapsed(example_policy: Load) -> None:
    model = board(example_policy, "mixed-fleet")  # four classes: expanded
    assert not any(p["collapsed"] for p in model["panels"] if p["type"] == "row")
    extra = """    - name: extra
      nodeSelector: {node-pool: extra}
      gpu: {model: T4, count: 1}
      sharing: exclusive
  tenants:"""
    policy = example_policy("mixed-fleet", ("  tenants:", extra))
    config_map = yaml.safe_load(compile_policy(policy)[CONFIG_MAP])
    model = json.loads(next(iter(config_map["data"].values())))
    class_rows = [p for p in model["panels"] if p["type"] == "row"][-5:]
    assert all(r["collapsed"] and r["panels"] for r in class_rows)


def test_a_large_fleet_gets_one_row_repeated_per_class_and_stays_small(tmp_path: Path) -> None:
    tree = compile_policy(fleet(dashboard.STATIC_ROWS + 1))
    assert len(tree[CONFIG_MAP]) < 64 * 1024  # the same for any number of classes
    (text,) = yaml.safe_load(tree[CONFIG_MAP])["data"].values()
    model = json.loads(text)
    assert list(_validator().iter_errors(model)) == []
    variable = next(v for v in model["templating"]["list"] if v["name"] == "class")
    assert variable["query"] == "label_values(gpupolicy:node_class:info, class)"
    assert variable["multi"] and variable["includeAll"]
    (row,) = [p for p in model["panels"] if p.get("repeat")]
    assert row["repeat"] == "class" and row["title"] == "$class"
    found = [(title, ref, expr.replace("$class", "pool-000")) for title, ref, expr in queries(model)]
    assert any('class="pool-000"' in expr for _, _, expr in found)
    done = check_queries([expr for _, _, expr in found], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
