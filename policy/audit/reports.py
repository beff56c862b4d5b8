"""An audit as PolicyReport objects: wg-policy ``wgpolicyk8s.io/v1alpha2`` or OpenReports ``openreports.io/v1alpha1``.

The shape follows the CRDs pinned in tests/fixtures/policy-reports (kubernetes-sigs/wg-policy-prototypes
policy-report/crd/v1alpha2 @25056e1, openreports/reports-api config/crd @v0.2.1): one namespaced report per
namespace with results, one cluster-scoped report for objects without a namespace; ``summary`` counts every result
even where ``results`` is capped; ``properties`` values are strings (the CRD's additionalProperties type). Every
report carries the policy's hash in a label, so a report older than the policy in force can be listed with
``kubectl get polr -A -l gpupolicy.dev/policy-hash!=<hash>``. No timestamps: the same audit gives the same objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from policy.audit.scan import Audit, ObjectRef, Outcome, Result
from policy.resolved.offers import AdmissionPolicy
from policy.spec.diagnostics import Diagnostic, format_path, shorten

Flavor = Literal["wgpolicy", "openreports"]
API_VERSIONS: dict[Flavor, tuple[str, str, str]] = {
    # (apiVersion, namespaced kind, cluster-scoped kind)
    "wgpolicy": ("wgpolicyk8s.io/v1alpha2", "PolicyReport", "ClusterPolicyReport"),
    "openreports": ("openreports.io/v1alpha1", "Report", "ClusterReport"),
}
SOURCE = "gpupolicy"
HASH_LABEL = "gpupolicy.dev/policy-hash"
POLICY_LABEL = "gpupolicy.dev/cluster"
TRUNCATED_ANNOTATION = "gpupolicy.dev/results-truncated"
#: Results per report unless told otherwise: ~1 KiB each, so a report stays far below etcd's 1.5 MiB request
#: limit (kube-apiserver --max-request-bytes default); the summary still counts them all (docs/audit.md).
DEFAULT_MAX_RESULTS = 500
MAX_MESSAGE_CHARS = 1024
_SEVERITY = {"error": "high", "warning": "medium", "info": "low"}
_RESULT: dict[str, Outcome] = {"error": "fail", "warning": "warn", "info": "warn"}
PASS_RULE = "admission-rules"
"""The rule name of a pass result: the engine says the workload passes every rule, not one by one."""


@dataclass(frozen=True)
class Options:
    flavor: Flavor = "wgpolicy"
    fail_only: bool = False
    """Leave pass and skip results out (the summary still counts them)."""
    max_results: int = DEFAULT_MAX_RESULTS
    """Results kept per report; 0: none (summary only)."""


def policy_hash(policy: AdmissionPolicy) -> str:
    """Sixteen hex characters of sha256 over the admission policy document: what the verdicts depend on."""
    return hashlib.sha256(policy.to_json().encode()).hexdigest()[:16]


def build_reports(result: Audit, policy: AdmissionPolicy, options: Options = Options()) -> list[dict[str, Any]]:
    """One namespaced report per namespace with results (sorted), then the cluster-scoped report (always, so
    every run leaves a report with the current hash, even on a cluster without GPU workloads)."""
    digest = policy_hash(policy)
    by_namespace: dict[str, list[Result]] = {}
    for r in result.results:
        by_namespace.setdefault(r.ref.namespace, []).append(r)
    cluster_scoped = by_namespace.pop("", [])
    out = [_report(results, policy.cluster, digest, options, namespace=ns)
           for ns, results in sorted(by_namespace.items())]
    out.append(_report(cluster_scoped, policy.cluster, digest, options, namespace=None))
    return out


def report_name(cluster: str) -> str:
    return f"gpupolicy-{cluster}"


def _report(results: list[Result], cluster: str, digest: str, options: Options,
            namespace: str | None) -> dict[str, Any]:
    api_version, namespaced, cluster_kind = API_VERSIONS[options.flavor]
    entries = [e for r in results for e in _entries(r, cluster)]
    summary = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for e in entries:
        summary[e["result"]] += 1
    kept = [e for e in entries if not options.fail_only or e["result"] in ("fail", "warn")]
    metadata: dict[str, Any] = {
        "name": report_name(cluster),
        "labels": {"app.kubernetes.io/managed-by": SOURCE, POLICY_LABEL: cluster, HASH_LABEL: digest},
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    if len(kept) > options.max_results:
        metadata["annotations"] = {TRUNCATED_ANNOTATION: f"{options.max_results} of {len(kept)} results kept"}
    report: dict[str, Any] = {
        "apiVersion": api_version, "kind": namespaced if namespace is not None else cluster_kind,
        "metadata": metadata, "summary": summary, "results": kept[: max(options.max_results, 0)],
    }
    if options.flavor == "openreports":
        report["source"] = SOURCE
    return report


def _entries(r: Result, cluster: str) -> Iterable[dict[str, Any]]:
    """The report results of one workload: one per finding, or one pass (or skip)."""
    resources = [_reference(r.ref)]
    common = {"tenants": ",".join(r.tenants) or "(default rules)", "folded": str(len(r.folded))}
    if not r.diagnostics:
        yield {"policy": cluster, "rule": PASS_RULE, "result": "pass", "severity": "info", "source": SOURCE,
               "message": f"{r.ref.subject} passes every admission rule of the policy", "resources": resources,
               "properties": common}
        return
    for d in r.diagnostics:
        outcome: Outcome = "skip" if r.outcome == "skip" else _RESULT[d.severity]
        yield {"policy": cluster, "rule": d.code, "result": outcome, "severity": _SEVERITY[d.severity],
               "source": SOURCE, "message": shorten(d.message, MAX_MESSAGE_CHARS), "resources": resources,
               "properties": {**common, **_finding_properties(d)}}


def _finding_properties(d: Diagnostic) -> dict[str, str]:
    out = {"path": format_path(d.path)} if d.path else {}
    if d.hint:
        out["fix"] = shorten(d.hint, MAX_MESSAGE_CHARS)
    return out


def _reference(ref: ObjectRef) -> dict[str, str]:
    out = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
    if ref.namespace:
        out["namespace"] = ref.namespace
    if ref.uid:
        out["uid"] = ref.uid
    return out


# --- writing the reports to the cluster (the in-cluster audit): what to apply and what to delete -----------------

#: The field manager of every report write (server-side apply): the reports' fields are this tool's alone.
FIELD_MANAGER = "gpupolicy-audit"
#: kind -> (API group, plural, namespaced): what RBAC rules and REST paths name.
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "PolicyReport": ("wgpolicyk8s.io", "policyreports", True),
    "ClusterPolicyReport": ("wgpolicyk8s.io", "clusterpolicyreports", False),
    "Report": ("openreports.io", "reports", True),
    "ClusterReport": ("openreports.io", "clusterreports", False),
}


def report_kinds(flavor: Flavor) -> tuple[str, str]:
    """The namespaced and the cluster-scoped report kind of a flavor."""
    _, namespaced, cluster_scoped = API_VERSIONS[flavor]
    return namespaced, cluster_scoped


def owned_selector(cluster: str) -> str:
    """The label selector of the reports this tool wrote for the policy ``cluster``: what a run may replace or delete
    (never a report another tool, or another policy, wrote)."""
    return f"app.kubernetes.io/managed-by={SOURCE},{POLICY_LABEL}={cluster}"


@dataclass(frozen=True, order=True)
class StoredReport:
    """A report found in the cluster under ``owned_selector``."""

    kind: str
    namespace: str
    """Empty for a cluster-scoped report."""
    name: str
    policy_hash: str = ""
    resource_version: str = ""
    """Deleted only as it was listed: a report rewritten meanwhile (a concurrent run) is left to that run."""

    @classmethod
    def from_object(cls, obj: dict[str, Any], kind: str) -> StoredReport:
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
        return cls(kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""),
                   str(labels.get(HASH_LABEL) or ""), str(metadata.get("resourceVersion") or ""))


@dataclass(frozen=True)
class WritePlan:
    """One run's writes: every report applied (created, or replaced whole), then the stale ones deleted."""

    apply: tuple[dict[str, Any], ...]
    delete: tuple[StoredReport, ...]
    """Reports this tool wrote that no result backs any more: a namespace without GPU workloads now, or a report of
    an earlier run under another name; sorted."""
    replaced: tuple[StoredReport, ...] = ()
    """Reports applied over one with another policy hash (the policy changed since), sorted."""


def plan_writes(reports: Iterable[dict[str, Any]], stored: Iterable[StoredReport]) -> WritePlan:
    """What a run applies and deletes: ``reports`` (build_reports) are applied as they are; every stored report
    whose kind, namespace and name none of them has is deleted."""
    wanted = tuple(reports)
    keys = {(r["kind"], r["metadata"].get("namespace", ""), r["metadata"]["name"]): r for r in wanted}
    digest = {key: r["metadata"]["labels"][HASH_LABEL] for key, r in keys.items()}
    found = sorted(set(stored))
    delete = tuple(s for s in found if (s.kind, s.namespace, s.name) not in keys)
    replaced = tuple(s for s in found if (s.kind, s.namespace, s.name) in keys
                     and s.policy_hash != digest[s.kind, s.namespace, s.name])
    return WritePlan(wanted, delete, replaced)
