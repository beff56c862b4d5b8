"""CLI start-up benchmark: wall time of short commands, and which imports they pay for.

    apt-get install -y hyperfine                        # optional: used when installed
    .venv/bin/python bench/startup_bench.py             # 20 runs per command (~15 s)
    .venv/bin/python bench/startup_bench.py --quick     # 3 runs (the smoke test)

Commands: `python -c pass` (the interpreter's own floor), `gpupolicy --help`, `gpupolicy --version`,
`gpupolicy validate examples/clusters/tke-l20-t4/cluster.yaml`. With hyperfine (Debian: `hyperfine`)
the timing is its mean ± σ after warm-up runs; without it, the same is measured here by repeated runs.
Then `python -X importtime` lists, per command, the modules with the largest self time, and which heavy
libraries got imported at all (none of flask, kubernetes, jsonschema, cryptography, gunicorn,
prometheus_client belong in these commands; pydantic and PyYAML only where a spec is read).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
GPUPOLICY = str(Path(PYTHON).parent / "gpupolicy")
EXAMPLE = "examples/clusters/tke-l20-t4/cluster.yaml"
HEAVY = ("pydantic", "yaml", "flask", "werkzeug", "kubernetes", "jsonschema", "cryptography", "gunicorn",
         "prometheus_client")

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [PYTHON, "-c", "pass"],
    "gpupolicy --help": [GPUPOLICY, "--help"],
    "gpupolicy --version": [GPUPOLICY, "--version"],
    "gpupolicy validate (example)": [GPUPOLICY, "validate", EXAMPLE],
}


def with_hyperfine(runs: int) -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "out.json"
        command = ["hyperfine", "--style", "none", "-N", "--warmup", "2", "--runs", str(runs),
                   "--export-json", str(export)]
        for name, argv in COMMANDS.items():
            command += ["-n", name, " ".join(argv)]
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results = json.loads(export.read_text())["results"]
    return {r["command"]: (r["mean"], r["stddev"] or 0.0) for r in results}


def by_hand(runs: int) -> dict[str, tuple[float, float]]:
    out = {}
    for name, argv in COMMANDS.items():
        times = []
        for i in range(runs + 2):
            start = time.perf_counter()
            subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            if i >= 2:  # two warm-up runs, as with hyperfine
                times.append(time.perf_counter() - start)
        out[name] = (statistics.fmean(times), statistics.stdev(times) if len(times) > 1 else 0.0)
    return out


def import_times(argv: list[str]) -> tuple[list[tuple[int, int, str]], set[str]]:
    """(self µs, cumulative µs, module) of every import, and the heavy top-level packages imported."""
    script = argv[1:] if argv[0] == GPUPOLICY else None
    command = [PYTHON, "-X", "importtime", "-m", "cli", *script] if script is not None else \
        [PYTHON, "-X", "importtime", *argv[1:]]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        rows.append((int(own), int(cumulative), name))
    heavy = {name.strip().split(".")[0] for _, _, name in rows} & set(HEAVY)
    return rows, heavy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 runs per command (the smoke test)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=8, help="import offenders listed per command")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    tool = "hyperfine" if shutil.which("hyperfine") else "repeated runs (hyperfine not installed)"
    timings = with_hyperfine(runs) if shutil.which("hyperfine") else by_hand(runs)

    print(f"# startup_bench {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {os.cpu_count()} CPUs  "
          f"Python {platform.python_version()}  load average {os.getloadavg()[0]:.2f}  ({tool}, {runs} runs)\n")
    print("| command | mean ms | σ ms |\n|---|---:|---:|")
    for name, (mean, sd) in timings.items():
        print(f"| `{name}` | {mean * 1000:.0f} | {sd * 1000:.0f} |")
    for name, command in COMMANDS.items():
        if name.startswith("python"):
            continue
        rows, heavy = import_times(command)
        total = sum(own for own, _, _ in rows)
        print(f"\n### `{name}`: {len(rows)} modules, {total / 1000:.0f} ms of imports; heavy libraries: "
              f"{', '.join(sorted(heavy)) or 'none'}\n")
        print("| module | self ms | cumulative ms |\n|---|---:|---:|")
        for own, cumulative, module in sorted(rows, reverse=True)[: args.top]:
            print(f"| {module.strip()} | {own / 1000:.1f} | {cumulative / 1000:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
