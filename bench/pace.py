"""An open-loop, fixed-rate HTTPS load generator: what wrk2 does, in asyncio, for bench/webhook_bench.py.

    .venv/bin/python bench/pace.py --url https://127.0.0.1:8443 --rate 500 --seconds 10 --ca ca.crt

Why not wrk, hey or h2load (all in Debian 12; wrk2 is not): wrk cannot pace at all; `hey -q` and
`h2load --rps` pace each connection but start the clock when a request is actually sent, so a request
held back behind a slow one never counts its wait (coordinated omission) and tail latency looks better
than a caller sees it. Here request k is due at t0 + k/rate whatever happened before, and goes out on a
pool of keep-alive TLS connections kept the way the API server's Go client keeps them (idle ones reused
most recent first, a new one dialled when none is idle, up to --connections). Latency is measured from
the due time, so queueing in the client or the server shows in p99 and p99.9.
The generator's own lateness (due time to actual send) is reported separately as client lag, so a
saturated client cannot pass for a slow server. One process: at 1,000 req/s it uses a fraction of a core,
reported as client CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reviews

#: The name the API server dials; `gpupolicy webhook certs` issues the certificate for it.
SERVICE_HOST = "gpupolicy-webhook.gpupolicy-system.svc"


@dataclass
class Result:
    rate: float
    seconds: float
    sent: int = 0
    ok: int = 0
    errors: int = 0
    wrong: int = 0
    """200 answers whose verdict was not the one expected (the server answered something else)."""
    latencies: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    client_cpu: float = 0.0
    peak_connections: int = 0

    def summary(self) -> dict[str, float]:
        lat = sorted(self.latencies)
        lag = sorted(self.lags)
        return {
            "target_rps": self.rate, "achieved_rps": self.ok / self.elapsed if self.elapsed else 0.0,
            "requests": self.sent, "errors": self.errors + self.wrong,
            "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "p999_ms": pct(lat, 99.9), "max_ms": lat[-1] if lat else 0,
            "client_lag_p99_ms": pct(lag, 99), "client_cpu": self.client_cpu / self.elapsed if self.elapsed else 0.0,
            "connections": self.peak_connections,
        }


def pct(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def _request_bytes(body: reviews.Body, host: str) -> bytes:
    data = body.data
    head = (f"POST {body.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-apiserver-admission\r\n"
            f"Accept: application/json, */*\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


class _Pool:
    """Keep-alive connections the way Go's http.Transport (the API server's client) keeps them: an idle
    connection is reused, most recently used first; when none is idle a new one is dialled, up to
    ``limit``; beyond that, requests wait for the first connection to come free."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, limit: int) -> None:
        self.host, self.port, self.context, self.limit = host, port, context, limit
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.waiters: collections.deque[asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None]] \
            = collections.deque()
        self.opened = 0
        self.peak = 0

    async def dial(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.opened += 1
        self.peak = max(self.peak, self.opened)
        try:
            return await asyncio.open_connection(self.host, self.port, ssl=self.context,
                                                 server_hostname=SERVICE_HOST)
        except BaseException:
            self.opened -= 1
            self._wake(None)
            raise

    async def acquire(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while True:
            if self.idle:
                conn = self.idle.pop()
                if conn[0].at_eof() or conn[1].is_closing():
                    # The server closed it while idle: Go's transport sees that EOF in its read loop and drops the
                    # connection from its idle pool (net/http transport.go, errServerClosedIdle), never reusing it.
                    conn[1].close()
                    self.opened -= 1
                    continue
                return conn
            if self.opened < self.limit:
                return await self.dial()
            waiter: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None] = \
                asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            conn = await waiter
            if conn is not None:  # handed over; None: a slot came free, dial (or take an idle one)
                return conn

    def release(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        if not self._wake(conn):
            self.idle.append(conn)

    def discard(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        conn[1].close()
        self.opened -= 1
        self._wake(None)

    def _wake(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None) -> bool:
        """Hand conn (or a free slot) to the longest waiter still waiting; False if none is."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def run(url: str, rate: float, seconds: float, *, connections: int, context: ssl.SSLContext,
              bodies: tuple[reviews.Body, ...], check_verdicts: bool = True, timeout: float = 5.0,
              warm: int = 2, on_done: Callable[[], None] | None = None) -> Result:
    """Send rate*seconds requests, request k due at t0 + k/rate, cycling through ``bodies``.

    Connections come from a pool of at most ``connections`` (``warm`` of them dialled before the clock
    starts, the rest on demand, as an API server that has been running a while would have them). With
    ``check_verdicts`` every 200 answer must carry the body's expected verdict (off for the no-op server,
    which allows everything). ``on_done`` runs after the last answer, while the connections are still
    open (the benchmark counts connections per server worker there).
    """
    parts = urlsplit(url)
    pool = _Pool(parts.hostname or "127.0.0.1", parts.port or 443, context, connections)
    payloads = [(_request_bytes(b, SERVICE_HOST), b.allowed) for b in bodies]
    result = Result(rate, seconds)
    clock = time.perf_counter

    async def one(k: int, due: float) -> None:
        payload, expect = payloads[k % len(payloads)]
        status, data = 0, b""
        for attempt in (1, 2):
            try:  # bounded too: a server that accepts and never answers must not hang the run
                conn = await asyncio.wait_for(pool.acquire(), timeout)
            except (OSError, ssl.SSLError, TimeoutError):
                break
            if attempt == 1:
                result.lags.append((clock() - due) * 1000)
            try:
                conn[1].write(payload)
                status, data = await asyncio.wait_for(_read_response(conn[0]), timeout)
                pool.release(conn)
                break
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ssl.SSLError):
                pool.discard(conn)  # a closed keep-alive connection: retry once on another, as Go does
        if status == 0:
            result.errors += 1
            return
        result.latencies.append((clock() - due) * 1000)
        if status != 200:
            result.errors += 1
        elif check_verdicts and (b'"allowed":true' in data or b'"allowed": true' in data) != expect:
            result.wrong += 1
        else:
            result.ok += 1

    for _ in range(min(warm, connections)):
        # A server refusing connections now: the requests below dial on demand and count the failures.
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            pool.release(await asyncio.wait_for(pool.dial(), timeout))
    tasks = []
    cpu0, t0 = time.process_time(), clock()
    total = int(rate * seconds)
    interval = 1.0 / rate
    for k in range(total):
        due = t0 + k * interval
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(k, due)))
        result.sent += 1
    await asyncio.gather(*tasks)
    result.elapsed = clock() - t0
    result.client_cpu = time.process_time() - cpu0
    result.peak_connections = pool.peak
    if on_done is not None:
        on_done()
    pool.close()
    return result


def client_context(ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    context.set_alpn_protocols(["http/1.1"])
    return context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="https://127.0.0.1:PORT")
    parser.add_argument("--ca", required=True, type=Path, help="CA certificate that signed the server's")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32, help="most connections the pool opens")
    parser.add_argument("--no-verdicts", action="store_true", help="accept any verdict (the no-op server)")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONASYNCIODEBUG"):
        print("warning: asyncio debug mode distorts timings", file=sys.stderr)
    result = asyncio.run(run(args.url, args.rate, args.seconds, connections=args.connections,
                             context=client_context(args.ca), bodies=reviews.bodies(),
                             check_verdicts=not args.no_verdicts))
    print(json.dumps(result.summary(), indent=2))
    return 0 if result.errors == 0 and result.wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
