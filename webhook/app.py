"""The Flask application factory: per-app state, request limits, JSON errors and the last-resort handler."""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import sharedctypes
from pathlib import Path
from typing import Any

from flask import Flask, Response, current_app, g, jsonify, request
from prometheus_client import CollectorRegistry
from werkzeug.exceptions import HTTPException, MethodNotAllowed, ServiceUnavailable

from webhook import metrics as webhook_metrics
from webhook import review
from webhook import store as webhook_store
from webhook.settings import Settings, SettingsError

log = logging.getLogger("gpupolicy.webhook")
EXTENSION = "gpupolicy"
#: The blueprint is named after the extension; its admission view is `validate` (routes.py).
VALIDATE_ENDPOINT = f"{EXTENSION}.validate"

#: metav1.Status reasons for the HTTP errors we answer (k8s.io/apimachinery StatusReason).
_REASONS = {
    400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType", 422: "Invalid", 500: "InternalError", 503: "ServiceUnavailable",
}


#: Bodies above this are parsed one at a time (LargeBodyGate). Real reviews are a few KiB to tens of KiB.
LARGE_BODY_BYTES = 256 * 1024


class LargeBodyGate:
    """Lets one body over LARGE_BODY_BYTES be parsed at a time: in this process and, given a lock file, in
    every worker process that opens the same file.

    json.loads inflates a body up to 25-fold (3 MiB of `{},` is 75 MiB of dicts), so eight such bodies at
    once took the pod (master and two workers) from 160 MiB to 467 MiB of RSS: past the compiled 256 MiB
    limit, an OOM kill and, under failurePolicy Fail, refused GPU workloads. Taking turns, the peak is
    about 100 MiB over idle (docs/reliability.md). A thread lock orders this process's threads; an
    flock(2) on the shared file orders the workers, and the kernel drops it if a worker dies holding it
    (a SIGKILLed worker can never wedge the gate, as a shared semaphore could).
    """

    def __init__(self, lock_file: Path | None = None) -> None:
        self.lock_file = lock_file
        self._threads = threading.Lock()
        self._fd: int | None = None
        self._fd_pid = 0

    @contextmanager
    def hold(self, timeout_seconds: float) -> Iterator[None]:
        """Hold the gate; raises ServiceUnavailable (503) if it stays taken for timeout_seconds."""
        deadline = time.monotonic() + timeout_seconds
        if not self._threads.acquire(timeout=timeout_seconds):
            raise ServiceUnavailable("too many large reviews at once; retry")
        try:
            fd = self._process_fd()
            while fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ServiceUnavailable("too many large reviews at once; retry") from None
                    time.sleep(0.005)
            try:
                yield
            finally:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _process_fd(self) -> int | None:
        """This process's own descriptor: flock(2) locks belong to an open file, which a fork shares."""
        if self.lock_file is None:
            return None
        if self._fd is None or self._fd_pid != os.getpid():
            self._fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fd_pid = os.getpid()
        return self._fd


class DrainFlag:
    """Set once SIGTERM arrives; /readyz then answers 503.

    It lives in shared memory created before gunicorn forks, so the master's signal handler flips it for
    every worker at once.
    """

    def __init__(self) -> None:
        self._value = sharedctypes.RawValue(ctypes.c_bool, False)

    @property
    def draining(self) -> bool:
        return bool(self._value.value)

    def begin(self) -> None:
        self._value.value = True


@dataclass(frozen=True)
class Webhook:
    """The state one app serves from, kept on `app.extensions["gpupolicy"]`."""

    settings: Settings
    store: webhook_store.PolicyStore
    metrics: webhook_metrics.Metrics
    drain: DrainFlag
    large_bodies: LargeBodyGate = field(default_factory=LargeBodyGate)

    @contextmanager
    def in_turn(self, content_length: int | None) -> Iterator[None]:
        """Read and parse a body in turn with the other large ones (LargeBodyGate); small ones go at once.

        A body of unknown length (chunked) counts as large. Raises ServiceUnavailable (503) when the
        turn does not come within the request timeout.
        """
        if content_length is not None and content_length <= LARGE_BODY_BYTES:
            yield
            return
        with self.large_bodies.hold(self.settings.request_timeout_seconds):
            try:
                yield
            except review.MalformedReview as err:
                # Its traceback holds the parser's frames and so the whole parsed body: drop it while we
                # still hold the gate, or the next large body is parsed while this one is still alive.
                raise err.with_traceback(None) from None

    def admit(self, rv: review.Review, *, tenant: str | None, started: float) -> review.Verdict:
        """Decide one review against the current policy, then count and log it.

        Raises ServiceUnavailable (HTTP 503) while no valid policy has loaded: the API server then applies
        the webhook's failurePolicy, and readiness keeps the Service from sending us traffic meanwhile.
        """
        snapshot = self.store.current
        if snapshot is None:
            raise ServiceUnavailable(f"no valid admission policy is loaded: {self.store.last_error}")
        verdict = review.decide(rv, snapshot.engine, tenants=(tenant,) if tenant else ())
        self.record(rv, verdict, time.perf_counter() - started, tenant=tenant, generation=snapshot.generation)
        return verdict

    def record(self, rv: review.Review, verdict: review.Verdict, seconds: float, *, tenant: str | None,
               generation: int | None) -> None:
        self.metrics.observe(rv, verdict, seconds)
        fired = ",".join(rule for rule, _ in verdict.rules if rule != review.NO_RULE) or "-"
        outcome = "allow" if verdict.allowed else "deny"
        # Names and verdicts only: object contents (env values, args) may hold secrets.
        log.info(
            "admission uid=%s kind=%s object=%s operation=%s dryRun=%s tenant=%s verdict=%s code=%s "
            "rules=%s%s generation=%s latency_ms=%.2f",
            loggable(rv.uid), loggable(rv.kind["kind"]), loggable(rv.object_key), rv.operation,
            str(rv.dry_run).lower(), tenant or "-", outcome, verdict.code, fired,
            f" skipped={loggable(verdict.skipped)}" if verdict.skipped else "",
            generation if generation is not None else "-", seconds * 1000,
        )
        if self.settings.log_objects and log.isEnabledFor(logging.DEBUG):
            log.debug("admission uid=%s object=%r", rv.uid, rv.object)


