"""Serving models to compare: the webhook (or a floor) behind each candidate server, configured alike.

    .venv/bin/python bench/servers.py --server hypercorn --app real --cert-dir DIR --port 9443
    .venv/bin/python bench/webhook_bench.py --server hypercorn      # throughput and latency, both floors
    .venv/bin/python scripts/stall.py --server hypercorn            # the hostile connections

The candidates are not dependencies of gpupolicy: install them into the virtualenv to measure them
(`.venv/bin/pip install hypercorn uvicorn a2wsgi gevent granian`). Each is given what the webhook's own
settings say (Settings.from_env: GPUPOLICY_* variables), translated into its own options as far as it has
one: 5 s for the TLS handshake and the headers, 10 s for a request, 75 s of keep-alive, 500 connections per
worker, 3 MiB bodies, 2 worker processes, TLS 1.2+ from webhook/tls.py where the server takes an
SSLContext. What a server has no option for is left at its default, and docs/performance.md says so.

--app picks what runs behind it: `real` (the webhook's Flask app, policy from GPUPOLICY_POLICY or
GPUPOLICY_SPEC, a log line per denied review, multiprocess metrics), `noop` (the raw WSGI floor) or
`flask-noop` (the Flask floor), both from bench/noop_app.py. ASGI servers get them through a2wsgi.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for entry in (str(BENCH), str(ROOT)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from webhook import serve, tls  # noqa: E402
from webhook.settings import Settings  # noqa: E402

#: server kind -> what it is, for reports.
KINDS = {
    "eventloop": "gunicorn + the webhook's event-loop worker (webhook/worker.py), as shipped",
    "gthread": "gunicorn's gthread worker, 4 threads per worker (the worker the event loop replaced)",
    "gevent": "gunicorn's gevent worker",
    "gevent-timeout": "gunicorn's gevent worker, each connection under a gevent.Timeout of the request timeout",
    "gasgi": "gunicorn 27's ASGI worker (-k asgi, gunicorn/workers/gasgi.py) + a2wsgi",
    "hypercorn": "hypercorn 0.18, WSGI served directly (asyncio worker)",
    "uvicorn": "uvicorn 0.54 (httptools) + a2wsgi",
    "granian": "granian 2.8 (Rust, hyper), WSGI interface",
}
APPS = ("real", "noop", "flask-noop")
#: Threads per gthread worker, as the webhook shipped them before the event-loop worker.
GTHREAD_THREADS = 4


def build(app: str) -> Any:
    """The WSGI application `app` names, built in the calling (worker) process."""
    if app == "real":
        from webhook.app import create_app

        settings = Settings.from_env()
        serve.configure_logging(settings.log_level)
        return create_app(settings)
    import noop_app

    return noop_app.flask_app() if app == "flask-noop" else noop_app.app


def __getattr__(name: str) -> Any:
    """`servers:real`, `servers:real_asgi`, ...: what servers that import an app by name load in each worker."""
    app = name.removesuffix("_asgi").replace("_", "-")
    if app not in APPS:
        raise AttributeError(name)
    wsgi = build(app)
    if name.endswith("_asgi"):
        from a2wsgi import WSGIMiddleware

        return WSGIMiddleware(wsgi)  # its default pool: 10 threads per worker
    return wsgi


# --- gunicorn-based candidates: the webhook's WebhookServer with another worker class ----------------------


def _gunicorn(settings: Settings, app: str, worker_class: Any, *, asgi: bool = False) -> int:
    class Candidate(serve.WebhookServer):
        def load_config(self) -> None:
            super().load_config()
            self.cfg.set("worker_class", worker_class)
            if worker_class not in ("webhook.worker.EventLoopWorker", "gthread"):  # those keep tls.py's reloader
                # Built in the worker, after gevent's monkey-patching: a context made before it (the
                # master's CertificateReloader) wraps sockets gevent cannot use. Once per worker, so no
                # hot reload here: gevent and gasgi ask gunicorn's ssl_context hook once, at start.
                cert, key = self.settings.cert_file, self.settings.key_file
                self.cfg.set("ssl_context", lambda conf, factory: tls.build_context(cert, key))
            if asgi:
                self.cfg.set("asgi_lifespan", "off")
            if worker_class == "gthread":
                self.cfg.set("threads", GTHREAD_THREADS)

        def load(self) -> Any:
            wsgi = super().load() if app == "real" else build(app)
            if asgi:
                from a2wsgi import WSGIMiddleware

                return WSGIMiddleware(wsgi)
            return wsgi

    return serve.run(settings, application=Candidate)


def _gevent_timeout_worker() -> Any:
    import gevent
    from gunicorn.workers.ggevent import GeventWorker

    class GeventDeadlineWorker(GeventWorker):  # type: ignore[misc]
        """Every connection, keep-alive included, ends after the request timeout: the one bound gevent offers
        without rewriting gunicorn's request loop (base_async.handle)."""

        def handle(self, listener: Any, client: Any, addr: Any) -> None:
            with gevent.Timeout(self.app.settings.request_timeout_seconds, False):
                super().handle(listener, client, addr)

    return GeventDeadlineWorker


