"""Soak the webhook: a bounded, mixed load over TLS on loopback, reporting failures, latency and memory.

Usage (from the repository root):

    .venv/bin/python scripts/soak.py                      # 60 s, 8 clients, 2 workers x 4 threads
    .venv/bin/python scripts/soak.py --duration 300 --clients 16 --json soak.json

It starts `gpupolicy webhook serve` on 127.0.0.1 with a development certificate and the tke-l20-t4 example,
warms it up, samples the RSS of the gunicorn master and workers, sends the mix below for --duration seconds
(or --max-requests, whichever comes first) and samples again. The exit status is 0 only when no request
failed, every worker served, the server drained and exited 0 on SIGTERM, and RSS grew by at most
--max-growth-mib. tests/reliability/test_load.py runs the same LoadGenerator for 10 s against its own server.

Only loopback is ever contacted; the server binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GPUPOLICY = str(Path(sys.executable).parent / "gpupolicy")
SPEC = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
#: The name the API server dials and the development certificate is issued for (webhook.md §1.10).
SERVICE_HOST = "gpupolicy-webhook.gpupolicy-system.svc"
LOOPBACK = "127.0.0.1"


# --- what we send -----------------------------------------------------------------------------------------


def review(obj: Mapping[str, Any] | None, *, uid: str, operation: str = "CREATE",
           old: Mapping[str, Any] | None = None, api_version: str = "admission.k8s.io/v1",
           sub_resource: str | None = None) -> bytes:
    """An AdmissionReview body as kube-apiserver sends it for obj (or old, on DELETE)."""
    subject = obj or old or {}
    kind = subject.get("kind", "Pod")
    group = subject.get("apiVersion", "v1").rpartition("/")[0]
    gvk = {"group": group, "version": "v1", "kind": kind}
    request: dict[str, Any] = {
        "uid": uid, "kind": gvk, "requestKind": gvk,
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "name": subject.get("metadata", {}).get("name", ""), "namespace": "ml", "operation": operation,
        "userInfo": {"username": "soak@example.com"}, "object": obj, "oldObject": old, "dryRun": False,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return json.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "request": request}).encode()


def workload(kind: str, gpus: int, *, name: str = "soak") -> dict[str, Any]:
    """A Pod or Deployment whose one container asks for gpus shared nvidia.com/gpu."""
    container = {"name": "main", "image": "registry.example/soak:1.0",
                 "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    spec = {"containers": [container]}
    metadata = {"name": name, "namespace": "ml"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


@dataclass(frozen=True)
class Call:
    """One kind of request in the mix and what a correct answer looks like."""

    name: str
    weight: int
    method: str
    path: str
    body: bytes | None = None
    content_type: str = "application/json"
    status: int = 200
    allowed: bool | None = None
    """For a review answered 200: the verdict expected under the tke-l20-t4 policy (None: not checked)."""


def default_mix() -> tuple[Call, ...]:
    """Mostly reviews, as the API server sends them, with probes, scrapes and malformed calls mixed in."""
    return (
        Call("allow-pod", 30, "POST", "/validate?timeout=3s", review(workload("Pod", 1), uid="{uid}"), allowed=True),
        Call("deny-deployment", 20, "POST", "/validate?timeout=3s",
             review(workload("Deployment", 2), uid="{uid}"), allowed=False),
        Call("deny-update", 10, "POST", "/validate?timeout=3s",
             review(workload("Deployment", 2), old=workload("Deployment", 1), operation="UPDATE", uid="{uid}"),
             allowed=False),
        Call("delete", 5, "POST", "/validate?timeout=3s",
             review(None, old=workload("Pod", 2), operation="DELETE", uid="{uid}"), allowed=True),
        Call("v1beta1-scale", 5, "POST", "/validate?timeout=3s",
             review(workload("Deployment", 2), old=workload("Deployment", 2), operation="UPDATE",
                    api_version="admission.k8s.io/v1beta1", sub_resource="scale", uid="{uid}"), allowed=True),
        Call("not-json", 3, "POST", "/validate", b"{not json", status=400),
        Call("not-a-review", 3, "POST", "/validate", b'{"kind": "AdmissionReview", "request": {}}', status=422),
        Call("wrong-type", 3, "POST", "/validate", b"{}", content_type="text/plain", status=415),
        Call("healthz", 8, "GET", "/healthz"),
        Call("readyz", 8, "GET", "/readyz"),
        Call("metrics", 2, "GET", "/metrics"),
    )


# --- the load generator -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where the webhook listens (always loopback) and how to trust it."""

    port: int
    ca_files: tuple[Path, ...]
    host: str = LOOPBACK
    server_hostname: str = SERVICE_HOST

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        for ca in self.ca_files:
            context.load_verify_locations(cafile=str(ca))
        return context


