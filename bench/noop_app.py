"""The floors for bench/webhook_bench.py: our exact gunicorn + TLS stack serving an app that does nothing.

    .venv/bin/python bench/noop_app.py --cert-dir DIR --bind 127.0.0.1 --port 9443 [--flask] [--workers 2]

Two floors, both reading the body, parsing it as JSON (every webhook must) and answering `allowed: true`
for its uid:

* `app`, a raw WSGI function: the least any server can do for a review;
* `flask_app()` (`--flask`), the same work in a Flask route with `jsonify`: what the webhook costs above
  the framework it is written in. The webhook's own figure is judged against this one (docs/performance.md).

Everything else is the webhook's own serving code, called, not copied: `webhook.serve.run` (logging, the
`webhook.tls.CertificateReloader` as gunicorn's ssl_context hook, the metrics directory) starting a
`webhook.serve.WebhookServer` (the gunicorn options we ship: worker class, workers, keep-alive, limits,
timeouts, the SIGTERM drain), configured by `Settings.from_env`, so the same GPUPOLICY_* variables and
flags configure every server. Only `load()` differs: it returns a floor instead of the webhook's app. The
difference between the webhook and the Flask floor is therefore the policy store, the rule engine,
metrics and the per-request log line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from webhook import serve
from webhook.settings import Settings, SettingsError

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """Parse the AdmissionReview and allow it; GET (probes) gets a tiny JSON body."""
    if environ["REQUEST_METHOD"] != "POST":
        return _reply(start_response, "200 OK", b'{"status":"ok"}')
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length)
    try:
        review = json.loads(body)
        uid = review["request"]["uid"]
        api_version = review["apiVersion"]
    except (ValueError, KeyError, TypeError):
        return _reply(start_response, "400 Bad Request", b'{"kind":"Status","status":"Failure","code":400}')
    out = json.dumps({"apiVersion": api_version, "kind": "AdmissionReview",
                      "response": {"uid": uid, "allowed": True}}).encode()
    return _reply(start_response, "200 OK", out)


def _reply(start_response: StartResponse, status: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def flask_app() -> Any:
    """The same no-op in Flask: routes as the webhook's (`/validate`, per tenant, probes), `jsonify` answers."""
    from flask import Flask, jsonify, request

    floor = Flask("gpupolicy.bench.noop")

    @floor.post("/validate", defaults={"tenant": None})
    @floor.post("/validate/tenant/<tenant>")
    def validate(tenant: str | None) -> Any:
        try:
            review = json.loads(request.get_data(cache=False))
            uid, api_version = review["request"]["uid"], review["apiVersion"]
        except (ValueError, KeyError, TypeError):
            return jsonify(kind="Status", status="Failure", code=400), 400
        return jsonify(apiVersion=api_version, kind="AdmissionReview", response={"uid": uid, "allowed": True})

    @floor.get("/healthz")
    @floor.get("/readyz")
    def probe() -> Any:
        return jsonify(status="ok")

    return floor


class NoopServer(serve.WebhookServer):
    """The webhook's gunicorn application with the raw WSGI floor loaded in each worker."""

    def load(self) -> Any:
        return app


class FlaskNoopServer(serve.WebhookServer):
    """The webhook's gunicorn application with the Flask floor loaded in each worker."""

    def load(self) -> Any:
        return flask_app()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--flask", action="store_true", help="serve the Flask floor instead of the raw WSGI one")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--log-level", default=None)
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env(cert_dir=args.cert_dir, bind=args.bind, port=args.port, workers=args.workers,
                                     threads=args.threads, log_level=args.log_level)
        # serve.run itself, so logging, the TLS reloader, the metrics directory and the arbiter are set up
        # exactly as for the webhook; only the application class is ours.
        return serve.run(settings, application=FlaskNoopServer if args.flask else NoopServer)
    except SettingsError as err:
        print(f"noop_app: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
