"""Try to stall the webhook: hold hostile connections open while valid reviews and probes must still pass.

Usage (from the repository root):

    .venv/bin/python scripts/stall.py                              # 100 per kind, 100 reviews/s, 30 s
    .venv/bin/python scripts/stall.py --per-kind 20 --seconds 10 --json stall.json

It starts `gpupolicy webhook serve` on 127.0.0.1 (2 workers, the mixed-fleet example, default timeouts),
then, from a second process, keeps --per-kind connections of each hostile kind open, reopening each one
the server drops:

  idle        completes the TLS handshake, then sends nothing
  headers     sends a request's headers one byte per second
  body        sends headers declaring a 1000-byte body, then one body byte per second
  declared    declares Content-Length: 3000000, then sends one body byte per second
  chunked     declares a chunk of 0xffffffffffff bytes, then sends one byte per second

Meanwhile it sends valid AdmissionReviews at --rate per second for --seconds (bench/pace.py: open loop,
latency from each review's due time, kept-alive connections as the API server keeps them) and probes
/healthz every 0.5 s on a new connection, as the kubelet does. The exit status is 0 only when no review
failed or got a wrong verdict, review p99 < --max-p99-ms (100), and every probe was answered within 1 s.
Only loopback is contacted; everything stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import memory  # noqa: E402
import pace  # noqa: E402
import reviews  # noqa: E402
import soak  # noqa: E402

SPEC = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"  # the policy bench/reviews.py expects
HEAD = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
#: Per kind: what is sent at once, then what is trickled one byte per second.
KINDS: dict[str, tuple[bytes, bytes]] = {
    "idle": (b"", b""),
    "headers": (b"", HEAD + b"X-Padding: " + b"p" * 200 + b"\r\n\r\n"),
    "body": (HEAD + b"Content-Length: 1000\r\n\r\n", b"{" * 1000),
    "declared": (HEAD + b"Content-Length: 3000000\r\n\r\n", b"[" * 1000),
    "chunked": (HEAD + b"Transfer-Encoding: chunked\r\n\r\nffffffffffff\r\n", b"[" * 1000),
}
PROBE = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
CHUNKED_HEAD = (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
#: Malformed chunked framing, sent after CHUNKED_HEAD: each must get a 4xx, no traceback, no internal error.
MALFORMED_FRAMING: dict[str, bytes] = {
    "chunk size zz": b"zz\r\n{}\r\n0\r\n\r\n",
    "chunk size -2": b"-2\r\n{}\r\n0\r\n\r\n",
    "chunk size 0x2": b"0x2\r\n{}\r\n0\r\n\r\n",
    "chunk size of 20 hex digits": b"ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
    "a missing CRLF after the chunk": b"2\r\n{}0\r\n\r\n",
    "a malformed trailer": b"2\r\n{}\r\n0\r\nbad trailer\r\n\r\n",
    "a 20 KB trailer": b"2\r\n{}\r\n0\r\nX-Trailer: " + b"t" * 20_000 + b"\r\n\r\n",
}
#: Broken framing outside the chunks (whole requests).
MALFORMED_REQUESTS: dict[str, bytes] = {
    "Content-Length with chunked": HEAD + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"2\r\n{}\r\n0\r\n\r\n",
    "a negative Content-Length": HEAD + b"Content-Length: -5\r\n\r\n",
    "a garbage request line": b"\x16\x03garbage\r\n\r\n",
}
INTERNAL_ERRORS = "gpupolicy_webhook_internal_errors_total"


# --- the hostile side (its own process, so its TLS work does not delay the reviews' clock) ----------------


async def _hold(kind: str, port: int, context: ssl.SSLContext, until: float, counts: dict[str, Any],
                pause: float = 0.05) -> None:
    """One hostile connection of ``kind``, reopened ``pause`` seconds after the server drops it."""
    prefix, trickle = KINDS[kind]
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                soak.LOOPBACK, port, ssl=context, server_hostname=soak.SERVICE_HOST), 10)
        except (OSError, ssl.SSLError, TimeoutError):
            counts["refused"] += 1
            await asyncio.sleep(0.5)
            continue
        counts["opened"] += 1
        opened = time.monotonic()
        eof = asyncio.ensure_future(reader.read(-1))
        try:
            writer.write(prefix)
            for byte in trickle:
                done, _ = await asyncio.wait({eof}, timeout=1.0)
                if done or time.monotonic() >= until:
                    break
                writer.write(bytes([byte]))
            await asyncio.wait({eof}, timeout=max(0.0, until - time.monotonic()))
        except (OSError, ssl.SSLError):
            pass
        if eof.done():
            counts["dropped"] += 1
            counts["held_s"].append(time.monotonic() - opened)
        eof.cancel()
        writer.close()
        await asyncio.sleep(pause)


async def _attack(port: int, ca: Path, per_kind: int, seconds: float, kinds: Sequence[str] = tuple(KINDS),
                  pause: float = 0.05) -> dict[str, Any]:
    asyncio.sslproto.SSLProtocol.max_size = 16 * 1024  # 500 client connections: keep their buffers small
    context = pace.client_context(ca)
    counts: dict[str, dict[str, Any]] = {kind: {"opened": 0, "dropped": 0, "refused": 0, "held_s": []}
                                         for kind in kinds}
    until = time.monotonic() + seconds
    tasks = []
    for index in range(per_kind):
        for kind in kinds:
            tasks.append(asyncio.create_task(_hold(kind, port, context, until, counts[kind], pause)))
        if index % 10 == 9:
            await asyncio.sleep(0.05)  # open them over a second or two, not in one burst
    await asyncio.gather(*tasks)
    by_kind = {kind: {**{k: v for k, v in c.items() if k != "held_s"},
                      "held_s_median": round(statistics.median(c["held_s"]), 1) if c["held_s"] else None}
               for kind, c in counts.items()}
    totals = {key: sum(c[key] for c in counts.values()) for key in ("opened", "dropped", "refused")}
    return {**totals, "by_kind": by_kind}


def _attacker(port: int, ca: Path, per_kind: int, seconds: float, out: Any, kinds: Sequence[str] = tuple(KINDS),
              pause: float = 0.05) -> None:
    out.put(asyncio.run(_attack(port, ca, per_kind, seconds, kinds, pause)))


# --- the legitimate side -----------------------------------------------------------------------------------


async def _probe(port: int, context: ssl.SSLContext, until: float, times: list[float], failed: list[str]) -> None:
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                soak.LOOPBACK, port, ssl=context, server_hostname=soak.SERVICE_HOST), 5)
            writer.write(PROBE)
            answer = await asyncio.wait_for(reader.read(-1), 5)
            writer.close()
            if not answer.startswith(b"HTTP/1.1 200"):
                failed.append(answer[:60].decode("latin-1"))
        except (OSError, ssl.SSLError, TimeoutError) as err:
            failed.append(type(err).__name__)
        times.append(time.perf_counter() - started)
        await asyncio.sleep(0.5)


async def _legitimate(port: int, ca: Path, rate: float, seconds: float, big_clients: int = 0) -> dict[str, Any]:
    context = pace.client_context(ca)
    probes: list[float] = []
    failed: list[str] = []
    until = time.monotonic() + seconds
    prober = asyncio.create_task(_probe(port, context, until, probes, failed))
    big: list[dict[str, Any]] = [{"answered_s": [], "failures": [], "allowed": 0} for _ in range(big_clients)]
    senders = [asyncio.create_task(_send_big(port, context, until, record)) for record in big]
    result = await pace.run(f"https://{soak.LOOPBACK}:{port}", rate, seconds, connections=8, context=context,
                            bodies=reviews.bodies(), check_verdicts=True)
    await prober
    await asyncio.gather(*senders)
    answered = sorted(t for record in big for t in record["answered_s"])
    return {"reviews": result.summary(), "healthz_max_s": round(max(probes, default=0.0), 3),
            "healthz_probes": len(probes), "healthz_failures": failed,
            **({"big": {"clients": big_clients, "reviews": len(answered),
                        "max_s": round(answered[-1], 3) if answered else None,
                        "median_s": round(statistics.median(answered), 3) if answered else None,
                        "allowed": sum(record["allowed"] for record in big),
                        "failures": [f for record in big for f in record["failures"]][:5]}} if big_clients else {})}


#: The object of the bounded-review acceptance: a legal Pod of 1,000 containers, each asking nvidia.com/gpu: 2
#: (82 KB as JSON; it once kept a worker busy for more than 30 s).
BIG_CONTAINERS = 1000


def big_review() -> bytes:
    containers = [{"name": f"c{i}", "image": "registry.example/soak:1.0",
                   "resources": {"limits": {"nvidia.com/gpu": "2"}}} for i in range(BIG_CONTAINERS)]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "big"},
           "spec": {"containers": containers}}
    body = soak.review(pod, uid="big")
    return (b"POST /validate HTTP/1.1\r\nHost: " + soak.SERVICE_HOST.encode() + b"\r\nContent-Type: application/json"
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _send_big(port: int, context: ssl.SSLContext, until: float, record: dict[str, Any]) -> None:
    """Big reviews back to back on one kept-alive connection (a new one if the server closes it) until ``until``."""
    request = big_review()
    connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            if connection is None:
                connection = await asyncio.wait_for(asyncio.open_connection(
                    soak.LOOPBACK, port, ssl=context, server_hostname=soak.SERVICE_HOST), 5)
            connection[1].write(request)
            status, data = await asyncio.wait_for(pace._read_response(connection[0]), 10)
        except (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError) as err:
            record["failures"].append(type(err).__name__)
            connection = None
            continue
        record["answered_s"].append(time.perf_counter() - started)
        if status != 200:
            record["failures"].append(f"HTTP {status}")
        elif b'"allowed":true' in data:
            record["allowed"] += 1


async def _send_raw(port: int, context: ssl.SSLContext, data: bytes) -> str:
    """The status a raw request got on a fresh connection, or how the server ended it without one."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            soak.LOOPBACK, port, ssl=context, server_hostname=soak.SERVICE_HOST), 5)
    except (OSError, ssl.SSLError, TimeoutError) as err:
        return f"connect failed: {type(err).__name__}"
    try:
        writer.write(data)
        answer = await asyncio.wait_for(reader.read(200), 5)
    except TimeoutError:
        return "no answer in 5 s"
    except (OSError, ssl.SSLError):
        answer = b""
    finally:
        writer.close()
    return answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/1.") else "closed without an answer"


