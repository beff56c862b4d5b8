"""Where the webhook's slowest requests wait: a watchdog in each worker catches every stall of its event loop.

    .venv/bin/python bench/tail_profile.py                   # 500 req/s for 20 s, stalls over 5 ms
    .venv/bin/python bench/tail_profile.py --rate 500 --seconds 20 --threshold-ms 5 --py-spy
    .venv/bin/python bench/tail_profile.py --app flask-noop      # the Flask floor, watched the same way

A p99.9 is one request in a thousand, a few per second at 500 req/s: a sampling profile of the whole run
averages it away. So this starts the webhook as shipped (serve.run, event-loop workers, TLS, the
mixed-fleet policy, multiprocess metrics, a log line per denied review to a file) with one addition per worker:
a heartbeat on the event loop every millisecond and a thread that notices when it is late by more than
--threshold-ms. While the loop is stalled the thread samples the loop thread's Python stack every
millisecond and reads that thread's CPU clock, so each stall is reported with how long it lasted, how much
of it the worker spent on the CPU (the rest: waiting in a system call, or not scheduled at all), and the
frames it was in. The load is bench/pace.py's (open loop, latency from each request's due time), so the
client's slowest requests can be set against the server's stalls. --py-spy also records both workers with
`py-spy record --idle` (py-spy from PyPI) for a whole-run picture. 127.0.0.1 only; stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

import pace  # noqa: E402
import reviews  # noqa: E402
import webhook_bench  # noqa: E402

#: Frames from these files say little about why the loop waited; the report shows the innermost others.
_PLUMBING = ("asyncio/base_events.py", "asyncio/events.py", "asyncio/selector_events.py", "gunicorn/")


class Watchdog:
    """Runs beside a worker's event loop; records every stall longer than threshold seconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float, out: Path) -> None:
        self.loop, self.threshold, self.out = loop, threshold, out
        self.main = threading.main_thread().ident or 0
        self.cpu_clock = time.pthread_getcpuclockid(self.main)
        self.main_tid = os.getpid()  # the loop runs on the process's main thread
        self.tick = time.monotonic()
        self.stalls: list[dict[str, Any]] = []

    def start(self) -> None:
        self.loop.call_soon_threadsafe(self._beat)
        threading.Thread(target=self._watch, daemon=True).start()

    def _beat(self) -> None:
        self.tick = time.monotonic()
        self.loop.call_later(0.001, self._beat)

    def _watch(self) -> None:
        saved = 0
        while True:
            time.sleep(0.001)
            if len(self.stalls) > saved:  # saved as they come: gunicorn may kill a worker that lingers at exit
                saved = len(self.stalls)
                partial = self.out.with_suffix(".part")
                partial.write_text(json.dumps(self.stalls[:saved]))
                partial.rename(self.out)
            started = self.tick
            if time.monotonic() - started < self.threshold:
                continue
            cpu0, wall0 = time.clock_gettime(self.cpu_clock), time.monotonic()
            frames: collections.Counter[str] = collections.Counter()
            states: collections.Counter[str] = collections.Counter()
            while self.tick == started:
                states[_state(self.main_tid)] += 1
                frame = sys._current_frames().get(self.main)
                if frame is not None:
                    frames[_where(frame)] += 1
                time.sleep(0.001)
            wall = time.monotonic() - wall0
            cpu = time.clock_gettime(self.cpu_clock) - cpu0
            self.stalls.append({"ms": round((time.monotonic() - started) * 1000, 1),
                                "on_cpu": round(cpu / wall, 2) if wall > 0 else None,
                                "states": dict(states), "frames": frames.most_common(3)})


def _state(tid: int) -> str:
    """The loop thread's scheduler state (proc(5)): R running or waiting for a CPU, S sleeping, D in I/O."""
    try:
        return Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


def _where(frame: Any) -> str:
    """The innermost three frames that are not the loop's own plumbing, innermost last."""
    stack = [f for f in traceback.extract_stack(frame) if not any(p in f.filename for p in _PLUMBING)]
    return " > ".join(f"{Path(f.filename).name}:{f.name}" for f in stack[-3:])


