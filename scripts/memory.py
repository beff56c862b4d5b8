"""Peak memory of the webhook pod under hostile bodies and a full connection table: what sizes its limit.

Usage (from the repository root):

    .venv/bin/python scripts/memory.py                    # 8 clients for 40 s, then 2 x 500 idle connections
    .venv/bin/python scripts/memory.py --seconds 10 --json memory.json

It starts `gpupolicy webhook serve` (2 workers, defaults) and samples the proportional set size (PSS, what
the kubelet's working set approximates) of the master and workers every 20 ms while 8 clients send, round
robin: valid reviews, distinct 15 KiB pods (they fill the engine's memo of verdicts), 1 MiB reviews (a Pod
with a 1 MiB annotation), 3 MiB of `[{},...]` (a million dicts if parsed), 50,000-deep arrays, and the
costliest body under the JSON value cap. Then it opens as many idle TLS connections as the workers accept
(--connections, default 2 x 500) and samples again. It prints the peak and settled figures as JSON; the
compiled memory limit is that peak plus the headroom stated in docs/reliability.md. Only loopback is
contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import soak  # noqa: E402

from webhook import review  # noqa: E402

#: Distinct pods just under the largest the engine remembers (16 KiB of key), enough to fill its memo (256 per
#: worker) many times over: what a client sending nothing but new pods makes it hold.
DISTINCT_PODS = 1024


def distinct_pods() -> list[bytes]:
    out = []
    for n in range(DISTINCT_PODS):
        pod = soak.workload("Pod", 1, name=f"distinct-{n}")
        pod["metadata"]["annotations"] = {"example.com/blob": f"{n:05d}" + "x" * 14_000}
        out.append(soak.review(pod, uid=f"distinct-{n}"))
    return out


def bodies() -> list[tuple[str, bytes | list[bytes]]]:
    pod = soak.workload("Pod", 1, name="big")
    pod["metadata"]["annotations"] = {"example.com/blob": "x" * (1 << 20)}
    most = (review.MAX_JSON_VALUES - 2) // 2
    return [
        ("valid review", soak.review(soak.workload("Pod", 1), uid="valid")),
        ("distinct 15 KiB pods", distinct_pods()),
        ("1 MiB review", soak.review(pod, uid="big")),
        ("3 MiB of empty objects", b"[" + b"{}," * (3 * 1024 * 1024 // 3 - 40) + b"{}]"),
        ("50k-deep arrays", b"[" * 50_000 + b"]" * 50_000),
        ("one-key objects up to the value cap", b"[" + b'{"a":1},' * (most - 1) + b'{"a":1}]'),
    ]


class Sampler:
    """The highest PSS of the server's process tree, read every interval seconds on a thread of its own."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid, self.interval, self.peak, self.stop = pid, interval, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, soak.memory_mib(self.pid)["pss_mib"])
            time.sleep(self.interval)


def hostile_bodies(server: soak.Server, seconds: float, clients: int) -> dict[str, Any]:
    payloads = bodies()
    statuses: dict[str, dict[int, int]] = {name: {} for name, _ in payloads}
    until = time.monotonic() + seconds

    def client(index: int) -> None:
        context = server.target.context()
        k = index
        while time.monotonic() < until:
            name, payload = payloads[k % len(payloads)]
            body = payload[(k // len(payloads)) % len(payload)] if isinstance(payload, list) else payload
            k += 1
            connection = soak._Connection(server.target, context, 30.0)
            try:
                connection.request("POST", "/validate", body=body, headers={"Content-Type": "application/json"})
                status = connection.getresponse().status
            except OSError:
                status = 0
            finally:
                connection.close()
            statuses[name][status] = statuses[name].get(status, 0) + 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


async def _idle(server: soak.Server, count: int) -> tuple[int, float]:
    asyncio.sslproto.SSLProtocol.max_size = 16 * 1024
    context = server.target.context()
    opened = []
    for _ in range(count):
        try:
            opened.append(await asyncio.open_connection(soak.LOOPBACK, server.target.port, ssl=context,
                                                        server_hostname=soak.SERVICE_HOST))
        except (OSError, ConnectionError):
            break
    await asyncio.sleep(1.0)
    pss = soak.memory_mib(server.process.pid)["pss_mib"]
    for _, writer in opened:
        writer.close()
    return len(opened), pss


def measure(*, seconds: float, clients: int, connections: int, workdir: Path) -> dict[str, Any]:
    server = soak.start_server(workdir, workers=2, threads=1,
                               env={"GPUPOLICY_HEADER_TIMEOUT_SECONDS": "60", "GPUPOLICY_LOG_LEVEL": "warning"})
    try:
        idle = soak.memory_mib(server.process.pid)["pss_mib"]
        sampler = Sampler(server.process.pid)
        sampler.thread.start()
        statuses = hostile_bodies(server, seconds, clients)
        sampler.stop.set()
        sampler.thread.join()
        time.sleep(2.0)
        settled = soak.memory_mib(server.process.pid)["pss_mib"]
        opened, with_connections = asyncio.run(_idle(server, connections))
    finally:
        status = soak.stop_server(server)
    return {"idle_pss_mib": idle, "peak_pss_mib": sampler.peak, "settled_pss_mib": settled,
            "idle_connections": opened, "pss_with_connections_mib": with_connections,
            "peak_with_connections_mib": round(sampler.peak + with_connections - settled, 1),
            "statuses": statuses, "server_exit": status}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--connections", type=int, default=1000, help="idle connections to open afterwards")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpupolicy-memory-") as tmp:
        report = measure(seconds=args.seconds, clients=args.clients, connections=args.connections,
                         workdir=Path(tmp))
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if report["server_exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
