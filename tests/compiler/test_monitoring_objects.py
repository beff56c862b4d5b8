"""The monitoring/ objects and the exporter configuration: shapes the Prometheus Operator and the GPU Operator
accept, the webhook scraped on its metrics port, the counters file dcgm-exporter parses, the allow-list the rules
need."""

from __future__ import annotations

import csv
import io
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from external_tools import require_tool
from operator_crd import undeclared
from prometheus_cluster import check_rules, fleet

from compiler import compile_policy
from compiler.targets import gpu_operator
from compiler.targets.monitoring import collectors, rules
from compiler.targets.monitoring import signals as sig
from policy.hardware import operator
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
EXAMPLES = ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"]
PER_POD = ("  monitoring:\n    enabled: true\n",
           "  monitoring:\n    enabled: true\n    dcgmExporter: {perPodMetrics: true}\n")

# Fields of the Prometheus Operator's CRDs (monitoring.coreos.com/v1, as shipped with kube-prometheus-stack
# 88.5.3 / prometheus-operator v0.93.1): what the objects may use. A typo would be pruned silently by the API
# server, and the rule or scrape would quietly not exist.
RULE_GROUP_FIELDS = {"name", "interval", "limit", "labels", "partial_response_strategy", "query_offset", "rules"}
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
SERVICE_MONITOR_SPEC = {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels", "podTargetLabels"}
ENDPOINT_FIELDS = {"port", "scheme", "path", "interval", "scrapeTimeout", "tlsConfig", "honorLabels", "relabelings",
                   "metricRelabelings"}


def objects(tree: Any, prefix: str) -> dict[str, dict[str, Any]]:
    return {path: yaml.safe_load(data) for path, data in tree.items()
            if path.startswith(prefix) and path.endswith(".yaml") and not path.endswith("kustomization.yaml")}


@pytest.mark.parametrize("name", EXAMPLES)
def test_monitoring_holds_a_rule_a_dashboard_and_the_monitors_of_what_the_tree_runs(
        example_policy: Load, name: str) -> None:
    tree = compile_policy(example_policy(name))
    found = objects(tree, "monitoring/")
    reconciler = any(p.startswith("node-labels/") for p in tree)  # the tree runs the node-label reconciler
    webhook = "admission/deployment-gpupolicy-webhook.yaml" in tree  # h20-mig: ValidatingAdmissionPolicies alone
    assert webhook == (name != "h20-mig")
    assert sorted(found) == ["monitoring/configmap-gpupolicy-dashboard.yaml",
                             *(["monitoring/podmonitor-gpupolicy-node-labels.yaml"] if reconciler else []),
                             "monitoring/prometheusrule-gpupolicy.yaml",
                             *(["monitoring/servicemonitor-gpupolicy-webhook.yaml"] if webhook else [])]
    assert reconciler == (name != "tke-l20-t4")
    for obj in found.values():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/component"] == "monitoring"
        # last: the monitoring stack's CRDs and admission webhook must not hold back the GPU configuration
        assert obj["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "3"


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_rule_and_service_monitor_use_only_fields_of_the_prometheus_operator_crds(
        example_policy: Load, name: str) -> None:
    found = objects(compile_policy(example_policy(name)), "monitoring/")
    rule = found["monitoring/prometheusrule-gpupolicy.yaml"]
    assert set(rule["spec"]) == {"groups"}
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(set(names)) == len(names) and names[0] == rules.RECORDING_GROUP
    for group in rule["spec"]["groups"]:
        assert set(group) <= RULE_GROUP_FIELDS
        for r in group["rules"]:
            assert set(r) <= RULE_FIELDS and ("alert" in r) != ("record" in r) and r["expr"]
    if (monitor := found.get("monitoring/servicemonitor-gpupolicy-webhook.yaml")) is not None:
        assert set(monitor["spec"]) <= SERVICE_MONITOR_SPEC
        (endpoint,) = monitor["spec"]["endpoints"]
        assert set(endpoint) <= ENDPOINT_FIELDS


def test_prometheus_scrapes_the_webhooks_metrics_port(example_policy: Load) -> None:
    tree = compile_policy(example_policy("tke-l20-t4"))
    monitor = objects(tree, "monitoring/")["monitoring/servicemonitor-gpupolicy-webhook.yaml"]
    service = yaml.safe_load(tree["admission/service-gpupolicy-webhook.yaml"])
    network = yaml.safe_load(tree["admission/networkpolicy-gpupolicy-webhook.yaml"])
    (endpoint,) = monitor["spec"]["endpoints"]
    # the Service's metrics port by name, its labels by the selector, a port the NetworkPolicy opens to all pods
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert endpoint == {"port": "metrics", "path": "/metrics"}  # plain HTTP: no scheme, no TLS
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert {"from": [{"namespaceSelector": {}}], "ports": [{"port": port["port"], "protocol": "TCP"}]} in \
        network["spec"]["ingress"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_prometheus_scrapes_the_node_label_reconciler_by_its_pods_metrics_port(example_policy: Load) -> None:
    tree = compile_policy(example_policy("mixed-fleet"))
    monitor = yaml.safe_load(tree["monitoring/podmonitor-gpupolicy-node-labels.yaml"])
    deployment = yaml.safe_load(tree["node-labels/deployment.yaml"])
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    # podmonitors.monitoring.coreos.com: spec.selector (required), namespaceSelector, podMetricsEndpoints
    assert set(monitor["spec"]) == {"selector", "namespaceSelector", "podMetricsEndpoints"}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [deployment["metadata"]["namespace"]]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics"}
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_rules_namespace_and_labels_come_from_the_spec(example_policy: Load) -> None:
    edits = (("  monitoring:\n    enabled: true\n", "  monitoring:\n    enabled: true\n    namespace: monitoring\n"
              "    labels: {prometheus: platform}\n    runbookUrl: https://wiki.example.com/gpu/runbooks\n"),)
    tree = compile_policy(example_policy("tke-l20-t4", *edits))
    rule = yaml.safe_load(tree["monitoring/prometheusrule-gpupolicy.yaml"])
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["prometheus"] == "platform" and "release" not in rule["metadata"]["labels"]
    urls = {r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert "https://wiki.example.com/gpu/runbooks#gpupolicyallocatabledrift" in urls
    monitor = yaml.safe_load(tree["monitoring/servicemonitor-gpupolicy-webhook.yaml"])
    assert monitor["metadata"]["namespace"] == "gpupolicy-system"  # beside the Service it scrapes


@pytest.mark.parametrize("setting", ["enabled: false", "engine: vap"])
def test_without_the_webhook_there_is_no_webhook_to_scrape_or_alert_on(example_policy: Load, setting: str) -> None:
    edit = ("  admission:\n    enforcement: enforce\n    failurePolicy: Fail",
            f"  admission:\n    {setting}\n    enforcement: enforce\n    failurePolicy: Fail")
    tree = compile_policy(example_policy("tke-l20-t4", edit))
    assert "monitoring/servicemonitor-gpupolicy-webhook.yaml" not in tree
    rule = tree["monitoring/prometheusrule-gpupolicy.yaml"].decode()
    assert "GPUPolicyWebhook" not in rule and "gpupolicy_admission" not in rule


@pytest.mark.parametrize("name", EXAMPLES)
def test_monitoring_builds_with_kustomize(example_policy: Load, name: str, tmp_path: Path) -> None:
    tree = compile_policy(example_policy(name))
    for path, data in tree.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    done = subprocess.run([require_tool("kubectl"), "kustomize", str(tmp_path / "monitoring")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(done.stdout) if d)
    webhook = "admission/deployment-gpupolicy-webhook.yaml" in tree
    assert set(kinds) - {"PodMonitor"} == {"ConfigMap", "PrometheusRule", *(["ServiceMonitor"] if webhook else [])}


# ----------------------------------------------------------------------------------------- exporters


def test_the_operator_runs_dcgm_exporter_with_our_counters_and_a_service_monitor_prometheus_selects(
        example_policy: Load) -> None:
    tree = compile_policy(example_policy("h20-mig"))
    values = yaml.safe_load(tree[gpu_operator.VALUES_FILE])
    config_map = yaml.safe_load(tree["dcgm-exporter/configmap.yaml"])
    dcgm = values["dcgmExporter"]
    assert dcgm["config"] == {"name": config_map["metadata"]["name"]}
    assert config_map["metadata"]["namespace"] == "gpu-operator"
    assert list(config_map["data"]) == ["dcgm-metrics.csv"]  # the key the operator mounts
    assert dcgm["serviceMonitor"] == {
        "enabled": True, "honorLabels": True, "additionalLabels": {"release": "kube-prometheus-stack"},
        "relabelings": [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                         "targetLabel": "node"}]}
    assert "hostPID" not in dcgm and "env" not in dcgm
    # a counters change renames the ConfigMap, so the operator rolls dcgm-exporter (it mounts with subPath)
    assert config_map["metadata"]["name"].startswith("gpupolicy-dcgm-metrics-")
    assert "dcgm-exporter" in yaml.safe_load(tree["kustomization.yaml"])["resources"]
    olm = compile_policy(example_policy("h20-mig", ("installer: helm ", "installer: olm ")))
    assert yaml.safe_load(olm["gpu-operator/clusterpolicy.yaml"])["spec"]["dcgmExporter"] == dcgm


@pytest.mark.parametrize("release", [r for r in operator.RELEASES if r.crd_relabels_dcgm_exporter],
                         ids=lambda r: r.version)
def test_the_dcgm_exporter_fields_are_valid_in_every_release_that_can_take_them(
        example_policy: Load, release: operator.Release) -> None:
    edits = [("      version: v25.3.0\n", f"      version: {release.version}\n")]
    if release.crd_has_dcgm_exporter_host_pid:
        edits.append(PER_POD)
    policy = example_policy("h20-mig", *edits)
    assert resolve(policy).operator_release == release
    dcgm = yaml.safe_load(compile_policy(policy)[gpu_operator.VALUES_FILE])["dcgmExporter"]
    schema = operator.crd_schema(release)["properties"]["spec"]["properties"]["dcgmExporter"]
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(dcgm)]
    assert errors == [] and undeclared(schema, dcgm) == []
    assert ("hostPID" in dcgm) == release.crd_has_dcgm_exporter_host_pid


def test_standalone_trees_leave_dcgm_exporter_alone_and_document_its_values(example_policy: Load) -> None:
    tree = compile_policy(example_policy("mixed-fleet"))
    assert not any("dcgm" in path for path in tree if path.endswith(".yaml"))
    report = tree["REPORT.md"].decode()
    section = report[report.index("## Monitoring"):report.index("## Notes")]
    values = yaml.safe_load(section.split("```yaml\n")[2].split("```")[0])
    assert values["customMetrics"] == collectors.dcgm_csv()
    assert values["hostPID"] is True and values["serviceMonitor"]["honorLabels"] is True
    assert "--metric-labels-allowlist=nodes=[node-pool," in section
    # one DaemonSet on every GPU node: it tolerates the h100-train class's taint, and keeps the chart's own
    assert values["tolerations"] == [*collectors.CHART_TOLERATIONS, {
        "key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]


def test_the_chart_keeps_its_own_tolerations_where_no_class_is_tainted(example_policy: Load) -> None:
    assert "tolerations" not in collectors.dcgm_exporter_chart_values(resolve(example_policy("tke-l20-t4")))


def test_the_counters_file_parses_as_dcgm_exporter_reads_it() -> None:
    # counters/counter_config.go: csv with '#' comments, exactly three fields, a known metric type
    rows = [r for r in csv.reader(io.StringIO(collectors.dcgm_csv())) if r and not r[0].startswith("#")]
    assert rows and all(len(r) == 3 for r in rows)
    assert {r[1].strip() for r in rows} <= {"gauge", "counter", "histogram", "summary", "label"}
    fields = [r[0] for r in rows]
    assert len(set(fields)) == len(fields)
    read = {sig.DCGM_FB_USED, sig.DCGM_FB_FREE, sig.DCGM_GPU_UTIL, sig.DCGM_SM_ACTIVE, sig.DCGM_GR_ENGINE_ACTIVE}
    assert read <= set(fields)
    assert read <= {c.field for c in collectors.DCGM_COUNTERS if c.used}


def test_the_allow_list_holds_every_node_label_the_rules_read(example_policy: Load) -> None:
    for name in EXAMPLES:
        policy = example_policy(name)
        tree = compile_policy(policy)
        text = tree["monitoring/prometheusrule-gpupolicy.yaml"].decode()
        read = set(re.findall(r"\b(label_[a-z0-9_]+)=", text))
        allowed = {sig.ksm_label(k) for k in collectors.ksm_allowlist(resolve(policy))}
        assert read <= allowed, (name, read - allowed)


def test_the_allow_list_of_the_seed_cluster(example_policy: Load) -> None:
    resolved = resolve(example_policy("tke-l20-t4"))
    # no GPU Feature Discovery standalone, no MIG: the selectors' labels are all the rules read
    assert collectors.ksm_allowlist(resolved) == ("node.kubernetes.io/instance-type", "nvidia-device-enable")


# ----------------------------------------------------------------------------------------- large fleets


def test_a_large_fleets_rules_are_split_into_objects_the_prometheus_operator_can_store(tmp_path: Path) -> None:
    tree = compile_policy(fleet(230))
    found = objects(tree, "monitoring/")
    names = sorted(p for p in found if "prometheusrule" in p)
    assert names == ["monitoring/prometheusrule-gpupolicy-classes-001.yaml",
                     "monitoring/prometheusrule-gpupolicy-classes-002.yaml",
                     "monitoring/prometheusrule-gpupolicy-classes-003.yaml",
                     "monitoring/prometheusrule-gpupolicy.yaml"]
    assert all(len(tree[p]) < 512 * 1024 for p in names)
    groups = [g for p in names for g in found[p]["spec"]["groups"]]
    assert len({g["name"] for g in groups}) == len(groups)
    recorded = [r["labels"]["class"] for g in groups for r in g["rules"] if r.get("record") == rules.NODE_CLASS]
    assert sorted(recorded) == [f"pool-{i:03d}" for i in range(230)]
    # every alert the same policy compiles as one object is there, the per-class ones once per part
    alerts = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert alerts.count("GPUPolicyNodeLabelMissing") == 3 and alerts.count("GPUPolicyAllocatableDrift") == 1
    done = check_rules(groups, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert yaml.safe_load(tree["monitoring/kustomization.yaml"])["resources"] == [p.split("/")[1] for p in
                                                                                 sorted(found)]
