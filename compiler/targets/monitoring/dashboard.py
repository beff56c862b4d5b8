"""The Grafana dashboard: the cluster at a glance, admission, and one row per node class.

A dashboard JSON model (schemaVersion 41, Grafana 11/12) with a Prometheus data-source variable, built as data
and checked in tests against the model as Grafana documents it (schemas/grafana-dashboard.schema.json).
Every query reads the recording rules of rules.py, so a class's row shows exactly the expectations the alerts
compare against: slots before and after, allocation, memory per slot against its budget, SM activity, and the
node labels that carry the sharing and MIG state.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from compiler.targets.monitoring import modes
from compiler.targets.monitoring import rules as r
from compiler.targets.monitoring import signals as sig
from compiler.targets.monitoring.promql import (
    RATE_INTERVAL,
    Expr,
    Matcher,
    aggregate,
    and_,
    call,
    cmp,
    div,
    eq,
    mul,
    ne,
    number,
    render,
    sel,
)
from policy.resolved.resolve import ResolvedClass

Obj = dict[str, Any]
SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
UID_LENGTH = 40  # Grafana's limit on dashboard uids
#: Rows beyond this many classes start collapsed: Grafana queries a collapsed row's panels only when opened.
EXPANDED_CLASSES = 4
#: Beyond this many classes one row, repeated by Grafana for each value of a `class` variable, replaces the rows
#: written out per class: the dashboard keeps one size (a ConfigMap holds at most 1 MiB, some 70 written-out
#: rows), and what is particular to a class comes from its recorded expectations.
STATIC_ROWS = 16
CLASS_VARIABLE = "class"

_DEVICE_LEGEND = "{{node}} GPU {{gpu}} {{GPU_I_PROFILE}}"
_POD_LEGEND = "{{namespace}}/{{pod}}"
_DCGM_NOTES = (
    "DCGM reports per GPU, or per MIG instance (GPU_I_PROFILE), not per pod, unless dcgm-exporter runs with "
    "virtual GPUs (4.5.3-4.8.2 or newer), which adds per-pod memory and, off MIG, SM utilization. With "
    "honorLabels false on its ServiceMonitor, pod labels arrive as exported_pod and the per-pod series are empty."
)


def dashboard_uid(cluster: str) -> str:
    """A stable uid per cluster within Grafana's 40 characters."""
    uid = f"gpupolicy-{cluster}"
    if len(uid) <= UID_LENGTH:
        return uid
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:8]
    return f"{uid[:UID_LENGTH - 9]}-{digest}"


@dataclass
class _Grid:
    """Places panels left to right in rows of 24 columns, numbering them, under the current row panel."""

    panels: list[Obj] = field(default_factory=list)
    next_id: int = 1
    x: int = 0
    y: int = 0
    line_height: int = 0
    row: Obj | None = None

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _newline(self) -> None:
        self.y += self.line_height
        self.x, self.line_height = 0, 0

    def add_row(self, title: str, *, collapsed: bool = False, repeat: str | None = None) -> None:
        self._newline()
        row: Obj = {"type": "row", "id": self._id(), "title": title, "collapsed": collapsed, "panels": [],
                    "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": self.y}}
        if repeat is not None:
            row["repeat"] = repeat
        self.panels.append(row)
        self.row = row if collapsed else None
        self.y += 1

    def add(self, panel: Obj, width: int, height: int) -> None:
        if self.x + width > GRID_WIDTH:
            self._newline()
        panel = {"id": self._id(), **panel, "gridPos": {"h": height, "w": width, "x": self.x, "y": self.y}}
        (self.row["panels"] if self.row is not None else self.panels).append(panel)
        self.x += width
        self.line_height = max(self.line_height, height)


def _target(ref: str, expr: Expr, legend: str | None = None, *, table: bool = False) -> Obj:
    target: Obj = {"datasource": DATASOURCE, "editorMode": "code", "expr": render(expr), "refId": ref,
                   "range": not table, "instant": table}
    if legend is not None:
        target["legendFormat"] = legend
    if table:
        target["format"] = "table"
    return target


def _targets(*queries: tuple[Expr, str | None]) -> list[Obj]:
    return [_target(chr(ord("A") + i), expr, legend) for i, (expr, legend) in enumerate(queries)]


