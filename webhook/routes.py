"""HTTP routes: /validate (default and per tenant), /healthz, /readyz, /metrics; each parse → evaluate → respond."""

from __future__ import annotations

import re
import time

from flask import Blueprint, Response, g, jsonify, request
from werkzeug.exceptions import BadRequest, NotFound, UnsupportedMediaType

from webhook import review
from webhook.context import EXTENSION, current_webhook, status_response
from webhook.wsgi import ARRIVED_KEY

blueprint = Blueprint(EXTENSION, __name__)

# Tenant names are DNS labels in the spec (policy/spec/model.py Tenant.name), so anything else is no route.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

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
    started = g.started = time.perf_counter()
    # The budget runs from the request's arrival, so time spent queueing for a review thread counts (worker.py
    # stamps it; under another WSGI server it runs from here).
    arrived = request.environ.get(ARRIVED_KEY) or time.monotonic()
    if tenant is not None and not _DNS_LABEL.match(tenant):
        raise NotFound(f"{tenant!r} is not a tenant name (tenant names are DNS labels)")
    rv = g.review = review.parse_review(_json_body())
    verdict = webhook.admit(rv, tenant=tenant, started=started,
                            deadline=arrived + webhook.settings.review_budget_seconds)
    return jsonify(review.build_response(rv, verdict))


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
