"""One client connection on a worker's event loop: HTTP/1.1 read by httptools, a deadline for every phase.

A connection costs no thread and no process while its request arrives: the TLS handshake (asyncio), the
request line and headers, and the body are read as bytes come in, and the application runs only once the
request is complete and within its limits (wsgi.py). Every phase has a deadline, counted by the event loop
and not by a blocked read, so a client that trickles bytes gains nothing:

* a new connection must complete its TLS handshake and its first request's headers within
  `header_timeout` of being accepted (Go's `http.Server.ReadHeaderTimeout`, which Kyverno and Gatekeeper
  rely on, starts at the same point);
* a kept-alive connection may idle `keepalive` seconds; from the first byte of its next request the headers
  must arrive within `header_timeout`;
* the whole request, body included, must arrive within `request_timeout` of its first byte;
* an answer the client does not read holds the connection for at most `request_timeout`.

Malformed framing (a bad chunk size, a missing CRLF, a bad trailer, Content-Length together with chunked)
is refused by the parser before the application runs: a 400 and one log line, never a traceback. Sizes are
checked as bytes arrive: the head (64 KiB), the URL and each header field (8 KiB, as gunicorn and nginx
allow), 100 header fields, the body against its limit
(413, from Content-Length alone when declared), trailers (8 KiB), and the worker's budget for bodies in
flight (beyond it, reading pauses until other bodies are done, within the request's deadline), so what a
request may make the worker hold is bounded before it is complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httptools

from webhook import review, wsgi

log = logging.getLogger("gpupolicy.webhook.connection")

Phase = Literal["new", "idle", "head", "body", "busy", "closing"]
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True)
class Limits:
    """What one connection may take: time per phase and bytes per part of a request."""

    header_timeout: float
    request_timeout: float
    keepalive: float
    max_body: int
    max_head_bytes: int = 64 * 1024
    max_url_bytes: int = 8 * 1024
    max_field_bytes: int = 8 * 1024
    max_header_fields: int = 100
    max_trailer_bytes: int = 8 * 1024
    #: A body past this size is large: it waits for one of the worker's few large-body slots (worker.py).
    small_body_bytes: int = 64 * 1024


class Host(Protocol):
    """What a connection needs from the worker that accepted it."""

    @property
    def limits(self) -> Limits: ...
    @property
    def draining(self) -> bool: ...
    def admit_large_body(self, connection: Connection) -> bool: ...
    def large_body_done(self, connection: Connection) -> None: ...
    def closed(self, connection: Connection) -> None: ...
    def idle(self, connection: Connection) -> None: ...
    def active(self, connection: Connection) -> None: ...
    def evaluate(self, app: wsgi.WSGIApp, env: dict[str, Any]) -> asyncio.Future[wsgi.Answer]: ...
    def after_large_request(self) -> None: ...
    def dropped(self, reason: str, message: str) -> None: ...


class Refused(Exception):
    """A request we answer with a 4xx (or 503) and close; raised from the parser's callbacks."""

    def __init__(self, code: int, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason


class Connection(asyncio.Protocol):
    """The HTTP/1.1 side of one accepted connection (asyncio runs TLS underneath)."""

    def __init__(self, host: Host, app: wsgi.WSGIApp, *, accepted_at: float) -> None:
        self.host = host
        self.app = app
        self.limits = host.limits
        self.loop = asyncio.get_running_loop()
        self.accepted_at = accepted_at
        self.transport: asyncio.Transport | None = None
        self.endpoint = wsgi.Endpoint("-", 0, "-", 0)
        self.parser = httptools.HttpRequestParser(self)
        self.phase: Phase = "new"
        self.request: wsgi.Request | None = None  # being read
        self.ready: list[tuple[wsgi.Request, bool]] = []  # complete, with keep-alive, not yet answered
        self._timer: asyncio.TimerHandle | None = None
        self._started = 0.0
        self._url = bytearray()
        self._chunks: list[bytes] = []
        self._body_size = 0
        self._head_bytes = 0
        self._trailer_bytes = 0
        self._large = False
        self._write_paused = False
        self._evaluating = False  # a review of this connection is with a review thread (worker.py)
        self.task: asyncio.Task[None] | None = None  # its TLS handshake, until the connection is made

    # --- asyncio.Protocol -------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("-", 0)
        local = transport.get_extra_info("sockname") or ("-", 0)
        self.endpoint = wsgi.Endpoint(str(peer[0]), int(peer[1]), str(local[0]), int(local[1]),
                                      "https" if transport.get_extra_info("sslcontext") else "http")
        if self.host.draining:
            self.close()
            return
        self.host.idle(self)
        self._arm(self.accepted_at + self.limits.header_timeout, "request headers", self.limits.header_timeout)

    def data_received(self, data: bytes) -> None:
        if self.phase == "closing":
            return
        if self.phase in ("new", "idle", "head"):
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            self._answer_ready()
            refusal = err.__context__
            if not isinstance(refusal, Refused):
                raise
            self.refuse(refusal)
            return
        except httptools.HttpParserUpgrade:
            self.refuse(Refused(400, "protocol upgrades are not supported"))
            return
        except httptools.HttpParserError as err:
            self._answer_ready()
            self.refuse(Refused(400, f"malformed HTTP request: {err}"))
            return
        if self.phase == "head" and self._head_bytes > self.limits.max_head_bytes:
            self._answer_ready()
            self.refuse(Refused(431, f"the request head is larger than {self.limits.max_head_bytes} bytes"))
            return
        self._answer_ready()

    def eof_received(self) -> bool | None:
        return None  # the transport closes; a half-sent request is simply dropped

    def connection_lost(self, exc: Exception | None) -> None:
        self.phase = "closing"
        self._disarm()
        self._release()
        self.host.closed(self)
        # The parser calls back into this object and the transport holds it: a cycle that only the cyclic
        # GC would free, and connections live long enough to reach its oldest generation, which it seldom
        # scans. Under a stream of dropped hostile connections that held ~60 KiB each until then.
        self.parser = None  # type: ignore[assignment]
        self.transport = None
        self.ready.clear()
        self.request, self._chunks = None, []

    def pause_reading(self) -> None:
        if self.transport is not None and self.phase != "closing":
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and self.phase != "closing" and not self._write_paused:
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        # The client is not reading its answers: stop reading its requests and bound how long it may stall.
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()
        self._arm(self.loop.time() + self.limits.request_timeout, "read of its answer", self.limits.request_timeout)

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.transport is not None and self.phase != "closing":
            self.transport.resume_reading()
            self._after_answers()

    # --- httptools callbacks ------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.host.active(self)
        now = self.loop.time()
        if self.phase == "new":  # its first request: every deadline counts from the accept
            self._started = self.accepted_at
        else:  # a kept-alive connection: its headers are due from this first byte
            self._started = now
            self._arm(now + self.limits.header_timeout, "request headers", self.limits.header_timeout)
        self.phase = "head"
        self.request = wsgi.Request(method="", target=b"", version="")
        self._url.clear()
        self._chunks, self._body_size, self._trailer_bytes = [], 0, 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self.limits.max_url_bytes:
            raise Refused(414, f"the request URL is longer than {self.limits.max_url_bytes} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.request is not None
        if self.phase == "body":  # a trailer field: bounded, then ignored (nothing here reads trailers)
            self._trailer_bytes += len(name) + len(value)
            if self._trailer_bytes > self.limits.max_trailer_bytes:
                raise Refused(431, f"the request's trailer fields exceed {self.limits.max_trailer_bytes} bytes")
            return
        if len(name) + len(value) > self.limits.max_field_bytes:
            raise Refused(431, f"a header field is longer than {self.limits.max_field_bytes} bytes")
        self.request.headers.append((name, value))
        if len(self.request.headers) > self.limits.max_header_fields:
            raise Refused(431, f"the request has more than {self.limits.max_header_fields} header fields")

    def on_headers_complete(self) -> None:
        request = self.request
        assert request is not None
        request.method = self.parser.get_method().decode("ascii", "replace")
        request.version = self.parser.get_http_version()
        request.target = bytes(self._url)
        self.phase = "body"
        declared = request.header(b"content-length")
        if declared is not None and int(declared) > self.limits.max_body:  # digits only: the parser checked
            raise Refused(413, f"the request body is larger than the {self.limits.max_body} bytes accepted",
                          "too-large")
        self._arm(self._started + self.limits.request_timeout, "request", self.limits.request_timeout)
        expect = request.header(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and declared != b"0":
            self._write(CONTINUE)

    def on_body(self, chunk: bytes) -> None:
        self._body_size += len(chunk)
        if self._body_size > self.limits.max_body:
            raise Refused(413, f"the request body is larger than the {self.limits.max_body} bytes accepted",
                          "too-large")
        self._chunks.append(chunk)
        if not self._large and self._body_size > self.limits.small_body_bytes:
            self._large = True
            if not self.host.admit_large_body(self):
                self.pause_reading()  # until the worker hands us a slot (resume_reading), within our deadline

    def on_message_complete(self) -> None:
        request = self.request
        assert request is not None
        request.body = b"".join(self._chunks)
        request.arrived = self.loop.time()
        self._chunks = []
        self.ready.append((request, self.parser.should_keep_alive()))
        self.request = None
        self.phase = "busy"
        self._disarm()

    # --- answering ------------------------------------------------------------------------------------------

    def _answer_ready(self) -> None:
        # Pipelined requests are answered in order: the next waits while a review is with a thread.
        while self.ready and self.phase != "closing" and not self._evaluating:
            request, keep_alive = self.ready.pop(0)
            self._answer(request, keep_alive=keep_alive and not self.host.draining)
        if self.phase != "closing" and not self._evaluating:
            self._after_answers()

    def _after_answers(self) -> None:
        if self.request is None and not self.ready and not self._write_paused:
            self.phase = "idle"
            self.host.idle(self)
            self._arm(self.loop.time() + self.limits.keepalive, None, self.limits.keepalive)

    def _answer(self, request: wsgi.Request, *, keep_alive: bool) -> None:
        try:
            url = httptools.parse_url(request.target)
        except httptools.HttpParserInvalidURLError:
            self.refuse(Refused(400, "the request target is not a valid URL"))
            return
        env = wsgi.environ(request, url.path or b"/", url.query or b"", self.endpoint)
        env[wsgi.ARRIVED_KEY] = request.arrived
        if request.method == "POST":
            # A review is evaluated by a review thread, so this loop goes on reading, handshaking and answering
            # probes meanwhile; the answer is written when it is done (_answered).
            self._evaluating = True
            self.host.evaluate(self.app, env).add_done_callback(
                lambda done: self._answered(request, keep_alive, done))
            return
        try:  # probes and metrics: cheap, answered on the loop
            answer = wsgi.call(self.app, env)
        except Exception:
            answer = self._failed(request)
        self._send(request, answer, keep_alive=keep_alive)

    def _answered(self, request: wsgi.Request, keep_alive: bool, done: asyncio.Future[wsgi.Answer]) -> None:
        self._evaluating = False
        if done.cancelled():  # the worker is stopping
            self._release()
            self.abort()
            return
        error = done.exception()
        answer = self._failed(request, error) if error is not None else done.result()
        if self.phase == "closing":  # the client went away meanwhile: nobody to answer
            self._release()
            return
        self._send(request, answer, keep_alive=keep_alive)
        self._answer_ready()

    def _failed(self, request: wsgi.Request, error: BaseException | None = None) -> wsgi.Answer:
        # The Flask app answers every error itself (app.py's last-resort handler); reaching here is a bug.
        log.error("the application failed on %s %s from %s", request.method, _shown(request.target),
                  self.endpoint.peer, exc_info=error or True)
        return _status_answer(500, "internal error")

    def _send(self, request: wsgi.Request, answer: wsgi.Answer, *, keep_alive: bool) -> None:
        self._release()
        status, headers, body = answer
        head = wsgi.response_head(status, headers, len(body), close=not keep_alive)
        self._write(head if request.method == "HEAD" else head + body)
        if len(request.body) > self.limits.small_body_bytes:
            request.body = b""
            self.host.after_large_request()
        if not keep_alive:
            self.close()

    def refuse(self, refusal: Refused) -> None:
        """Answer a request we will not serve, log it in one line, and close the connection."""
        if self.phase == "closing":
            return
        self.host.dropped(refusal.reason, f"{self.endpoint.peer}: {refusal.code} {refusal.message}")
        status, headers, body = _status_answer(refusal.code, refusal.message)
        self._write(wsgi.response_head(status, headers, len(body), close=True) + body)
        self.close()

    def close(self) -> None:
        self.phase = "closing"
        self._disarm()
        self._release()
        if self.transport is not None:
            self.transport.close()

    def shutdown(self) -> None:
        """The worker is stopping: close now unless a request is on its way (it is answered, then closed)."""
        if self.phase in ("new", "idle"):
            self.close()

    def abort(self) -> None:
        self.phase = "closing"
        self._disarm()
        if self.transport is not None:
            self.transport.abort()

    def evict(self) -> None:
        """Close a connection with no request in flight to make room for a new one (worker.py, at the cap)."""
        if self.transport is not None:
            self.close()
        elif self.task is not None:  # still in its TLS handshake
            self.task.cancel()

    # --- deadlines ------------------------------------------------------------------------------------------

    def _arm(self, when: float, what: str | None, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_at(when, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, what: str | None, seconds: float) -> None:
        self._timer = None
        if what is None:  # an idle kept-alive connection: closing it is routine
            self.close()
            return
        message = f"{self.endpoint.peer} did not complete its {what} within {seconds:g}s; disconnected"
        if self.phase == "body":  # it sent headers, so it can read an answer
            self.host.dropped("timeout", message)
            status, headers, body = _status_answer(408, f"the request did not arrive within {seconds:g}s")
            self._write(wsgi.response_head(status, headers, len(body), close=True) + body)
            self.close()
            return
        self.host.dropped("timeout", message)
        self.close()

    # --- bytes ----------------------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _release(self) -> None:
        if self._large:
            self._large = False
            self.host.large_body_done(self)


def not_found(env: dict[str, Any], start_response: Any) -> list[bytes]:
    """A WSGI app answering 404 with a metav1.Status, as the webhook's own errors are answered."""
    status, headers, body = _status_answer(404, f"{env['PATH_INFO'][:200]!r} is not served on this port")
    start_response(status, headers)
    return [body]


def _status_answer(code: int, message: str) -> wsgi.Answer:
    body = json.dumps(review.status_document(code, message)).encode()
    return wsgi.status_line(code), [("Content-Type", "application/json")], body


def _shown(target: Any) -> str:
    text = bytes(target[:200]).decode("latin-1")
    return repr(text) if not text.isprintable() else text