async def _framing(port: int, ca: Path) -> dict[str, Any]:
    context = pace.client_context(ca)

    async def internal_errors() -> float | None:
        reader, writer = await asyncio.open_connection(soak.LOOPBACK, port, ssl=context,
                                                       server_hostname=soak.SERVICE_HOST)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        text = (await asyncio.wait_for(reader.read(-1), 5)).decode("latin-1")
        writer.close()
        found = [line.split()[-1] for line in text.splitlines() if line.startswith(INTERNAL_ERRORS + " ")]
        return float(found[0]) if found else None

    before = await internal_errors()
    cases = {**{name: CHUNKED_HEAD + framing for name, framing in MALFORMED_FRAMING.items()}, **MALFORMED_REQUESTS}
    statuses = {name: await _send_raw(port, context, data) for name, data in cases.items()}
    after = await internal_errors()
    return {"statuses": statuses, "internal_errors_added": None if before is None else (after or 0) - before,
            "all_4xx": all(status.startswith("4") for status in statuses.values())}


def framing_report(port: int, ca: Path) -> dict[str, Any]:
    """Every malformed framing case sent once: what each got, and whether the internal-error count moved."""
    return asyncio.run(_framing(port, ca))


def measure_big(*, clients: int = 2, rate: float = 50.0, seconds: float = 30.0, workdir: Path) -> dict[str, Any]:
    """``clients`` connections sending 1,000-container pods back to back while valid reviews flow at ``rate``."""
    server = soak.start_server(workdir, workers=2, threads=2, spec=SPEC)
    try:
        legitimate = asyncio.run(_legitimate(server.target.port, server.target.ca_files[0], rate, seconds, clients))
    finally:
        status = soak.stop_server(server)
    log = server.log_text()
    return {**legitimate, "server_exit": status, "tracebacks_in_log": log.count("Traceback"),
            "workers_killed": log.count("WORKER TIMEOUT") + log.count("was sent SIGKILL")}


