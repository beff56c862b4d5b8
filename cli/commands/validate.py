"""gpupolicy validate: check cluster specs and report every finding."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="cluster spec files (- for stdin)")
    parser.add_argument("--output", "-O", choices=("text", "json", "github"), default="text",
                        help="how to print findings (default: text)")
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")


def run(args: argparse.Namespace) -> int:
    from cli.inputs import read_text
    from cli.reporters import REPORTER_BY_NAME, Report
    from policy.load import load_policies
    from policy.spec.diagnostics import Diagnostic, sort_key

    report = Report()
    for path in args.files:
        report.files += 1
        text = read_text(path)
        if isinstance(text, Diagnostic):
            report.extend([text])
            continue
        for result in load_policies(text, filename=path):
            # Notes (the tenant label keys) are for whoever reviews the spec, so validate alone prints them.
            report.extend(sorted((*result.diagnostics, *result.notes), key=sort_key))
    if args.strict:
        from dataclasses import replace

        report.diagnostics = [replace(d, severity="error") if d.severity == "warning" else d
                              for d in report.diagnostics]
    sys.stdout.write(REPORTER_BY_NAME[args.output](report))
    return report.exit_code
