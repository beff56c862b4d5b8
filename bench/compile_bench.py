"""Compiler benchmark: wall time and peak memory of `gpupolicy compile` and `validate` as node classes grow.

    .venv/bin/python bench/compile_bench.py            # 1, 10, 100, 1000 classes, 3 runs each (~1 min)
    .venv/bin/python bench/compile_bench.py --quick    # 1 and 10 classes, one run (the smoke test)

Specs come from specgen.py (disjoint selectors, modes cycling exclusive / time-slicing / MPS / MIG,
three tenants). Each run is a fresh `gpupolicy` process writing into a fresh directory, timed from spawn
to exit; peak memory is that process's ru_maxrss from os.wait4. Growth is shown as the ratio per 10x
classes and as the exponent k of time ~ classes^k between the two largest sizes (1 = linear).

Two in-process sections follow for the largest size: where the time goes (load and check, render,
write), and the class-overlap check against the quadratic reference it replaced (same findings,
checked here on disjoint and on randomly overlapping selectors).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))

import specgen  # noqa: E402

GPUPOLICY = str(Path(sys.executable).parent / "gpupolicy")


def timed_run(command: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, exit code) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode  # ru_maxrss is in KiB on Linux


def measure(command: list[str], runs: int, before: list[str] | None = None) -> dict[str, float]:
    walls, rss = [], []
    for _ in range(runs):
        if before:
            shutil.rmtree(before[0], ignore_errors=True)
        wall, peak, code = timed_run(command)
        if code != 0:
            raise SystemExit(f"{' '.join(command)} exited with {code}")
        walls.append(wall)
        rss.append(peak)
    return {"median_s": statistics.median(walls), "min_s": min(walls), "rss_mib": max(rss)}


def exponent(sizes: list[int], values: list[float]) -> float:
    """k in value ~ size^k between the two largest sizes."""
    (n1, n2), (v1, v2) = sizes[-2:], values[-2:]
    return math.log(v2 / v1) / math.log(n2 / n1)


def phases(spec: Path, out: Path) -> dict[str, float]:
    from compiler import compile_policy, writer
    from policy.load import load_policy

    text = spec.read_text()
    t0 = time.perf_counter()
    result = load_policy(text, filename=str(spec))
    t1 = time.perf_counter()
    assert result.policy is not None
    tree = compile_policy(result.policy)
    t2 = time.perf_counter()
    writer.write_tree(tree, out)
    t3 = time.perf_counter()
    return {"load and check": t1 - t0, "render (YAML and JSON)": t2 - t1, "write (atomic swap)": t3 - t2}


def quadratic_pairs(names: list[str], node_selectors: list[dict[str, str]]) -> list[tuple[int, int]]:
    """The overlap check as it was: conflicting_key on every pair (the reference)."""
    from policy.kube import selectors

    found = []
    for j in range(len(names)):
        for i in range(j):
            if names[i] == names[j] or selectors.conflicting_key(node_selectors[i], node_selectors[j]):
                continue
            found.append((j, i))
    return found


def overlap_section(n: int) -> list[str]:
    from policy.checks import classes

    rng = random.Random(4)
    cases = {
        f"{n} disjoint classes": ([specgen.class_name(i) for i in range(n)],
                                  [{"node-pool": specgen.class_name(i), "tier": "gpu"} for i in range(n)]),
        f"{n} random selectors": ([f"c{rng.randrange(n)}" for _ in range(n)],
                                  [{rng.choice("abcd"): rng.choice("xyz") for _ in range(rng.randint(1, 3))}
                                   for _ in range(n)]),
    }
    lines = ["| selectors | pairs found | quadratic reference | bitset (policy/checks/classes.py) | same findings |",
             "|---|---:|---:|---:|---|"]
    for label, (names, sels) in cases.items():
        t0 = time.perf_counter()
        reference = quadratic_pairs(names, sels)
        t1 = time.perf_counter()
        fast = list(classes.overlapping_pairs(names, sels))
        t2 = time.perf_counter()
        if fast != reference:
            raise SystemExit(f"overlap check differs from the reference on {label}")
        lines.append(f"| {label} | {len(fast):,} | {(t1 - t0) * 1000:,.1f} ms | {(t2 - t1) * 1000:,.1f} ms | yes |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 and 10 classes, one run (the smoke test)")
    parser.add_argument("--runs", type=int, default=3, help="runs per size; the median is reported (default 3)")
    parser.add_argument("--sizes", default="1,10,100,1000", help="node-class counts (default 1,10,100,1000)")
    args = parser.parse_args(argv)
    sizes = [1, 10] if args.quick else [int(s) for s in args.sizes.split(",")]
    runs = 1 if args.quick else args.runs

    print(f"# compile_bench {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {os.cpu_count()} CPUs  "
          f"Python {platform.python_version()}  load average {os.getloadavg()[0]:.2f}\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpupolicy-compile-bench-") as tmp:
        work = Path(tmp)
        for n in sizes:
            spec = work / f"spec-{n}.yaml"
            spec.write_text(specgen.generate_spec(n))
            out = work / f"out-{n}"
            compiled = measure([GPUPOLICY, "compile", str(spec), "-o", str(out)], runs, before=[str(out)])
            validated = measure([GPUPOLICY, "validate", str(spec)], runs)
            files = sum(1 for p in out.rglob("*") if p.is_file())
            rows.append((n, spec.stat().st_size, files, compiled, validated))
        print("| classes | spec KiB | files | compile s | compile MiB | validate s | validate MiB |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n, size, files, c, v in rows:
            print(f"| {n:,} | {size / 1024:,.0f} | {files:,} | {c['median_s']:.2f} | {c['rss_mib']:.0f} | "
                  f"{v['median_s']:.2f} | {v['rss_mib']:.0f} |")
        if len(rows) >= 2:
            print("\n| growth | compile time | compile memory | validate time |")
            print("|---|---:|---:|---:|")
            for (n1, _, _, c1, v1), (n2, _, _, c2, v2) in itertools.pairwise(rows):
                print(f"| {n1:,} → {n2:,} classes | ×{c2['median_s'] / c1['median_s']:.1f} | "
                      f"×{c2['rss_mib'] / c1['rss_mib']:.2f} | ×{v2['median_s'] / v1['median_s']:.1f} |")
            ns = [r[0] for r in rows]
            print(f"\nBetween {ns[-2]:,} and {ns[-1]:,} classes: compile time ~ classes^"
                  f"{exponent(ns, [r[3]['median_s'] for r in rows]):.2f}, validate time ~ classes^"
                  f"{exponent(ns, [r[4]['median_s'] for r in rows]):.2f} (1.00 = linear; start-up makes small"
                  " sizes look flat).")
        biggest = sizes[-1]
        print(f"\n## where the time goes, {biggest:,} classes (in-process)\n")
        print("| phase | seconds |\n|---|---:|")
        for phase, seconds in phases(work / f"spec-{biggest}.yaml", work / "phases").items():
            print(f"| {phase} | {seconds:.2f} |")
        print("\n## class-overlap check\n")
        print("\n".join(overlap_section(200 if args.quick else 1000)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
