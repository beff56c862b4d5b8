"""Webhook benchmark: the real server against two no-op floors on the same stack, over TLS with keep-alive.

    apt-get install -y wrk                                # saturation load (Debian 12 has no wrk2)
    .venv/bin/python bench/webhook_bench.py               # full run: about 8 minutes (3 rounds per point)
    .venv/bin/python bench/webhook_bench.py --quick       # a few seconds (the smoke test)
    .venv/bin/python bench/webhook_bench.py --server hypercorn   # another server in front of all three

What runs, on 127.0.0.1 only, in one go, each behind the same server (--server, bench/servers.py; default
the shipped one: gunicorn with the event-loop worker, 2 processes, TLS through webhook/tls.py):
  real   the webhook exactly as shipped (`gpupolicy webhook serve` for the default server): the compiled
         mixed-fleet admission policy, Prometheus multiprocess metrics, a log line per denied review (to a file
         here, to the container log in a pod);
  noop   bench/noop_app.py's raw WSGI app: parses the JSON body and allows it. The floor of the stack;
  flask  bench/noop_app.py's Flask app doing the same in a route: the floor of a Flask webhook, which the
         real server's targets are set against (throughput ≥ 80 %, p99 at 500 req/s ≤ 1.25x).
Load, the same for all three, interleaved so all see the same machine:
  fixed rates (100, 500, 1000 req/s): bench/pace.py, open loop, latency from each request's due time
        (wrk cannot pace; `hey -q` and `h2load --rps` start the clock at send time), keep-alive
        connections pooled as the API server's Go client pools them (reused, dialled on demand);
  saturation: wrk -t1 -c16 with bench/post.lua (keep-alive, closed loop): the most a server answers.
Bodies: bench/reviews.py (a GPU Pod, a Deployment, a CronJob, a denied Pod; 5-15 KB, managedFields and all).
Reported per run: achieved req/s, p50/p99/p99.9 latency, server CPU per request (all workers, from /proc:
robust when the machine is noisy), how the connections spread over the workers, the ratios to both
floors, and a Targets table against the Flask floor (saturation, CPU per request, p99 and p99.9 at 500 req/s,
with conns/worker) beside the load average at the start and the end: what docs/performance.md's table needs.
Rounds (--rounds, default 3): every point is run that many times, the three servers interleaved round by
round, and each figure reported is the median of its rounds: a single 10 s p99 on two shared cores moves by 2-3x
from one round to the next (a scheduler hiccup of the load generator lands in whichever server it is timing), the
median of three does not. The JSON keeps every round.
Everything is bounded (--seconds per point) and the servers are stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))

import pace  # noqa: E402
import reviews  # noqa: E402
import servers as servers_module  # noqa: E402

PYTHON = sys.executable
GPUPOLICY = str(Path(PYTHON).parent / "gpupolicy")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def workers(self) -> list[int]:
        return [int(p) for p in _children(self.process.pid)]

    def cpu_seconds(self) -> float:
        """User + system CPU of every worker (the master only supervises)."""
        total = 0
        for pid in self.workers():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        return total / CLOCK_TICKS

    def connections_per_worker(self) -> list[int]:
        """Established connections to our port held by each worker (from /proc, no ss needed)."""
        inodes = _established_inodes(self.port)
        counts = []
        for pid in self.workers():
            n = 0
            try:
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and int(target[8:-1]) in inodes:
                        n += 1
            except OSError:
                pass
            counts.append(n)
        return sorted(counts, reverse=True)


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def _established_inodes(port: int) -> set[int]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], int(parts[9])
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                found.add(inode)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- setup ------------------------------------------------------------------------------------------------


def write_policy(directory: Path, example: str) -> Path:
    from policy.load import load_policy_or_raise
    from policy.resolved.offers import build_admission_policy

    spec = ROOT / "examples" / "clusters" / example / "cluster.yaml"
    policy = build_admission_policy(load_policy_or_raise(spec.read_text(), filename=str(spec)))
    path = directory / "admission-policy.json"
    path.write_text(policy.to_json())
    return path


def write_bodies(directory: Path, templates: int = 1) -> Path:
    """The bodies as files plus index.txt (path, file), for bench/post.lua."""
    directory.mkdir()
    lines = []
    for body in reviews.bodies(templates):
        (directory / f"{body.name}.json").write_bytes(body.data)
        lines.append(f"{body.path} {body.name}.json")
    (directory / "index.txt").write_text("\n".join(lines) + "\n")
    return directory


def start(name: str, command: list[str], port: int, work: Path, env: dict[str, str]) -> Server:
    log = work / f"{name}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=work,
                                   start_new_session=True)
    return Server(name, process, port, log)


def wait_ready(server: Server, context: ssl.SSLContext, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise SystemExit(f"{server.name} server exited:\n{server.log.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200 and len(server.workers()) > 0:
                conn.close()
                return
        except (OSError, ssl.SSLError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{server.name} server not ready after {timeout:.0f}s:\n{server.log.read_text()[-3000:]}")
        time.sleep(0.1)


def stop(server: Server) -> None:
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()


#: What runs behind the server kind: the webhook, the raw WSGI floor, the Flask floor (bench/noop_app.py).
ROLES = {"real": "real", "noop": "noop", "flask": "flask-noop"}


@contextmanager
def servers(work: Path, args: argparse.Namespace) -> Iterator[list[Server]]:
    certs = work / "certs"
    subprocess.run([GPUPOLICY, "webhook", "certs", "--out", str(certs)], check=True, capture_output=True)
    policy = write_policy(work, args.policy)
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["GPUPOLICY_DRAIN_SECONDS"] = "0"  # stop at once when done; serving is unaffected
    env["GPUPOLICY_POLICY"] = str(policy)
    if args.workers:
        env["GPUPOLICY_WORKERS"] = str(args.workers)
    started: list[Server] = []
    try:
        for role, app in ROLES.items():
            if args.no_floors and role != "real":
                continue
            port = free_port()
            started.append(start(role, servers_module.command(args.server, app, cert_dir=certs, port=port),
                                 port, work, env))
        context = pace.client_context(certs / "ca.crt")
        context.check_hostname = False  # readiness only: dialled by IP
        for server in started:
            wait_ready(server, context)
        yield started
    finally:
        for server in started:
            stop(server)


# --- load -------------------------------------------------------------------------------------------------


def fixed_rate(server: Server, rate: float, seconds: float, *, connections: int, ca: Path,
               templates: int = 1) -> dict[str, Any]:
    spread: list[int] = []
    cpu0 = server.cpu_seconds()
    result = asyncio.run(pace.run(server.url, rate, seconds, connections=connections,
                                  context=pace.client_context(ca), bodies=reviews.bodies(templates),
                                  check_verdicts=server.name == "real",
                                  on_done=lambda: spread.extend(server.connections_per_worker())))
    cpu = server.cpu_seconds() - cpu0
    point = {"load": f"{rate:g} req/s", **result.summary(), "conns_per_worker": spread,
             "cpu_us_per_req": cpu / max(result.ok, 1) * 1e6, "server_cpu_cores": cpu / result.elapsed}
    server.points.append(point)
    return point


def saturation(server: Server, seconds: float, *, connections: int, bodies: Path) -> dict[str, Any] | None:
    if shutil.which("wrk") is None:
        return None
    cpu0 = server.cpu_seconds()
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "5s",
               "-s", str(BENCH / "post.lua"), server.url, "--", str(bodies)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(min(1.0, seconds / 2))
    spread = server.connections_per_worker()
    out, _ = proc.communicate(timeout=seconds + 60)
    cpu = server.cpu_seconds() - cpu0
    line = next((x for x in out.splitlines() if x.startswith("{")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({proc.returncode}):\n{out}")
    data = json.loads(line)
    point = {"load": "saturation (wrk)", "target_rps": None, "achieved_rps": data["rps"], "requests": data["requests"],
             "errors": data["non2xx"] + data["socket_errors"], "p50_ms": data["p50_ms"], "p99_ms": data["p99_ms"],
             "p999_ms": data["p999_ms"], "max_ms": data["max_ms"], "client_lag_p99_ms": None, "client_cpu": None,
             "conns_per_worker": spread, "cpu_us_per_req": cpu / max(data["requests"], 1) * 1e6,
             "server_cpu_cores": cpu / data["seconds"]}
    server.points.append(point)
    return point


def median_point(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One point from its rounds: every figure the median of the rounds', the spread that of the median p99's
    round (a spread is a fact of one round, not a number to average)."""
    middle = sorted(rounds, key=lambda p: p["p99_ms"])[len(rounds) // 2]
    point = dict(middle)
    for key, value in middle.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            figures = [p[key] for p in rounds if p.get(key) is not None]
            point[key] = statistics.median(figures) if figures else value
    point["rounds"] = [{k: v for k, v in p.items() if k != "rounds"} for p in rounds]
    return point


def run_rounds(started: list[Server], rounds: int, measure: Any) -> None:
    """Run `measure(server)` `rounds` times per server, interleaved, and keep one median point per server."""
    taken: dict[str, list[dict[str, Any]]] = {s.name: [] for s in started}
    for _ in range(rounds):
        for server in started:
            point = measure(server)
            if point is not None:
                server.points.pop()
                taken[server.name].append(point)
    for server in started:
        if taken[server.name]:
            server.points.append(median_point(taken[server.name]))


# --- report -----------------------------------------------------------------------------------------------


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    load = os.getloadavg()[0]
    return (f"{os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, Python {platform.python_version()}, "
            f"load average {load:.2f} at start")


def render(started: list[Server], meta: dict[str, Any]) -> str:
    lines = [f"# webhook_bench {meta['date']}", "", f"- machine: {meta['machine']}",
             f"- server: {meta['server']} ({servers_module.KINDS[meta['server']]}), {meta['model']}, TLS, "
             f"policy {meta['policy']}",
             f"- bodies: {_bodies(meta['templates'])}",
             f"- load average: {meta['load']:.2f} at start, {meta.get('load_end', meta['load']):.2f} at the end",
             f"- load: keep-alive, wrk -c{meta['connections']}, pacer pool up to {meta['connections']} connections;"
             f" {meta['seconds']:g} s per point, {meta.get('rounds', 1)} round(s) per point interleaved, each figure"
             " the median of its rounds", "",
             "| load | server | req/s | p50 ms | p99 ms | p99.9 ms | CPU µs/req | conns/worker | errors |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for points in zip(*(s.points for s in started), strict=True):
        for p, server in zip(points, started, strict=True):
            spread = "/".join(map(str, p["conns_per_worker"]))
            lines.append(f"| {p['load']} | {server.name} | {p['achieved_rps']:,.0f} | {p['p50_ms']:.2f} | "
                         f"{p['p99_ms']:.2f} | {p['p999_ms']:.2f} | {p['cpu_us_per_req']:,.0f} | {spread} | "
                         f"{p['errors']} |")
    if len(started) == len(ROLES):
        lines += _ratios(*started)
    lines += _pacer_check(started)
    return "\n".join(lines) + "\n"


def _bodies(templates: int) -> str:
    if templates <= 1:
        return "the four of bench/reviews.py in turn (replicas of four templates: the engine remembers their verdicts)"
    from policy.admission.engine import MEMO_SIZE

    if 4 * templates <= MEMO_SIZE:
        return (f"{4 * templates} distinct templates in turn (bench/reviews.py, --templates {templates}): each judged "
                "once, then remembered")
    return (f"{4 * templates} distinct templates in turn (bench/reviews.py, --templates {templates}): more than the "
            f"engine remembers ({MEMO_SIZE}), so every review is judged afresh")


def _ratios(real: Server, noop: Server, flask: Server) -> list[str]:
    lines = ["", "Against the floors:", "",
             "| load | throughput real/flask | real/noop | CPU/req real/flask | p99 real/flask | p99.9 real/flask | "
             "p99 real/noop | CPU/req real − flask µs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r, n, f in zip(real.points, noop.points, flask.points, strict=True):
        lines.append(f"| {r['load']} | {r['achieved_rps'] / f['achieved_rps']:.2f}x | "
                     f"{r['achieved_rps'] / n['achieved_rps']:.2f}x | "
                     f"{r['cpu_us_per_req'] / f['cpu_us_per_req']:.2f}x | "
                     f"{r['p99_ms'] / f['p99_ms']:.2f}x | {r['p999_ms'] / f['p999_ms']:.2f}x | "
                     f"{r['p99_ms'] / n['p99_ms']:.2f}x | {r['cpu_us_per_req'] - f['cpu_us_per_req']:+,.0f} |")
    return lines + _targets(real, flask)


#: The targets against the Flask floor (docs/performance.md): (what, the real/flask ratio's limit, at least or most).
TARGETS = (("throughput at saturation", "saturation (wrk)", "achieved_rps", 0.8, "≥"),
           ("CPU per request at saturation", "saturation (wrk)", "cpu_us_per_req", 1.25, "≤"),
           ("p99 at 500 req/s", "500 req/s", "p99_ms", 1.25, "≤"),
           ("p99.9 at 500 req/s", "500 req/s", "p999_ms", 2.0, "≤"))


def _targets(real: Server, flask: Server) -> list[str]:
    """The targets, each met or missed on this run: every figure docs/performance.md's table needs."""
    by_load = {p["load"]: (p, q) for p, q in zip(real.points, flask.points, strict=True)}
    lines = ["", "Targets (real against the Flask floor, this run):", "",
             "| target | real | Flask floor | ratio | limit | conns/worker (real, flask) | status |",
             "|---|---:|---:|---:|---:|---|---|"]
    for what, load, key, limit, sense in TARGETS:
        if load not in by_load:
            lines.append(f"| {what} | | | | {sense} {limit:g}x | | not measured (no {load} point in this run) |")
            continue
        r, f = by_load[load]
        if not f[key]:  # a floor of 0 (no sample) would make any ratio "met"
            lines.append(f"| {what} | {r[key]:,.2f} | 0 | | {sense} {limit:g}x | | not measured (no floor figure) |")
            continue
        ratio = r[key] / f[key]
        met = ratio >= limit if sense == "≥" else ratio <= limit
        spread = f"{'/'.join(map(str, r['conns_per_worker']))}, {'/'.join(map(str, f['conns_per_worker']))}"
        lines.append(f"| {what} | {r[key]:,.2f} | {f[key]:,.2f} | {ratio:.2f}x | {sense} {limit:g}x | {spread} | "
                     f"{'met' if met else 'missed'} |")
    return lines


def _pacer_check(started: list[Server]) -> list[str]:
    lines: list[str] = []
    lag = [p["client_lag_p99_ms"] for s in started for p in s.points if p["client_lag_p99_ms"] is not None]
    cpu = [p["client_cpu"] for s in started for p in s.points if p["client_cpu"] is not None]
    if lag:
        lines += ["", f"Pacer self-check: client lag p99 ≤ {max(lag):.2f} ms, client CPU ≤ {max(cpu):.0%} of a core."]
        if max(lag) > 5.0:  # on an idle machine the pacer stays within ~2 ms of schedule at 1,000 req/s
            lines += ["", f"WARNING: the load generator fell up to {max(lag):.0f} ms behind schedule, so something "
                          "else was using the CPUs: latencies are not representative; CPU per request still is."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one short point per load (the smoke test)")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of each load point (default 10)")
    parser.add_argument("--rates", default="100,500,1000", help="fixed rates in req/s (default 100,500,1000)")
    parser.add_argument("--connections", type=int, default=16,
                        help="wrk's connections, and the most the pacer's pool opens (default 16)")
    parser.add_argument("--server", default="eventloop", choices=sorted(servers_module.KINDS),
                        help="the server in front of all three apps (default: eventloop, as shipped)")
    parser.add_argument("--workers", type=int, help="worker processes for every server (default: as shipped)")
    parser.add_argument("--policy", default="mixed-fleet", help="example whose policy the real server loads")
    parser.add_argument("--no-wrk", action="store_true", help="skip the saturation runs")
    parser.add_argument("--no-floors", action="store_true", help="the real server only (comparing servers)")
    reviews.add_templates_option(parser)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per point, interleaved; figures are the rounds' medians (default 3)")
    parser.add_argument("--json", type=Path, help="also write every point as JSON here")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so the servers are stopped too
    if args.quick:
        args.seconds, args.rates, args.connections, args.rounds = 1.0, "100", 4, 1
    rates = [float(r) for r in args.rates.split(",") if r]
    use_wrk = not args.no_wrk and shutil.which("wrk") is not None
    if not use_wrk and not args.no_wrk:
        print("wrk is not installed (apt-get install -y wrk): skipping the saturation runs", file=sys.stderr)
    from webhook.settings import Settings

    shipped = Settings()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(), "load": os.getloadavg()[0],
            "policy": args.policy, "templates": args.templates,
            "server": args.server, "model": f"{args.workers or shipped.workers} workers",
            "connections": args.connections, "seconds": args.seconds, "rounds": max(1, args.rounds)}
    with tempfile.TemporaryDirectory(prefix="gpupolicy-bench-") as tmp:
        work = Path(tmp)
        bodies = write_bodies(work / "bodies", args.templates)
        with servers(work, args) as started:
            ca = work / "certs" / "ca.crt"
            for rate in rates:
                run_rounds(started, meta["rounds"], lambda server, rate=rate: fixed_rate(
                    server, rate, args.seconds, connections=args.connections, ca=ca, templates=args.templates))
            if use_wrk:
                run_rounds(started, meta["rounds"], lambda server: saturation(
                    server, args.seconds, connections=args.connections, bodies=bodies))
        meta["load_end"] = os.getloadavg()[0]
        sys.stdout.write(render(started, meta))
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, **{s.name: s.points for s in started}}, indent=2))
        failed = [p for s in started for p in s.points if p["errors"]]
        if failed:
            print(f"errors in {len(failed)} point(s); server logs were in {work}", file=sys.stderr)
            print((work / "real.log").read_text()[-3000:], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
