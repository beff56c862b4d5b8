"""The webhook's application and both floors in one process: CPU and instructions per review, and per step.

    .venv/bin/python bench/app_bench.py                  # CPU µs per review and per step, about a minute
    .venv/bin/python bench/app_bench.py --instructions   # the same in instructions (valgrind), ~10 minutes
    .venv/bin/python bench/app_bench.py --quick          # a few seconds (the smoke test)

webhook_bench.py measures the servers as shipped, TLS and event loop included; on a shared machine its
figures move with the load. This takes the network out: each application (the webhook as `gpupolicy webhook
serve` builds it: the compiled mixed-fleet policy, Prometheus multiprocess metrics, a log line per denied review,
here to a file; the no-op Flask floor; the raw WSGI floor, bench/noop_app.py) is called the way the event-loop
worker calls it (webhook/connection.py: `wsgi.environ`, `wsgi.call`, `wsgi.response_head`) on the four
bench/reviews.py bodies, round after round, in one process.

Per step, a step's cost is what the whole loop saves when that step is replaced by its result, computed
beforehand (ablation): measured in context, with the caches the rest of the request leaves behind, which a
loop over the step alone would miss. --instructions counts instructions with valgrind's callgrind instead of
timing: a run with no reviews is subtracted from a run with --reviews of them, so start-up cancels out; the
count does not change with the machine's load, which CPU time does by ±10 % here.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]

#: The steps of a review that the webhook does and the floors do not (or do differently), each replaced by its
#: result in turn; the Flask floor's JSON parse is replaced the same way, to set the two parses side by side.
STEPS = {
    "json": "the body parsed (webhook.review: json.loads, or orjson where it answers the same)",
    "parse": "review.parse_review beyond the JSON parse (every field of the AdmissionReview checked)",
    "engine": "review.decide: the rule engine, the verdict's message, warnings and annotations",
    "metrics": "Metrics.observe: the decision counter per rule and the latency histogram (mmap files)",
    "log": "the review's log line (Webhook.record less its metrics)",
}
APPS = ("real", "flask", "noop")


def build(app: str, work: Path) -> Callable[..., Any]:
    """The WSGI application, built as its server builds it (metrics directory set before prometheus_client)."""
    import noop_app

    if app == "flask":
        return noop_app.flask_app()  # type: ignore[no-any-return]
    if app == "noop":
        return noop_app.app
    import webhook_bench

    from webhook import serve
    from webhook.app import create_app
    from webhook.settings import Settings

    serve.configure_logging("info")
    handler = logging.getLogger("gpupolicy").handlers[0]
    handler.setStream(open(work / "webhook.log", "a"))  # noqa: SIM115 (kept open for the process's life)
    policy = webhook_bench.write_policy(work, "mixed-fleet")
    return create_app(Settings(policy_file=policy, metrics_dir=Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])))


def ablate(app: str, step: str, wsgi_app: Any, templates: int) -> None:
    """Replace one step of the webhook (or the floor's JSON parse) by its result, computed beforehand."""
    import noop_app
    import reviews

    from webhook import metrics as webhook_metrics
    from webhook import review, state

    bodies = {b.data: b for b in reviews.bodies(templates)}
    if app != "real":
        if step != "json":
            raise SystemExit(f"the floors have no step {step}")
        parsed = {data: json.loads(data) for data in bodies}
        noop_app.json = SimpleNamespace(loads=lambda body: parsed[bytes(body)], dumps=json.dumps)
        return
    if step == "json":
        parsed = {data: json.loads(data) for data in bodies}
        original_document = review._parse_document
        # parse_review without the parse: the document a body parses to, copied only at the top (the engine
        # never writes to it), then the same checks.
        review.parse_review = lambda body: original_document(dict(parsed[bytes(body)]))
    elif step == "parse":
        done = {data: review.parse_review(data) for data in bodies}
        parse = getattr(review, "_loads", json.loads)  # before orjson: json.loads
        review.parse_review = lambda body: done[bytes(body)] if parse(body) else None  # the JSON parse kept
    elif step == "engine":
        engine = wsgi_app.extensions["gpupolicy"].store.current.engine
        verdicts = {}
        for data, body in bodies.items():
            tenant = body.path.split("?")[0].rpartition("/tenant/")[2] if "/tenant/" in body.path else None
            rv = review.parse_review(data)
            verdicts[rv.uid] = review.decide(rv, engine, tenants=(tenant,) if tenant else ())
        review.decide = lambda rv, evaluator, tenants=(): verdicts[rv.uid]
    elif step == "metrics":
        webhook_metrics.Metrics.observe = lambda self, rv, verdict, seconds: None  # type: ignore[method-assign]
    elif step == "log":  # record() with its metrics and without the line (its arguments included)
        state.Webhook.record = lambda self, rv, verdict, seconds, **_: self.metrics.observe(  # type: ignore[method-assign]
            rv, verdict, seconds)
    else:
        raise SystemExit(f"unknown step {step}")


def requests(templates: int) -> list[tuple[Any, bytes, bytes]]:
    """The bodies (bench/reviews.py) as complete requests, with the headers the API server sends."""
    import reviews

    from webhook import wsgi

    out = []
    for body in reviews.bodies(templates):
        path, _, query = body.path.partition("?")
        headers = [(b"Host", b"gpupolicy-webhook.gpupolicy-system.svc"), (b"User-Agent", b"kube-apiserver-admission"),
                   (b"Accept", b"application/json, */*"), (b"Content-Type", b"application/json"),
                   (b"Content-Length", str(len(body.data)).encode())]
        out.append((wsgi.Request("POST", body.path.encode(), "1.1", headers, body.data), path.encode(),
                    query.encode()))
    return out


def loop(wsgi_app: Any, templates: int) -> Callable[[int], None]:
    """count -> that many requests, the bodies in turn, each answered as connection.py answers it."""
    from webhook import wsgi

    endpoint = wsgi.Endpoint("127.0.0.1", 40000, "127.0.0.1", 8443)
    prepared = requests(templates)
    for request, path, query in prepared:
        status, _, body = wsgi.call(wsgi_app, wsgi.environ(request, path, query, endpoint))
        if not status.startswith("200"):
            raise SystemExit(f"{status}: {body[:300]!r}")

    def run(count: int) -> None:
        for i in range(count):
            request, path, query = prepared[i % len(prepared)]
            status, headers, body = wsgi.call(wsgi_app, wsgi.environ(request, path, query, endpoint))
            wsgi.response_head(status, headers, len(body), close=False)

    return run


def child(app: str, step: str | None, reviews: int, repeats: int, templates: int) -> list[float]:
    """In a fresh process: CPU µs per review of each repeat (or, with repeats 0, just the reviews)."""
    work = Path(tempfile.mkdtemp(prefix="gpupolicy-app-bench-"))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(work)
    try:
        wsgi_app = build(app, work)
        if step:
            ablate(app, step, wsgi_app, templates)
        run = loop(wsgi_app, templates)
        run(200)  # warm: first-use costs paid, the specialising interpreter settled
        if not repeats:
            run(reviews)
            return []
        out = []
        for _ in range(repeats):
            gc.collect()
            start = time.process_time()
            run(reviews)
            out.append((time.process_time() - start) / reviews * 1e6)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def spawn(args: list[str], *, prefix: list[str] = ()) -> str:  # type: ignore[assignment]
    proc = subprocess.run([*prefix, sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                          timeout=3600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return proc.stdout


def cpu(app: str, step: str | None, reviews: int, repeats: int, templates: int) -> float:
    """Best CPU µs per review over the repeats, in a process of its own."""
    out = spawn([app, step or "-", str(reviews), str(repeats), str(templates)])
    return min(json.loads(out.strip().splitlines()[-1]))


def instructions(app: str, step: str | None, reviews: int, templates: int) -> float:
    """Instructions per review: callgrind's total with `reviews` reviews minus that with none."""
    totals = []
    with tempfile.TemporaryDirectory(prefix="gpupolicy-callgrind-") as tmp:
        for count in (0, reviews):
            out = Path(tmp) / f"callgrind-{count}.out"
            spawn([app, step or "-", str(count), "0", str(templates)],
                  prefix=["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
            summary = next(line for line in out.read_text().splitlines() if line.startswith(("summary:", "totals:")))
            totals.append(int(summary.split()[1]))
    return (totals[1] - totals[0]) / reviews


def main(argv: list[str] | None = None) -> int:
    import reviews

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        app, step, count, repeats, templates = argv[1:6]
        print(json.dumps(child(app, None if step == "-" else step, int(count), int(repeats), int(templates))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instructions", action="store_true", help="count instructions with valgrind's callgrind")
    parser.add_argument("--reviews", type=int, default=4000, help="reviews per repeat (per run with --instructions)")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per figure; the best is reported")
    parser.add_argument("--no-steps", action="store_true", help="the three applications only, no breakdown")
    reviews.add_templates_option(parser)
    parser.add_argument("--quick", action="store_true", help="a few hundred reviews, one repeat (the smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.reviews, args.repeats = 200, 1
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    if args.instructions and not args.quick:
        args.reviews = min(args.reviews, 800)  # ~1-2 M instructions each under callgrind's ~50x slowdown
    import webhook_bench

    print(f"# {webhook_bench.machine()}", file=sys.stderr)
    unit = "instructions" if args.instructions else "CPU µs"

    def measure(app: str, step: str | None = None) -> float:
        if args.instructions:
            return instructions(app, step, args.reviews, args.templates)
        return cpu(app, step, args.reviews, args.repeats, args.templates)

    figures = {app: measure(app) for app in APPS}
    fmt = (lambda x: f"{x / 1000:,.0f}k") if args.instructions else (lambda x: f"{x:,.1f}")
    print(f"## per review, {unit} ({'best of ' + str(args.repeats) if not args.instructions else 'callgrind'})\n")
    print(f"| application | {unit} per review | vs the Flask floor |")
    print("|---|---:|---:|")
    for app in APPS:
        print(f"| {app} | {fmt(figures[app])} | {figures[app] / figures['flask']:.2f}x |")
    if args.no_steps:
        return 0
    print(f"\n## the webhook's steps, each replaced by its result ({unit} the whole review saves)\n")
    print("| step | webhook | Flask floor | what |")
    print("|---|---:|---:|---|")
    saved = {step: figures["real"] - measure("real", step) for step in STEPS}
    floor_json = figures["flask"] - measure("flask", "json")
    for step, what in STEPS.items():
        print(f"| {step} | {fmt(saved[step])} | {fmt(floor_json) if step == 'json' else '-'} | {what} |")
    rest = figures["real"] - figures["flask"] - sum(saved.values()) + floor_json
    print(f"| the rest | {fmt(rest)} | | what is left of real - flask: Flask work the floor's route does not do "
          "(`g`, the tenant and media-type checks, the policy store, a Verdict, a larger answer) and what "
          "replacing steps cannot separate |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
