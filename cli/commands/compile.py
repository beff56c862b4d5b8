"""gpupolicy compile: write a spec's Kustomize tree atomically, or with --check report how it drifted."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from compiler.writer import Drift


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="cluster spec(s) (- for stdin)")
    parser.add_argument("-o", "--out", metavar="DIR",
                        help="output directory; replaced as a whole (only if empty, new, or a previous output); "
                             "default: out/ beside each SPEC, the layout of examples/clusters/*/")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; print a unified diff and exit 1 when DIR is not what SPEC compiles to")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.out is not None and len(args.specs) > 1:
        print("gpupolicy compile: error: -o names one output directory; with several specs leave it out "
              "(each compiles into out/ beside itself)", file=sys.stderr)
        return 2
    if args.out is None and "-" in args.specs:
        print("gpupolicy compile: error: a spec read from stdin needs -o DIR", file=sys.stderr)
        return 2
    codes = [_compile_one(spec, Path(args.out) if args.out else Path(spec).parent / "out", check=args.check)
             for spec in args.specs]
    return max(codes)


def _compile_one(spec: str, out_dir: Path, *, check: bool) -> int:
    from cli.reporters import Report, load_or_report, render_text
    from compiler import compile_policy, writer
    from policy.diagnostics import PolicyError

    policy = load_or_report(spec)
    if isinstance(policy, int):
        return policy
    try:
        tree = compile_policy(policy)
    except PolicyError as err:  # a finding only rendering can make (validate reports it first)
        sys.stderr.write(render_text(Report(list(err.diagnostics), files=1)))
        return 1
    try:
        drift = writer.check_tree(tree, out_dir)
        if check:
            return _report_check(drift, spec, out_dir)
        if drift.clean:
            print(f"{out_dir}: up to date ({len(tree)} files)", file=sys.stderr)
            return 0
        writer.write_tree(tree, out_dir)
    except writer.WriteError as err:
        print(f"gpupolicy compile: error: {err}", file=sys.stderr)
        return 2
    print(f"{out_dir}: wrote {len(tree)} files ({len(drift.missing)} added, {len(drift.changed)} changed, "
          f"{len(drift.extra)} removed)", file=sys.stderr)
    return 0


def _report_check(drift: Drift, spec: str, out_dir: Path) -> int:
    if drift.clean:
        print(f"{out_dir}: up to date", file=sys.stderr)
        return 0
    sys.stdout.write(drift.diff)
    print(f"{out_dir}: stale ({drift.summary()}); run: gpupolicy compile {spec} -o {out_dir}", file=sys.stderr)
    return 1
