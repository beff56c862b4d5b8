"""An open-loop, fixed-rate HTTPS load generator: what wrk2 does, in asyncio, for bench/webhook_bench.py.

    .venv/bin/python bench/pace.py --url https://127.0.0.1:8443 --rate 500 --seconds 10 --ca ca.crt

Why not wrk, hey or h2load (all in Debian 12; wrk2 is not): wrk cannot pace at all; `hey -q` and
`h2load --rps` pace each connection but start the clock when a request is actually sent, so a request
held back behind a slow one never counts its wait (coordinated omission) and tail latency looks better
than a caller sees it. Here request k is due at t0 + k/rate whatever happened before; a scheduler
releases due requests to a pool of keep-alive TLS connections (the API server also reuses a pool), and
latency is measured from the due time, so queueing in the client or the server shows in p99 and p99.9.
The generator's own lateness (due time to actual send) is reported separately as client lag, so a
saturated client cannot pass for a slow server. One process: at 1,000 req/s it uses a fraction of a core,
reported as client CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reviews  # noqa: E402

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

    def summary(self) -> dict[str, float]:
        lat = sorted(self.latencies)
        lag = sorted(self.lags)
        return {
            "target_rps": self.rate, "achieved_rps": self.ok / self.elapsed if self.elapsed else 0.0,
            "requests": self.sent, "errors": self.errors + self.wrong,
            "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "p999_ms": pct(lat, 99.9), "max_ms": lat[-1] if lat else 0,
            "client_lag_p99_ms": pct(lag, 99), "client_cpu": self.client_cpu / self.elapsed if self.elapsed else 0.0,
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


async def run(url: str, rate: float, seconds: float, *, connections: int, context: ssl.SSLContext,
              bodies: tuple[reviews.Body, ...], check_verdicts: bool = True, timeout: float = 5.0) -> Result:
    """Send rate*seconds requests, request k due at t0 + k/rate, cycling through ``bodies``.

    With ``check_verdicts`` every 200 answer must carry the body's expected verdict (off for the no-op
    server, which allows everything).
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    payloads = [(_request_bytes(b, SERVICE_HOST), b.allowed) for b in bodies]
    result = Result(rate, seconds)
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    clock = time.perf_counter

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port, ssl=context, server_hostname=SERVICE_HOST)

    async def worker() -> None:
        conn = await connect()
        while (item := await queue.get()) is not None:
            k, due = item
            payload, expect = payloads[k % len(payloads)]
            result.lags.append((clock() - due) * 1000)
            for attempt in (1, 2):
                try:
                    reader, writer = conn
                    writer.write(payload)
                    status, data = await asyncio.wait_for(_read_response(reader), timeout)
                    break
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ssl.SSLError):
                    conn[1].close()
                    if attempt == 2:
                        result.errors += 1
                        status = 0
                        break
                    conn = await connect()
            if status == 0:
                continue
            result.latencies.append((clock() - due) * 1000)
            if status != 200:
                result.errors += 1
            elif check_verdicts and (b'"allowed":true' in data or b'"allowed": true' in data) != expect:
                result.wrong += 1
            else:
                result.ok += 1
        conn[1].close()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    await asyncio.sleep(0.2)  # let every connection finish its handshake before the clock starts
    cpu0, t0 = time.process_time(), clock()
    total = int(rate * seconds)
    interval = 1.0 / rate
    for k in range(total):
        due = t0 + k * interval
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((k, due))
        result.sent += 1
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    result.elapsed = clock() - t0
    result.client_cpu = time.process_time() - cpu0
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
    parser.add_argument("--connections", type=int, default=16)
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
