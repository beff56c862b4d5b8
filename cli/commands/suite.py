"""gpupolicy test: run table-driven admission test suites (kind: AdmissionTestSuite) against their policies."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policy.admission.engine import AdmissionTestSuite, Decision, Engine, SuiteCase
    from policy.spec.diagnostics import Diagnostic
    from policy.spec.source import SourceMap


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suites", nargs="+", metavar="SUITE", help="admission test suite files")
    # dest must not be "run": the command table stores the command's run function there
    parser.add_argument("--run", dest="only", metavar="REGEX", help="run only the cases whose name matches REGEX")
    parser.add_argument("--output", "-O", choices=("text", "json"), default="text",
                        help="how to print results (default: text)")
    parser.add_argument("--verbose", "-v", action="store_true", help="print the decision of passing cases too")


@dataclass(frozen=True)
class CaseResult:
    """One case's outcome: empty ``failures`` means it passed."""

    suite: str
    line: int
    name: str
    failures: tuple[str, ...]
    decision: Decision

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class Outcome:
    results: list[CaseResult] = field(default_factory=list)
    problems: list[Diagnostic] = field(default_factory=list)
    """Suite files that cannot be run (unreadable, invalid, policy that does not load): exit 2."""

    @property
    def exit_code(self) -> int:
        if any(d.severity == "error" for d in self.problems):
            return 2
        return 1 if any(not r.passed for r in self.results) else 0


def run(args: argparse.Namespace) -> int:
    try:
        selected = re.compile(args.only) if args.only else None
    except re.error as err:
        print(f"gpupolicy test: error: --run {args.only!r} is not a regular expression: {err}", file=sys.stderr)
        return 2
    outcome = Outcome()
    for path in args.suites:
        _run_file(path, selected, outcome)
    sys.stdout.write(_render_json(outcome) if args.output == "json" else _render_text(outcome, args.verbose))
    return outcome.exit_code


def _run_file(path: str, selected: re.Pattern[str] | None, outcome: Outcome) -> None:
    from cli.inputs import read_text
    from policy.spec.diagnostics import Diagnostic
    from policy.spec.source import parse_documents

    text = read_text(path)
    if isinstance(text, Diagnostic):
        outcome.problems.append(text)
        return
    for doc in parse_documents(text, filename=path):
        outcome.problems.extend(d for d in doc.diagnostics if d.severity == "error")
        if doc.data is None or any(d.severity == "error" for d in doc.diagnostics):
            continue
        suite = _validate(doc.data, doc.source, outcome)
        if suite is None:
            continue
        engine = _engine(path, suite, doc.source, outcome)
        if engine is None:
            continue
        for index, case in enumerate(suite.cases):
            if selected is None or selected.search(case.name):
                result = _run_case(path, suite, index, case, engine, doc.source, outcome)
                if result is not None:
                    outcome.results.append(result)


def _validate(data: Any, source: SourceMap, outcome: Outcome) -> AdmissionTestSuite | None:
    from pydantic import ValidationError

    from policy.admission.engine import AdmissionTestSuite
    from policy.spec.diagnostics import Diagnostic, from_validation_error

    if not isinstance(data, dict):
        outcome.problems.append(Diagnostic("not-a-mapping", "a suite is a mapping with kind: AdmissionTestSuite",
                                           (), "start from examples/clusters/tke-l20-t4/admission-tests.yaml",
                                           span=source.span(())))
        return None
    try:
        return AdmissionTestSuite.model_validate(data)
    except ValidationError as err:
        for d in from_validation_error(err, data, AdmissionTestSuite):
            outcome.problems.append(d.at(source.span(d.path, key=d.code == "unknown-field")))
        return None


def _engine(path: str, suite: AdmissionTestSuite, source: SourceMap, outcome: Outcome) -> Engine | None:
    from cli.inputs import load_spec
    from policy.admission.engine import Engine
    from policy.resolved.offers import build_admission_policy

    policy, found = load_spec(str(FilePath(path).parent / suite.policy))
    if policy is None:
        # An unreadable file is located at the suite's `policy:` line; spec findings at their own place.
        outcome.problems.extend(d.at(source.span(("policy",))) if d.code == "unreadable-file" else d
                                for d in found if d.severity == "error")
        return None
    return Engine(build_admission_policy(policy))