class _Connection(http.client.HTTPSConnection):
    """Dials the loopback address but verifies the certificate for the Service name, as the API server does."""

    def __init__(self, target: Target, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(target.server_hostname, target.port, context=context, timeout=timeout)
        self._target = target

    def connect(self) -> None:
        raw = socket.create_connection((self._target.host, self.port), self.timeout)
        # Go, and so kube-apiserver, sets TCP_NODELAY on every connection. http.client does not, and it
        # sends headers and body in two writes, so Nagle plus a delayed ACK can add 40 ms to a request:
        # that would measure the client, not the webhook.
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._context.wrap_socket(raw, server_hostname=self._target.server_hostname)  # type: ignore[attr-defined]


@dataclass
class LoadReport:
    """What one run sent and got back. Latencies are seconds, end to end as the client saw them."""

    sent: int = 0
    failures: int = 0
    by_call: Counter[str] = field(default_factory=Counter)
    by_status: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    connections: int = 0
    seconds: float = 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "sent": self.sent, "failures": self.failures, "seconds": round(self.seconds, 2),
            "requests_per_second": round(self.sent / self.seconds, 1) if self.seconds else 0.0,
            "connections": self.connections, "p50_ms": round(self.percentile(0.50) * 1000, 2),
            "p99_ms": round(self.percentile(0.99) * 1000, 2), "max_ms": round(max(self.latencies, default=0) * 1000, 2),
            "by_call": dict(sorted(self.by_call.items())), "by_status": dict(sorted(self.by_status.items())),
            "errors": self.errors[:10],
        }


