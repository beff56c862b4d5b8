"""Monitoring the policy in production: a PrometheusRule, a Grafana dashboard, the webhook's ServiceMonitor and the
node-label reconciler's PodMonitor.

`render_monitoring` returns the objects of the tree's monitoring/ component (spec.monitoring.enabled);
`render_dcgm_metrics` the dcgm-exporter counters ConfigMap the GPU Operator mounts, with the ClusterPolicy
fields that point at it (deploy: gpu-operator only: elsewhere the spec does not own dcgm-exporter, and
REPORT.md documents what to configure instead). Modules: `promql` (expressions as data), `signals` (the
exporters' series and label conventions), `modes` (what to watch per sharing mode), `rules` (recording rules
and the alert catalogue), `dashboard`, `collectors` (exporter configuration).
"""

from __future__ import annotations

import json

from compiler import objects
from compiler.objects import Obj
from compiler.targets import admission_webhook, node_labels
from compiler.targets.monitoring import collectors, dashboard, rules
from compiler.targets.monitoring.promql import render_lines
from policy.resolved.resolve import ResolvedPolicy

__all__ = ["COMPONENT", "dcgm_exporter_fields", "render_dcgm_metrics", "render_monitoring"]

COMPONENT = "monitoring"
RULE_NAME = "gpupolicy"
DASHBOARD_CONFIG_MAP = "gpupolicy-dashboard"
PROMETHEUS_API_VERSION = "monitoring.coreos.com/v1"
CLASSES_PER_RULE = 100
METRICS_PATH = "/metrics"


def render_monitoring(resolved: ResolvedPolicy) -> list[Obj]:
    """The PrometheusRule, the dashboard ConfigMap (unless disabled) and, with admission, the webhook's
    ServiceMonitor; empty when monitoring is off."""
    settings = resolved.spec.monitoring
    if not settings.enabled:
        return []
    ctx = rules.Context(resolved)
    out = _prometheus_rules(ctx)
    if settings.dashboard.enabled:
        out.append(_dashboard_config_map(ctx))
    if ctx.admission:
        out.append(_webhook_service_monitor(ctx))
    if rules.reconciler_runs(resolved):
        out.append(_reconciler_pod_monitor(ctx))
    return out


def render_dcgm_metrics(resolved: ResolvedPolicy) -> Obj | None:
    """dcgm-exporter's counters as a content-named ConfigMap in the operator's namespace; None unless monitoring
    with dcgm-exporter is on and the GPU Operator runs it. Content-named: the operator mounts the file with
    subPath, which never sees an edit of the same ConfigMap; a new name in the ClusterPolicy rolls the exporter."""
    spec = resolved.spec
    if not (spec.monitoring.enabled and spec.monitoring.dcgm_exporter.enabled
            and spec.device_plugin.deploy == "gpu-operator"):
        return None
    return objects.config_map(collectors.DCGM_CONFIG_MAP, {collectors.DCGM_CSV_KEY: collectors.dcgm_csv()},
                              namespace=spec.device_plugin.operator.namespace,
                              labels=objects.labels(resolved.policy, "dcgm-exporter"))


def dcgm_exporter_fields(resolved: ResolvedPolicy, config_map: str) -> dict[str, object]:
    """The ClusterPolicy's (or the operator chart's) dcgmExporter fields that mount that ConfigMap."""
    return collectors.cluster_policy_fields(resolved, config_map)


def _namespace(ctx: rules.Context) -> str:
    return ctx.settings.namespace or ctx.webhook_namespace


def _metadata(ctx: rules.Context, name: str, namespace: str, extra_labels: dict[str, str],
              annotations: dict[str, str] | None = None) -> Obj:
    labels = objects.labels(ctx.resolved.policy, COMPONENT, **extra_labels)
    return objects.metadata(name, namespace=namespace, labels=labels,
                            annotations={objects.SYNC_WAVE: objects.SYNC_WAVE_MONITORING, **(annotations or {})})


