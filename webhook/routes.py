"""HTTP routes: /validate (default and per tenant), /healthz, /readyz, /metrics; each parse → evaluate → respond."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, g, jsonify, request
from werkzeug.exceptions import BadRequest, NotFound, UnsupportedMediaType

from webhook import review
from webhook.context import EXTENSION, current_webhook, status_response
from webhook.state import Webhook
from webhook.wsgi import ARRIVED_KEY, WSGIApp

blueprint = Blueprint(EXTENSION, __name__)

# Tenant names are DNS labels in the spec (policy/spec/model.py Tenant.name), so anything else is no route.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # used with fullmatch: "$" takes a final "\n"

# Every route but liveness first lets the store notice a new policy file (at most once per interval), probes
# included; liveness stays trivial. Each view calls it itself: as a blueprint before_request hook it cost
# ~2 µs a review in Flask's hook dispatch (docs/performance.md).


@blueprint.post("/validate", defaults={"tenant": None})
@blueprint.post("/validate/tenant/<tenant>")
def validate(tenant: str | None) -> Response:
    """Admit one AdmissionReview: the default entry evaluates with no tenant, a tenant entry with its name.

    The ValidatingWebhookConfiguration routes each tenant's namespaces (by namespaceSelector) to its path,
    so the webhook needs no API access to learn a namespace's labels; the API server ANDs the verdicts.
    """
    webhook = current_webhook()
    webhook.store.maybe_refresh()
    g.started = time.perf_counter()
    if tenant is not None and not _DNS_LABEL.fullmatch(tenant):
        raise NotFound(f"{tenant!r} is not a tenant name (tenant names are DNS labels)")
    return jsonify(answer(webhook, _json_body(), tenant, request.environ, g))


def answer(webhook: Webhook, body: bytes, tenant: str | None, environ: Mapping[str, Any],
           scratch: Any) -> review.AdmissionReviewOut:
    """The answer to one review of a tenant entry (None: the default one): parse, decide, record (the caller has
    let the store notice a new policy file).

    The view and the fast path (ValidateFastPath) both call this, so /validate is written once. ``scratch``
    receives ``review`` (and has ``started``) as soon as the body parses: Flask's ``g``, which the last-resort
    handler reads to echo the uid of a review that crashed later.
    """
    # The budget runs from the request's arrival, so time spent queueing for a review thread counts (worker.py
    # stamps it; under another WSGI server it runs from here).
    arrived = environ.get(ARRIVED_KEY) or time.monotonic()
    rv = scratch.review = review.parse_review(body)
    verdict, generation = webhook.admit(rv, tenant=tenant, deadline=arrived + webhook.settings.review_budget_seconds)
    out = review.build_response(rv, verdict)
    webhook.record(rv, verdict, time.perf_counter() - scratch.started, tenant=tenant, generation=generation)
    return out


@blueprint.get("/healthz")
def healthz() -> Response:
    """Liveness: the process answers. It never depends on the policy, so a bad ConfigMap cannot restart us."""
    return jsonify(status="ok")


@blueprint.get("/readyz")
def readyz() -> Response:
    """Readiness: 503 until a valid policy is loaded, and again once SIGTERM has started the drain."""
    webhook = current_webhook()
    webhook.store.maybe_refresh()
    snapshot = webhook.store.current
    if webhook.drain.draining:
        return status_response(503, "shutting down: draining in-flight requests")
    if snapshot is None:
        return status_response(503, f"no valid admission policy is loaded: {webhook.store.last_error}")
    return jsonify(status="ok", cluster=snapshot.policy.cluster, generation=snapshot.generation,
                   digest=snapshot.digest)


@blueprint.get("/metrics")
def metrics() -> Response:
    webhook = current_webhook()
    webhook.store.maybe_refresh()
    body, content_type = webhook.metrics.render()
    return Response(body, content_type=content_type)


def _json_body() -> bytes:
    """The raw body of a JSON request: 415 for another media type, 413 (before reading) when too large."""
    if not request.is_json:
        raise UnsupportedMediaType(
            f"expected Content-Type application/json, got {request.mimetype or 'none'!r}")
    # Complete and within its limits by now: the serving layer reads the whole body, chunked or not, before
    # it calls the app, and gives its exact length (wsgi.py).
    body = request.get_data(cache=True)
    if not body:
        raise BadRequest("the request body is empty; expected an AdmissionReview")
    return body


class ValidateFastPath:
    """WSGI middleware in front of Flask (``app.wsgi_app``, Flask's documented way to wrap it) that answers a
    well-formed review itself and hands every other request to Flask untouched.

    Flask's request handling (its contexts, the URL map, the request and response objects, the JSON provider)
    costs about as much CPU as a new pod's whole verdict (docs/performance.md, "Where a new pod's review goes"),
    and a review needs none of it: the serving layer has already read, bounded and framed the body (wsgi.py).
    Only a POST to /validate or /validate/tenant/<DNS label> with a JSON body of at most 64 KiB is taken,
    and it runs the view's own `answer`; anything else, and any exception on the way (a malformed body, no
    policy loaded, a bug), goes to Flask, which answers it (again from the start) as it always did: errors and
    the last-resort handler stay Flask's. A call that raises here has recorded nothing (`answer` records only
    once the answer is built), so Flask's attempt counts it once.
    """

    def __init__(self, flask_wsgi: WSGIApp, webhook: Webhook) -> None:
        self._flask = flask_wsgi
        self._webhook = webhook
        self._limit = min(webhook.settings.max_content_length, FAST_PATH_MAX_BYTES)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        tenant = self._route(environ)
        if tenant is _NOT_OURS:
            return self._flask(environ, start_response)
        body = environ["wsgi.input"].read()
        if not body or len(body) > self._limit:
            return self._to_flask(environ, start_response, body)
        data = None
        try:
            self._webhook.store.maybe_refresh()
            if self._webhook.store.current is None:  # Flask's 503, without parsing the body twice first
                return self._to_flask(environ, start_response, body)
            scratch = _Scratch(time.perf_counter())  # from here, as the view's g.started
            data = review.answer_bytes(answer(self._webhook, body, tenant, environ, scratch))
        except Exception:  # Flask answers it, from the start, with its own error handlers
            pass  # and only once this block is left: the exception's frames hold the parsed body until then
        if data is None:
            return self._to_flask(environ, start_response, body)
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return (data,)

    def _route(self, environ: Mapping[str, Any]) -> Any:
        """The tenant (None for the default entry) of a request this path answers, or _NOT_OURS."""
        if environ["REQUEST_METHOD"] != "POST" or environ.get("SCRIPT_NAME") or not isinstance(
                environ.get("wsgi.input"), io.BytesIO):
            return _NOT_OURS
        media = environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower()
        if media != "application/json":
            return _NOT_OURS
        path = environ["PATH_INFO"]
        if path == "/validate":
            return None
        tenant = path.removeprefix("/validate/tenant/")
        return tenant if tenant != path and _DNS_LABEL.fullmatch(tenant) else _NOT_OURS

    def _to_flask(self, environ: dict[str, Any], start_response: Callable[..., Any], body: bytes) -> Iterable[bytes]:
        environ["wsgi.input"] = io.BytesIO(body)  # read here: Flask reads it again from the start
        return self._flask(environ, start_response)


@dataclass
class _Scratch:
    """What `answer` leaves for a crash handler on the fast path (Flask's ``g`` on the view's)."""

    started: float
    review: review.Review | None = None


_NOT_OURS: Any = object()
#: Bodies past this go to Flask directly. Real reviews are 5-20 KB; a body the fast path hands to Flask is parsed
#: twice, and up to this size a parse costs little and builds at most ~2 MiB (review.py, UNCOUNTED_BYTES).
FAST_PATH_MAX_BYTES = review.UNCOUNTED_BYTES