def measure_idle(*, max_connections: int = 100, rate: float = 100.0, seconds: float = 30.0, workdir: Path,
                 pause: float = 1.0) -> dict[str, Any]:
    """Twice the server's connection cap (2 workers x ``max_connections``) of idle TLS connections held open by
    another process, each reopened ``pause`` s after the server closes it, while valid reviews flow."""
    server = soak.start_server(workdir, workers=2, threads=2, spec=SPEC,
                               env={"GPUPOLICY_MAX_CONNECTIONS": str(max_connections)})
    ca = server.target.ca_files[0]
    idle = 2 * 2 * max_connections
    queue: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    ramp = 3.0 + idle / 200
    attacker = multiprocessing.Process(target=_attacker, args=(server.target.port, ca, idle, ramp + seconds + 1,
                                                               queue, ("idle",), pause), daemon=True)
    try:
        attacker.start()
        time.sleep(ramp)
        legitimate = asyncio.run(_legitimate(server.target.port, ca, rate, seconds))
        hostile = queue.get(timeout=60)
        attacker.join(timeout=10)
    finally:
        if attacker.is_alive():
            attacker.kill()
        status = soak.stop_server(server)
    log = server.log_text()
    return {**legitimate, "hostile": {"idle": idle, **hostile}, "server_exit": status,
            "tracebacks_in_log": log.count("Traceback")}