# What a uid, a kind or a namespace/name is made of; anything else is quoted and escaped in logs.
_PLAIN_TOKEN = re.compile(r"[A-Za-z0-9._:/@*<>+-]{0,253}")


def loggable(text: str) -> str:
    """Text from a request as one unambiguous log token.

    Every field of a review is the client's to choose: a newline would forge a log line, a space a
    `verdict=allow` field, a 3 MiB uid a 3 MiB line. Plain tokens pass unchanged; anything else is
    cut to 253 characters (a DNS subdomain) and written as a Python repr, quoted and escaped.
    """
    if _PLAIN_TOKEN.fullmatch(text):
        return text
    cut = text[:253]
    return repr(cut) + ("…" if len(text) > len(cut) else "")


def create_app(
    settings: Settings | None = None,
    *,
    store: webhook_store.PolicyStore | None = None,
    registry: CollectorRegistry | None = None,
    drain: DrainFlag | None = None,
    large_bodies: LargeBodyGate | None = None,
) -> Flask:
    """Build the webhook app.

    store defaults to one reading settings.policy_file (or spec_file); registry to a fresh
    CollectorRegistry, never prometheus_client's global one, so two apps in one process share nothing;
    drain and large_bodies to ones of this app alone (serve.py passes ones that all workers share).
    The policy is loaded here; an invalid one leaves the app running and unready.
    """
    settings = settings or Settings()
    if store is None:
        store = _store_from(settings)
    metrics = webhook_metrics.Metrics(registry or CollectorRegistry(), multiprocess_dir=settings.metrics_dir)
    webhook = Webhook(settings, store, metrics, drain or DrainFlag(), large_bodies or LargeBodyGate())
    store.subscribe(metrics)
    store.refresh()

    from webhook import routes  # the views import this module for current_webhook()

    app = Flask("gpupolicy.webhook")
    # Werkzeug refuses a larger body with 413 before reading it (Request.max_content_length).
    app.config["MAX_CONTENT_LENGTH"] = settings.max_content_length
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION] = webhook
    app.register_blueprint(routes.blueprint)
    app.register_error_handler(HTTPException, _on_http_error)
    app.register_error_handler(review.MalformedReview, _on_malformed_review)
    app.register_error_handler(Exception, _on_unexpected_error)
    return app


def _store_from(settings: Settings) -> webhook_store.PolicyStore:
    if settings.policy_path is None:
        raise SettingsError("a policy file (--policy) or a spec (--spec) is required")
    return webhook_store.PolicyStore(settings.policy_path, fmt=settings.policy_format,
                                     interval_seconds=settings.reload_interval_seconds)


def current_webhook() -> Webhook:
    webhook: Webhook = current_app.extensions[EXTENSION]
    return webhook


def status_response(code: int, message: str, *, causes: list[Mapping[str, Any]] | None = None) -> Response:
    """A metav1.Status body with the HTTP status code: what the API server and kubectl understand."""
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "code": code, "reason": _REASONS.get(code, "Unknown"), "message": message,
    }
    if causes:
        body["details"] = {"causes": causes}
    response = jsonify(body)
    response.status_code = code
    return response


def _on_http_error(err: HTTPException) -> Response:
    code = err.code or 500
    message = err.description or err.name
    if code == 413:
        # Refused from Content-Length alone, before reading; gunicorn then discards the unread body before
        # the connection's next request, so a client that sent it all still reads this answer.
        message = f"the request body is larger than the {current_app.config['MAX_CONTENT_LENGTH']} bytes accepted"
    response = status_response(code, message)
    if isinstance(err, MethodNotAllowed) and err.valid_methods:
        response.headers["Allow"] = ", ".join(err.valid_methods)
    return response


def _on_malformed_review(err: review.MalformedReview) -> Response:
    log.warning("malformed review from %s on %s: %s", request.remote_addr, loggable(request.path), err)
    message = str(err) if err.code == 400 else f"the request is not a valid AdmissionReview: {err}"
    return status_response(err.code, message, causes=[dict(c) for c in err.causes])


def _on_unexpected_error(err: Exception) -> tuple[Response, int] | Response:
    """Last resort: log, count and fail closed. Whatever lands here is a bug and gets a test."""
    incident = uuid.uuid4().hex[:12]
    webhook = current_webhook()
    webhook.metrics.internal_errors.inc()
    rv: review.Review | None = g.get("review") or _review_if_admission_call()
    log.exception("internal error %s on %s %s uid=%s: %s", incident, request.method, loggable(request.path),
                  loggable(rv.uid) if rv else "-", type(err).__name__)
    if rv is None:
        return status_response(500, f"internal error {incident}")
    verdict = review.internal_error(rv, incident)
    started = g.get("started", time.perf_counter())
    webhook.record(rv, verdict, time.perf_counter() - started, tenant=(request.view_args or {}).get("tenant"),
                   generation=None)
    return jsonify(review.build_response(rv, verdict)), 200


def _review_if_admission_call() -> review.Review | None:
    """The review of a /validate call that failed before it was parsed (so the denial can echo its uid)."""
    if request.endpoint != VALIDATE_ENDPOINT:
        return None
    try:
        return review.parse_review(request.get_data(cache=True))
    except (review.MalformedReview, HTTPException):
        return None
