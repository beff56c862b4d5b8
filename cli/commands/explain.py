"""gpupolicy explain: per class, the slots before and after, memory per slot, isolation and labels to set."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="the cluster spec (- for stdin)")
    parser.add_argument("--output", "-O", choices=("text", "json"), default="text",
                        help="a table (text) or the report.json document (json)")


def run(args: argparse.Namespace) -> int:
    from cli.reporters import load_or_report
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
