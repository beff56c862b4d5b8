"""`gpupolicy cluster audit`'s outputs: text, JSON, GitHub annotations, and PolicyReport (or OpenReports) YAML."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policy.audit.reports import Options
    from policy.audit.scan import Audit, Result
    from policy.resolved.offers import AdmissionPolicy



def render(output: str, audit: Audit, policy: AdmissionPolicy, options: Options) -> str:
    """The audit in the chosen output; ``options`` (fail-only, the cap) apply to every output."""
    if output in ("policy-report", "openreports"):
        from compiler.serialize import dump_yaml
        from policy.audit.reports import build_reports

        flavor = "openreports" if output == "openreports" else "wgpolicy"
        reports = build_reports(audit, policy, replace(options, flavor=flavor))
        return "".join("---\n" + dump_yaml(r).decode() for r in reports)
    shown, total = _shown(audit, options)
    if output == "json":
        return _json(audit, policy, shown, total)
    if output == "github":
        return _github(shown)
    return _text(shown, total)


def _shown(audit: Audit, options: Options) -> tuple[list[Result], int]:
    chosen = [r for r in audit.results if not options.fail_only or r.outcome in ("fail", "warn")]
    return chosen[: max(options.max_results, 0)], len(chosen)


def _text(shown: list[Result], total: int) -> str:
    lines = []
    for r in shown:
        folded = f" (+{len(r.folded)} owned object(s) with the same verdict)" if r.folded else ""
        tenants = ", ".join(r.tenants) or "default rules"
        lines.append(f"{r.outcome.upper()} {r.ref.subject} [tenants: {tenants}]{folded}")
        lines.extend(f"  [{d.code}] {d.message}" + (f"\n    fix: {d.hint}" if d.hint else "")
                     for d in r.diagnostics)
    if total > len(shown):
        lines.append(f"... {total - len(shown)} more result(s) not shown (--max-results {len(shown)})")
    return "\n".join(lines) + ("\n" if lines else "")


def _json(audit: Audit, policy: AdmissionPolicy, shown: list[Result], total: int) -> str:
    from policy.audit.reports import policy_hash
    from policy.spec.diagnostics import format_path

    def one(r: Result) -> dict[str, Any]:
        return {
            "apiVersion": r.ref.api_version, "kind": r.ref.kind, "name": r.ref.name, "namespace": r.ref.namespace,
            "uid": r.ref.uid, "result": r.outcome, "tenants": list(r.tenants),
            "folded": [{"kind": f.kind, "name": f.name, "uid": f.uid} for f in r.folded],
            "findings": [{"rule": d.code, "severity": d.severity, "message": d.message, "path": format_path(d.path),
                          "hint": d.hint} for d in r.diagnostics],
        }

    document = {"policy": policy.cluster, "policyHash": policy_hash(policy), "objects": audit.objects,
                "summary": audit.counts(), "total": total, "truncated": total > len(shown),
                "results": [one(r) for r in shown]}
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def _github(shown: list[Result]) -> str:
    from cli.reporters import Report, render_github

    report = Report(diagnostics=[replace(d, message=f"{r.ref.subject}: {d.message}", path=(), span=None, fix=None)
                                 for r in shown for d in r.diagnostics])
    return render_github(report)
