"""Production serving: gunicorn's master, event-loop workers over TLS, a readiness drain on SIGTERM, metrics."""

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

from webhook import balance, connection, tls
from webhook.nodes import NodeSourceFactory
from webhook.settings import Settings, SettingsError

log = logging.getLogger("gpupolicy.webhook.serve")
#: gunicorn's worker heartbeat timeout: a worker silent this long is killed and replaced.
WORKER_TIMEOUT_SECONDS = 30
#: A worker reads at most this many bodies past 64 KiB at once (3 MiB each at most): 12 MiB per worker.
LARGE_BODY_SLOTS = 4


def run(settings: Settings, *, application: type[WebhookServer] | None = None,
        nodes: NodeSourceFactory | None = None) -> int:
    """Serve until SIGTERM (drain, then exit 0) or SIGINT. Raises SettingsError for unusable certificates.

    application replaces WebhookServer (the benchmarks' floors load another app on the same stack); nodes builds
    each worker's node cache after the fork (the command line passes cluster.nodes' factory when
    settings.node_cache is on).
    """
    if settings.cert_file is None or settings.key_file is None:
        raise SettingsError("the webhook serves TLS only: give --cert-dir, or --cert and --key")
    configure_logging(settings.log_level)
    reloader = tls.CertificateReloader(settings.cert_file, settings.key_file)
    try:
        reloader.context()  # fail now, with a message, rather than at the first handshake
    except (OSError, ssl.SSLError, ValueError) as err:
        raise SettingsError(f"cannot load the serving certificate {settings.cert_file}: {err}") from None
    metrics_dir, owned = _prepare_metrics_dir(settings)
    master = os.getpid()
    try:
        (application or WebhookServer)(dataclasses.replace(settings, metrics_dir=metrics_dir), reloader,
                                       nodes=nodes).run()
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


def configure_logging(level: str) -> None:
    """The `gpupolicy` loggers to stderr, one line per record with the process id (workers log apart)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LineFormatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"))
    logger = logging.getLogger("gpupolicy")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    # A record computes its caller's frame, thread and multiprocessing process name unless told not to, and no
    # line here prints them (the logging HOWTO, "Optimization"): a review's record 15.7 -> 13.6 µs.
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logMultiprocessing = False


class LineFormatter(logging.Formatter):
    """logging.Formatter's lines, byte for byte, with the date and time of day formatted once a second.

    The webhook logs a line per denied, warned or audited review; time.strftime was a fifth of that line's cost
    (docs/performance.md).
    A record's time of day changes only when its whole second does, so the text is reused until then.
    """

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if int(record.created) != second:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (int(record.created), text)
        return self.default_msec_format % (text, record.msecs)


def _address(bind: str, port: int) -> str:
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"


class WebhookServer(BaseApplication):  # type: ignore[misc]
    """gunicorn configured in code: no config file, no command line of its own."""

    def __init__(self, settings: Settings, reloader: tls.CertificateReloader, *,
                 nodes: NodeSourceFactory | None = None) -> None:
        from webhook.state import DrainFlag

        self.settings = settings
        self.reloader = reloader
        self.nodes = nodes
        self.drain = DrainFlag()  # shared memory, created before the fork
        self.counts = balance.ConnectionCounts()  # likewise: how the workers spread connections (balance.py)
        super().__init__()

    def connection_counts(self) -> balance.ConnectionCounts:
        """Every worker's open connections, shared, so that each takes its share (worker.py, balance.py)."""
        return self.counts

    def connection_limits(self) -> connection.Limits:
        """What one connection may take (the worker asks in each process)."""
        s = self.settings
        return connection.Limits(header_timeout=s.effective_header_timeout, request_timeout=s.request_timeout_seconds,
                                 keepalive=s.keepalive_seconds, max_body=s.max_content_length)

    def metrics_port(self) -> int:
        """The plain-HTTP port for /metrics and the probes, or 0 (the worker serves it without TLS)."""
        return self.settings.metrics_port

    def review_threads(self) -> int:
        """How many threads of each worker evaluate reviews beside its event loop (worker.py)."""
        return self.settings.threads

    def large_body_slots(self) -> int:
        """How many bodies past 64 KiB one worker reads at once (worker.py)."""
        return LARGE_BODY_SLOTS

    def load_config(self) -> None:
        s = self.settings
        options: dict[str, Any] = {
            "bind": [_address(s.bind, s.port)] + ([_address(s.bind, s.metrics_port)] if s.metrics_port else []),
            "worker_class": "webhook.worker.EventLoopWorker",
            "workers": s.workers,
            "worker_connections": s.max_connections,
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
            "pre_fork": self._pre_fork,
            "child_exit": self._child_exit,
            # gunicorn >= 24 opens a control socket in the working directory; a read-only,
            # non-root container has no use for it.
            "control_socket_disable": True,
        }
        for key, value in options.items():
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Any:
        """Runs in each worker after the fork: its own store, metrics, Flask app and node cache (a watch thread of
        each worker's own: a client's connections must not cross the fork, and one cache per process costs about
        1 MB and one watch for 5,000 nodes, against a shared one's inter-process reads on every pinned pod)."""
        from webhook.app import create_app
        from webhook.context import EXTENSION

        app = create_app(self.settings, drain=self.drain, nodes=self.nodes)
        self.metrics = app.extensions[EXTENSION].metrics
        self.reloader.observe(self.metrics)
        return app

    def connection_dropped(self, reason: str) -> None:
        """A client refused or disconnected by the worker (worker.py), counted in this worker's metrics."""
        metrics = getattr(self, "metrics", None)
        if metrics is not None:
            metrics.connection_dropped(reason)

    def run(self) -> None:
        try:
            _DrainingArbiter(self).run()
        except RuntimeError as err:  # what BaseApplication.run turns into a message, too
            raise SettingsError(str(err)) from None

    def _pre_fork(self, arbiter: Arbiter, worker: Any) -> None:
        # In the master, one worker at a time: the new worker's slot in the shared connection counts.
        worker.balance_slot = self.counts.assign(getattr(w, "balance_slot", None) for w in arbiter.WORKERS.values())

    def _child_exit(self, arbiter: Arbiter, worker: Any) -> None:
        self.counts.release(getattr(worker, "balance_slot", None))
        if self.settings.metrics_dir is not None:
            from prometheus_client import multiprocess

            # Drops the dead worker's live* gauge samples; its counters stay, as counters must.
            multiprocess.mark_process_dead(worker.pid, str(self.settings.metrics_dir))


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
