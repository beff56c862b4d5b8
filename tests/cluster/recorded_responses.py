"""Recorded API responses served over HTTP, for the `cluster verify` and `discover` tests that need what a live API
server cannot give here: the recorded moment as the server's clock (the `Date` header, so ages in the output are
those of the recording: a pod Pending for 28 days, a MIG state pending for 47 minutes, which a store can only
hold with timestamps the API server sets itself), and failures on demand (403, 500, a handler slower than the
client's timeout).  Stdlib http.server on 127.0.0.1, read-only: List JSON filtered by namespace, fieldSelector and
labelSelector, paged with limit/continue.  It is not an API server: what needs one (ownership of labels,
watches, writes, events) runs against the real one (tests/kube: test_kube_reconciler.py,
test_kube_cluster_verify.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

RECORDED = Path(__file__).parent / "recorded"
Obj = dict[str, Any]

# resource -> (group/version path, List kind)
RESOURCES = {
    "nodes": ("api/v1", "NodeList"),
    "pods": ("api/v1", "PodList"),
    "events": ("api/v1", "EventList"),
    "configmaps": ("api/v1", "ConfigMapList"),
    "daemonsets": ("apis/apps/v1", "DaemonSetList"),
    "replicasets": ("apis/apps/v1", "ReplicaSetList"),
    "deployments": ("apis/apps/v1", "DeploymentList"),
    "resourceslices": ("apis/resource.k8s.io/v1", "ResourceSliceList"),
}
# fieldSelector keys the real API server supports for these resources, as paths into the object.
FIELD_PATHS = {
    "status.phase": ("status", "phase"),
    "spec.nodeName": ("spec", "nodeName"),
    "reason": ("reason",),
    "involvedObject.kind": ("involvedObject", "kind"),
    "involvedObject.name": ("involvedObject", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "metadata.name": ("metadata", "name"),
}


@dataclass
class Fault:
    """What to do instead of answering a list of a resource (the key): an HTTP status with a Status body, or a
    delay before the answer."""

    status: int = 0
    sleep_seconds: float = 0.0


@dataclass
class RecordedResponses:
    objects: Mapping[str, list[Obj]]
    date: datetime
    faults: Mapping[str, Fault] = field(default_factory=dict)
    user: str = "system:serviceaccount:ci:gpupolicy"
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path with query) of every request received."""
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, directory: Path, *, context: str = "tke-prod") -> Path:
        """A kubeconfig whose only context points at this server (bearer token, plain HTTP)."""
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "fake", "user": "tester"}}],
        }), encoding="utf-8")
        return path


def load_scenario(name: str) -> dict[str, list[Obj]]:
    """resource -> items of a recorded scenario."""
    return {resource: json.loads((RECORDED / name / f"{resource}.json").read_text(encoding="utf-8"))["items"]
            for resource in RESOURCES if (RECORDED / name / f"{resource}.json").exists()}


@contextmanager
def serve(server: RecordedResponses) -> Iterator[RecordedResponses]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


def _handler(server: RecordedResponses) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            return format_datetime(server.date, usegmt=True)  # the recorded moment, so ages are stable

        def do_GET(self) -> None:
            server.requests.append(("GET", self.path))
            url = urlparse(self.path)
            route = _route(url.path)
            if route is None:
                missing = f"the server could not find the requested resource ({url.path})"
                self._send(404, _status(404, "NotFound", missing))
                return
            resource, namespace = route
            fault = server.faults.get(resource)
            if fault and fault.sleep_seconds:
                time.sleep(fault.sleep_seconds)
            if fault and fault.status:
                self._send(fault.status, _forbidden(server.user, resource, namespace) if fault.status == 403
                           else _status(fault.status, "InternalError", "etcdserver: request timed out"))
                return
            self._send(200, _list(server.objects.get(resource, []), resource, namespace, parse_qs(url.query)))

        def _refuse_write(self) -> None:
            server.requests.append((self.command, self.path))
            self._send(405, _status(405, "MethodNotAllowed", "the recorded responses are read-only"))

        do_PUT = do_DELETE = do_PATCH = do_POST = _refuse_write

        def _send(self, code: int, body: Obj) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout test)

    return Handler


def _route(path: str) -> tuple[str, str | None] | None:
    parts = path.strip("/").split("/")
    for resource, (prefix, _) in RESOURCES.items():
        base = prefix.split("/")
        if parts == [*base, resource]:
            return resource, None
        if len(parts) == len(base) + 3 and parts[: len(base)] == base and parts[len(base)] == "namespaces" \
                and parts[-1] == resource:
            return resource, parts[len(base) + 1]
    return None


def _list(items: list[Obj], resource: str, namespace: str | None, query: Mapping[str, list[str]]) -> Obj:
    chosen = [o for o in items if namespace is None or o.get("metadata", {}).get("namespace") == namespace]
    for selector in query.get("fieldSelector", []):
        chosen = [o for o in chosen if _fields_match(o, selector)]
    for selector in query.get("labelSelector", []):
        chosen = [o for o in chosen if _labels_match(o, selector)]
    start = int(query.get("continue", ["0"])[0] or 0)
    limit = int(query.get("limit", ["0"])[0] or 0) or len(chosen)
    page = chosen[start:start + limit]
    rest = str(start + limit) if start + limit < len(chosen) else None
    api, kind = RESOURCES[resource]
    metadata: Obj = {"resourceVersion": "4243", **({"continue": rest} if rest else {})}
    return {"kind": kind, "apiVersion": api.removeprefix("api/").removeprefix("apis/"), "metadata": metadata,
            "items": page}


def _fields_match(obj: Obj, selector: str) -> bool:
    for term in selector.split(","):
        key, _, want = term.partition("=")
        value: Any = obj
        for part in FIELD_PATHS[key]:
            value = (value or {}).get(part)
        if (value or "") != want:
            return False
    return True


def _labels_match(obj: Obj, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, _, v in (term.partition("=") for term in selector.split(",")))


def _status(code: int, reason: str, message: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _forbidden(user: str, resource: str, namespace: str | None) -> Obj:
    prefix = RESOURCES[resource][0]
    group = f'"{prefix.split("/")[1]}"' if prefix.startswith("apis/") else '""'
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    body = _status(403, "Forbidden", f'{resource} is forbidden: User "{user}" cannot list resource "{resource}" in '
                                     f"API group {group} {scope}")
    body["details"] = {"kind": resource}
    return body
