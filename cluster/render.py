"""A verification rendered as text (grouped by class, then node or object) or as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable

from cluster.findings import Finding
from cluster.verify import ClassStatus, Verification

REPORT_VERSION = 1
_KINDS = {"node": "node", "daemonset": "DaemonSet", "configmap": "ConfigMap", "pod": "Pod", "deployment": "Deployment"}
_WORKLOADS = ("pod/", "deployment/")


def render_text(result: Verification) -> str:
    lines = [
        f"Cluster {result.context} ({result.server}) against policy {result.cluster}: {result.nodes} nodes, "
        f"{result.gpu_nodes} with GPUs, {len(result.classes)} classes.",
        "",
    ]
    for status in result.classes:
        mine = [f for f in result.findings if f.node_class == status.name]
        lines.append(_class_header(status, mine))
        if status.mig_states:
            lines.append("  MIG config state: " + ", ".join(s.describe() for s in status.mig_states))
        lines += _grouped(mine)
    cluster = [f for f in result.findings if not f.node_class and not f.subject.startswith(_WORKLOADS)]
    workloads = [f for f in result.findings if not f.node_class and f.subject.startswith(_WORKLOADS)]
    for title, found in (("cluster-wide", cluster), ("Pending GPU pods and the rollouts they block", workloads)):
        if found:
            lines += [title, *_grouped(found)]
    lines += ["", _summary(result)]
    return "\n".join(lines) + "\n"


def _class_header(status: ClassStatus, found: list[Finding]) -> str:
    nodes = f"{len(status.nodes)} node{'s' if len(status.nodes) != 1 else ''}"
    if status.expected_nodes is not None and status.expected_nodes != len(status.nodes):
        nodes += f" (spec: {status.expected_nodes})"
    supply = ", ".join(f"{resource} {advertised} of {status.promised_total(resource)} advertised"
                       for resource, advertised in status.advertised)
    verdict = "agrees" if not any(f.severity == "error" for f in found) else _counts(found)
    return f"class {status.name}: {nodes}" + (f", {supply}" if supply and status.nodes else "") + f": {verdict}"


def _grouped(found: Iterable[Finding]) -> list[str]:
    by_subject: dict[str, list[Finding]] = {}
    for finding in found:
        by_subject.setdefault(finding.subject, []).append(finding)
    lines = []
    for subject, items in by_subject.items():
        indent = "    " if subject else "  "
        if subject:
            lines.append(f"  {_subject(subject)}")
        for f in items:
            lines.append(f"{indent}{f.severity}[{f.code}]: {f.message}")
            lines += [f"{indent}    {detail}" for detail in f.details]
            if f.hint:
                lines.append(f"{indent}    hint: {f.hint}")
    return lines


def _subject(subject: str) -> str:
    kind, _, name = subject.partition("/")
    return f"{_KINDS.get(kind, kind)} {name}"


def _counts(found: Iterable[Finding]) -> str:
    found = list(found)
    errors = sum(1 for f in found if f.severity == "error")
    warnings = sum(1 for f in found if f.severity == "warning")
    parts = [f"{errors} error{'s' if errors != 1 else ''}"]
    if warnings:
        parts.append(f"{warnings} warning{'s' if warnings != 1 else ''}")
    return ", ".join(parts)


def _summary(result: Verification) -> str:
    if result.agrees:
        tail = "" if not result.count("warning") else f" ({_counts(result.findings)})"
        return f"The cluster agrees with policy {result.cluster}{tail}."
    return f"{_counts(result.findings)}: the cluster differs from policy {result.cluster}."


def render_json(result: Verification, exit_code: int) -> str:
    document = {
        "version": REPORT_VERSION,
        "cluster": result.cluster,
        "context": result.context,
        "server": result.server,
        "takenAt": result.taken_at.isoformat(),
        "summary": {
            "nodes": result.nodes,
            "gpuNodes": result.gpu_nodes,
            "errors": result.count("error"),
            "warnings": result.count("warning"),
            "agrees": result.agrees,
            "labelsChecked": result.labels_checked,
            "exitCode": exit_code,
        },
        "classes": [
            {
                "name": s.name,
                "nodes": list(s.nodes),
                "expectedNodes": s.expected_nodes,
                "promisedPerNode": dict(s.promised_per_node),
                "advertised": dict(s.advertised),
                "migState": [{"node": m.node, "config": m.config, "state": m.state, "forSeconds": m.seconds}
                             for m in s.mig_states],
                "agrees": not any(f.severity == "error" for f in result.findings if f.node_class == s.name),
            }
            for s in result.classes
        ],
        "findings": [as_dict(f) for f in result.findings],
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def as_dict(finding: Finding) -> dict[str, object]:
    return {
        "code": finding.code,
        "severity": finding.severity,
        "message": finding.message,
        "hint": finding.hint,
        "class": finding.node_class or None,
        "subject": finding.subject or None,
        "details": list(finding.details),
    }
