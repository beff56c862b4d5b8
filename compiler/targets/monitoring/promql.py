"""PromQL expressions as data: a small syntax tree, rendered with correct precedence and readable line breaks.

Rules and panels are built from these nodes, never by pasting strings, so a label value with a quote or a
regular-expression metacharacter (a MIG profile's ``.``, a resource's ``/``) is always escaped, and an
operand is parenthesised exactly when PromQL's precedence needs it (prometheus/docs querying/operators.md:
``^`` binds tightest, then ``* / % atan2``, ``+ -``, comparisons, ``and unless``, and ``or`` loosest).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "RATE_INTERVAL", "Aggregate", "Binary", "Call", "Expr", "Matcher", "Number", "Selector", "String",
    "add", "aggregate", "and_", "call", "cmp", "div", "eq", "escape_regex", "mul", "ne", "number", "one_of", "or_",
    "render", "render_lines", "sel", "sub", "unless",
]

#: Grafana's range for rate() in panels: four scrape intervals at least (a built-in dashboard variable).
RATE_INTERVAL = "$__rate_interval"
WIDTH = 100
"""Expressions longer than this break at their outermost operators, for people reading the rules."""
SHORT = 24

_PRECEDENCE = {"^": 6, "*": 5, "/": 5, "%": 5, "atan2": 5, "+": 4, "-": 4,
               "==": 3, "!=": 3, "<=": 3, "<": 3, ">=": 3, ">": 3, "and": 2, "unless": 2, "or": 1}
_COMPARISONS = frozenset({"==", "!=", "<=", "<", ">=", ">"})
_SET_OPERATORS = frozenset({"and", "unless", "or"})
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Words PromQL's lexer reads as keywords or numbers, never as a metric name (promql/parser/lex.go).
_KEYWORDS = frozenset({
    "and", "or", "unless", "atan2", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "offset", "start", "end", "inf", "nan", "sum", "avg", "count", "min", "max", "group", "stddev", "stdvar",
    "topk", "bottomk", "count_values", "quantile", "limitk", "limit_ratio",
})
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_DURATION = re.compile(r"^\d+(ms|s|m|h|d|w|y)$")
# RE2 metacharacters (Prometheus matches label regexes with Go's regexp, fully anchored).
_REGEX_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def escape_regex(text: str) -> str:
    """``text`` as a literal inside a label regular expression: ``mig-1g.12gb`` -> ``mig-1g\\.12gb``."""
    return _REGEX_SPECIAL.sub(r"\\\1", text)


def _quote(text: str) -> str:
    """A PromQL double-quoted string literal (Go-style escapes for backslash, quote and line breaks)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if not _LABEL_NAME.match(self.label):
            raise ValueError(f"not a Prometheus label name: {self.label!r}")
        if self.op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"not a label matcher: {self.op!r}")

    def render(self) -> str:
        return f"{self.label}{self.op}{_quote(self.value)}"


@dataclass(frozen=True)
class Selector:
    """``metric{label="value", ...}``, optionally a range ``[5m]``."""

    metric: str
    matchers: tuple[Matcher, ...] = ()
    range: str | None = None

    def __post_init__(self) -> None:
        if not _METRIC_NAME.match(self.metric) or self.metric.lower() in _KEYWORDS:
            raise ValueError(f"not a Prometheus metric name: {self.metric!r}")
        if self.range is not None and not (_DURATION.match(self.range) or self.range == RATE_INTERVAL):
            raise ValueError(f"not a PromQL duration: {self.range!r}")

    def over(self, duration: str) -> Selector:
        """The same selector as a range vector over ``duration``."""
        return Selector(self.metric, self.matchers, duration)


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class String:
    value: str


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Aggregate:
    """``op by (labels) (expr)``; ``by=None`` aggregates everything away."""

    op: str
    expr: Expr
    by: tuple[str, ...] | None = None
    param: Expr | None = None


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: Expr
    rhs: Expr
    on: tuple[str, ...] | None = None
    group_left: tuple[str, ...] | None = None
    bool_: bool = False

    def __post_init__(self) -> None:
        if self.op not in _PRECEDENCE:
            raise ValueError(f"not a PromQL binary operator: {self.op!r}")
        if self.group_left is not None and self.op in _SET_OPERATORS:
            raise ValueError("set operators take no group modifier")
        if self.bool_ and self.op not in _COMPARISONS:
            raise ValueError("bool only modifies comparisons")