def _defaults(unit: str, minimum: float | None = None, maximum: float | None = None) -> Obj:
    defaults: Obj = {"unit": unit}
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return defaults


def _timeseries(title: str, description: str, targets: list[Obj], unit: str, *, minimum: float | None = 0,
                maximum: float | None = None) -> Obj:
    defaults = _defaults(unit, minimum, maximum)
    defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "showPoints": "never"}
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DATASOURCE,
        "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def _stat(title: str, description: str, targets: list[Obj], unit: str = "short") -> Obj:
    return {
        "type": "stat", "title": title, "description": description, "datasource": DATASOURCE,
        "targets": targets, "fieldConfig": {"defaults": _defaults(unit), "overrides": []},
        "options": {"graphMode": "none", "colorMode": "none", "justifyMode": "auto", "textMode": "value_and_name",
                    "wideLayout": True, "showPercentChange": False, "percentChangeColorMode": "standard",
                    "orientation": "horizontal",
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
    }


def _table(title: str, description: str, expr: Expr) -> Obj:
    hidden = {name: True for name in ("Time", "Value", "__name__", "job", "instance", "endpoint", "service",
                                      "container", "namespace", "pod", "class", "sharing")}
    return {
        "type": "table", "title": title, "description": description, "datasource": DATASOURCE,
        "targets": [_target("A", expr, table=True)], "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"frameIndex": 0, "showHeader": True, "cellHeight": "sm"},
        "transformations": [{"id": "organize", "options": {"excludeByName": hidden}}],
    }


@dataclass(frozen=True)
class _ClassRow:
    """A class's row: its name in queries (or the repeated row's variable) and what the compiler knows of it."""

    name: str
    title: str
    labels_title: str
    isolation: str
    per_pod_activity: bool
    """dcgm-exporter reports per-pod SM utilization for these GPUs (never for MIG instances)."""


def _static_row(c: ResolvedClass) -> _ClassRow:
    offers = ", ".join(f"{o.per_node} {o.resource}" for o in c.offers)
    return _ClassRow(c.name, f"{c.name}: {c.gpu_count} x {c.product}, {c.mode_name} ({offers} per node)",
                     "MIG state" if c.mig_config is not None else "Node labels", modes.watch(c).isolation,
                     c.mig_strategy == "none")


_REPEATED_ROW = _ClassRow(f"${CLASS_VARIABLE}", f"${CLASS_VARIABLE}", "Node labels and MIG state",
                          "as the class's sharing mode allows (REPORT.md, Per class)", True)


# ----------------------------------------------------------------------------------------- queries


def _nodes_of(name: str) -> Expr:
    return sel(r.NODE_CLASS, eq("class", name))


def _on_nodes(e: Expr, name: str | None = None) -> Expr:
    """``e`` kept on the nodes of one class, or of any class."""
    nodes = _nodes_of(name) if name else sel(r.NODE_CLASS)
    return mul(e, nodes, on=("node",), group_left=())


def _advertised(name: str | None = None) -> Expr:
    return _on_nodes(aggregate("max", sig.nvidia(sig.KSM_ALLOCATABLE), ("node", "resource")), name)


def _rate(metric: str, *matchers: Matcher) -> Expr:
    return call("rate", sel(metric, *matchers).over(RATE_INTERVAL))


def _before(name: str | None = None) -> Expr:
    """Whole GPUs on the nodes of one class (or of every class), from the GPUs per node it records."""
    nodes = aggregate("count", _nodes_of(name) if name else sel(r.NODE_CLASS), ("class",))
    gpus = sel(r.CLASS_GPUS_PER_NODE, eq("class", name)) if name else sel(r.CLASS_GPUS_PER_NODE)
    return aggregate("sum", mul(nodes, gpus, on=("class",)))


def _slots_panel(row: _ClassRow) -> Obj:
    return _stat("Slots before / after", (
        "before: whole GPUs on the class's nodes; compiled: what every node should advertise once its config "
        "is live; advertised: what the nodes advertise now. compiled and advertised differ while a config rolls "
        "out, and GPUPolicyAllocatableDrift fires if they stay apart."), _targets(
        (_before(row.name), "before"),
        (aggregate("sum", sel(r.EXPECTED_ALLOCATABLE, eq("class", row.name))), "compiled"),
        (aggregate("sum", _advertised(row.name)), "advertised"),
        (aggregate("count", _nodes_of(row.name)), "nodes"),
    ))


def _allocation_panel(row: _ClassRow) -> Obj:
    running = cmp(sel(sig.KSM_POD_PHASE, eq("phase", "Running")), "==", number(1))
    requested = _on_nodes(and_(sig.nvidia(sig.KSM_POD_REQUESTS), running, on=("namespace", "pod")), row.name)
    return _timeseries("Allocation", "Slots requested by running pods against slots the class's nodes advertise, "
                       "per resource.", _targets(
                           (aggregate("sum", requested, ("resource",)), "{{resource}} requested"),
                           (aggregate("sum", _advertised(row.name), ("resource",)), "{{resource}} advertised"),
                       ), "short")


def _memory_panel(row: _ClassRow, per_pod: bool) -> Obj:
    per_slot = div(sel(r.GPU_MEMORY_USED, eq("class", row.name)), sel(r.CLASS_REPLICAS, eq("class", row.name)),
                   on=("class", "GPU_I_PROFILE"), group_left=())
    queries: list[tuple[Expr, str | None]] = [
        (per_slot, f"{_DEVICE_LEGEND} per slot"),
        (sel(r.CLASS_SLOT_MEMORY, eq("class", row.name)), "budget {{resource}} {{GPU_I_PROFILE}}"),
    ]
    if per_pod:
        queries.append((sel(r.POD_MEMORY_USED, eq("class", row.name)), _POD_LEGEND))
    return _timeseries("Memory per slot against its budget", (
        "Device memory in use divided by its replicas, against the memory per slot the class was sized for "
        f"(its budget). Isolation: {row.isolation}. {_DCGM_NOTES}"), _targets(*queries), "mbytes")


def _activity_panel(row: _ClassRow, per_pod: bool) -> Obj:
    queries: list[tuple[Expr, str | None]] = [(sel(r.GPU_SM_ACTIVE, eq("class", row.name)), _DEVICE_LEGEND)]
    if per_pod and row.per_pod_activity:
        queries.append((sel(r.POD_UTILIZATION, eq("class", row.name)), f"{_POD_LEGEND} SM utilization"))
    return _timeseries("SM activity", (
        "Share of cycles the SMs have work (DCGM_FI_PROF_SM_ACTIVE, or the graphics engine's activity where "
        "the counters file leaves SM activity off). Memory in use is not GPU use: a device holding memory with "
        f"idle SMs is waste (GPUPolicyIdleGPUMemory). GPU_UTIL is not reported for MIG instances. {_DCGM_NOTES}"),
        _targets(*queries), "percentunit", maximum=1)


def _labels_panel(row: _ClassRow) -> Obj:
    return _table(row.labels_title, (
        "The class's nodes with the labels kube-state-metrics exports (its --metric-labels-allowlist): the "
        "selector, GPU Feature Discovery's product and replicas, and mig-manager's nvidia.com/mig.config and "
        "nvidia.com/mig.config.state (pending, rebooting, success, failed)."),
        _on_nodes(sel(sig.KSM_NODE_LABELS), row.name))


def _class_panels(grid: _Grid, ctx: r.Context, row: _ClassRow) -> None:
    grid.add(_slots_panel(row), 6, 8)
    grid.add(_allocation_panel(row), 9, 8)
    grid.add(_labels_panel(row), 9, 8)
    if ctx.dcgm:
        grid.add(_memory_panel(row, ctx.per_pod), 12, 8)
        grid.add(_activity_panel(row, ctx.per_pod), 12, 8)


def _class_rows(grid: _Grid, ctx: r.Context) -> None:
    if len(ctx.classes) > STATIC_ROWS:
        grid.add_row(_REPEATED_ROW.title, repeat=CLASS_VARIABLE)
        _class_panels(grid, ctx, _REPEATED_ROW)
        return
    collapsed = len(ctx.classes) > EXPANDED_CLASSES
    for c in ctx.classes:
        row = _static_row(c)
        grid.add_row(row.title, collapsed=collapsed)
        _class_panels(grid, ctx, row)


def _cluster_row(grid: _Grid, ctx: r.Context) -> None:
    grid.add_row(f"Cluster {ctx.resolved.name}")
    grid.add(_stat("GPU slots", "All classes: whole GPUs before sharing, slots the compiled configs promise, "
                   "and slots the nodes advertise now.", _targets(
                       (_before(), "before"),
                       (aggregate("sum", sel(r.EXPECTED_ALLOCATABLE)), "compiled"),
                       (aggregate("sum", _advertised()), "advertised"),
                   )), 8, 6)
    firing = sel("ALERTS", Matcher("alertname", "=~", "GPUPolicy.+"), eq("alertstate", "firing"))
    grid.add(_stat("Firing alerts", "gpupolicy alerts firing now, by severity.",
                   _targets((aggregate("sum", firing, ("severity",)), "{{severity}}"))), 6, 6)
    grid.add(_table("GPU nodes outside every class", "Nodes with NVIDIA GPUs no class selects "
                    "(GPUPolicyUnmanagedGPUNode).", r.unmanaged_nodes(ctx)), 10, 6)


def _admission_row(grid: _Grid, ctx: r.Context) -> None:
    grid.add_row("Admission")
    namespace = eq("namespace", ctx.webhook_namespace)
    names = r.webhook_names(ctx)
    grid.add(_timeseries("Decisions", "Reviews answered per second, by rule and outcome (gpupolicy's own "
                         "metrics).", _targets((aggregate("sum", _rate(sig.WEBHOOK_DECISIONS, namespace),
                                                          ("rule", "outcome")), "{{rule}} {{outcome}}")),
                         "reqps"), 8, 8)

    def p99(metric: str, *matchers: Matcher) -> Expr:
        return call("histogram_quantile", number(0.99), aggregate("sum", _rate(metric, *matchers), ("le",)))

    grid.add(_timeseries("Latency p99", (
        "As the API server measures it (network and TLS included; its buckets cannot resolve below 5 ms) and "
        "as the webhook measures it."), _targets(
            (p99(sig.APISERVER_WEBHOOK_DURATION, names, eq("type", "validating")), "API server"),
            (p99(sig.WEBHOOK_DURATION, namespace), "webhook"),
        ), "s"), 8, 8)
    grid.add(_timeseries("Failed and ignored calls", (
        "Calls the API server could not complete (error_type), calls it ignored under failurePolicy Ignore, and "
        "connections the webhook dropped before a request reached it, by reason (timeout, malformed, too-large, "
        "busy, connection-limit)."), _targets(
            (aggregate("sum", _rate(sig.APISERVER_WEBHOOK_REJECTIONS, names, ne("error_type", "no_error")),
                       ("name", "error_type")), "{{name}} {{error_type}}"),
            (aggregate("sum", _rate(sig.APISERVER_WEBHOOK_FAIL_OPEN, names), ("name",)), "{{name}} ignored"),
            (aggregate("sum", _rate(sig.WEBHOOK_DROPPED_CONNECTIONS, namespace), ("reason",)), "dropped: {{reason}}"),
        ), "reqps"), 8, 8)


def _variables(ctx: r.Context) -> list[Obj]:
    found: list[Obj] = [{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                         "hide": 0}]
    if len(ctx.classes) > STATIC_ROWS:
        found.append({"name": CLASS_VARIABLE, "label": "Node class", "type": "query", "datasource": DATASOURCE,
                      "query": f"label_values({r.NODE_CLASS}, class)", "refresh": 1, "sort": 1, "multi": True,
                      "includeAll": True, "hide": 0})
    return found


def render_dashboard(ctx: r.Context) -> Obj:
    """The dashboard JSON model of one cluster."""
    grid = _Grid()
    _cluster_row(grid, ctx)
    if ctx.admission:
        _admission_row(grid, ctx)
    _class_rows(grid, ctx)
    return {
        "uid": dashboard_uid(ctx.resolved.name),
        "title": f"GPU sharing: {ctx.resolved.name}",
        "description": "Generated by gpupolicy compile from the cluster spec; edit the spec, not this dashboard.",
        "tags": ["gpupolicy", "gpu"],
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "browser",
        "templating": {"list": _variables(ctx)},
        "annotations": {"list": []},
        "links": [],
        "panels": grid.panels,
    }
