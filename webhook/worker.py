"""The gunicorn worker: one asyncio event loop per process accepts, reads and answers every connection.

Why not gthread (the worker this replaced): it commits one of its few threads to a connection before the
request has arrived, so clients that complete a TLS handshake and stay silent, trickle their headers, or
declare a large body and send it slowly held every thread and stopped the reviews behind them
(docs/reliability.md has the figures). Here a connection is an object on the loop until its request is
complete (connection.py). A review is then evaluated by one of a few review threads (`threads`, 2 by
default), so the loop goes on reading requests, completing handshakes and answering /healthz while it runs:
reviews are pure CPU under the GIL, so the threads buy no parallelism (two processes use two CPUs), but
a costly review no longer stops every other connection of its worker. Each review has a budget counted
from its arrival, queueing included (routes.py), and the engine is linear in the object, so no review
holds a thread longer than that. Probes and /metrics are answered on the loop itself.

What the worker bounds:
* connections: at most `max_connections` open at once (gunicorn's `worker_connections`), handshakes
  included. At the cap a new connection takes the place of the one idle longest without a request in
  flight, which is closed and counted (reason evicted): idle strangers cannot keep the API server out,
  whose connections carry requests. Only when every connection has a request under way is the newcomer
  closed at once, before any TLS work. The cap stays as memory protection (each idle TLS connection holds
  ~40 KiB, docs/reliability.md). The metrics port, when there is one, has its own 16, plain HTTP, and
  serves only /metrics and the probes;
* reviews waiting for a thread: at most REVIEW_QUEUE per worker; past that a review is evaluated as
  already out of time, which denies it at once (never allows);
* TLS: the handshake must finish within the header timeout; each handshake uses the newest good
  certificate (the `ssl_context` hook, tls.CertificateReloader); asyncio's per-connection read buffer is
  cut from 256 KiB to 16 KiB (one TLS record), or a thousand idle connections would hold 256 MiB;
* bodies in flight: a body past 64 KiB needs one of `large_body_slots` slots to go on reading; without
  one, its client waits (within its request deadline) until a large body is done. Slots are granted in
  order and never taken back, so large bodies always progress;
* spread: a worker holding more serving connections than another live worker lets a pending connection wait
  a moment (at most 20 ms) for that one (balance.py), so the API server's few keep-alive connections use
  every worker;
* shutdown: SIGTERM stops accepting, closes idle connections, lets requests under way finish within
  `graceful_timeout`, then exits.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import collections
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import gc
import os
import select
import signal
import socket
import ssl
import sys
from typing import Any

from gunicorn import sock as gunicorn_sock
from gunicorn.workers import base

from webhook import balance, connection, wsgi

#: asyncio's SSLProtocol reads into a buffer of this many bytes per connection (3.11 default: 256 KiB,
#: allocated and zeroed for every connection). A TLS record carries at most 16 KiB, so nothing is lost.
TLS_READ_BYTES = 16 * 1024
#: How many pending connections one wake-up of the listener accepts before the loop serves others. Every
#: worker is woken for a pending connection, so taking one at a time spreads a burst over the workers;
#: with 64 per wake-up the first awake worker took all 16 of wrk's connections (16/0) and the pod
#: served from one CPU (bench/webhook_bench.py, conns/worker: 8/8 with 1). Which worker is woken first is still
#: chance, so a worker holding more connections than another also leaves a pending one to it (balance.py).
ACCEPT_BATCH = 1
#: After its last answer, how long a closing TLS connection waits for the client's close_notify.
TLS_SHUTDOWN_SECONDS = 1.0
#: glibc's malloc_trim(3): parsing a large body leaves megabytes of freed heap that glibc would keep
#: (measured: the pod settled 15-20 MiB higher without it, scripts/memory.py). None on other C libraries.
_MALLOC_TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim", None)
#: What the plain-HTTP metrics port serves (serve.py `metrics_port`); anything else there is a 404.
SCRAPE_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})
#: Open connections per worker on the metrics port, apart from the serving port's: a scraper needs one or
#: two, and whoever else reaches that port cannot take connections from the API server.
SCRAPE_CONNECTIONS = 16
#: Reviews queued for a review thread per worker, beyond those being evaluated. A queued review's budget runs
#: while it waits, so a longer queue would only hold reviews that are denied for their time when they start.
REVIEW_QUEUE = 64
#: Drop reports logged one by one per window; the rest are counted and summed up in one line.
LOG_BURST, LOG_WINDOW_SECONDS = 20, 10.0


class EventLoopWorker(base.Worker):  # type: ignore[misc]
    """A gunicorn worker whose connections cost no thread while their requests arrive (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[connection.Connection] = set()  # on the serving port
        self._scrapes: set[connection.Connection] = set()  # on the metrics port
        self._large: set[connection.Connection] = set()
        self._waiting: collections.deque[connection.Connection] = collections.deque()
        # Serving connections with no request in flight, the one idle longest first (dicts keep insertion order).
        self._idle: dict[connection.Connection, None] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._reviews = 0  # with the pool: being evaluated or queued
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._log_window_end = 0.0
        self._logged = 0
        self._suppressed: dict[str, int] = {}
        self._counts: balance.ConnectionCounts | None = None  # shared with the other workers (balance.py)
        self._slot: int | None = None  # this worker's slot in them (None: it takes part in no balance)
        self._deferring_since: float | None = None  # when this worker first left the pending connection to others

    # --- connection.Host ------------------------------------------------------------------------------

    @property
    def limits(self) -> connection.Limits:
        return self._limits

    @property
    def draining(self) -> bool:
        return not self.alive

    def admit_large_body(self, conn: connection.Connection) -> bool:
        """A slot for a large body, or False: the connection then waits (paused) for large_body_done."""
        if len(self._large) < self._large_slots:
            self._large.add(conn)
            return True
        self._waiting.append(conn)
        return False

    def large_body_done(self, conn: connection.Connection) -> None:
        if conn in self._large:
            self._large.discard(conn)
        elif conn in self._waiting:
            self._waiting.remove(conn)
        while self._waiting and len(self._large) < self._large_slots:
            waiting = self._waiting.popleft()
            self._large.add(waiting)
            waiting.resume_reading()

    def closed(self, conn: connection.Connection) -> None:
        self.connections.discard(conn)
        self._scrapes.discard(conn)
        self._idle.pop(conn, None)
        self._publish()

    def _publish(self) -> None:
        # Only while accepting: a draining worker's falling count must not draw its siblings' connections to it.
        if self._counts is not None and self.alive:
            self._counts.publish(self._slot, len(self.connections))  # type: ignore[arg-type]

    def idle(self, conn: connection.Connection) -> None:
        if conn in self.connections:
            self._idle.pop(conn, None)
            self._idle[conn] = None  # now the newest idle one

    def active(self, conn: connection.Connection) -> None:
        self._idle.pop(conn, None)

    def evaluate(self, app: wsgi.WSGIApp, env: dict[str, Any]) -> asyncio.Future[wsgi.Answer]:
        """Run the application on a review thread; the future completes on the loop."""
        assert self.loop is not None and self._pool is not None
        if self._reviews >= self._threads + REVIEW_QUEUE:
            env[wsgi.ARRIVED_KEY] = float("-inf")  # out of time before it starts: denied at its first step
        self._reviews += 1
        future = self.loop.run_in_executor(self._pool, wsgi.call, app, env)
        future.add_done_callback(self._review_done)
        return future

    def _review_done(self, _: asyncio.Future[wsgi.Answer]) -> None:
        self._reviews -= 1

    def after_large_request(self) -> None:
        """Hand the heap's free pages back to the kernel after a large body (glibc keeps them otherwise)."""
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)

    def dropped(self, reason: str, message: str) -> None:
        """Log a refused or timed-out client in one line; a flood of them is summed up, not logged line by line."""
        assert self.loop is not None
        now = self.loop.time()
        if now >= self._log_window_end:
            if self._suppressed:
                counts = ", ".join(f"{n} {why}" for why, n in sorted(self._suppressed.items()))
                self.log.warning("more clients refused or disconnected in the last %gs: %s",
                                 LOG_WINDOW_SECONDS, counts)
            self._log_window_end, self._logged, self._suppressed = now + LOG_WINDOW_SECONDS, 0, {}
        if self._logged < LOG_BURST:
            self._logged += 1
            self.log.warning("%s", message)
        else:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
        observer = getattr(self.app, "connection_dropped", None)
        if observer is not None:
            observer(reason)

    # --- gunicorn's Worker ------------------------------------------------------------------------------

    def init_process(self) -> None:
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BYTES  # type: ignore[attr-defined]
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self._stopping = asyncio.Event()
        self._limits = self.app.connection_limits()
        self._large_slots = self.app.large_body_slots()
        self._metrics_port = self.app.metrics_port()
        self._threads = self.app.review_threads()
        counts = getattr(self.app, "connection_counts", None)
        self._slot = getattr(self, "balance_slot", None)  # given by the master before the fork (serve.py)
        self._counts = counts() if counts is not None and self._slot is not None else None
        self._pool = concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix="review")
        super().init_process()  # signals, the application, then run()

    def init_signals(self) -> None:
        super().init_signals()
        assert self.loop is not None
        # Through the loop's wake-up pipe, so a signal wakes the selector at once.
        self.loop.add_signal_handler(signal.SIGTERM, self._stop)
        self.loop.add_signal_handler(signal.SIGQUIT, self._quit)
        self.loop.add_signal_handler(signal.SIGINT, self._quit)
        self.loop.add_signal_handler(signal.SIGUSR1, self.log.reopen_files)

    def run(self) -> None:
        assert self.loop is not None
        # Everything loaded so far (the app, its policy, Flask, the libraries: ~60,000 objects) lives as long as
        # the worker. Frozen (Python's gc.freeze), a full collection no longer walks it: it took 12-70 ms of the
        # loop, a stall for every review waiting, once every ~20,000 reviews, and now takes well under 1 ms.
        gc.freeze()
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
            self.loop.close()

    # --- serving ----------------------------------------------------------------------------------------

    async def _serve(self) -> None:
        assert self.loop is not None and self._stopping is not None
        scrape_app = wsgi.only(self.wsgi, SCRAPE_PATHS, connection.not_found)
        for listener in self.sockets:
            listener.sock.setblocking(False)
            scrape = bool(self._metrics_port) and listener.sock.getsockname()[1] == self._metrics_port
            self.loop.add_reader(listener.sock.fileno(), self._accept, listener.sock,
                                 self._scrapes if scrape else self.connections, scrape_app if scrape else self.wsgi)
        self._publish()  # accepting now: until here the slot read as unused, so siblings did not wait for it
        heartbeat = max(0.5, min(1.0, self.timeout / 4))
        while self.alive:
            self.notify()
            if self.ppid != os.getppid():
                self.log.info("Parent changed, shutting down: %s", self)
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), heartbeat)
        await self._drain()

    def _accept(self, listener: socket.socket, table: set[connection.Connection], app: wsgi.WSGIApp) -> None:
        """Accept what the listener has, into table (serving or scrape connections), served by app."""
        assert self.loop is not None
        scrape = table is self._scrapes
        limit = SCRAPE_CONNECTIONS if scrape else self.cfg.worker_connections
        if not scrape and self._defer_to_others(listener, table, app):
            return
        for _ in range(ACCEPT_BATCH):
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # EMFILE, ENOBUFS, ...: the backlog keeps the client for the next try
                self.log.warning("cannot accept a connection: %s", err)
                return
            if len(table) >= limit:
                victim = None if scrape else next(iter(self._idle), None)
                if victim is None:
                    self.dropped("connection-limit", f"{_peer(client)}: refused, {len(table)} connections are "
                                                     f"open on the {'metrics' if scrape else 'serving'} port (the "
                                                     "limit per worker) and each has a request under way")
                    client.close()
                    continue
                self.closed(victim)
                victim.evict()
                self.dropped("evicted", f"{victim.endpoint.peer}: closed, the connection idle longest, for a new "
                                        f"one: {limit} connections were open (the limit per worker)")
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = connection.Connection(self, app, accepted_at=self.loop.time())
            table.add(conn)
            if not scrape:
                self._idle[conn] = None  # no request yet: evictable from its accept on
            conn.task = self.loop.create_task(self._start(conn, client, tls=self.cfg.is_ssl and not scrape))
            if not scrape:
                self._publish()

    def _defer_to_others(self, listener: socket.socket, table: set[connection.Connection],
                         app: wsgi.WSGIApp) -> bool:
        """Whether to leave a pending connection to a worker holding fewer (balance.py): the listener is then not
        watched for RECHECK_SECONDS, and again while one stays pending, until MAX_WAIT_SECONDS have passed since
        this worker first left it; after that this worker takes it."""
        assert self.loop is not None
        now = self.loop.time()
        if self._counts is None or not self._counts.over_share(self._slot, len(self.connections)):  # type: ignore[arg-type]
            self._deferring_since = None
            return False
        if self._deferring_since is None:
            self._deferring_since = now
        elif now - self._deferring_since >= balance.MAX_WAIT_SECONDS:
            self._deferring_since = None
            return False  # nobody took it: a sibling is busy or stuck, so this worker does
        fd = listener.fileno()
        self.loop.remove_reader(fd)

        def watch_again() -> None:
            if not self.alive:  # the drain has stopped accepting
                return
            if not _pending(fd):
                self._deferring_since = None  # another worker took it: the next connection starts a new wait
            self.loop.add_reader(fd, self._accept, listener, table, app)  # type: ignore[union-attr]

        self.loop.call_later(balance.RECHECK_SECONDS, watch_again)
        return True

    async def _start(self, conn: connection.Connection, client: socket.socket, *, tls: bool) -> None:
        assert self.loop is not None
        peer = _peer(client)
        context = gunicorn_sock.ssl_context(self.cfg) if tls else None
        try:
            await self.loop.connect_accepted_socket(
                lambda: conn, client, ssl=context,
                ssl_handshake_timeout=self._limits.header_timeout if context else None,
                ssl_shutdown_timeout=TLS_SHUTDOWN_SECONDS if context else None,
            )
            conn.task = None
        except asyncio.CancelledError:  # evicted during its handshake
            self._failed(conn, client)
            return
        except TimeoutError:
            self._failed(conn, client)
            self.dropped("timeout", f"{peer} did not complete its TLS handshake within "
                                    f"{self._limits.header_timeout:g}s; disconnected")
        except (OSError, ssl.SSLError, EOFError) as err:  # scanners, refused TLS versions, resets
            self._failed(conn, client)
            self.log.debug("TLS handshake with %s failed: %s", peer, err)

    def _failed(self, conn: connection.Connection, client: socket.socket) -> None:
        self.closed(conn)
        client.close()

    async def _drain(self) -> None:
        assert self.loop is not None
        if self._counts is not None:
            self._counts.release(self._slot)  # accepting no more: siblings stop leaving connections to it
        for listener in self.sockets:
            self.loop.remove_reader(listener.sock.fileno())
        for conn in [*self.connections, *self._scrapes]:
            conn.shutdown()
        deadline = self.loop.time() + self.cfg.graceful_timeout
        while (self.connections or self._scrapes) and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in [*self.connections, *self._scrapes]:
            conn.abort()

    def _stop(self) -> None:
        self.alive = False
        if self._stopping is not None:
            self._stopping.set()

    def _quit(self) -> None:
        self.alive = False
        self.cfg.worker_int(self)
        sys.exit(0)


def _pending(fd: int) -> bool:
    """Whether a listening socket has a connection waiting (poll, not select: a worker's fds may pass 1,024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _peer(client: socket.socket) -> str:
    try:
        host, port = client.getpeername()[:2]
    except OSError:
        return "a client"
    return f"{host}:{port}"
