"""The serving SSLContext: TLS 1.2+, ECDHE with AEAD, rebuilt when the cert or key files' digest changes."""

# How rotation reaches us: cert-manager (or an operator) updates the Secret, and the kubelet swaps the
# mounted files by replacing a `..data` symlink, up to about a minute later (webhook.md §1.11). No file
# event reaches the paths we watch, so, like kopf's `__sleep_forever_or_until_ssl_files_change`, we hash
# the bytes. Our worker asks gunicorn's `ssl_context(conf, default_factory)` hook (gunicorn/sock.py
# `ssl_context`) for a context at every accept (worker.py), so a reloader installed as that hook makes
# every new handshake use the newest good pair; connections already open keep theirs. Hashing two small
# PEM files costs tens of microseconds, and the API server keeps connections alive, so a check per
# connection is cheap.
#
# Deadlines for slow clients are not a socket's business any more: the worker's event loop counts them for
# every phase of a connection (connection.py), and asyncio bounds the handshake (worker.py).

from __future__ import annotations

import hashlib
import logging
import ssl
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509

log = logging.getLogger("gpupolicy.webhook.tls")

# ECDHE with AEAD only for TLS 1.2, as Kyverno's server does (webhook.md §1.11); TLS 1.3 suites are fixed.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class CertificateObserver(Protocol):
    def certificate_loaded(self, not_after: datetime, *, reloaded: bool) -> None: ...
    def certificate_reload_failed(self) -> None: ...


def build_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context for cert_file and key_file; raises ssl.SSLError or OSError if they do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])  # the worker speaks HTTP/1.1 only (connection.py)
    context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    return context


class CertificateReloader:
    """Hands out the current SSLContext, rebuilding it when the files' combined sha256 changes.

    A pair that fails to load (say the certificate was replaced and its key not yet) keeps the previous
    context serving and is retried at the next handshake, so a rotation never fails a handshake. Only the
    digest is kept, never the key bytes.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
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
            context = build_context(self.cert_file, self.key_file)
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
