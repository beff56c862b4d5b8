"""The broken-spec corpus: every check, located, with the right exit code and no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from cli.main import main
from policy.spec.diagnostics import Code

CORPUS = Path(__file__).parent.parent / "fixtures" / "specs" / "bad"
CASES = sorted(CORPUS.glob("*/*.yaml"))
HEADER = re.compile(rb"^# expect: (?P<code>[a-z0-9-]+) at (?P<line>\d+):(?P<col>\d+) exit (?P<exit>\d)\n")
# multiple-documents is only raised where one cluster is required (compile); test_load covers it.
COVERED_ELSEWHERE = {"multiple-documents"}


def expectation(case: Path) -> tuple[str, int, int, int]:
    match = HEADER.match(case.read_bytes())
    assert match, f"{case} must start with '# expect: <code> at <line>:<col> exit <n>'"
    return match["code"].decode(), int(match["line"]), int(match["col"]), int(match["exit"])


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.stem}" for c in CASES])
def test_broken_spec_is_reported_at_its_line_and_column(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, line, col, exit_code = expectation(case)
    assert case.parent.name == code, "a case lives in the directory named after its code"
    status = main(["validate", str(case)])
    out, err = capsys.readouterr()
    assert status == exit_code, out + err
    assert f"{case}:{line}:{col}: " in out and f"[{code}]" in out, out
    located = [row for row in out.splitlines() if row.startswith(f"{case}:{line}:{col}: ") and f"[{code}]" in row]
    assert located, out
    assert "Traceback" not in out + err


def test_corpus_covers_every_diagnostic_code() -> None:
    covered = {case.parent.name for case in CASES}
    assert set(get_args(Code)) - covered - COVERED_ELSEWHERE == set()
    assert len(CASES) >= 40


def test_every_finding_has_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", "--output", "json", *map(str, CASES)])
    import json

    report = json.loads(capsys.readouterr().out)
    missing = [d for d in report["diagnostics"] if not d["hint"]]
    assert missing == []


def test_the_installed_command_prints_no_traceback_for_any_broken_spec() -> None:
    # One real process over the whole corpus: what a user's shell sees, not an in-process call.
    result = subprocess.run(
        [sys.executable, "-m", "cli", "validate", *map(str, CASES)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2  # the corpus includes unreadable and unparseable files
    assert "Traceback" not in result.stdout + result.stderr
    warning_only = sum(1 for case in CASES if expectation(case)[3] == 0)  # they report warnings
    assert result.stdout.count("error[") >= len(CASES) - warning_only
