"""Every code a finding can carry is a member of a closed set, and every member is documented.

The source is read as Python syntax (not run): each ``Diagnostic(...)``/``_d(...)`` anywhere and each verify
``Finding(...)`` in cluster/ is found, and its code resolved to the string constants it can take. A code passed
through a variable is resolved from the constants of the enclosing function and of the module-level names that
function reads; a call whose code cannot be resolved at all fails the test, so no code escapes it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from cluster.findings import FindingCode
from policy.admission.claims import ClaimRule
from policy.checks.advice import AdviceCode
from policy.spec.diagnostics import Code, InventoryCode, NoticeCode
from policy.spec.model import RuleId

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("policy", "compiler", "cluster", "webhook", "cli")
DOCS = REPO / "docs"
CODE_SHAPED = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
DIAGNOSTIC_CODES = frozenset(get_args(Code)) | frozenset(get_args(InventoryCode)) | frozenset(get_args(NoticeCode)) \
    | frozenset(get_args(AdviceCode)) | frozenset(get_args(RuleId)) | frozenset(get_args(ClaimRule))
FINDING_CODES = frozenset(get_args(FindingCode)) | frozenset(get_args(Code))  # verify repeats driver-too-old


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _code_argument(node: ast.Call) -> ast.expr | None:
    if node.args:
        return node.args[0]
    return next((k.value for k in node.keywords if k.arg == "code"), None)


def _constants(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and CODE_SHAPED.match(n.value)}


def _module_values(module: ast.Module) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for statement in module.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value is not None else []
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = statement
    return found


def _resolve(argument: ast.expr, scope: ast.AST, module: dict[str, ast.AST]) -> set[str]:
    """The code-shaped constants a code argument can take."""
    if isinstance(argument, ast.Constant):
        return {argument.value} if isinstance(argument.value, str) else set()
    names = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
    found = _constants(scope) if isinstance(argument, ast.Name) and argument.id not in module else set()
    for name in names & module.keys():
        if isinstance(argument, ast.Name) and (argument.id == name or argument.id not in module):
            found |= _constants(module[name])
    return found


def emitted() -> Iterator[tuple[str, str, str]]:
    """(kind, code, where) for every code every finding constructor is given in the source."""
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            module = _module_values(tree)
            scopes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = _called(node)
                kind = "diagnostic" if name in ("Diagnostic", "_d") else \
                    "finding" if name == "Finding" and package == "cluster" else ""
                argument = _code_argument(node) if kind else None
                if argument is None:
                    continue
                # A typed parameter passed on (advice's _d(code: AdviceCode)) is checked where _d is called.
                if isinstance(argument, ast.Name) and _parameter_of_typed_helper(argument.id, node, scopes):
                    continue
                scope = min((s for s in scopes if s.lineno <= node.lineno <= (s.end_lineno or s.lineno)),
                            key=lambda s: (s.end_lineno or s.lineno) - s.lineno, default=tree)
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                codes = _resolve(argument, scope, module)
                assert codes, f"{where}: the code {ast.unparse(argument)} cannot be resolved to constants"
                for code in codes:
                    yield kind, code, where


def _parameter_of_typed_helper(name: str, call: ast.Call, scopes: list[ast.FunctionDef | ast.AsyncFunctionDef]
                               ) -> bool:
    for scope in scopes:
        if scope.lineno <= call.lineno <= (scope.end_lineno or scope.lineno):
            for arg in scope.args.args:
                if arg.arg == name and arg.annotation is not None and ast.unparse(arg.annotation) in (
                        "AdviceCode", "Code", "InventoryCode", "NoticeCode", "RuleId", "FindingCode", "ClaimRule"):
                    return True
    return False


EMITTED = sorted(set(emitted()))


def test_the_walk_sees_the_codes_of_every_layer() -> None:
    # The walk itself must see codes in each place they come from, or the tests below prove nothing.
    codes = {code for _, code, _ in EMITTED}
    assert {"unknown-field", "empty-inventory", "cloud-vgpu-not-checked", "workload-not-checked",
            "production-tenant-without-memory-isolation", "gpu-request-invalid", "node-label-conflict",
            "yaml11-octal", "duplicate-class-name", "unsupported-kind"} <= codes


@pytest.mark.parametrize(("kind", "code", "where"), EMITTED, ids=[f"{w}:{c}" for _, c, w in EMITTED])
def test_every_emitted_code_is_a_member_of_a_closed_set(kind: str, code: str, where: str) -> None:
    members = DIAGNOSTIC_CODES if kind == "diagnostic" else FINDING_CODES
    assert code in members, f"{where} emits {code!r}, which no closed set of codes lists"


def test_no_two_codes_differ_only_in_word_order() -> None:
    # unknown-operator-version and operator-version-unknown said the same thing twice.
    every = DIAGNOSTIC_CODES | FINDING_CODES
    by_words: dict[frozenset[str], set[str]] = {}
    for code in every:
        by_words.setdefault(frozenset(code.split("-")), set()).add(code)
    assert [sorted(c) for c in by_words.values() if len(c) > 1] == []


def test_every_member_of_the_inventory_verify_and_notice_sets_is_emitted() -> None:
    codes = {code for _, code, _ in EMITTED}
    for members in (InventoryCode, FindingCode, NoticeCode):
        assert set(get_args(members)) - codes == set(), members


DOCUMENTED = [
    *((code, "operations.md", f"| `{code}` |") for code in get_args(Code)),
    *((code, "operations.md", f"| `{code}` |") for code in get_args(FindingCode)),
    *((code, "operations.md", f"#### {code}") for code in get_args(NoticeCode)),
    *((code, "operations.md", f"#### {code}\n") for code in get_args(RuleId)),
    *((code, "plan.md", f"| `{code}` |") for code in get_args(InventoryCode)),
    *((code, "spec-reference.md", f"`{code}`") for code in get_args(AdviceCode)),
    *((code, "dra.md", f"| `{code}` |") for code in get_args(ClaimRule)),
]


@pytest.mark.parametrize(("code", "doc", "entry"), DOCUMENTED, ids=[f"{d}:{c}" for c, d, _ in DOCUMENTED])
def test_every_member_is_documented(code: str, doc: str, entry: str) -> None:
    assert entry in (DOCS / doc).read_text(encoding="utf-8"), f"docs/{doc} does not explain {code}"