class LoadGenerator:
    """Clients on threads, each on a kept-alive connection that it drops now and then to force a new
    handshake (and so reach every worker: gunicorn workers take turns at accepting)."""

    def __init__(self, target: Target, *, mix: Sequence[Call] | None = None, check_verdicts: bool = True,
                 reconnect_every: int = 20, timeout_seconds: float = 10.0, seed: int = 5) -> None:
        self.target = target
        self.mix = tuple(mix or default_mix())
        self.check_verdicts = check_verdicts
        self.reconnect_every = reconnect_every
        self.timeout_seconds = timeout_seconds
        self.seed = seed
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask running clients to finish the request they are in and return."""
        self._stop.set()

    def run(self, *, seconds: float, clients: int, max_requests: int = 1_000_000,
            on_tick: Callable[[LoadReport], None] | None = None) -> LoadReport:
        """Send the mix from `clients` threads until `seconds` pass, max_requests are sent, or stop()."""
        report = LoadReport()
        context = self.target.context()
        deadline = time.monotonic() + seconds
        budget = iter(range(max_requests))
        self._stop.clear()

        def client(index: int) -> None:
            rng = random.Random(self.seed * 1000 + index)
            weights = [c.weight for c in self.mix]
            connection: _Connection | None = None
            n = 0
            while time.monotonic() < deadline and not self._stop.is_set():
                with self._lock:
                    if next(budget, None) is None:
                        break
                call = rng.choices(self.mix, weights)[0]
                if connection is None:
                    connection = _Connection(self.target, context, self.timeout_seconds)
                    with self._lock:
                        report.connections += 1
                n += 1
                error, status, seconds_taken = self._send(connection, call, f"soak-{index}-{n}")
                with self._lock:
                    report.sent += 1
                    report.by_call[call.name] += 1
                    report.latencies.append(seconds_taken)
                    if status:
                        report.by_status[status] += 1
                    if error:
                        report.failures += 1
                        report.errors.append(f"{call.name}: {error}")
                if error or n % self.reconnect_every == 0:
                    connection.close()
                    connection = None
                if on_tick is not None and index == 0:
                    on_tick(report)
            if connection is not None:
                connection.close()

        started = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,), name=f"soak-client-{i}") for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        report.seconds = time.monotonic() - started
        return report

    def _send(self, connection: _Connection, call: Call, uid: str) -> tuple[str, int, float]:
        """One request; returns (error or "", HTTP status or 0, seconds)."""
        body = call.body.replace(b"{uid}", uid.encode()) if call.body else None
        headers = {"Content-Type": call.content_type} if body is not None else {}
        started = time.perf_counter()
        try:
            connection.request(call.method, call.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as err:
            return f"{type(err).__name__}: {err}", 0, time.perf_counter() - started
        seconds = time.perf_counter() - started
        if response.status != call.status:
            return f"HTTP {response.status}, expected {call.status}: {data[:200]!r}", response.status, seconds
        if call.body is not None and call.status == 200:
            answer = json.loads(data).get("response", {})
            if answer.get("uid") != uid:
                return f"uid {answer.get('uid')!r} is not the request's {uid!r}", response.status, seconds
            if answer.get("status", {}).get("code") == 500:
                return f"internal error: {answer['status'].get('message')}", response.status, seconds
            if self.check_verdicts and call.allowed is not None and answer.get("allowed") is not call.allowed:
                return f"allowed={answer.get('allowed')}, expected {call.allowed}", response.status, seconds
        return "", response.status, seconds


# --- the server and its memory ----------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """pid and its children (gunicorn's master and its workers), read from /proc."""
    children = [pid]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children.append(int(entry))
    return children


def memory_mib(pid: int) -> dict[str, float]:
    """Resident (Rss) and proportional (Pss: shared pages split between sharers) memory of the tree, MiB."""
    totals = {"rss_mib": 0.0, "pss_mib": 0.0, "processes": 0.0}
    for member in process_tree(pid):
        try:
            text = Path(f"/proc/{member}/smaps_rollup").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = dict(re.findall(r"^(Rss|Pss):\s+(\d+) kB", text, re.MULTILINE))
        totals["rss_mib"] += int(fields.get("Rss", 0)) / 1024
        totals["pss_mib"] += int(fields.get("Pss", 0)) / 1024
        totals["processes"] += 1
    return {key: round(value, 1) for key, value in totals.items()}


def admissions_by_worker(log_text: str) -> Counter[int]:
    """How many reviews each worker process logged (the log format carries `[pid]`)."""
    return Counter(int(pid) for pid in re.findall(r"\[(\d+)\] \[INFO\] gpupolicy\.webhook: admission ", log_text))


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    target: Target
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(workdir: Path, *, workers: int, threads: int, env: Mapping[str, str] | None = None,
                 spec: Path = SPEC, command: Callable[[Path, int], list[str]] | None = None) -> Server:
    """`gpupolicy webhook serve` on a free loopback port with a fresh development certificate.

    command(cert_dir, port), when given, is the command line to start instead (another server in front of
    the same app: bench/servers.py); it gets the same GPUPOLICY_* environment, the spec in GPUPOLICY_SPEC.
    """
    certs = workdir / "certs"
    subprocess.run([GPUPOLICY, "webhook", "certs", "--out", str(certs)], check=True, capture_output=True)
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port = int(probe.getsockname()[1])
    environment = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    environment.update({"GPUPOLICY_WORKERS": str(workers), "GPUPOLICY_THREADS": str(threads),
                        "GPUPOLICY_DRAIN_SECONDS": "0.5", "GPUPOLICY_SPEC": str(spec), **(env or {})})
    argv = command(certs, port) if command else [GPUPOLICY, "webhook", "serve", "--cert-dir", str(certs),
                                                 "--bind", LOOPBACK, "--port", str(port)]
    log = workdir / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
    server = Server(process, Target(port, (certs / "ca.crt",)), log)
    deadline = time.monotonic() + 30
    context = server.target.context()
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{server.log_text()[-3000:]}")
        try:
            connection = _Connection(server.target, context, 2.0)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                connection.close()
                return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the server did not become ready within 30 s")
        time.sleep(0.05)


def stop_server(server: Server, timeout: float = 30.0) -> int:
    """SIGTERM (drain, then graceful stop) and the exit status."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    try:
        status = server.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.process.kill()
        status = server.process.wait()
    with contextlib.suppress(ProcessLookupError):  # a worker that outlived its server (its own session)
        os.killpg(server.process.pid, signal.SIGKILL)
    return status


# --- the command line -------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--max-requests", type=int, default=1_000_000, help="stop after this many (default 1e6)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker (default 4)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before measuring (default 3)")
    parser.add_argument("--max-growth-mib", type=float, default=25.0,
                        help="largest RSS growth of master + workers accepted, MiB (default 25)")
    parser.add_argument("--json", metavar="FILE", type=Path, help="also write the report as JSON")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.clients < 1 or args.duration > 24 * 3600:
        parser.error("--duration must be in (0, 86400] and --clients at least 1")

    with tempfile.TemporaryDirectory(prefix="gpupolicy-soak-") as workdir:
        server = start_server(Path(workdir), workers=args.workers, threads=args.threads)
        try:
            generator = LoadGenerator(server.target)
            warmup = generator.run(seconds=args.warmup, clients=args.clients)
            log_offset = len(server.log_text())
            before = memory_mib(server.process.pid)
            load = generator.run(seconds=args.duration, clients=args.clients, max_requests=args.max_requests)
            after = memory_mib(server.process.pid)
            served = admissions_by_worker(server.log_text()[log_offset:])
        finally:
            exit_status = stop_server(server)
        log = server.log_text()

    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "machine": f"{os.cpu_count()} CPU, {os.uname().sysname} {os.uname().release}, Python {sys.version.split()[0]}",
        "server": {"workers": args.workers, "threads": args.threads, "exit_status": exit_status},
        "warmup": {"sent": warmup.sent, "failures": warmup.failures},
        "load": load.summary(),
        "reviews_by_worker": {str(pid): count for pid, count in sorted(served.items())},
        "memory_before": before, "memory_after": after,
        "rss_growth_mib": round(after["rss_mib"] - before["rss_mib"], 1),
        "private_key_in_log": "PRIVATE KEY" in log,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    problems = []
    if load.failures or warmup.failures:
        problems.append(f"{load.failures + warmup.failures} failed request(s)")
    if len(served) < args.workers:
        problems.append(f"only {len(served)} of {args.workers} workers served reviews")
    if exit_status != 0:
        problems.append(f"the server exited {exit_status} on SIGTERM")
    if report["rss_growth_mib"] > args.max_growth_mib:
        problems.append(f"RSS grew by {report['rss_growth_mib']} MiB (limit {args.max_growth_mib})")
    if report["private_key_in_log"]:
        problems.append("a private key appeared in the server log")
    for problem in problems:
        print(f"soak: FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
