"""gpupolicy compile: write a spec's Kustomize tree atomically, or with --check report how it drifted."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.writer import Drift


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="the cluster spec (- for stdin)")
    parser.add_argument("-o", "--out", required=True, metavar="DIR",
                        help="output directory; replaced as a whole (only if empty, new, or a previous output)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; print a unified diff and exit 1 when DIR is not what SPEC compiles to")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from compiler import compile_policy, writer
    from compiler.reporters import Report, load_or_report, render_text
    from policy.diagnostics import PolicyError

    policy = load_or_report(args.spec)
    if isinstance(policy, int):
        return policy
    try:
        tree = compile_policy(policy)
    except PolicyError as err:  # a finding only rendering can make (validate reports it first)
        sys.stderr.write(render_text(Report(list(err.diagnostics), files=1)))
        return 1
    out_dir = Path(args.out)
    try:
        drift = writer.check_tree(tree, out_dir)
        if args.check:
            return _report_check(drift, args)
        if drift.clean:
            print(f"{out_dir}: up to date ({len(tree)} files)", file=sys.stderr)
            return 0
        writer.write_tree(tree, out_dir)
    except writer.WriteError as err:
        print(f"gpupolicy compile: {err}", file=sys.stderr)
        return 2
    print(f"{out_dir}: wrote {len(tree)} files ({len(drift.missing)} added, {len(drift.changed)} changed, "
          f"{len(drift.extra)} removed)", file=sys.stderr)
    return 0


def _report_check(drift: Drift, args: argparse.Namespace) -> int:
    if drift.clean:
        print(f"{args.out}: up to date", file=sys.stderr)
        return 0
    sys.stdout.write(drift.diff)
    print(f"{args.out}: stale ({drift.summary()}); run: gpupolicy compile {args.spec} -o {args.out}",
          file=sys.stderr)
    return 1
