"""The serving SSLContext: TLS 1.2+, a deadline per request, rebuilt when the cert or key files' digest changes."""

# How rotation reaches us: cert-manager (or an operator) updates the Secret, and the kubelet swaps the
# mounted files by replacing a `..data` symlink, up to about a minute later (webhook.md §1.11). No file
# event reaches the paths we watch, so, like kopf's `__sleep_forever_or_until_ssl_files_change`, we hash
# the bytes. gunicorn calls its `ssl_context(conf, default_factory)` hook for every new connection
# (gunicorn/sock.py `ssl_wrap_socket`), so a reloader installed as that hook makes every new handshake
# use the newest good pair; connections already open keep theirs. Hashing two small PEM files costs tens
# of microseconds, and the API server keeps connections alive, so a check per connection is cheap.
#
# Why a deadline per request (slow-loris). gunicorn's gthread worker runs the TLS handshake, the header
# parse and the body read in one of its few threads on a *blocking* socket with no timeout
# (gunicorn/workers/gthread.py `ThreadWorker.handle`: `conn.sock.setblocking(True)`, then `conn.init()` and
# `next(conn.parser)`). A client that sends its ClientHello or its headers a byte at a time, or never
# finishes its body, would hold that thread for ever, and workers x threads such clients (8 by default)
# stop the webhook for everyone: the API server then times out and, with failurePolicy Fail, every GPU
# workload is refused. gunicorn's `timeout` does not help: it is the worker heartbeat, which the gthread
# main loop keeps beating while its threads are stuck. So every socket we hand out (SSLContext's
# documented `sslsocket_class` hook) bounds each request, from its first byte to its last, by one
# deadline: every blocking read and the handshake wait at most for what is left of it.

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Protocol

from cryptography import x509

log = logging.getLogger("gpupolicy.webhook.tls")

# ECDHE with AEAD only for TLS 1.2, as Kyverno's server does (webhook.md §1.11); TLS 1.3 suites are fixed.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
#: How long one request may take from its first byte to its last, unless the settings say otherwise.
DEFAULT_REQUEST_TIMEOUT_SECONDS = 10.0
#: How long a closing connection waits for the client's own close (see DeadlineSSLSocket.shutdown).
LINGER_SECONDS = 0.1


class ClientTooSlow(TimeoutError):
    """A client did not finish its handshake or request within the request deadline; it is disconnected."""


class DeadlineSSLSocket(ssl.SSLSocket):
    """A server-side TLS socket whose blocking reads share one deadline per request.

    gunicorn's gthread worker calls `setblocking(True)` each time a thread takes the connection up for a
    request and `setblocking(False)` when it parks it in its poller (gthread.py `handle`,
    `finish_request`), so `setblocking(True)` starts the clock; the handshake of a new connection, which
    comes before any such call on this socket, starts it too. Reads past the deadline raise ClientTooSlow
    (a TimeoutError): gunicorn then closes the connection, and werkzeug turns one during a body read into
    400 ClientDisconnected (werkzeug/wsgi.py `LimitedStream.readinto`). Writes get the whole budget each,
    so a slow request's answer is still sent.
    """

    budget_seconds: ClassVar[float] = DEFAULT_REQUEST_TIMEOUT_SECONDS

    @classmethod
    def with_budget(cls, seconds: float) -> type[DeadlineSSLSocket]:
        """This class with another per-request budget (a subclass, so contexts never share one)."""
        return type(cls.__name__, (cls,), {"budget_seconds": seconds, "__doc__": cls.__doc__})

    def setblocking(self, flag: bool) -> None:
        if flag:
            self._deadline: float | None = time.monotonic() + self.budget_seconds
            self.settimeout(self.budget_seconds)
        else:
            self._deadline = None
            super().setblocking(False)

    def do_handshake(self, block: bool = False) -> None:
        self._arm()
        try:
            super().do_handshake(block)
        except TimeoutError as err:
            raise self._too_slow("TLS handshake") from err

    def read(self, len: int = 1024, buffer: Any = None) -> Any:  # ssl.SSLSocket.read's own signature
        self._arm()
        try:
            return super().read(len, buffer)
        except TimeoutError as err:
            raise self._too_slow("request") from err

    def send(self, data: Any, flags: int = 0) -> int:
        if self.gettimeout() != 0.0:
            self.settimeout(self.budget_seconds)
        return super().send(data, flags)

    def shutdown(self, how: int) -> None:
        """Half-close, and from now on wait at most LINGER_SECONDS in all for the client to close too.

        gthread closes a connection it will not keep with util.close_graceful (RFC 9112 §9.6): shutdown,
        then read until the client's FIN for up to 2 s, and it does so on the worker's *main loop*
        (`finish_request`), which meanwhile accepts and dispatches nothing. A client that asks for
        `Connection: close`, or is dropped as too slow, and then keeps its socket open froze the worker
        for 2 s each time. Our answers are small and sent in full before this, so a short linger loses
        nothing.
        """
        super().shutdown(how)
        self._linger_until: float | None = time.monotonic() + LINGER_SECONDS

    def settimeout(self, value: float | None) -> None:
        linger_until = getattr(self, "_linger_until", None)
        if linger_until is not None:  # closing: 0.0 (non-blocking) once the linger is over
            left = max(0.0, linger_until - time.monotonic())
            value = left if value is None else min(value, left)
        super().settimeout(value)

    def _arm(self) -> None:
        """Bound the next blocking call by what is left of this request's deadline (non-blocking stays so)."""
        current = self.gettimeout()
        if current == 0.0:
            return
        deadline = getattr(self, "_deadline", None)
        if deadline is None:  # a new connection's handshake: its first request starts now
            deadline = self._deadline = time.monotonic() + self.budget_seconds
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._too_slow("request")
        # A caller's shorter timeout (gunicorn bounds its drain of an unread body) is kept.
        self.settimeout(remaining if current is None else min(current, remaining))

    def _too_slow(self, what: str) -> ClientTooSlow:
        try:
            host, port = self.getpeername()[:2]  # IPv4 and IPv6 address tuples alike
            peer = f"{host}:{port}"
        except OSError:
            peer = "a client"
        return ClientTooSlow(f"{peer} did not complete its {what} within {self.budget_seconds:g}s; disconnected")


