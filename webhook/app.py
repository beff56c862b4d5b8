"""The Flask application factory: per-app state, request limits, JSON errors and the last-resort handler."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from flask import Flask, Response, current_app, g, jsonify, request
from flask.json.provider import DefaultJSONProvider
from prometheus_client import CollectorRegistry
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from webhook import metrics as webhook_metrics
from webhook import nodes as webhook_nodes
from webhook import review, routes
from webhook import store as webhook_store
from webhook.context import EXTENSION, VALIDATE_ENDPOINT, current_webhook, status_response
from webhook.settings import Settings, SettingsError
from webhook.state import DrainFlag, Webhook, loggable

log = logging.getLogger("gpupolicy.webhook")


def create_app(
    settings: Settings | None = None,
    *,
    store: webhook_store.PolicyStore | None = None,
    registry: CollectorRegistry | None = None,
    drain: DrainFlag | None = None,
    nodes: webhook_nodes.NodeSourceFactory | None = None,
) -> Flask:
    """Build the webhook app.

    store defaults to one reading settings.policy_file (or spec_file); registry to a fresh
    CollectorRegistry, never prometheus_client's global one, so two apps in one process share nothing;
    drain to one of this app alone (serve.py passes one that all workers share).
    The policy is loaded here; an invalid one leaves the app running and unready. ``nodes`` builds the node
    cache (given the metrics it reports to); it is given each policy's label keys and started here.
    """
    settings = settings or Settings()
    if store is None:
        store = _store_from(settings)
    metrics = webhook_metrics.Metrics(registry or CollectorRegistry(), multiprocess_dir=settings.metrics_dir)
    source = nodes(metrics) if nodes is not None else None
    webhook = Webhook(settings, store, metrics, drain or DrainFlag(), source)
    store.subscribe(metrics)
    if source is not None:
        metrics.state_changed(source.state)
        store.subscribe(webhook_nodes.KeysFollowPolicy(source))
    store.refresh()
    if source is not None:
        source.start()

    app = Flask("gpupolicy.webhook")
    # Werkzeug refuses a larger body with 413 before reading it (Request.max_content_length).
    app.config["MAX_CONTENT_LENGTH"] = settings.max_content_length
    app.json = AnswerJSON(app)
    app.extensions[EXTENSION] = webhook
    app.register_blueprint(routes.blueprint)
    app.wsgi_app = routes.ValidateFastPath(app.wsgi_app, webhook)  # type: ignore[method-assign]
    app.register_error_handler(HTTPException, _on_http_error)
    app.register_error_handler(review.MalformedReview, _on_malformed_review)
    app.register_error_handler(Exception, _on_unexpected_error)
    return app


class AnswerJSON(DefaultJSONProvider):
    """jsonify through review.json_bytes: the answers are dicts of strings, numbers and lists, written as Flask
    writes them, compact and in insertion order (the order the API types declare), but faster."""

    sort_keys = False

    def response(self, *args: Any, **kwargs: Any) -> Response:
        body = review.answer_bytes(self._prepare_response_obj(args, kwargs))
        return self._app.response_class(body, mimetype=self.mimetype)


def _store_from(settings: Settings) -> webhook_store.PolicyStore:
    if settings.policy_path is None:
        raise SettingsError("a policy file (--policy) or a spec (--spec) is required")
    return webhook_store.PolicyStore(settings.policy_path, fmt=settings.policy_format,
                                     interval_seconds=settings.reload_interval_seconds)


def _on_http_error(err: HTTPException) -> Response:
    code = err.code or 500
    message = err.description or err.name
    if code == 413:
        # Refused from Content-Length alone, before reading. The serving layer refuses such a body even earlier
        # (connection.py); this answers the same for any other WSGI server and Flask's test client.
        message = f"the request body is larger than the {current_app.config['MAX_CONTENT_LENGTH']} bytes accepted"
    response = status_response(code, message)
    if isinstance(err, MethodNotAllowed) and err.valid_methods:
        response.headers["Allow"] = ", ".join(err.valid_methods)
    return response


def _on_malformed_review(err: review.MalformedReview) -> Response:
    log.warning("malformed review from %s on %s: %s", request.remote_addr, loggable(request.path), err)
    message = str(err) if err.code != 422 else f"the request is not a valid AdmissionReview: {err}"
    return status_response(err.code, message, causes=err.causes)


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
