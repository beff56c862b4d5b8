"""Production serving: gunicorn gthread workers over TLS, a readiness drain on SIGTERM, metrics across workers."""

# Nothing here may import prometheus_client (or webhook.app/metrics) at module level: `run` must put
# PROMETHEUS_MULTIPROC_DIR in the environment first (metrics.py says why).

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.workers import gthread

from webhook import tls
from webhook.settings import Settings, SettingsError

log = logging.getLogger("gpupolicy.webhook.serve")
#: gunicorn's worker heartbeat timeout: a worker silent this long is killed and replaced.
WORKER_TIMEOUT_SECONDS = 30


def run(settings: Settings) -> int:
    """Serve until SIGTERM (drain, then exit 0) or SIGINT. Raises SettingsError for unusable certificates."""
    if settings.cert_file is None or settings.key_file is None:
        raise SettingsError("the webhook serves TLS only: give --cert-dir, or --cert and --key")
    _configure_logging(settings.log_level)
    reloader = tls.CertificateReloader(settings.cert_file, settings.key_file,
                                       request_timeout_seconds=settings.request_timeout_seconds)
    try:
        reloader.context()  # fail now, with a message, rather than at the first handshake
    except (OSError, ssl.SSLError, ValueError) as err:
        raise SettingsError(f"cannot load the serving certificate {settings.cert_file}: {err}") from None
    metrics_dir, owned = _prepare_metrics_dir(settings)
    master = os.getpid()
    try:
        WebhookServer(dataclasses.replace(settings, metrics_dir=metrics_dir), reloader).run()
    finally:
        # Workers are forked from inside run() and unwind through here too when they exit: only the
        # master may remove the directory they all write to.
        if owned and metrics_dir is not None and os.getpid() == master:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def _prepare_metrics_dir(settings: Settings) -> tuple[Path | None, bool]:
    """The multiprocess metrics directory (given, or a fresh one when workers > 1), and whether we own it."""
    directory, owned = settings.metrics_dir, False
    if directory is None and settings.workers > 1:
        directory, owned = Path(tempfile.mkdtemp(prefix="gpupolicy-metrics-")), True
    if directory is None:
        return None, False
    if "prometheus_client" in sys.modules and "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        raise RuntimeError("prometheus_client was imported before serve.run set PROMETHEUS_MULTIPROC_DIR")
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):  # a previous run's samples (prometheus_client docs: wipe on start)
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    log.info("metrics of all workers are merged through %s", directory)
    return directory, owned


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"))
    logger = logging.getLogger("gpupolicy")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def _address(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


class WebhookServer(BaseApplication):  # type: ignore[misc]
    """gunicorn configured in code: no config file, no command line of its own."""

    def __init__(self, settings: Settings, reloader: tls.CertificateReloader) -> None:
        from webhook.app import DrainFlag, LargeBodyGate  # after PROMETHEUS_MULTIPROC_DIR is set (app imports metrics)

        self.settings = settings
        self.reloader = reloader
        self.drain = DrainFlag()  # shared memory, created before the fork
        # One large body parsed at a time in the whole pod: the workers lock one file (app.py says why). The
        # metrics directory is per run and writable (an emptyDir in the compiled Deployment); with a single
        # worker there is none, and the gate's thread lock is enough.
        lock_file = settings.metrics_dir / "large-body.lock" if settings.metrics_dir is not None else None
        self.large_bodies = LargeBodyGate(lock_file)
        super().__init__()

    def load_config(self) -> None:
        s = self.settings
        options: dict[str, Any] = {
            "bind": [_address(s.bind, s.port)],
            "worker_class": _Worker,
            "workers": s.workers,
            "threads": s.threads,
            "certfile": str(s.cert_file),
            "keyfile": str(s.key_file),
            "ssl_context": self.reloader,  # called per connection: rotation without restart (tls.py)
            "timeout": WORKER_TIMEOUT_SECONDS,
            "graceful_timeout": math.ceil(s.graceful_timeout_seconds),
            "keepalive": math.ceil(s.keepalive_seconds),
            "accesslog": None,  # routes log each review with its verdict; paths alone say nothing
            "errorlog": "-",
            "loglevel": s.log_level,
            "proc_name": "gpupolicy-webhook",
            "child_exit": self._child_exit,
            # gunicorn >= 24 opens a control socket in the working directory; a read-only,
            # non-root container has no use for it.
            "control_socket_disable": True,
        }
        for key, value in options.items():
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Any:
        """Runs in each worker after the fork: its own store, metrics and Flask app."""
        from webhook.app import EXTENSION, create_app

        app = create_app(self.settings, drain=self.drain, large_bodies=self.large_bodies)
        self.reloader.observe(app.extensions[EXTENSION].metrics)
        logging.getLogger("gunicorn.error").addFilter(_SlowClientLog())
        return app

    def run(self) -> None:
        try:
            _DrainingArbiter(self).run()
        except RuntimeError as err:  # what BaseApplication.run turns into a message, too
            raise SettingsError(str(err)) from None

    def _child_exit(self, arbiter: Arbiter, worker: Any) -> None:
        if self.settings.metrics_dir is not None:
            from prometheus_client import multiprocess

            # Drops the dead worker's live* gauge samples; its counters stay, as counters must.
            multiprocess.mark_process_dead(worker.pid, str(self.settings.metrics_dir))


#: gunicorn >= 24's "park this connection in the poller" answer from ThreadWorker.handle; None before.
_PARK = getattr(gthread, "_DEFER", None)


class _Worker(gthread.ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker, changed in two ways so that clients who hold threads cannot starve others.

    * A new connection waits for its first byte in the poller. gunicorn 27 hands every accepted
      connection straight to a thread, which waits up to 5 s (gthread.py `DEFAULT_WORKER_DATA_TIMEOUT`)
      for the client's first byte, so 8 clients that connect and say nothing (a TCP health check, a port
      scan, an attack) held all 8 threads and a review waited 9.7 s (docs/reliability.md). Parked, a
      silent connection holds no thread and is closed after `keepalive` seconds (as gunicorn <= 23 did).
    * A worker accepts only while it has a free thread. gthread accepts whenever it has fewer than
      `worker_connections` (1000) connections and queues the work behind its busy threads, so one worker
      took all 16 stalled clients of a test and a review waited 7.7 s behind them while the other worker
      sat idle. Left in the kernel's backlog, a connection goes to the first worker with a free thread.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._busy = 0  # connections handed to the pool and not yet back: only the main loop touches it

    def handle(self, conn: Any) -> Any:
        if _PARK is not None and not conn.initialized and not conn.data_ready and not conn.wait_for_data(0):
            return _PARK
        return super().handle(conn)

    def enqueue_req(self, conn: Any) -> None:
        self._busy += 1
        super().enqueue_req(conn)

    def finish_request(self, conn: Any, fs: Any) -> None:
        self._busy -= 1
        super().finish_request(conn, fs)

    def accept(self, listener: Any) -> None:
        super().accept(listener)
        if self._busy >= self.cfg.threads:
            self.set_accept_enabled(False)

    def set_accept_enabled(self, enabled: bool) -> None:
        # gthread's loop asks to accept again on every pass while it has room for connections; it gets its
        # wish only once a thread is free (finish_request wakes the loop when one is).
        super().set_accept_enabled(enabled and self._busy < self.cfg.threads)


class _SlowClientLog(logging.Filter):
    """Logs a client we disconnected on purpose (tls.ClientTooSlow) as one warning, not a traceback.

    gthread's `handle` logs any OSError it does not recognise with `log.exception("Socket error processing
    request.")`; a slow-loris client would fill the log with tracebacks of our own timeout.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, tls.ClientTooSlow):
            record.msg, record.args = "%s", (str(error),)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class _DrainingArbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's master, with a readiness drain in front of its graceful SIGTERM shutdown.

    Kubernetes sends SIGTERM and removes the pod from the Service's endpoints at the same time, and the
    API server may keep sending reviews until the removal has propagated. So the master first flips the
    shared drain flag (every worker's /readyz answers 503) and keeps the listeners open for
    drain_seconds; then gunicorn's own graceful stop closes them and lets in-flight requests finish
    within graceful_timeout. terminationGracePeriodSeconds must exceed the sum.
    """

    def handle_term(self) -> None:
        server: WebhookServer = self.app
        server.drain.begin()
        seconds = server.settings.drain_seconds
        self.log.info("SIGTERM: readiness is off; serving for %.1fs more, then stopping gracefully", seconds)
        # Workers serve meanwhile; the master only waits (signals arriving now stay queued).
        time.sleep(seconds)
        raise StopIteration