def _prometheus_rules(ctx: rules.Context) -> list[Obj]:
    """One PrometheusRule; for a fleet of more than CLASSES_PER_RULE classes, the rules written class by class
    go to further objects of at most that many classes each, so that no object nears the 1 MiB the Prometheus
    Operator can put into one rule ConfigMap (about 2 KiB per class)."""
    classes = [c.name for c in ctx.classes]
    if len(classes) <= CLASSES_PER_RULE:
        groups = {rules.RECORDING_GROUP: [_recording(rec) for rec in rules.recording_rules(ctx)]}
        return [_rule_object(ctx, RULE_NAME, _with_alerts(ctx, groups, None))]
    groups = {f"{rules.RECORDING_GROUP}.devices": [_recording(rec) for rec in rules.device_recordings(ctx)]}
    out = [_rule_object(ctx, RULE_NAME, _with_alerts(ctx, groups, False))]
    for start in range(0, len(classes), CLASSES_PER_RULE):
        part = f"{start // CLASSES_PER_RULE + 1:03d}"
        scoped = rules.Context(ctx.resolved, tuple(classes[start:start + CLASSES_PER_RULE]))
        groups = {f"{rules.RECORDING_GROUP}.{part}": [_recording(rec) for rec in rules.class_recordings(scoped)]}
        out.append(_rule_object(ctx, f"{RULE_NAME}-classes-{part}", _with_alerts(scoped, groups, True, part)))
    return out


def _with_alerts(ctx: rules.Context, groups: dict[str, list[Obj]], per_class: bool | None,
                 part: str | None = None) -> dict[str, list[Obj]]:
    for alert in rules.alerts(ctx, per_class=per_class):
        name = alert.group if part is None else f"{alert.group}.{part}"
        groups.setdefault(name, []).append(_alert(ctx, alert))
    return groups


def _rule_object(ctx: rules.Context, name: str, groups: dict[str, list[Obj]]) -> Obj:
    return {
        "apiVersion": PROMETHEUS_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": _metadata(ctx, name, _namespace(ctx), dict(ctx.settings.labels)),
        "spec": {"groups": [{"name": group, "rules": items} for group, items in groups.items() if items]},
    }


def _recording(rec: rules.Recording) -> Obj:
    out: Obj = {"record": rec.record, "expr": render_lines(rec.expr)}
    if rec.labels:
        out["labels"] = dict(rec.labels)
    return out


def _alert(ctx: rules.Context, alert: rules.Alert) -> Obj:
    out: Obj = {
        "alert": alert.name,
        "expr": render_lines(alert.expr),
        "labels": {"severity": alert.severity},
        "annotations": {"summary": alert.summary, "description": alert.description,
                        "runbook_url": rules.runbook_url(ctx.settings, alert.name)},
    }
    if alert.for_:
        out["for"] = alert.for_
    return out


def _dashboard_config_map(ctx: rules.Context) -> Obj:
    board = ctx.settings.dashboard
    text = json.dumps(dashboard.render_dashboard(ctx), indent=2, sort_keys=True) + "\n"
    # A fixed name, not content-named like the others: the Grafana sidecar reloads a changed ConfigMap, and
    # an old copy left behind would load a second dashboard with the same uid.
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(ctx, DASHBOARD_CONFIG_MAP, _namespace(ctx), dict(board.labels), dict(board.annotations)),
        "data": {f"gpupolicy-{ctx.resolved.name}.json": text},
    }


def _webhook_service_monitor(ctx: rules.Context) -> Obj:
    """The webhook serves /metrics in plain HTTP on a port of its own, which its Service names and its
    NetworkPolicy opens to every pod (admission_webhook.METRICS_PORT)."""
    return _monitor(ctx, "ServiceMonitor", admission_webhook.NAME, "endpoints", {"port": "metrics",
                                                                                "path": METRICS_PATH})


def _reconciler_pod_monitor(ctx: rules.Context) -> Obj:
    """The node-label reconciler serves /metrics on a named container port and has no Service: a PodMonitor."""
    return _monitor(ctx, "PodMonitor", node_labels.NAME, "podMetricsEndpoints", {"port": "metrics",
                                                                                 "path": METRICS_PATH})


def _monitor(ctx: rules.Context, kind: str, app: str, endpoints: str, endpoint: Obj) -> Obj:
    """A ServiceMonitor or PodMonitor named after the app it scrapes, in the webhook's namespace, where the
    webhook and the reconciler run, selecting it by its app.kubernetes.io/name."""
    namespace = ctx.webhook_namespace
    return {
        "apiVersion": PROMETHEUS_API_VERSION,
        "kind": kind,
        "metadata": _metadata(ctx, app, namespace, dict(ctx.settings.labels)),
        "spec": {
            "selector": {"matchLabels": {admission_webhook.NAME_LABEL: app}},
            "namespaceSelector": {"matchNames": [namespace]},
            endpoints: [endpoint],
        },
    }
