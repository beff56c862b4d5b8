"""Review time against object size: is one review's work linear in the object it judges?

    .venv/bin/python bench/review_size_bench.py            # full run, about a minute
    .venv/bin/python bench/review_size_bench.py --quick    # a few seconds (the smoke test)

The shapes a tenant with the right to create pods can send, at 10, 100, 1,000 and 5,000 containers, and as
bodies of 1 MiB and 3 MiB (the API server's limit on a request):

  gpu-each     every container asks for nvidia.com/gpu: 2 (the object of the bounded-review issue: denied)
  one-gpu      one container asks for nvidia.com/gpu: 2 on a shared class (denied, so the fix search runs),
               every other container is a CPU sidecar: the rules and the search read every container
  affinity     one GPU container, and as many required node-affinity terms as the size says (allowed)

Each is timed in process (`review.parse_review` then `review.decide`, as the webhook's route does, on an engine
that remembers nothing) and through the webhook (`gpupolicy webhook serve` on 127.0.0.1, one review at a time on
a kept-alive TLS connection). The fitted exponent is the slope of log(time) over log(containers) by least
squares; 1 is linear. The acceptance figures: exponent <= 1.1, and the 1,000-container review under 100 times the
10-container one. Policy: the tke-l20-t4 example, whose largest class holds 8 GPU devices per node.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(1, str(ROOT))

import soak  # noqa: E402

from policy.admission.engine import Engine  # noqa: E402
from policy.load import load_policy_or_raise  # noqa: E402
from policy.resolved.offers import build_admission_policy  # noqa: E402
from webhook import review  # noqa: E402

SPEC = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
SIZES = (10, 100, 1000, 5000)
MIB = 1024 * 1024


def _container(i: int, gpus: str | None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {"cpu": "100m"}
    return {"name": f"c{i}", "image": "registry.example/infer:1.0", "resources": {"limits": limits}}


def gpu_each(n: int) -> dict[str, Any]:
    return {"containers": [_container(i, "2") for i in range(n)]}


def one_gpu(n: int) -> dict[str, Any]:
    return {"containers": [_container(0, "2"), *(_container(i, None) for i in range(1, n))]}


def affinity(n: int) -> dict[str, Any]:
    terms = [{"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                    "values": ["PNV5b.8XLARGE96", f"other-{i}"]}]} for i in range(n)]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    return {"containers": [_container(0, "1")], "affinity": {"nodeAffinity": required}}


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {"gpu-each": gpu_each, "one-gpu": one_gpu, "affinity": affinity}


def body(spec: dict[str, Any]) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "default"}, "spec": spec}
    return soak.review(pod, uid="size-bench")


def containers_for(shape: str, size: int) -> int:
    """How many containers (or terms) make a body of about ``size`` bytes."""
    per = (len(body(SHAPES[shape](200))) - len(body(SHAPES[shape](100)))) / 100
    return max(1, int(size / per))


def in_process(data: bytes, engine: Engine, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            parsed = review.parse_review(data)
        except review.MalformedReview:  # past the 200,000 values a body may hold: refused unread
            return float("nan")
        review.decide(parsed, engine, expired=lambda: False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def through_webhook(data: bytes, server: soak.Server, repeat: int) -> tuple[float, bool | None]:
    """Median seconds per review and its verdict; (nan, None) when the server refuses the body unread (a JSON body
    of more than 200,000 values gets 413 and the connection is closed while the client still sends)."""
    connection = soak._Connection(server.target, server.target.context(), 30.0)
    times: list[float] = []
    allowed = True
    for attempt in range(repeat + 1):  # the first is untimed: it warms the connection and the worker
        started = time.perf_counter()
        try:
            connection.request("POST", "/validate", data, {"Content-Type": "application/json"})
            response = connection.getresponse()
        except (ssl.SSLError, ConnectionError):
            connection.close()
            return float("nan"), None
        answer = response.read()
        if response.status != 200:
            connection.close()
            return float("nan"), None
        if attempt:
            times.append(time.perf_counter() - started)
        allowed = json.loads(answer)["response"]["allowed"]
    connection.close()
    return statistics.median(times), allowed


def _verdict(allowed: bool | None) -> str:
    return "refused unread (413)" if allowed is None else "allow" if allowed else "deny"


def exponent(points: list[tuple[int, float]]) -> float:
    points = [(n, t) for n, t in points if t == t]  # a body refused unread has no time
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 and 100 containers, one repeat, no MiB bodies")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    sizes = SIZES[:2] if args.quick else SIZES
    repeat = 1 if args.quick else 5
    engine = Engine(build_admission_policy(load_policy_or_raise(SPEC.read_text(), filename=str(SPEC))), memo_size=0)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpupolicy-size-") as tmp:
        server = soak.start_server(Path(tmp), workers=2, threads=2, spec=SPEC)
        try:
            print("| shape | containers | body | in process | through the webhook | verdict |")
            print("|---|---:|---:|---:|---:|---|")
            for shape, make in SHAPES.items():
                rows = [(n, n) for n in sizes]
                if not args.quick:
                    rows += [(containers_for(shape, mib * MIB), f"{mib} MiB") for mib in (1, 3)]
                local: list[tuple[int, float]] = []
                remote: list[tuple[int, float]] = []
                for n, label in rows:
                    data = body(make(n))
                    seconds = in_process(data, engine, repeat)
                    over_http, allowed = through_webhook(data, server, repeat)
                    local.append((n, seconds))
                    remote.append((n, over_http))
                    print(f"| {shape} | {n:,} | {len(data) / 1024:,.0f} KiB | {seconds * 1000:.2f} ms | "
                          f"{over_http * 1000:.2f} ms | {_verdict(allowed)} |")
                    figures.setdefault(shape, []).append({"containers": n, "label": str(label), "bytes": len(data),
                                                          "in_process_s": seconds, "webhook_s": over_http})
                ratio = local[sizes.index(1000)][1] / local[0][1] if 1000 in sizes else float("nan")
                fit = exponent(local)
                fit_http = exponent(remote)
                figures[f"{shape} fit"] = {"exponent_in_process": fit, "exponent_webhook": fit_http,
                                           "ratio_1000_to_10": ratio}
                print(f"| {shape} | fitted exponent | | {fit:.2f} | {fit_http:.2f} | 1,000 / 10: {ratio:.1f}x |")
        finally:
            soak.stop_server(server)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