Expr = Selector | Number | String | Call | Aggregate | Binary


# ----------------------------------------------------------------------------------------- constructors


def eq(label: str, value: str) -> Matcher:
    return Matcher(label, "=", value)


def ne(label: str, value: str) -> Matcher:
    return Matcher(label, "!=", value)


def one_of(label: str, values: Iterable[str]) -> Matcher:
    """``label=~"a|b"``: any of the literal values (escaped and sorted, so the text never depends on order)."""
    options = sorted(set(values))
    if not options:
        raise ValueError("one_of needs at least one value")
    return Matcher(label, "=~", "|".join(escape_regex(v) for v in options))


def sel(metric: str, *matchers: Matcher, **equal: str) -> Selector:
    """A selector; keyword arguments are equality matchers, in the order given after ``matchers``."""
    return Selector(metric, (*matchers, *(eq(k, v) for k, v in equal.items())))


def number(value: float) -> Number:
    return Number(value)


def call(function: str, *args: Expr) -> Call:
    return Call(function, tuple(args))


def aggregate(op: str, expr: Expr, by: Sequence[str] | None = None, param: Expr | None = None) -> Aggregate:
    return Aggregate(op, expr, None if by is None else tuple(by), param)


def _binary(op: str, lhs: Expr, rhs: Expr, on: Sequence[str] | None, group_left: Sequence[str] | None,
            bool_: bool = False) -> Binary:
    return Binary(op, lhs, rhs, None if on is None else tuple(on),
                  None if group_left is None else tuple(group_left), bool_)


def cmp(lhs: Expr, op: str, rhs: Expr, *, on: Sequence[str] | None = None,
        group_left: Sequence[str] | None = None) -> Binary:
    if op not in _COMPARISONS:
        raise ValueError(f"not a comparison: {op!r}")
    return _binary(op, lhs, rhs, on, group_left)


def mul(lhs: Expr, rhs: Expr, *, on: Sequence[str] | None = None, group_left: Sequence[str] | None = None) -> Binary:
    return _binary("*", lhs, rhs, on, group_left)


def div(lhs: Expr, rhs: Expr, *, on: Sequence[str] | None = None, group_left: Sequence[str] | None = None) -> Binary:
    return _binary("/", lhs, rhs, on, group_left)


def add(lhs: Expr, rhs: Expr, *, on: Sequence[str] | None = None, group_left: Sequence[str] | None = None) -> Binary:
    return _binary("+", lhs, rhs, on, group_left)


def sub(lhs: Expr, rhs: Expr, *, on: Sequence[str] | None = None, group_left: Sequence[str] | None = None) -> Binary:
    return _binary("-", lhs, rhs, on, group_left)


def and_(lhs: Expr, rhs: Expr, *, on: Sequence[str] | None = None) -> Binary:
    return _binary("and", lhs, rhs, on, None)


def unless(lhs: Expr, rhs: Expr, *, on: Sequence[str] | None = None) -> Binary:
    return _binary("unless", lhs, rhs, on, None)


def or_(*terms: Expr, on: Sequence[str] | None = None) -> Expr:
    """``a or b or c``; one term is itself."""
    if not terms:
        raise ValueError("or_ needs at least one term")
    result = terms[0]
    for term in terms[1:]:
        result = _binary("or", result, term, on, None)
    return result


# ----------------------------------------------------------------------------------------- rendering


def _labels(names: Sequence[str]) -> str:
    for name in names:
        if not _LABEL_NAME.match(name):
            raise ValueError(f"not a Prometheus label name: {name!r}")
    return "(" + ", ".join(names) + ")"


