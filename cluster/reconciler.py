"""The node-label reconciler: keeps the labels of the label plan (policy.resolved.node_labels) on every node of a class.

A plain watch loop on the official client (list, then watch from the list's resourceVersion, relist on 410 or
any failure), because the whole job is one resource and one idempotent write per node: a framework such as kopf
would add a dependency, a second event model and its own state annotations on the nodes, and would not remove
the one hard part, which is ownership.

Ownership is the API server's own: the reconciler writes with server-side apply as field manager
``gpupolicy-node-labels`` and sends exactly the labels the plan gives the node. The API server records which label
keys it owns (managedFields), removes a key it owned and no longer sends (a node that left a class, a class whose
selector changed), and keeps every other key untouched. A key that another manager (a person's kubectl, the GPU
Operator, node provisioning) set to a different value is a conflict: the reconciler leaves it, records a Warning
event on the node and sets gpupolicy_node_label_conflicts, and never forces. The one exception is a GPU Operator
default (policy.hardware.labels.OPERATOR_DEFAULTS: nvidia.com/mig.config=all-disabled,
nvidia.com/gpu.deploy.*=true) that
only the operator wrote: the operator sets those on a node that lacks them and never changes them afterwards, so
on a node that joined a pool it may simply have been first. The reconciler takes such a key over with a forced
apply (LabelPlan.overrides), and the operator leaves the new value alone.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cluster.resources import field_managers
from policy.resolved.node_labels import FIELD_MANAGER, LabelPlan

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

LOG = logging.getLogger("gpupolicy.reconciler")
EVENTS_NAMESPACE = "default"


@dataclass(frozen=True)
class Conflict:
    node: str
    key: str
    have: str
    want: str
    owners: tuple[str, ...]

    @property
    def message(self) -> str:
        return (f"label {self.key} is {self.have!r}, set by {', '.join(self.owners) or 'another writer'}; the "
                f"gpupolicy plan wants {self.want!r}: left alone (change it back, or change the spec)")


@dataclass(frozen=True)
class Action:
    """What one node needs: the labels to apply (None: nothing to send) and the conflicts to report."""

    node: str
    apply: Mapping[str, str] | None
    conflicts: tuple[Conflict, ...]
    overlap: tuple[str, ...] = ()
    """Names of several classes selecting the node: nothing is applied then."""
    force: bool = False
    """The apply takes over a GPU Operator default (LabelPlan.overrides): forced, as the operator owns the key."""


def label_owners(node: Mapping[str, Any]) -> dict[str, set[str]]:
    """Label key -> the field managers that own it, from metadata.managedFields (fieldsV1)."""
    owners: dict[str, set[str]] = {}
    for entry in field_managers(node.get("metadata") or {}) or ():
        for key in entry.labels:
            owners.setdefault(key, set()).add(entry.manager)
    return owners


def plan_node(plan: LabelPlan, node: Mapping[str, Any]) -> Action:
    """Pure: compare a node (API JSON) with the plan."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    labels: dict[str, str] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    owners = label_owners(node)
    ours = {k for k, managers in owners.items() if FIELD_MANAGER in managers}
    classes = plan.matching(labels)
    if len(classes) > 1:
        return Action(name, None, (), tuple(sorted(c.name for c in classes)))
    wanted = dict(classes[0].labels) if classes else {}
    send: dict[str, str] = {}
    conflicts = []
    force = False
    for key, want in sorted(wanted.items()):
        have = labels.get(key)
        others = tuple(sorted(owners.get(key, set()) - {FIELD_MANAGER}))
        if have is not None and have != want and plan.overrides(key, have, others):
            send[key], force = want, True
        elif have is not None and have != want and (others or key not in ours):
            conflicts.append(Conflict(name, key, have, want, others))
        else:
            send[key] = want
    settled = set(send) == ours and all(labels.get(k) == v for k, v in send.items())
    return Action(name, None if settled else send, tuple(conflicts), force=force and not settled)


