"""The audit's reports written to the cluster: server-side apply of each report, then the stale ones deleted.

What to write is decided in the pure core (policy.audit.reports.plan_writes); this module lists the reports this
tool wrote before (by the label selector owned_selector, so another tool's reports or another policy's are never
touched), applies each report as field manager gpupolicy-audit (forced: the reports' fields are this tool's alone;
a conflict would only mean someone edited a generated report) and deletes what the plan says, each with the
resourceVersion it was listed at as a precondition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cluster.snapshot import Access, ClusterAccessError, _connect, _Reader
from policy.audit import reports
from policy.audit.reports import StoredReport, WritePlan


@dataclass(frozen=True)
class Written:
    """What one run did."""

    plan: WritePlan
    deleted: tuple[StoredReport, ...]
    """The plan's deletions the API server carried out (a report already gone, or rewritten since it was listed,
    is left out)."""


def write_reports(access: Access, flavor: reports.Flavor, cluster: str, built: list[dict[str, Any]]) -> Written:
    """Apply ``built`` (policy.audit.reports.build_reports) and delete this policy's stale reports. Raises
    ClusterAccessError (cluster.snapshot) when the cluster refuses or cannot be reached; a 403's hint names the
    permission the identity lacks."""
    reader = _Reader(*_connect(access), timeout=access.timeout_seconds)
    with reader:
        reader.rbac_fix = _rbac_fix(flavor)
        found: list[StoredReport] = []
        for kind in reports.report_kinds(flavor):
            try:
                found.extend(StoredReport.from_object(obj, kind) for obj in reader.list(
                    "list", _plural(kind), reader.get_path, path=_path(kind),
                    label_selector=reports.owned_selector(cluster)))
            except ClusterAccessError as err:
                if err.status != 404:
                    raise
                raise _not_served(flavor) from None
        plan = reports.plan_writes(built, found)
        for report in plan.apply:
            metadata = report["metadata"]
            kind, namespace = report["kind"], metadata.get("namespace", "")
            where = f"{_plural(kind)}/{metadata['name']}"
            reader.request("apply", where, _once, send=reader.call, method="PATCH",
                           path=_path(kind, namespace, metadata["name"]),
                           query=[("fieldManager", reports.FIELD_MANAGER), ("force", "true")],
                           body=json.dumps(report, sort_keys=True), content_type="application/apply-patch+yaml",
                           namespace=namespace or None)
        deleted = []
        for stale in plan.delete:
            if _delete(reader, stale):
                deleted.append(stale)
        return Written(plan, tuple(deleted))


def _not_served(flavor: reports.Flavor) -> ClusterAccessError:
    group = reports.RESOURCES[reports.report_kinds(flavor)[0]][0]
    other = "openreports" if flavor == "wgpolicy" else "policy-report"
    return ClusterAccessError(
        f"the API server does not serve {', '.join(_plural(k) for k in reports.report_kinds(flavor))} ({group}): "
        "the report CRDs are not installed", f"install them (Policy Reporter's and Kyverno's charts install the "
        f"wg-policy ones; tests/fixtures/policy-reports pins both kinds), or write the reports the cluster has "
        f"(-O {other}, spec.audit.format)", status=404)


def _delete(reader: _Reader, stale: StoredReport) -> bool:
    """Delete one report as it was listed; False when it is gone or changed since (404, 409)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if stale.resource_version:
        body["preconditions"] = {"resourceVersion": stale.resource_version}
    try:
        reader.request("delete", f"{_plural(stale.kind)}/{stale.name}", _once, send=reader.call, method="DELETE",
                       path=_path(stale.kind, stale.namespace, stale.name), body=body,
                       content_type="application/json", namespace=stale.namespace or None)
    except ClusterAccessError as err:
        if err.status in (404, 409):
            return False
        raise
    return True


def _once(*, send: Any, method: str, path: str, _request_timeout: float, namespace: str | None = None,
          limit: int = 0, _continue: str | None = None, _preload_content: bool = False, **kwargs: Any) -> Any:
    """One write in ``_Reader.request``'s calling convention (which passes a page size and a continue token)."""
    return send(method, path, timeout=_request_timeout, **kwargs)


def _plural(kind: str) -> str:
    return reports.RESOURCES[kind][1]


def _path(kind: str, namespace: str = "", name: str = "") -> str:
    """The REST path of a report kind's collection over all namespaces, or of one report."""
    group, plural, namespaced = reports.RESOURCES[kind]
    version = next(v for v, _, _ in reports.API_VERSIONS.values() if v.startswith(group + "/")).partition("/")[2]
    base = f"/apis/{group}/{version}"
    if not name:
        return f"{base}/{plural}"
    scope = f"/namespaces/{namespace}" if namespaced else ""
    return f"{base}{scope}/{plural}/{name}"


def _rbac_fix(flavor: reports.Flavor) -> str:
    kinds = reports.report_kinds(flavor)
    group = reports.RESOURCES[kinds[0]][0]
    resources = ",".join(f"{_plural(k)}.{group}" for k in kinds)
    return (f"grant list, create, patch and delete on {resources} (the audit writes its reports there), e.g. "
            f"kubectl create clusterrole gpupolicy-audit-writer --verb=list,create,patch,delete "
            f"--resource={resources}, bound to the identity the audit runs as (the compiled audit/ ClusterRole "
            "grants it)")
