"""A complete, size-checked HTTP request handed to a WSGI application, and its answer as bytes (PEP 3333)."""

# The serving layer (connection.py) calls the application only once a request has fully arrived, so the
# environ carries the whole body in memory: `wsgi.input` is a BytesIO and CONTENT_LENGTH its exact size,
# also for a chunked request. The application can neither block on a slow client nor meet a framing
# error while it reads: both were dealt with before it was called.

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: The environ key carrying when the request's last byte arrived (time.monotonic, the event loop's clock): the
#: review budget runs from there, so time queued for a review thread counts (routes.py).
ARRIVED_KEY = "gpupolicy.arrived"
Answer = tuple[str, list[tuple[str, str]], bytes]
"""An application's status line, headers and whole body."""


@dataclass
class Request:
    """One request as it arrived: method, target, headers in order, and the body once it is complete."""

    method: str
    target: bytes
    version: str
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    arrived: float = 0.0
    """When its last byte arrived, on the event loop's clock (time.monotonic)."""

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (name in lower case), or None."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


@dataclass(frozen=True)
class Endpoint:
    """Where a connection comes from and arrives at: for REMOTE_ADDR, SERVER_NAME and logs."""

    peer_host: str
    peer_port: int
    server_host: str
    server_port: int
    scheme: str = "https"

    @property
    def peer(self) -> str:
        return f"{self.peer_host}:{self.peer_port}"


def environ(request: Request, path: bytes, query: bytes, endpoint: Endpoint) -> dict[str, Any]:
    """The WSGI environ of a complete request (path still percent-encoded, query as sent)."""
    env: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        # PEP 3333: PATH_INFO is the decoded path as bytes, carried in a latin-1 str.
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query.decode("latin-1"),
        "SERVER_NAME": endpoint.server_host,
        "SERVER_PORT": str(endpoint.server_port),
        "SERVER_PROTOCOL": f"HTTP/{request.version}",
        "REMOTE_ADDR": endpoint.peer_host,
        "REMOTE_PORT": str(endpoint.peer_port),
        "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": endpoint.scheme,
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in request.headers:
        key = name.decode("latin-1").upper().replace("-", "_")
        if key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
            continue  # the body is complete: its length above is the one that holds
        text = value.decode("latin-1")
        if key == "CONTENT_TYPE":
            env[key] = text
            continue
        key = "HTTP_" + key
        env[key] = f"{env[key]},{text}" if key in env else text
    return env


def only(app: WSGIApp, paths: frozenset[str], refuse: WSGIApp) -> WSGIApp:
    """app for GET and HEAD on paths; refuse (a 404) for anything else."""

    def guarded(env: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if env["REQUEST_METHOD"] in ("GET", "HEAD") and env["PATH_INFO"] in paths:
            return app(env, start_response)
        return refuse(env, start_response)

    return guarded


def call(app: WSGIApp, env: dict[str, Any]) -> Answer:
    """Run the application on env: its status line, headers and whole body."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        if exc_info is not None and started:
            raise exc_info[1].with_traceback(exc_info[2])
        started[:] = [status, headers]
        return _no_write

    result = app(env, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = started
    return status, headers, body


def _no_write(data: bytes) -> None:
    raise NotImplementedError("the webhook's applications return their body; write() is not supported")


def response_head(status: str, headers: list[tuple[str, str]], length: int, *, close: bool) -> bytes:
    """The status line and headers of an HTTP/1.1 answer, with the body's length and the connection's fate."""
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{name}: {value}" for name, value in headers
              if name.lower() not in ("content-length", "connection", "transfer-encoding")]
    lines.append(f"Content-Length: {length}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def status_line(code: int) -> str:
    return f"{code} {HTTPStatus(code).phrase}"