class Metrics:
    """Prometheus metrics of the reconciler (prometheus_client, imported only when it runs)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry or CollectorRegistry()
        self.conflicts = Gauge("gpupolicy_node_label_conflicts", "Owned label keys another writer set to another "
                               "value, left alone", ["node", "key"], registry=self.registry)
        self.applies = Counter("gpupolicy_node_label_applies_total", "Server-side applies of node labels",
                               ["outcome"], registry=self.registry)
        self.errors = Counter("gpupolicy_node_label_errors_total", "Failed API calls, by verb", ["verb"],
                              registry=self.registry)
        self.overlaps = Gauge("gpupolicy_node_label_overlapping_classes", "Nodes several classes select (left "
                              "alone)", registry=self.registry)


@dataclass
class Reconciler:
    """One reconciler process: ``run`` until ``stop`` is set."""

    api: CoreV1Api
    plan: LabelPlan
    metrics: Metrics
    watch_timeout_seconds: int = 300
    request_timeout_seconds: float = 10.0
    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 60.0
    stop: threading.Event = field(default_factory=threading.Event)
    sleep: Callable[[float], bool] | None = None
    _reported: dict[tuple[str, str], str] = field(default_factory=dict)
    _overlapping: set[str] = field(default_factory=set)
    healthy: bool = False

    def run(self) -> None:
        delay = self.backoff_seconds
        while not self.stop.is_set():
            try:
                version = self.resync()
                self.healthy = True
                delay = self.backoff_seconds
                self.watch(version)
            except _Relist:
                continue
            except Exception as err:  # any API or connection failure: back off, then list again
                self.healthy = False
                self.metrics.errors.labels("list/watch").inc()
                LOG.warning("listing or watching nodes failed (%s); retrying in %.0f s", _reason(err), delay)
                self._wait(delay)
                delay = min(delay * 2, self.max_backoff_seconds)

    def resync(self) -> str:
        """Reconcile every node; returns the list's resourceVersion for the watch."""
        response = self.api.list_node(_preload_content=False, _request_timeout=self.request_timeout_seconds)
        document = json.loads(response.data)
        for node in document.get("items") or ():
            self.reconcile(node)
        return str((document.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, version: str) -> None:
        """One watch request from ``version``; returns when the server ends it (timeoutSeconds), raises _Relist on
        an ERROR event (410 Gone: the version is too old). The raw stream is read here rather than through
        kubernetes.watch, whose non-deserializing mode fails on ERROR events (it reads a raw_object key that only
        its deserializing mode fills)."""
        from kubernetes.watch.watch import iter_resp_lines

        response = self.api.list_node(watch=True, resource_version=version, allow_watch_bookmarks=False,
                                      timeout_seconds=self.watch_timeout_seconds, _preload_content=False,
                                      _request_timeout=self.watch_timeout_seconds + self.request_timeout_seconds)
        try:
            for line in iter_resp_lines(response):
                if self.stop.is_set():
                    return
                event = json.loads(line) if line else {}
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise _Relist()
                if kind in ("ADDED", "MODIFIED"):
                    self.reconcile(obj)
                elif kind == "DELETED":
                    self._forget(str((obj.get("metadata") or {}).get("name", "")))
        finally:
            response.close()
            response.release_conn()

    def reconcile(self, node: Mapping[str, Any]) -> Action:
        action = plan_node(self.plan, node)
        self._report_overlap(action)
        self._report_conflicts(action)
        if action.apply is not None:
            self._apply(action.node, action.apply, force=action.force)
        return action

    def _apply(self, name: str, labels: Mapping[str, str], *, force: bool = False) -> None:
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}
        try:
            self.api.patch_node(name, body, field_manager=FIELD_MANAGER, force=force,
                                _content_type="application/apply-patch+yaml",
                                _request_timeout=self.request_timeout_seconds, _preload_content=False)
        except Exception as err:
            # A conflict here is a race with another writer: the next event of that node reports it. Anything
            # else is retried by the next event or resync.
            self.metrics.applies.labels("conflict" if getattr(err, "status", 0) == 409 else "error").inc()
            self.metrics.errors.labels("patch").inc()
            LOG.warning("applying labels to node %s failed: %s", name, _reason(err))
            return
        self.metrics.applies.labels("applied").inc()
        LOG.info("node %s: applied %s", name, ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels")

    def _report_conflicts(self, action: Action) -> None:
        current = {(c.node, c.key): c for c in action.conflicts}
        for (node, key) in [k for k in self._reported if k[0] == action.node and k not in current]:
            del self._reported[(node, key)]
            self.metrics.conflicts.remove(node, key)
        for key, conflict in current.items():
            if self._reported.get(key) == conflict.have:
                continue  # reported already; one event per conflict, not per watch event
            self._reported[key] = conflict.have
            self.metrics.conflicts.labels(conflict.node, conflict.key).set(1)
            LOG.warning("node %s: %s", conflict.node, conflict.message)
            self._event(conflict.node, "LabelConflict", conflict.message)

    def _report_overlap(self, action: Action) -> None:
        if action.overlap and action.node not in self._overlapping:
            self._overlapping.add(action.node)
            self._event(action.node, "OverlappingClasses", f"classes {', '.join(action.overlap)} all select this "
                        "node: gpupolicy applies none of their labels until the selectors are disjoint")
        elif not action.overlap:
            self._overlapping.discard(action.node)
        self.metrics.overlaps.set(len(self._overlapping))

    def _forget(self, node: str) -> None:
        for key in [k for k in self._reported if k[0] == node]:
            del self._reported[key]
            self.metrics.conflicts.remove(*key)
        self._overlapping.discard(node)

    def _event(self, node: str, reason: str, message: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{node}.", "namespace": EVENTS_NAMESPACE},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
                "reason": reason, "message": message, "type": "Warning", "count": 1,
                "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": FIELD_MANAGER}, "reportingComponent": FIELD_MANAGER}
        try:
            self.api.create_namespaced_event(EVENTS_NAMESPACE, body, _request_timeout=self.request_timeout_seconds,
                                             _preload_content=False)
        except Exception as err:
            self.metrics.errors.labels("create-event").inc()
            LOG.warning("could not record event on node %s: %s", node, _reason(err))

    def _wait(self, seconds: float) -> None:
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            self.stop.wait(seconds)


class _Relist(Exception):
    pass


def _reason(err: Exception) -> str:
    status = getattr(err, "status", None)
    return f"{status} {getattr(err, 'reason', '')}".strip() if status else type(err).__name__


def serve_metrics(worker: Reconciler, port: int) -> None:
    """/metrics (Prometheus) and /healthz (200 once a list succeeded, 503 while the API cannot be listed)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/healthz"):
                code, body, kind = (200 if worker.healthy else 503), b"ok\n", "text/plain"
            elif self.path.startswith("/metrics"):
                code, body, kind = 200, generate_latest(worker.metrics.registry), CONTENT_TYPE_LATEST
            else:
                code, body, kind = 404, b"not found\n", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
