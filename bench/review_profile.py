"""Where a review's CPU goes: the webhook's application under cProfile, in one process, on the bench's bodies.

    .venv/bin/python bench/review_profile.py --templates 100     # every review judged afresh (a new pod each)
    .venv/bin/python bench/review_profile.py                     # replicas of four templates
    .venv/bin/python bench/review_profile.py --quick             # a few hundred reviews (the smoke test)

The application is built and called as bench/app_bench.py builds and calls it (as the event-loop worker calls
it: wsgi.environ, wsgi.call, wsgi.response_head), so the network and TLS are out of the picture; those are the
serving layer's and the floors pay them too. Reported: CPU µs per review measured with process time (no
profiler), then the profile's top functions by own time and the cumulative time of the steps of a review
(parse, decode, engine, answer), each as µs per review. cProfile inflates every call by roughly the same
overhead, so the shares matter more than the absolute figures.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

import app_bench  # noqa: E402
import reviews  # noqa: E402

#: The steps of a review, as (label, module file suffix, function name) whose cumulative time is reported.
STEPS = (
    ("parse_review: the JSON parse and the AdmissionReview's fields", "webhook/review.py", "parse_review"),
    ("decide: the engine, the verdict's message, causes and warnings", "webhook/review.py", "decide"),
    ("Engine.evaluate", "policy/admission/engine.py", "evaluate"),
    ("build_response", "webhook/review.py", "build_response"),
    ("review.json_bytes: the answer's JSON, and a fix's inside decide", "webhook/review.py", "json_bytes"),
    ("Webhook.record: metrics and the log line", "webhook/state.py", "record"),
    ("the whole WSGI call (wsgi.call)", "webhook/wsgi.py", "call"),
)


def _label(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    parts = Path(filename).parts
    short = "/".join(parts[-2:]) if len(parts) > 1 else filename
    return f"{short}:{line}({name})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reviews", type=int, default=4000, help="reviews profiled (default 4000)")
    parser.add_argument("--top", type=int, default=25, help="functions listed by own time (default 25)")
    parser.add_argument("--quick", action="store_true", help="a few hundred reviews (the smoke test)")
    reviews.add_templates_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.reviews, args.top = 200, 5
    work = Path(tempfile.mkdtemp(prefix="gpupolicy-profile-"))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(work)
    try:
        run = app_bench.loop(app_bench.build("real", work), args.templates)
        run(400)  # warm: first-use costs paid
        start = time.process_time()
        run(args.reviews)
        plain = (time.process_time() - start) / args.reviews * 1e6
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        run(args.reviews)
        profiler.disable()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in entries.values())
    per = 1e6 / args.reviews
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}, load average {os.getloadavg()[0]:.2f}, "
          f"templates {args.templates}, {args.reviews} reviews\n")
    print(f"CPU per review, unprofiled: {plain:,.1f} µs; profiled: {total * per:,.1f} µs\n")
    print("| step (cumulative) | µs per review, profiled | share |")
    print("|---|---:|---:|")
    found = {}
    for label, suffix, name in STEPS:
        found[name] = sum(ct for (f, _, n), (_, _, _, ct, _) in entries.items() if n == name and f.endswith(suffix))
        print(f"| {label} | {found[name] * per:,.1f} | {found[name] / total:.0%} |")
    # The steps above that are not inside one another; what the WSGI call spends besides them is Flask's (or, on the
    # fast path, the path's own few lines) and the environ's.
    rest = found["call"] - sum(found[name] for name in ("parse_review", "decide", "build_response", "record"))
    print(f"| the rest of the WSGI call: Flask's request handling, routing and contexts; the answer's JSON | "
          f"{rest * per:,.1f} | {rest / total:.0%} |")
    print("\n| function (own time) | calls per review | µs per review, profiled | share |")
    print("|---|---:|---:|---:|")
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[: args.top]
    for func, (_, calls, tt, _, _) in ranked:
        print(f"| `{_label(func)}` | {calls / args.reviews:,.1f} | {tt * per:,.1f} | {tt / total:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