def _run_case(path: str, suite: AdmissionTestSuite, index: int, case: SuiteCase, engine: Engine,
              source: SourceMap, outcome: Outcome) -> CaseResult | None:
    where = ("cases", index)
    obj = case.object if case.object is not None else _object_from_file(path, case, source, where, outcome)
    if obj is None:
        return None
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ns = case.namespace or (metadata or {}).get("namespace") or "default"
    labels = {**suite.namespaces.get(ns, {}), **case.namespace_labels}
    decision = engine.evaluate(obj, tenants=engine.tenants_for(labels, namespace=ns), operation=case.operation,
                               old_obj=case.old_object)
    span = source.span(where)
    return CaseResult(path, span.line if span else 0, case.name, tuple(_compare(case, decision)), decision)


def _object_from_file(path: str, case: SuiteCase, source: SourceMap, where: tuple[str | int, ...],
                      outcome: Outcome) -> dict[str, Any] | None:
    from cli.inputs import read_text
    from policy.admission.workloads import find_workload
    from policy.spec.diagnostics import Diagnostic
    from policy.spec.source import parse_documents

    assert case.file is not None
    file = str(FilePath(path).parent / case.file)
    span = source.span((*where, "file"))
    text = read_text(file)
    if isinstance(text, Diagnostic):
        outcome.problems.append(text.at(span))
        return None
    documents = list(parse_documents(text, filename=file))
    unreadable = [d for doc in documents if doc.data is None for d in doc.diagnostics if d.severity == "error"]
    if unreadable:  # never test a case against part of a file that could not be read
        outcome.problems.extend(unreadable)
        return None
    objects = [doc.data for doc in documents if isinstance(doc.data, dict)]
    if case.index is not None:
        chosen = objects[case.index] if case.index < len(objects) else None
    else:
        chosen = next((o for o in objects if find_workload(o) is not None), objects[0] if objects else None)
    if chosen is None:
        outcome.problems.append(Diagnostic(
            "invalid-value", f"case {case.name!r}: {file} holds no object"
            + (f" at index {case.index}" if case.index is not None else ""),
            (*where, "file"), "name a manifest with the object under test", span=span))
    return chosen


def _compare(case: SuiteCase, decision: Decision) -> Iterator[str]:
    expect = case.expect
    if decision.allowed != expect.allowed:
        yield f"expected allowed={str(expect.allowed).lower()}, got allowed={str(decision.allowed).lower()}"
    fired = sorted({d.code for d in decision.diagnostics})
    if expect.rules is not None and sorted(set(expect.rules)) != fired:
        yield f"expected rules {sorted(set(expect.rules))}, fired {fired}"
    if expect.message is not None:
        text = decision.render()
        try:
            found = re.search(expect.message, text) is not None
        except re.error as err:
            yield f"expect.message is not a regular expression: {err}"
            return
        if not found:
            yield f"message /{expect.message}/ not found"


def _render_text(outcome: Outcome, verbose: bool) -> str:
    from cli.reporters import format_diagnostic

    lines = []
    for d in outcome.problems:
        lines.extend(format_diagnostic(d))
    for r in outcome.results:
        lines.append(f"{'PASS' if r.passed else 'FAIL'} {r.suite}:{r.line} {r.name}")
        lines.extend(f"  {failure}" for failure in r.failures)
        if (verbose or not r.passed) and r.decision.diagnostics:
            lines.extend(f"  | {line}" for line in r.decision.render().splitlines())
    passed = sum(r.passed for r in outcome.results)
    tail = f", {len(outcome.problems)} suite error(s)" if outcome.problems else ""
    lines.append(f"{passed} passed, {len(outcome.results) - passed} failed{tail}")
    return "\n".join(lines) + "\n"


def _render_json(outcome: Outcome) -> str:
    from cli.reporters import as_dict

    document = {
        "version": 1,
        "summary": {"passed": sum(r.passed for r in outcome.results),
                    "failed": sum(not r.passed for r in outcome.results),
                    "errors": len(outcome.problems), "exitCode": outcome.exit_code},
        "cases": [{"suite": r.suite, "line": r.line, "name": r.name, "passed": r.passed,
                   "failures": list(r.failures), "allowed": r.decision.allowed,
                   "rules": sorted({d.code for d in r.decision.diagnostics})} for r in outcome.results],
        "errors": [as_dict(d) for d in outcome.problems],
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
