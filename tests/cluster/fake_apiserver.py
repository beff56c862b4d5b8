"""A fake Kubernetes API server for tests: stdlib http.server on 127.0.0.1 serving recorded List JSON.

Read-only for everything but nodes and events: nodes can be watched and server-side applied (ownership and
conflicts computed by tests/server_side_apply.py, a stand-in for the API server's field manager, starting from the
managedFields a recording carries), events created.
It is a fake at the kubernetes-client boundary, not an API server: no admission, no validation beyond that."""

from __future__ import annotations

import contextlib
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

from server_side_apply import ManagedObject

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
    """What to do instead of answering a resource: an HTTP status with a Status body, or a delay. Keyed by
    resource for lists, or by "<verb> nodes" (patch, watch, list) and "create events"; ``times`` limits it."""

    status: int = 0
    sleep_seconds: float = 0.0
    times: int | None = None


@dataclass
class FakeApiServer:
    objects: Mapping[str, list[Obj]]
    date: datetime
    faults: Mapping[str, Fault] = field(default_factory=dict)
    user: str = "system:serviceaccount:ci:gpupolicy"
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path with query) of every request received."""
    port: int = 0
    version: int = 4243
    managed: dict[str, ManagedObject] = field(default_factory=dict)
    changes: list[tuple[int, str, Obj]] = field(default_factory=list)
    """(resourceVersion, event type, node) of every node change, for watches."""
    events: list[Obj] = field(default_factory=list)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        for node in self.objects.get("nodes", []):
            self.managed[node["metadata"]["name"]] = ManagedObject.recorded(json.loads(json.dumps(node)),
                                                                            clock=self.clock)

    @property
    def clock(self) -> str:
        """The server's moment as managedFields write it: every change here happens at the recorded moment."""
        return self.date.strftime("%Y-%m-%dT%H:%M:%SZ")

    def node(self, name: str) -> Obj:
        with self.lock:
            return self.managed[name].live()

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def change_node(self, name: str, labels: Mapping[str, str | None], manager: str = "kubectl-label") -> None:
        """An Update by ``manager`` (kubectl label, node provisioning): set or (None) remove labels."""
        with self.lock:
            managed = self.managed[name]
            new = json.loads(json.dumps(managed.obj))
            current = new["metadata"].setdefault("labels", {})
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            managed.update(new, manager)
            self._record("MODIFIED", name)

    def add_node(self, node: Obj, manager: str = "kubelet") -> None:
        with self.lock:
            name = node["metadata"]["name"]
            managed = ManagedObject({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, clock=self.clock)
            managed.update(json.loads(json.dumps(node)), manager)
            self.managed[node["metadata"]["name"]] = managed
            self._record("ADDED", node["metadata"]["name"])

    def _record(self, kind: str, name: str) -> None:
        self.version += 1
        obj = self.managed[name]
        obj.obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.changes.append((self.version, kind, obj.live()))
        self.lock.notify_all()

    def take_fault(self, key: str) -> Fault | None:
        fault = self.faults.get(key)
        if fault is None or fault.times == 0:
            return None
        if fault.times is not None:
            fault.times -= 1
        return fault

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
def serve(server: FakeApiServer) -> Iterator[FakeApiServer]:
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


def _handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            return format_datetime(server.date, usegmt=True)  # the recorded moment, so ages are stable

        def do_GET(self) -> None:
            server.requests.append(("GET", self.path))
            url = urlparse(self.path)
            query = parse_qs(url.query)
            if url.path == "/api/v1/nodes" and query.get("watch", [""])[0] in ("true", "1"):
                self._watch(query)
                return
            if url.path == "/api/v1/nodes" and server.managed and "nodes" not in server.faults:
                fault = server.take_fault("list nodes")
                if fault and fault.status:
                    self._send(fault.status, _status(fault.status, "InternalError", "etcdserver: leader changed"))
                    return
                with server.lock:
                    items = [server.managed[n].live() for n in sorted(server.managed)]
                    version = str(server.version)
                body = _list(items, "nodes", None, query)
                body["metadata"]["resourceVersion"] = version
                self._send(200, body)
                return
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
            self._send(405, _status(405, "MethodNotAllowed", "the fake API server is read-only"))

        do_PUT = do_DELETE = _refuse_write

        def do_PATCH(self) -> None:
            server.requests.append(("PATCH", self.path))
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if parts[:3] != ["api", "v1", "nodes"] or len(parts) != 4 or \
                    self.headers.get("Content-Type") != "application/apply-patch+yaml":
                self._refuse_write()
                return
            fault = server.take_fault("patch nodes")
            if fault and fault.status:
                self._send(fault.status, _status(fault.status, "InternalError", "etcdserver: request timed out"))
                return
            query = parse_qs(url.query)
            manager = query.get("fieldManager", [""])[0]
            force = query.get("force", ["false"])[0] == "true"
            with server.lock:
                managed = server.managed.get(parts[3])
                if managed is None:
                    self._send(404, _status(404, "NotFound", f'nodes "{parts[3]}" not found'))
                    return
                before = json.dumps(managed.live(), sort_keys=True)
                conflicts = managed.apply(body, manager, force=force)
                if conflicts and not force:
                    message = f"Apply failed with {len(conflicts)} conflict(s): " + "; ".join(map(str, conflicts))
                    self._send(409, _status(409, "Conflict", message))
                    return
                if json.dumps(managed.live(), sort_keys=True) != before:
                    server._record("MODIFIED", parts[3])
                live = managed.live()
            self._send(200, live)

        def do_POST(self) -> None:
            server.requests.append(("POST", self.path))
            url = urlparse(self.path)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if not url.path.endswith("/events"):
                self._refuse_write()
                return
            fault = server.take_fault("create events")
            if fault and fault.status:
                self._send(fault.status, _status(fault.status, "InternalError", "etcdserver: request timed out"))
                return
            with server.lock:
                server.events.append(body)
            self._send(201, body)

        def _watch(self, query: Mapping[str, list[str]]) -> None:
            fault = server.take_fault("watch nodes")
            if fault and fault.status:
                self._send(fault.status, _status(fault.status, "InternalError", "watch failed"))
                return
            since = int(query.get("resourceVersion", ["0"])[0] or 0)
            deadline = time.monotonic() + float(query.get("timeoutSeconds", ["5"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if since < server.version - 1000:  # too old: what an API server says after compaction
                    self._chunk({"type": "ERROR", "object": _status(410, "Expired", "too old resource version")})
                    return
                while time.monotonic() < deadline:
                    with server.lock:
                        fresh = [c for c in server.changes if c[0] > since]
                        if not fresh:
                            server.lock.wait(min(0.05, max(deadline - time.monotonic(), 0)))
                            continue
                    for version, kind, obj in fresh:
                        self._chunk({"type": kind, "object": obj})
                        since = version
            except (BrokenPipeError, ConnectionResetError):
                return
            finally:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, event: Obj) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

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
    group = '"apps"' if RESOURCES[resource][0].startswith("apis/apps") else '""'
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    body = _status(403, "Forbidden", f'{resource} is forbidden: User "{user}" cannot list resource "{resource}" in '
                                     f"API group {group} {scope}")
    body["details"] = {"kind": resource}
    return body