class CertificateObserver(Protocol):
    def certificate_loaded(self, not_after: datetime, *, reloaded: bool) -> None: ...
    def certificate_reload_failed(self) -> None: ...


def build_context(
    cert_file: Path, key_file: Path, *, request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
) -> ssl.SSLContext:
    """A server context for cert_file and key_file; raises ssl.SSLError or OSError if they do not load.

    Its sockets are DeadlineSSLSockets: each request must complete within request_timeout_seconds.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.sslsocket_class = DeadlineSSLSocket.with_budget(request_timeout_seconds)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])  # gunicorn's gthread worker serves HTTP/1.1
    context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    return context


class CertificateReloader:
    """Hands out the current SSLContext, rebuilding it when the files' combined sha256 changes.

    A pair that fails to load (say the certificate was replaced and its key not yet) keeps the previous
    context serving and is retried at the next handshake, so a rotation never fails a handshake. Only the
    digest is kept, never the key bytes.
    """

    def __init__(self, cert_file: Path, key_file: Path, *,
                 request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.request_timeout_seconds = request_timeout_seconds
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._digest = ""
        self._not_after: datetime | None = None
        self._failed_digest = ""
        self._observer: CertificateObserver | None = None

    @property
    def digest(self) -> str:
        return self._digest

    def observe(self, observer: CertificateObserver) -> None:
        """Report loads to observer from now on, starting with the pair in use (a fresh worker's metrics)."""
        self._observer = observer
        if self._not_after is not None:
            observer.certificate_loaded(self._not_after, reloaded=False)

    def context(self) -> ssl.SSLContext:
        """The context for the next handshake; raises ssl.SSLError or OSError only if none ever loaded."""
        digest = self._read_digest()
        if self._context is not None and digest in (self._digest, self._failed_digest):
            return self._context  # unchanged, or a pair already found bad: no rebuild per handshake
        with self._lock:
            if digest != self._digest or self._context is None:
                self._reload(digest)
            assert self._context is not None
            return self._context

    def __call__(self, conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """gunicorn's `ssl_context` server hook (gunicorn >= 21); gunicorn's default factory is not used."""
        return self.context()

    def _read_digest(self) -> str:
        try:
            return self._hash(self.cert_file.read_bytes(), self.key_file.read_bytes())
        except OSError:
            # mid-swap or briefly missing: keep serving what we have (and let _reload report it if nothing)
            return self._digest

    @staticmethod
    def _hash(cert_pem: bytes, key_pem: bytes) -> str:
        return hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()

    def _reload(self, digest: str) -> None:
        try:
            context = build_context(self.cert_file, self.key_file,
                                    request_timeout_seconds=self.request_timeout_seconds)
            cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        except (OSError, ssl.SSLError, ValueError) as err:
            if self._context is None:
                raise
            if digest != self._failed_digest:  # log and count each bad pair once, not once per handshake
                self._failed_digest = digest
                log.warning("serving certificate not reloaded, keeping the previous one: %s", err)
                if self._observer:
                    self._observer.certificate_reload_failed()
            return
        # The digest read before loading is what we record: if the files changed meanwhile, the next
        # handshake sees a different digest and loads again, so we never settle on a stale pair.
        reloaded = self._context is not None
        self._context, self._digest, self._not_after = context, digest, cert.not_valid_after_utc
        log.info("serving certificate loaded: %s serial=%x notAfter=%s digest=%s", self.cert_file,
                 cert.serial_number, cert.not_valid_after_utc.isoformat(), digest[:12])
        if self._observer:
            self._observer.certificate_loaded(cert.not_valid_after_utc, reloaded=reloaded)
