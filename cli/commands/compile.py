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
    parser.add_argument("--prune-unknown", action="store_true",
                        help="also delete files in DIR that gpupolicy did not write (by default they are kept)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.out is not None and not args.out.strip():
        print("gpupolicy compile: error: -o needs a directory name (leave -o out to write out/ beside each spec)",
              file=sys.stderr)
        return 2
    if args.check and args.prune_unknown:
        print("gpupolicy compile: error: --check writes nothing, so --prune-unknown has nothing to do with it",
              file=sys.stderr)
        return 2
    if args.out is not None and len(args.specs) > 1:
        print("gpupolicy compile: error: -o names one output directory; with several specs leave it out "
              "(each compiles into out/ beside itself)", file=sys.stderr)
        return 2
    if args.out is None and "-" in args.specs:
        print("gpupolicy compile: error: a spec read from stdin needs -o DIR", file=sys.stderr)
        return 2
    codes = [_compile_one(spec, Path(args.out) if args.out is not None else Path(spec).parent / "out",
                          check=args.check, prune=args.prune_unknown)
             for spec in args.specs]
    return max(codes)


def _compile_one(spec: str, out_dir: Path, *, check: bool, prune: bool) -> int:
    from cli.reporters import Report, load_or_report, render_text
    from compiler import compile_policy, writer
    from policy.spec.diagnostics import PolicyError

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
        if drift.clean and not (prune and drift.foreign):
            print(f"{out_dir}: up to date ({len(tree)} files){_kept(drift.foreign)}", file=sys.stderr)
            return 0
        foreign = writer.write_tree(tree, out_dir, prune_unknown=prune)
    except writer.WriteError as err:
        print(f"gpupolicy compile: error: {err}", file=sys.stderr)
        return 2
    removed = f"{len(drift.extra)} removed" + (f": {_names(drift.extra)}" if drift.extra else "")
    print(f"{out_dir}: wrote {len(tree)} files ({len(drift.missing)} added, {len(drift.changed)} changed, "
          f"{removed}){_pruned(foreign) if prune else _kept(foreign)}", file=sys.stderr)
    return 0


def _names(paths: tuple[str, ...], shown: int = 5) -> str:
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more


def _kept(foreign: tuple[str, ...]) -> str:
    if not foreign:
        return ""
    return (f"; kept {len(foreign)} file(s) gpupolicy did not write: {_names(foreign)} "
            "(--prune-unknown deletes them)")


def _pruned(foreign: tuple[str, ...]) -> str:
    return f"; deleted {len(foreign)} file(s) gpupolicy did not write: {_names(foreign)}" if foreign else ""


def _report_check(drift: Drift, spec: str, out_dir: Path) -> int:
    if drift.clean:
        print(f"{out_dir}: up to date{_kept(drift.foreign)}", file=sys.stderr)
        return 0
    sys.stdout.write(drift.diff)
    print(f"{out_dir}: stale ({drift.summary()}){_kept(drift.foreign)}; run: gpupolicy compile {spec} -o {out_dir}",
          file=sys.stderr)
    return 1
