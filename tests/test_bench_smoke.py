"""The benchmarks in bench/ still run: each script once in its --quick mode, its tables checked for shape.

Nothing here looks at a number: timings depend on the machine, and the benchmarks report them for people
(docs/performance.md). What is asserted is that every script starts, finishes by itself, exits 0 and
prints the tables it documents; yaml_bench also exits 1 if the compiler's fast YAML path ever wrote other
bytes than PyYAML's emitter, and the webhook benchmark if a server answered with a wrong verdict.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

pytestmark = pytest.mark.slow


def run_bench(script: str, *args: str, timeout: float = 120) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / script), "--quick", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_engine_bench_prints_both_growth_tables() -> None:
    out = run_bench("engine_bench.py")
    assert "## node classes grow" in out and "## containers grow" in out
    assert "| 30 | unpinned, denied |" in out


def test_compile_bench_compiles_validates_and_checks_the_overlap_rewrite() -> None:
    out = run_bench("compile_bench.py")
    assert "| classes | spec KiB | files | compile s |" in out
    assert "## class-overlap check" in out and "| yes |" in out


def test_review_size_bench_times_each_shape_in_process_and_through_the_webhook() -> None:
    out = run_bench("review_size_bench.py")
    assert "| shape | containers | body | in process | through the webhook | verdict |" in out
    for shape in ("gpu-each", "one-gpu", "affinity"):
        assert f"| {shape} | 100 |" in out and f"| {shape} | fitted exponent |" in out
    assert out.count("| deny |") == 4 and out.count("| allow |") == 2  # gpu-each and one-gpu deny, affinity allows


def test_startup_bench_times_the_short_commands_and_lists_their_imports() -> None:
    out = run_bench("startup_bench.py")
    assert "`gpupolicy --help`" in out and "`gpupolicy validate (example)`" in out
    assert "heavy libraries: none" in out  # --help and --version import neither pydantic nor flask


def test_app_bench_sets_the_webhook_against_both_floors_step_by_step() -> None:
    out = run_bench("app_bench.py")
    assert "| real |" in out and "| flask |" in out and "| noop |" in out
    for step in ("json", "parse", "engine", "metrics", "log", "the rest"):
        assert f"| {step} |" in out


def test_app_bench_runs_distinct_templates_too() -> None:
    out = run_bench("app_bench.py", "--templates", "3", "--no-steps")
    assert "| real |" in out and "| flask |" in out and "| the rest |" not in out


def test_yaml_bench_finds_no_byte_the_fast_emitter_writes_differently() -> None:
    out = run_bench("yaml_bench.py")
    assert out.startswith("equivalence: dump_yaml == PyYAML's emitter")


@pytest.fixture(scope="module")
def webhook_bench_output() -> str:
    """One quick run of the real server and both no-op floors (with wrk when installed)."""
    return run_bench("webhook_bench.py", *(() if shutil.which("wrk") else ("--no-wrk",)))


def test_webhook_bench_paces_the_real_server_and_both_floors(webhook_bench_output: str) -> None:
    assert "| 100 req/s | real |" in webhook_bench_output
    assert "| 100 req/s | noop |" in webhook_bench_output
    assert "| 100 req/s | flask |" in webhook_bench_output
    assert "throughput real/flask" in webhook_bench_output


def test_webhook_bench_reports_every_target_against_the_flask_floor(webhook_bench_output: str) -> None:
    assert "Targets (real against the Flask floor, this run):" in webhook_bench_output
    for target in ("throughput at saturation", "CPU per request at saturation", "p99 at 500 req/s",
                   "p99.9 at 500 req/s"):
        assert f"| {target} |" in webhook_bench_output
    assert "- load average: " in webhook_bench_output  # beside the figures, since the machine may be shared


def test_review_profile_lists_a_reviews_steps_and_its_costliest_functions() -> None:
    out = run_bench("review_profile.py", "--templates", "3")
    assert "CPU per review, unprofiled:" in out
    assert "| Engine.evaluate |" in out and "| function (own time) | calls per review |" in out


def test_webhook_bench_saturates_both_servers_with_wrk(webhook_bench_output: str) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install -y wrk): the saturation part was not run")
    assert "| saturation (wrk) | real |" in webhook_bench_output
    assert "| saturation (wrk) | noop |" in webhook_bench_output
    assert "| saturation (wrk) | flask |" in webhook_bench_output


def test_tail_profile_watches_the_workers_event_loops_and_reports_their_stalls() -> None:
    report = json.loads(run_bench("tail_profile.py"))
    assert report["client"]["errors"] == 0 and report["client"]["requests"] == 100
    assert {"stalls_over_threshold", "thread_states_while_stalled", "app_ms"} <= report.keys()


def test_audit_bench_audits_both_shapes_and_diffs_the_mixed_fleet() -> None:
    out = run_bench("audit_bench.py", timeout=240)
    assert "| templates | json | 241 |" in out and "| replicas | json | 241 |" in out and "| templates | yaml |" in out
    assert "| specs only |" in out and "| --workloads |" in out
    # the in-cluster run: lean and full pods, the reports of the run under the other policy replaced
    assert "| lean |" in out and "| full |" in out
    # the research half of the Deployments loses MPS: the audit fails (exit 1) on both shapes
    assert out.count(" | 1 | ") >= 3
