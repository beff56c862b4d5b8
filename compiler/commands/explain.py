"""gpupolicy explain: per class, the slots before and after, memory per slot, isolation and labels to set."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policy.model import ClusterGPUPolicy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="the cluster spec (- for stdin)")
    parser.add_argument("--output", "-O", choices=("text", "json"), default="text",
                        help="a table (text) or the report.json document (json)")


def run(args: argparse.Namespace) -> int:
    from compiler import report, serialize

    policy = load_or_report(args.spec)
    if isinstance(policy, int):
        return policy
    capacity = report.build_report(policy)
    if args.output == "json":
        sys.stdout.write(serialize.dump_json(capacity.to_dict()).decode("utf-8"))
    else:
        sys.stdout.write(report.render_text(capacity))
    return 0


def load_or_report(path: str) -> ClusterGPUPolicy | int:
    """The checked policy in `path`, or the exit code after printing its diagnostics to stderr (as
    `validate` words them): 2 when it cannot be read or parsed, 1 for any other error.  Warnings are
    printed too and do not stop the command."""
    from compiler.inputs import read_text
    from compiler.reporters import Report, render_text
    from policy.diagnostics import Diagnostic
    from policy.load import load_policy

    report = Report(files=1)
    text = read_text(path)
    if isinstance(text, Diagnostic):
        report.extend([text])
        sys.stderr.write(render_text(report))
        return int(report.exit_code)
    result = load_policy(text, filename=path)
    report.extend(result.diagnostics)
    if report.diagnostics:
        sys.stderr.write(render_text(report))
    if not result.ok or result.policy is None:
        return int(report.exit_code) or 1
    return result.policy
