"""Diagnostics rendered as text, JSON or GitHub annotations, and the exit code they imply."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cli.main import ExitCode
from policy.spec.diagnostics import Diagnostic, bounded, format_path

if TYPE_CHECKING:
    from policy.resolved.resolve import ResolvedPolicy

#: Codes meaning the input could not be read as a spec at all: bad input (exit 2), not a finding.
INPUT_CODES = frozenset({"unreadable-file", "yaml-syntax", "not-a-mapping", "empty-document", "multiple-documents"})
REPORT_VERSION = 1


@dataclass
class Report:
    """Everything one command run found, across files."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: int = 0
    workloads: dict[str, int] | None = None
    """`admit`: objects asking for GPUs, checked and not checked, and the verdicts (JSON summary.workloads)."""

    def extend(self, found: Iterable[Diagnostic]) -> None:
        self.diagnostics.extend(found)

    def count(self, severity: str) -> int:
        return sum(1 for d in self.diagnostics if d.severity == severity)

    @property
    def exit_code(self) -> ExitCode:
        """2 when any input could not be read or parsed, 1 for any other error, else 0 (warnings pass)."""
        errors = [d for d in self.diagnostics if d.severity == "error"]
        if any(d.code in INPUT_CODES for d in errors):
            return ExitCode.BAD_INPUT
        return ExitCode.FINDINGS if errors else ExitCode.OK


def format_diagnostic(d: Diagnostic) -> list[str]:
    """One finding as every text output prints it: ``file:line:col: severity[code]: message``, then the hint."""
    where = str(d.span) if d.span else "<input>"
    at = f" (at {bounded(format_path(d.path))})" if d.path else ""
    # Messages, paths and hints quote the input, which may hold a megabyte in one name.
    return [f"{where}: {d.severity}[{d.code}]: {bounded(d.message)}{at}",
            *([f"  hint: {bounded(d.hint)}"] if d.hint else [])]


def render_text(report: Report) -> str:
    lines = [line for d in report.diagnostics for line in format_diagnostic(d)]
    errors, warnings = report.count("error"), report.count("warning")
    lines.append(f"{report.files} file(s) checked: {errors} error(s), {warnings} warning(s)")
    return "\n".join(lines) + "\n"


def as_dict(d: Diagnostic) -> dict[str, object]:
    return {
        "code": d.code,
        "severity": d.severity,
        "message": bounded(d.message),
        "hint": bounded(d.hint),
        "path": bounded(format_path(d.path)),
        "file": d.span.file if d.span else None,
        "line": d.span.line if d.span else None,
        "column": d.span.column if d.span else None,
        "fix": d.fix.quoted if d.fix is not None else None,
    }


def render_json(report: Report) -> str:
    document = {
        "version": REPORT_VERSION,
        "summary": {
            "files": report.files,
            "errors": report.count("error"),
            "warnings": report.count("warning"),
            "exitCode": int(report.exit_code),
            **({"workloads": report.workloads} if report.workloads is not None else {}),
        },
        "diagnostics": [as_dict(d) for d in report.diagnostics],
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def _escape(text: str, *, prop: bool = False) -> str:
    # GitHub workflow-command escaping (actions/toolkit command.ts)
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def render_github(report: Report) -> str:
    lines = []
    for d in report.diagnostics:
        level = {"error": "error", "warning": "warning"}.get(d.severity, "notice")
        props = []
        if d.span:
            props += [f"file={_escape(d.span.file, prop=True)}", f"line={d.span.line}", f"col={d.span.column}"]
        props.append(f"title={_escape(d.code, prop=True)}")
        hint = f" ({bounded(d.hint)})" if d.hint else ""
        lines.append(f"::{level} {','.join(props)}::{_escape(bounded(d.message) + hint)}")
    return "\n".join(lines) + ("\n" if lines else "")


REPORTER_BY_NAME: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "json": render_json,
    "github": render_github,
}


def load_or_report(path: str, *, text: str | None = None) -> ResolvedPolicy | int:
    """The checked policy in `path`, resolved, or the exit code after printing its diagnostics to stderr (as
    `validate` words them): 2 when it cannot be read or parsed, 1 for any other error.  Warnings are
    printed too and do not stop the command."""
    import sys

    from cli.inputs import load_spec

    policy, found = load_spec(path, text=text)
    report = Report(list(found), files=1)
    if found:
        sys.stderr.write(render_text(report))
    return policy if policy is not None else int(report.exit_code) or 1
