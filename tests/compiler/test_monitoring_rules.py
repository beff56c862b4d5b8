"""The compiled PrometheusRule: promtool accepts it, and every alert fires on its fault and stays silent on a near
miss, on a synthetic cluster of each example (tests/compiler/prometheus_cluster.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_cluster import MINUTES, SCENARIOS, Scenario, check_rules, healthy, promtool

from compiler import compile_policy
from compiler.targets.monitoring import rules
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
EXAMPLES = ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"]
RULE_FILE = "monitoring/prometheusrule-gpupolicy.yaml"
# The h20 example with per-pod metrics as well, so time-sliced MIG instances are checked pod by pod too.
VARIANTS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    **{name: (name, ()) for name in EXAMPLES},
    "h20-mig-per-pod": ("h20-mig", (("  monitoring:\n    enabled: true\n",
                                     "  monitoring:\n    enabled: true\n    dcgmExporter: {perPodMetrics: true}\n"),
                                    ("      version: v25.3.0\n", "      version: v25.10.0\n"))),  # hostPID
}


def rule_object(example_policy: Load, variant: str) -> dict[str, Any]:
    name, edits = VARIANTS[variant]
    return yaml.safe_load(compile_policy(example_policy(name, *edits))[RULE_FILE])




def alerts_of(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


# ----------------------------------------------------------------------------------------- promtool


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_promtool_accepts_the_compiled_rules(example_policy: Load, variant: str, tmp_path: Path) -> None:
    rule = rule_object(example_policy, variant)
    done = check_rules(rule["spec"]["groups"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metrics_read(rule: dict[str, Any], alert: str) -> set[str]:
    """Every series name an alert reads, through the recording rules it reads: series of other metrics cannot
    change its result, so each promtool group loads only these (promtool's time grows with every series)."""
    records: dict[str, list[str]] = {}
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            if "record" in r:
                records.setdefault(r["record"], []).append(r["expr"])
    todo, seen = [alerts_of(rule)[alert]["expr"]], set()
    while todo:
        names = set(_NAME.findall(_QUOTED.sub("", todo.pop()))) - seen
        seen |= names
        todo += [expr for name in names for expr in records.get(name, [])]
    return seen


def rules_for(rule: dict[str, Any], alert: str) -> dict[str, Any]:
    """The rule file of one alert: the recording rules it reads, in their order, and the alert itself (promtool
    evaluates every rule of a file at every step, so each alert gets its own)."""
    read = metrics_read(rule, alert)
    groups = []
    for group in rule["spec"]["groups"]:
        kept = [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]
                if r.get("record") in read or r.get("alert") == alert]
        if kept:
            groups.append({**group, "rules": kept})
    return {"groups": groups}