def serve(out: Path, threshold: float, argv: list[str]) -> int:
    """The webhook (or a floor) as `gpupolicy webhook serve` runs it, each worker watched; stalls written to
    out/<pid>.json."""
    import noop_app

    from webhook import serve as webhook_serve
    from webhook.settings import Settings

    watchdogs: dict[int, Watchdog] = {}
    app, cert_dir, port = argv
    base = {"real": webhook_serve.WebhookServer, "noop": noop_app.NoopServer,
            "flask-noop": noop_app.FlaskNoopServer}[app]

    class Watched(base):  # type: ignore[valid-type,misc]
        def load_config(self) -> None:
            super().load_config()
            self.cfg.set("post_worker_init", self._watch)

        @staticmethod
        def _watch(worker: Any) -> None:
            watchdogs[os.getpid()] = dog = Watchdog(worker.loop, threshold, out / f"{os.getpid()}.json")
            dog.start()

    settings = Settings.from_env(cert_dir=cert_dir, bind="127.0.0.1", port=int(port))
    return webhook_serve.run(settings, application=Watched)


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    certs = work / "certs"
    subprocess.run([webhook_bench.GPUPOLICY, "webhook", "certs", "--out", str(certs)], check=True,
                   capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update({"GPUPOLICY_DRAIN_SECONDS": "0", "GPUPOLICY_POLICY": str(webhook_bench.write_policy(work, args.policy))})
    stalls_dir = work / "stalls"
    stalls_dir.mkdir()
    port = webhook_bench.free_port()
    command = [sys.executable, __file__, "--serve", str(stalls_dir), str(args.threshold_ms / 1000), args.app,
               str(certs), str(port)]
    server = webhook_bench.start("real", command, port, work, env)
    spies: list[subprocess.Popen[bytes]] = []
    try:
        context = pace.client_context(certs / "ca.crt")
        context.check_hostname = False
        webhook_bench.wait_ready(server, context)
        asyncio.run(pace.run(server.url, args.rate, 2, connections=16, context=pace.client_context(certs / "ca.crt"),
                             bodies=reviews.bodies()))  # warm: connections dialled, first-use costs paid
        if args.py_spy:
            spies = [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--idle", "-p",
                                       str(pid), "-r", "500", "-d", str(int(args.seconds) + 1), "--format", "raw",
                                       "-o", str(work / f"py-spy-{pid}.txt"), "--nonblocking", "--threads"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
                     for pid in server.workers()]
        result = asyncio.run(pace.run(server.url, args.rate, args.seconds, connections=16,
                                      context=pace.client_context(certs / "ca.crt"), bodies=reviews.bodies(),
                                      check_verdicts=args.app == "real"))
        for spy in spies:
            spy.wait(timeout=60)
        time.sleep(0.5)  # the watchdogs save what they saw
    finally:
        webhook_bench.stop(server)
    stalls = [s for path in stalls_dir.glob("*.json") for s in json.loads(path.read_text())]
    states: collections.Counter[str] = collections.Counter()
    for stall in stalls:
        states.update(stall["states"])
    log = server.log.read_text()
    app_ms = sorted(float(x.split("latency_ms=")[1].split()[0]) for x in log.splitlines() if "latency_ms=" in x)
    latencies = sorted(result.latencies)
    return {"client": result.summary(), "slowest_ms": [round(x, 1) for x in latencies[-10:]],
            "app_ms": {"p50": pace.pct(app_ms, 50), "p99": pace.pct(app_ms, 99), "p99.9": pace.pct(app_ms, 99.9),
                       "max": app_ms[-1] if app_ms else None},
            "stalled_ms_total": round(sum(s["ms"] for s in stalls)), "stalls_over_threshold": len(stalls),
            "on_cpu_while_stalled": round(sum(s["ms"] * (s["on_cpu"] or 0) for s in stalls)
                                          / max(1.0, sum(s["ms"] for s in stalls)), 2),
            "thread_states_while_stalled": dict(states.most_common()),
            "frames_while_stalled": _frames(stalls), "slowest_stalls": sorted(stalls, key=lambda s: -s["ms"])[:10],
            "py_spy": sorted(str(p) for p in work.glob("py-spy-*"))}


def _frames(stalls: list[dict[str, Any]]) -> list[tuple[str, int]]:
    frames: collections.Counter[str] = collections.Counter()
    for stall in stalls:
        for where, count in stall["frames"]:
            frames[where] += count
    return frames.most_common(12)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve":  # the server side, started by measure()
        return serve(Path(argv[1]), float(argv[2]), argv[3:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threshold-ms", type=float, default=5.0)
    parser.add_argument("--policy", default="mixed-fleet")
    parser.add_argument("--app", choices=("real", "noop", "flask-noop"), default="real",
                        help="the webhook, or one of the floors (bench/noop_app.py), on the same stack")
    parser.add_argument("--py-spy", action="store_true", help="also py-spy both workers (kept in --keep DIR)")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (logs, py-spy output)")
    parser.add_argument("--quick", action="store_true", help="100 req/s for 1 s (the smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rate, args.seconds = 100.0, 1.0
    print(f"# {webhook_bench.machine()}", file=sys.stderr)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        report = measure(args, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="gpupolicy-tail-") as tmp:
            report = measure(args, Path(tmp))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