def _number(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _needs_parens(parent: Binary, child: Expr, right: bool) -> bool:
    if not isinstance(child, Binary):
        return False
    mine, theirs = _PRECEDENCE[parent.op], _PRECEDENCE[child.op]
    if parent.op == "^":  # right-associative
        return theirs < mine or (theirs == mine and not right)
    # Equal precedence parses left to right; a different operator of the same level gets parentheses anyway,
    # so `a unless b and c` is never left for a reader to puzzle over.
    return theirs < mine or (theirs == mine and (right or child.op != parent.op))


def _operator(e: Binary) -> str:
    text = e.op + (" bool" if e.bool_ else "")
    if e.on is not None:
        text += f" on {_labels(e.on)}"
    if e.group_left is not None:
        text += " group_left" + (f" {_labels(e.group_left)}" if e.group_left else "")
    return text


def _head(e: Aggregate) -> str:
    return e.op + ("" if e.by is None else f" by {_labels(e.by)}")


def render(e: Expr) -> str:
    """The expression on one line."""
    if isinstance(e, Selector):
        matchers = "{" + ", ".join(m.render() for m in e.matchers) + "}" if e.matchers else ""
        return e.metric + matchers + (f"[{e.range}]" if e.range else "")
    if isinstance(e, Number):
        return _number(e.value)
    if isinstance(e, String):
        return _quote(e.value)
    if isinstance(e, Call):
        return f"{e.function}({', '.join(render(a) for a in e.args)})"
    if isinstance(e, Aggregate):
        inner = render(e.expr) if e.param is None else f"{render(e.param)}, {render(e.expr)}"
        return f"{_head(e)} ({inner})"
    # A left-nested chain of one operator (a or b or c ..., thousands long for a large fleet) is rendered in a
    # loop, not by recursion.
    chain = _chain(e)
    parts = []
    for i, operand in enumerate(chain):
        text = render(operand)
        if _needs_parens(e, operand, right=i > 0):
            text = f"({text})"
        parts.append(text)
    return f" {_operator(e)} ".join(parts)


def _chain(e: Binary) -> list[Expr]:
    """The operands of ``((a op b) op c) op d`` in order, for one operator with the same modifiers."""
    operands: list[Expr] = [e.rhs]
    left = e.lhs
    while isinstance(left, Binary) and _same_link(left, e):
        operands.append(left.rhs)
        left = left.lhs
    operands.append(left)
    return operands[::-1]


def _same_link(a: Binary, b: Binary) -> bool:
    return (a.op, a.on, a.group_left, a.bool_) == (b.op, b.on, b.group_left, b.bool_)



def render_lines(e: Expr) -> str:
    """The expression broken at its outermost operators and aggregations while a line is longer than WIDTH,
    with the operands of a broken operator indented inside their parentheses."""
    return "\n".join(_lines(e))


def _indent(lines: list[str]) -> list[str]:
    return ["  " + line for line in lines]


def _lines(e: Expr) -> list[str]:
    flat = render(e)
    if len(flat) <= WIDTH:
        return [flat]
    if isinstance(e, Binary) and len(chain := _chain(e)) > 2:
        # A long chain breaks before each operator, its operands at one level: a or b or c ...
        out: list[str] = []
        for i, operand in enumerate(chain):
            inner = _lines(operand)
            wrap = _needs_parens(e, operand, right=i > 0) or (isinstance(operand, Binary) and len(inner) > 1)
            out += [*(["(", *_indent(inner), ")"] if wrap else inner), *([_operator(e)] if i < len(chain) - 1 else [])]
        return out
    if isinstance(e, Binary):
        def operand(child: Expr, right: bool) -> list[str]:
            # A binary operand broken over lines gets parentheses even where precedence does not need them,
            # so every operator a reader meets at one indentation level belongs to the same expression; only
            # a chain of one set operator (a or b or c) stays flat.
            inner = _lines(child)
            chain = not right and isinstance(child, Binary) and child.op == e.op and e.op in _SET_OPERATORS
            wrap = _needs_parens(e, child, right) or (isinstance(child, Binary) and len(inner) > 1 and not chain)
            return ["(", *_indent(inner), ")"] if wrap else inner

        rhs = render(e.rhs)
        if e.op not in _SET_OPERATORS and len(rhs) <= SHORT and not _needs_parens(e, e.rhs, True):
            # `sum by (x) (...) > 0`: a short right operand stays on the line that closes the left one.
            lines = operand(e.lhs, False)
            return [*lines[:-1], f"{lines[-1]} {_operator(e)} {rhs}"]
        return [*operand(e.lhs, False), _operator(e), *operand(e.rhs, True)]
    if isinstance(e, Aggregate) and e.param is None:
        return [f"{_head(e)} (", *_indent(_lines(e.expr)), ")"]
    if isinstance(e, Call) and e.args and not isinstance(e.args[0], String | Number):
        # The vector argument on its own lines, the scalar and string arguments after it on one.
        inner = _lines(e.args[0])
        rest = ", ".join(render(a) for a in e.args[1:])
        if rest:
            inner = [*inner[:-1], inner[-1] + ",", rest]
        return [f"{e.function}(", *_indent(inner), ")"]
    return [flat]