def _test_groups(rule: dict[str, Any], alert: str, s: Scenario) -> list[dict[str, Any]]:
    severity = alerts_of(rule)[alert]["labels"]["severity"]
    read = metrics_read(rule, alert)
    expected = [{"exp_labels": {**labels, "severity": severity}} for labels in s.expected]
    return [{
        "name": f"{alert} {title}",
        "interval": "1m",
        "input_series": cluster.promtool_series(read),
        "alert_rule_test": [{"eval_time": f"{s.eval_minutes}m", "alertname": alert, "exp_alerts": alerts}],
    } for title, cluster, alerts in (("fires on its fault", s.fault, expected),
                                     ("stays silent on its near miss", s.near_miss, []))]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_alert_fires_on_its_fault_and_not_on_a_near_miss(
        example_policy: Load, variant: str, tmp_path: Path) -> None:
    name, edits = VARIANTS[variant]
    policy = example_policy(name, *edits)
    rule = yaml.safe_load(compile_policy(policy)[RULE_FILE])
    base = healthy(resolve(policy))
    files = []
    for alert in alerts_of(rule):
        assert alert in SCENARIOS, f"no scenario for {alert}: add one to tests/compiler/prometheus_cluster.py"
        found = SCENARIOS[alert](base)
        assert found is not None, f"{alert} is compiled for {variant} but its scenario does not apply"
        assert found.expected and found.eval_minutes < MINUTES
        (tmp_path / f"{alert}.rules.yaml").write_text(yaml.safe_dump(rules_for(rule, alert), sort_keys=False))
        tests = {"rule_files": [f"{alert}.rules.yaml"], "evaluation_interval": "1m",
                 "tests": _test_groups(rule, alert, found)}
        (tmp_path / f"{alert}.tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
        files.append(f"{alert}.tests.yaml")
    done = promtool("test", "rules", *files, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert done.stdout.count("SUCCESS") == len(files), done.stdout


def test_the_examples_together_test_every_alert_of_the_catalogue(example_policy: Load) -> None:
    tested = set()
    for variant in VARIANTS:
        tested |= set(alerts_of(rule_object(example_policy, variant)))
    assert tested == {a.name for a in rules.ALERTS}


# ----------------------------------------------------------------------------------------- shape


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_annotations_name_only_labels_the_alert_carries(example_policy: Load, variant: str) -> None:
    name, edits = VARIANTS[variant]
    policy = example_policy(name, *edits)
    rule = yaml.safe_load(compile_policy(policy)[RULE_FILE])
    base = healthy(resolve(policy))
    for alert, body in alerts_of(rule).items():
        found = SCENARIOS[alert](base)
        assert found is not None
        text = body["annotations"]["summary"] + body["annotations"]["description"]
        optional = set(re.findall(r"\{\{ if \$labels\.(\w+) \}\}", text))
        used = set(re.findall(r"\$labels\.(\w+)", text)) - optional
        for labels in found.expected:
            assert used <= set(labels), f"{alert}: {used - set(labels)} not on the alert"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_alert_has_a_severity_summary_and_a_runbook_link(example_policy: Load, variant: str) -> None:
    rule = rule_object(example_policy, variant)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for alert, body in alerts_of(rule).items():
        assert body["labels"]["severity"] in {"critical", "warning", "info"}
        assert body["annotations"]["summary"] and body["annotations"]["description"]
        assert body["annotations"]["runbook_url"] == (
            f"https://github.com/gpupolicy/gpupolicy/blob/main/docs/runbooks.md#{alert.lower()}")


def test_recording_rules_carry_each_classs_expectations(example_policy: Load) -> None:
    rule = rule_object(example_policy, "tke-l20-t4")
    records = [r for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r]

    def find(record: str, **labels: str) -> str:
        (hit,) = [r["expr"] for r in records if r["record"] == record and labels.items() <= r["labels"].items()]
        return hit

    # seed 003: L20 sized to 8 replicas of 4621 MiB with a 10% reserve, T4 to 3 of 4401 MiB
    assert "label_node_kubernetes_io_instance_type=\"PNV5b.8XLARGE96\"" in find(rules.NODE_CLASS, **{"class": "l20"})
    assert find(rules.EXPECTED_ALLOCATABLE, **{"class": "l20", "resource": "nvidia_com_gpu"}).endswith(" * 8")
    assert find(rules.EXPECTED_ALLOCATABLE, **{"class": "t4", "resource": "nvidia_com_gpu"}).endswith(" * 3")
    assert find(rules.CLASS_REPLICAS, **{"class": "l20"}) == "vector(8)"
    assert find(rules.CLASS_SLOT_MEMORY, **{"class": "l20"}) == "vector(4621)"
    assert find(rules.CLASS_SLOT_MEMORY, **{"class": "t4"}) == "vector(4401)"
    assert find(rules.CLASS_MEMORY_PRESSURE, **{"class": "l20"}) == "vector(0.9)"  # 100% minus the 10% reserve
    assert find(rules.CLASS_NODES, **{"class": "l20"}) == "vector(1)"
    sharing = {r["labels"]["class"]: r["labels"]["sharing"] for r in records if r["record"] == rules.NODE_CLASS}
    assert sharing == {"l20": "time-slicing", "t4": "time-slicing"}


def test_mig_classes_record_their_config_and_per_profile_budgets(example_policy: Load) -> None:
    rule = rule_object(example_policy, "h20-mig")
    records = [r for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r]
    by_name = {(r["record"], tuple(sorted(r.get("labels", {}).items()))): r["expr"] for r in records}
    assert by_name[(rules.CLASS_MIG_CONFIG, (("class", "h20"), ("mig_config", "h20")))] == "vector(1)"
    profile = (("GPU_I_PROFILE", "1g.12gb"), ("class", "h20"), ("resource", "nvidia_com_mig_1g_12gb"))
    assert by_name[(rules.CLASS_REPLICAS, profile)] == "vector(2)"
    # two replicas of a 1g.12gb instance split its memory between them
    assert by_name[(rules.CLASS_SLOT_MEMORY, profile)] == "vector(5621)"
    assert by_name[(rules.EXPECTED_ALLOCATABLE, profile[1:])] == (
        'max by (node) (gpupolicy:node_class:info{class="h20"}) * 112')


def test_thresholds_come_from_the_spec(example_policy: Load) -> None:
    edits = (("  monitoring:\n    enabled: true\n", "  monitoring:\n    enabled: true\n    thresholds:\n"
              "      memoryPressure: 80%\n      webhookLatency: 2s\n      idleSmActivity: 10%\n"),
             ("    engine: vap", "    engine: both"))
    rule = yaml.safe_load(compile_policy(example_policy("h20-mig", *edits))[RULE_FILE])
    alerts = alerts_of(rule)
    records = [r for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r]
    (pressure,) = [r for r in records if r["record"] == rules.CLASS_MEMORY_PRESSURE]
    assert pressure["expr"] == "vector(0.8)"  # no sizing on MIG instances: the spec's threshold
    assert alerts["GPUPolicyWebhookSlow"]["expr"].endswith("> 2")
    assert "< 0.1" in alerts["GPUPolicyIdleGPUMemory"]["expr"]


def test_alerts_only_for_what_the_cluster_runs(example_policy: Load) -> None:
    tke = alerts_of(rule_object(example_policy, "tke-l20-t4"))
    # no MIG, no GPU Feature Discovery, no node labels to set, no per-pod DCGM series
    for absent in ("GPUPolicyMIGReconfigFailed", "GPUPolicySharingLabelDrift", "GPUPolicyNodeLabelMissing",
                   "GPUPolicyPodOverSliceMemory", "GPUPolicySharedGPUComputeHog"):
        assert absent not in tke
    without = (("  admission:\n    enforcement: enforce\n    failurePolicy: Fail",
                "  admission:\n    enabled: false\n    enforcement: enforce\n    failurePolicy: Fail"),
               ("  monitoring:\n    enabled: true\n",
                "  monitoring:\n    enabled: true\n    dcgmExporter: {enabled: false}\n"))
    rule = yaml.safe_load(compile_policy(example_policy("tke-l20-t4", *without))[RULE_FILE])
    names = set(alerts_of(rule))
    assert not {n for n in names if "Webhook" in n or n in ("GPUPolicyReloadFailing", "GPUPolicyDeniesSurge")}
    assert not {n for n in names if "GPU" in n and ("Memory" in n or "DCGM" in n)}
    assert "gpupolicy:gpu_memory_used:ratio" not in str(rule)


def test_the_node_cache_alert_only_where_the_webhook_runs_its_cache(example_policy: Load) -> None:
    # A webhook without its cache exports gpupolicy_node_cache_synced as 0 (docs/operations.md): no alert may read it.
    alert = "GPUPolicyWebhookNodeCacheUnsynced"
    assert alert in alerts_of(rule_object(example_policy, "tke-l20-t4"))
    off = ("  admission:\n    enforcement: enforce\n", "  admission:\n    nodeCache: false\n    enforcement: enforce\n")
    names = set(alerts_of(yaml.safe_load(compile_policy(example_policy("tke-l20-t4", off))[RULE_FILE])))
    assert alert not in names and "GPUPolicyWebhookUnavailable" in names
    assert alert not in alerts_of(rule_object(example_policy, "h20-mig"))  # ValidatingAdmissionPolicies alone


def test_monitoring_is_off_unless_the_spec_turns_it_on(example_policy: Load) -> None:
    tree = compile_policy(example_policy("tke-l20-t4", ("  monitoring:\n    enabled: true\n", "")))
    assert not any(p.startswith("monitoring/") for p in tree)


def test_the_policy_errors_alert_watches_the_tenancy_guard_where_errors_can_be_told(example_policy: Load) -> None:
    guard = "gpupolicy-tenant-labels.gpupolicy.dev"
    fleet = resolve(example_policy("mixed-fleet"))  # 1.31: error_type tells an error from a verdict
    assert guard in rules.watched_policies(fleet)
    expr = alerts_of(rule_object(example_policy, "mixed-fleet"))["GPUPolicyAdmissionPolicyErrors"]["expr"]
    # a regex alternative inside a PromQL string: the dots escaped, and the escape escaped
    assert guard.replace(".", "\\\\.") in expr
    # 1.30 has no error_type, and the guard fails closed: its errors count as denials, which nothing can tell apart
    older = resolve(example_policy("mixed-fleet", ('kubernetesVersion: "1.31"', 'kubernetesVersion: "1.30"')))
    assert guard not in rules.watched_policies(older)


def test_the_policy_errors_alert_watches_the_dra_claims_policies(example_policy: Load) -> None:
    # a CEL error or an exhausted cost budget in the claims' policies must page as the rules' do
    claims = ("resourceclaimtemplates.gpupolicy-claims.gpupolicy.dev", "resourceclaims.gpupolicy-claims.gpupolicy.dev")
    tree = compile_policy(example_policy("dra-mixed"))
    compiled = {yaml.safe_load(tree[p])["metadata"]["name"] for p in tree
                if p.startswith("dra/validatingadmissionpolicy-")}
    assert set(claims) <= compiled
    assert set(claims) <= set(rules.watched_policies(resolve(example_policy("dra-mixed"))))
    monitored = "      gitOps: argocd\n  monitoring:\n    enabled: true\n"
    watched = example_policy("dra-mixed", ("      gitOps: argocd\n", monitored))
    expr = alerts_of(yaml.safe_load(compile_policy(watched)[RULE_FILE]))["GPUPolicyAdmissionPolicyErrors"]["expr"]
    assert all(name.replace(".", "\\\\.") in expr for name in claims)