def measure(*, per_kind: int = 100, rate: float = 100.0, seconds: float = 30.0, workdir: Path,
            server_kind: str = "eventloop") -> dict[str, Any]:
    """Run the whole check against a fresh server in workdir; every figure in one dict.

    server_kind other than the shipped `eventloop` puts another server (bench/servers.py) in front of the
    same app with the same settings.
    """
    command = None
    if server_kind != "eventloop":
        import servers

        def command(certs: Path, port: int) -> list[str]:
            return servers.command(server_kind, "real", cert_dir=certs, port=port)

    server = soak.start_server(workdir, workers=2, threads=1, spec=SPEC, command=command)
    ca = server.target.ca_files[0]
    queue: multiprocessing.Queue[dict[str, int]] = multiprocessing.Queue()
    ramp = 3.0 + per_kind * len(KINDS) / 200  # the hostile connections are open before the clock starts
    attacker = multiprocessing.Process(target=_attacker, args=(server.target.port, ca, per_kind, ramp + seconds + 1,
                                                               queue), daemon=True)
    try:
        attacker.start()
        time.sleep(ramp)
        before = soak.memory_mib(server.process.pid)
        # Every 0.25 s: reading smaps of three processes takes CPU from the pacer in this same process.
        sampler = memory.Sampler(server.process.pid, interval=0.25)
        sampler.thread.start()
        legitimate = asyncio.run(_legitimate(server.target.port, ca, rate, seconds))
        sampler.stop.set()
        sampler.thread.join()
        after = soak.memory_mib(server.process.pid)
        hostile = queue.get(timeout=60)
        attacker.join(timeout=10)
        framing = framing_report(server.target.port, ca)
    finally:
        if attacker.is_alive():
            attacker.kill()
        status = soak.stop_server(server)
    log = server.log_text()
    return {**legitimate, "server": server_kind, "hostile": {"per_kind": per_kind, "kinds": sorted(KINDS), **hostile},
            "memory_during_mib": before, "memory_end_mib": after, "peak_pss_mib": round(sampler.peak, 1),
            "framing": framing, "server_exit": status, "tracebacks_in_log": log.count("Traceback")}


def verdict(report: dict[str, Any], max_p99_ms: float) -> list[str]:
    """What failed, in words (empty when the server held)."""
    problems = []
    reviews_ = report["reviews"]
    if reviews_["errors"]:
        problems.append(f"{reviews_['errors']} reviews failed or got a wrong verdict")
    if reviews_["p99_ms"] >= max_p99_ms:
        problems.append(f"review p99 {reviews_['p99_ms']:.1f} ms >= {max_p99_ms:g} ms")
    if report["healthz_failures"] or report["healthz_max_s"] >= 1.0:
        problems.append(f"/healthz: {report['healthz_failures'][:3]} slowest {report['healthz_max_s']} s")
    if "framing" in report and (not report["framing"]["all_4xx"] or report["framing"]["internal_errors_added"]):
        problems.append(f"malformed framing: {report['framing']}")
    if report["server_exit"] != 0 or report["tracebacks_in_log"]:
        problems.append(f"server exit {report['server_exit']}, {report['tracebacks_in_log']} tracebacks")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-kind", type=int, default=100, help="hostile connections of each kind (default 100)")
    parser.add_argument("--rate", type=float, default=100.0, help="valid reviews per second (default 100)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the reviews run (default 30)")
    parser.add_argument("--max-p99-ms", type=float, default=100.0)
    parser.add_argument("--server", default="eventloop",
                        help="the server in front of the app: eventloop (as shipped) or a kind from bench/servers.py")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if os.getloadavg()[0] > (os.cpu_count() or 1):
        print(f"note: load average {os.getloadavg()[0]:.1f} at start", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gpupolicy-stall-") as tmp:
        report = measure(per_kind=args.per_kind, rate=args.rate, seconds=args.seconds, workdir=Path(tmp),
                         server_kind=args.server)
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    problems = verdict(report, args.max_p99_ms)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