# --- the others: each started through its own Python API --------------------------------------------------


def _metrics_dir(settings: Settings) -> str | None:
    """Several worker processes: prometheus_client's multiprocess mode, as serve.run arranges for gunicorn.
    Returns the directory made for it, which the caller removes."""
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")])
    if settings.workers > 1 and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made = tempfile.mkdtemp(prefix="gpupolicy-bench-metrics-")
        return made
    return None


def _hypercorn(settings: Settings, app: str) -> int:
    from hypercorn.config import Config
    from hypercorn.run import run

    config = Config()
    config.application_path = f"wsgi:servers:build({app!r})"  # evaluated in each worker
    config.bind = [f"{settings.bind}:{settings.port}"]
    config.workers = settings.workers
    config.certfile, config.keyfile = str(settings.cert_file), str(settings.key_file)
    config.alpn_protocols = ["http/1.1"]
    config.ssl_handshake_timeout = settings.effective_header_timeout
    config.read_timeout = int(settings.effective_header_timeout)  # per read(), reset by every byte that arrives
    config.keep_alive_timeout = settings.keepalive_seconds
    config.h11_max_incomplete_size = 64 * 1024
    config.wsgi_max_body_size = settings.max_content_length
    config.graceful_timeout = settings.graceful_timeout_seconds
    config.backlog = 1024
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = settings.log_level.upper()
    return run(config)


def _uvicorn(settings: Settings, app: str) -> int:
    import uvicorn

    uvicorn.run(f"servers:{app.replace('-', '_')}_asgi", host=settings.bind, port=settings.port,
                workers=settings.workers, ssl_certfile=str(settings.cert_file), ssl_keyfile=str(settings.key_file),
                limit_concurrency=settings.max_connections, timeout_keep_alive=int(settings.keepalive_seconds),
                timeout_graceful_shutdown=int(settings.graceful_timeout_seconds), h11_max_incomplete_event_size=65536,
                access_log=False, log_level=settings.log_level, backlog=1024)
    return 0


def _granian(settings: Settings, app: str) -> int:
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.server import Server

    Server(f"servers:{app.replace('-', '_')}", address=settings.bind, port=settings.port,
           interface=Interfaces.WSGI, workers=settings.workers, http=HTTPModes.http1,
           http1_settings=HTTP1Settings(header_read_timeout=int(settings.effective_header_timeout * 1000)),
           backpressure=settings.max_connections, ssl_cert=settings.cert_file, ssl_key=settings.key_file,
           workers_kill_timeout=int(settings.graceful_timeout_seconds), log_access=False).serve()
    return 0


def run(kind: str, app: str, settings: Settings) -> int:
    if kind == "eventloop":
        return _gunicorn(settings, app, "webhook.worker.EventLoopWorker")
    if kind == "gthread":
        return _gunicorn(settings, app, "gthread")
    if kind in ("gevent", "gevent-timeout"):
        return _gunicorn(settings, app, "gevent" if kind == "gevent" else _gevent_timeout_worker())
    if kind == "gasgi":
        return _gunicorn(settings, app, "asgi", asgi=True)
    made = _metrics_dir(settings)
    try:
        return {"hypercorn": _hypercorn, "uvicorn": _uvicorn, "granian": _granian}[kind](settings, app)
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def command(kind: str, app: str, *, cert_dir: Path, port: int, bind: str = "127.0.0.1") -> list[str]:
    """The command line that serves app behind kind (what the benchmark and the stall check start)."""
    if kind == "eventloop" and app == "real":  # exactly as shipped
        return [str(Path(sys.executable).parent / "gpupolicy"), "webhook", "serve", "--cert-dir", str(cert_dir),
                "--bind", bind, "--port", str(port)]
    return [sys.executable, str(BENCH / "servers.py"), "--server", kind, "--app", app, "--cert-dir", str(cert_dir),
            "--bind", bind, "--port", str(port)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=sorted(KINDS), required=True)
    parser.add_argument("--app", choices=APPS, default="real")
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    settings = Settings.from_env(cert_dir=args.cert_dir, bind=args.bind, port=args.port)
    return run(args.server, args.app, settings)


if __name__ == "__main__":
    sys.exit(main())
