"""gpupolicy diff: what a spec change does to capacity, nodes and running workloads (for a pull request)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policy.audit.impact import Impact
    from policy.resolved.resolve import ResolvedPolicy


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("specs", nargs="+", metavar="SPEC",
                        help="BASE HEAD: the spec before and after the change; with --base-ref, HEAD alone")
    parser.add_argument("--base-ref", metavar="GIT_REF",
                        help="take BASE from git: HEAD's file as committed at GIT_REF (e.g. origin/main)")
    parser.add_argument("--workloads", action="append", default=[], metavar="FILE",
                        help="running workloads (kubectl get -A -o yaml of namespaces, pods and their "
                             "controllers; repeatable): add the ones HEAD would deny or that no longer fit, and the "
                             "pods a MIG re-partition must drain")
    parser.add_argument("--output", "-O", choices=("markdown", "json", "github"), default="markdown",
                        help="markdown for a pull-request comment, json for tools, github: markdown also appended "
                             "to $GITHUB_STEP_SUMMARY (default: markdown)")


def run(args: argparse.Namespace) -> int:
    from cli.main import ExitCode

    expected = 1 if args.base_ref else 2
    if len(args.specs) != expected:
        print(f"gpupolicy diff: error: give {'HEAD alone with --base-ref' if args.base_ref else 'BASE and HEAD'} "
              f"(got {len(args.specs)} spec(s))", file=sys.stderr)
        return ExitCode.BAD_INPUT
    head_path = args.specs[-1]
    base_text = _committed(args.base_ref, head_path) if args.base_ref else None
    if args.base_ref and base_text is None:
        return ExitCode.BAD_INPUT
    base_name = f"{args.base_ref}:{head_path}" if args.base_ref else args.specs[0]
    base = _resolved(base_name, base_text)
    head = _resolved(head_path, None)
    if base is None or head is None:
        return ExitCode.BAD_INPUT
    return _report(args, base, head, (base_name, head_path))


def _report(args: argparse.Namespace, base: ResolvedPolicy, head: ResolvedPolicy, names: tuple[str, str]) -> int:
    from cli.impact_output import render_json, render_markdown
    from cli.main import ExitCode
    from compiler import compile_policy
    from policy.audit import impact

    found = impact.compare(base, head, compile_policy(base), compile_policy(head))
    if args.workloads:
        judged = _with_workloads(args.workloads, found, base, head)
        if judged is None:
            return ExitCode.BAD_INPUT
        found = judged
    if args.output == "json":
        sys.stdout.write(render_json(found, names))
    else:
        text = render_markdown(found, names)
        sys.stdout.write(text)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if args.output == "github" and summary:
            try:
                with open(summary, "a", encoding="utf-8") as stream:
                    stream.write(text)
            except OSError as err:
                print(f"gpupolicy diff: cannot append to $GITHUB_STEP_SUMMARY ({summary}): {err.strerror or err}",
                      file=sys.stderr)
                return ExitCode.BAD_INPUT
    return ExitCode.FINDINGS if found.new_violations or found.overcommits else ExitCode.OK


def _with_workloads(paths: list[str], found: Impact, base: ResolvedPolicy, head: ResolvedPolicy) -> Impact | None:
    """``found`` with the running workloads of the dumps judged under both specs; None after saying why a dump
    cannot be read."""
    from cli.recorded import read_objects
    from policy.admission.engine import Engine
    from policy.audit import impact, scan
    from policy.resolved.offers import build_admission_policy

    objects = read_objects(paths)
    if objects is None:
        return None
    labels = scan.namespace_labels(objects)
    audits = [scan.audit(Engine(build_admission_policy(p), memo_size=scan.MEMO_SIZE), objects, labels)
              for p in (base, head)]
    return impact.with_workloads(found, base, head, *audits, objects)


def _resolved(name: str, text: str | None) -> ResolvedPolicy | None:
    """The spec's resolved policy, or None after printing its errors (a spec that does not validate has no
    capacity to compare)."""
    from cli.inputs import load_spec
    from cli.reporters import Report, render_text

    resolved, found = load_spec(name, text=text)
    if resolved is None:
        sys.stderr.write(render_text(Report(diagnostics=[d for d in found if d.severity == "error"], files=1)))
        print(f"gpupolicy diff: error: {name} does not validate, so there is nothing to compare\n"
              "  hint: gpupolicy validate lists what to fix", file=sys.stderr)
    return resolved


def _committed(ref: str, path: str) -> str | None:
    """The file's text as committed at ``ref`` (git show REF:PATH from the file's repository), or None after
    saying why not."""
    import subprocess  # here: only --base-ref runs git, and importing it costs every `diff --help` ~9 ms

    where = Path(path).resolve()
    try:
        top = subprocess.run(["git", "-C", str(where.parent), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True).stdout.strip()
        relative = where.relative_to(Path(top).resolve()).as_posix()
        shown = subprocess.run(["git", "-C", top, "show", f"{ref}:{relative}"], capture_output=True, check=True)
        return shown.stdout.decode("utf-8-sig")
    except FileNotFoundError:
        reason = "git is not installed"
    except subprocess.CalledProcessError as err:
        reason = (err.stderr if isinstance(err.stderr, str) else err.stderr.decode(errors="replace")).strip()
    except (ValueError, UnicodeDecodeError) as err:
        reason = str(err)
    print(f"gpupolicy diff: error: cannot read {path} at {ref}: {reason}\n  hint: fetch the ref first (e.g. git "
          "fetch origin main; actions/checkout needs fetch-depth: 0) and name a file inside the repository",
          file=sys.stderr)
    return None
