"""What request handlers reach through the current Flask app: its Webhook state, and the Status answer."""

# A module of its own so that routes.py and app.py (which registers the routes) both import it and not
# each other.

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flask import Response, current_app, jsonify

from webhook import review
from webhook.state import Webhook

EXTENSION = "gpupolicy"
#: The blueprint is named after the extension; its admission view is `validate` (routes.py).
VALIDATE_ENDPOINT = f"{EXTENSION}.validate"


def current_webhook() -> Webhook:
    webhook: Webhook = current_app.extensions[EXTENSION]
    return webhook


def status_response(code: int, message: str, *, causes: Sequence[Mapping[str, Any]] = ()) -> Response:
    """A metav1.Status body with the HTTP status code: what the API server and kubectl understand."""
    response = jsonify(review.status_document(code, message, causes=causes))
    response.status_code = code
    return response
