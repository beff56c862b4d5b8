"""The worst-case CEL cost of an expression, worked out before it runs, over declared bounds of what it reads.

The API server estimates no cost for a ValidatingAdmissionPolicy when it is written: ``object`` is declared dyn, so
nothing bounds a list it holds, and the cost is counted only as the policy runs, against 1,000,000 units per
expression and 10,000,000 per policy evaluation (k8s.io/apiserver v0.30.0 pkg/admission/plugin/cel/compile.go,
pkg/apis/cel/config.go PerCallLimit and RuntimeCELCostBudget). Where a schema does bound an expression's input
(CRD validation rules), a list without maxItems is taken to hold as many of its smallest items as a 3 MiB request
can (pkg/cel/common/schemas.go estimateMaxArrayItemsFromMinSize: (3,145,728 - 2) / (min size + 1), over a million
containers): no guarantee for a pod. So the compiler estimates itself, over the sizes a :class:`Shape` declares
(how many containers, keys, characters), the way cel-go's checker estimates a typed expression (cel-go v0.17.8
checker/cost.go): a comprehension costs its range, its accumulator's start and result, plus the range's size times
its loop condition and step; both sides of ``&&``, ``||`` and ``?:`` are counted; every size is its bound.

Unit costs are the ones the API server's runtime tracker charges, so the estimate bounds what a run of the
expression can be charged (cel-go v0.17.8 interpreter/runtimecost.go, common/cost.go; Kubernetes library costs in
k8s.io/apiserver v0.32.0 pkg/cel/library/cost.go CallCost): an identifier, a field selection or an index 1, a
constant 0, a list literal 10, a map literal 30, a call 1 unless it traverses its arguments (string equality,
comparison and concatenation 0.1 per character, ``in`` a list its size, ``startsWith`` and ``matches`` by length,
the Kubernetes list functions their elements, ``quantity`` and ``join``/``split`` their text). Kubernetes charges
its library calls by traversal only under StrictCostEnforcementForVAP (beta and off in 1.30 and 1.31, on from
1.32), and 1 otherwise: the larger of the two is taken. Macros are costed as cel-go expands them
(parser/macro.go): ``all`` steps ``__result__ && p`` under ``@not_strictly_false(__result__)``, ``filter`` steps
``p ? __result__ + [x] : __result__``, and so on.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, cast

__all__ = ["EstimateError", "Shape", "estimate", "list_of", "map_of", "record", "shape_of", "text"]

STRING_FACTOR = Fraction(1, 10)  # common.StringTraversalCostFactor
REGEX_FACTOR = Fraction(1, 4)  # common.RegexStringLengthCostFactor
LIST_COST, MAP_COST = 10, 30  # common.ListCreateBaseCost, MapCreateBaseCost
_INT_TEXT = 20  # the longest int64 as text, with its sign


class EstimateError(Exception):
    """The expression reads something no bound was declared for, or uses what the estimator does not model."""


# ---------------------------------------------------------------- shapes: what a value may be, and how big


@dataclass(frozen=True)
class Shape:
    """The largest a value may be: a list or map (entries), a string (characters), a scalar, null or an optional."""

    kind: str
    size: int = 1
    item: Shape | None = None
    """A list's element, a map's value (for keys not in ``fields``), an optional's value."""
    key: Shape | None = None
    fields: Mapping[str, Shape] = field(default_factory=dict)
    """A map's entries known by key (an object's fields, a literal's keys)."""
    closed: bool = False
    """Every key is in ``fields`` (literal data): a key not there is absent, not undeclared."""

    def union(self, other: Shape) -> Shape:
        """A shape either value fits."""
        if self.kind == "null":
            return other
        if other.kind == "null":
            return self
        if self.kind != other.kind:
            raise EstimateError(f"a {self.kind} and a {other.kind} in one place")
        fields = dict(self.fields)
        for name, shape in other.fields.items():
            fields[name] = fields[name].union(shape) if name in fields else shape
        return Shape(self.kind, max(self.size, other.size), _union(self.item, other.item), _union(self.key, other.key),
                     fields, self.closed and other.closed)

    def member(self, name: str, optional: bool = False) -> Shape:
        """The value of field or constant key ``name`` (NULL for a key literal data lacks, read optionally)."""
        if self.kind == "optional" and self.item is not None:
            return self.item.member(name, optional)
        if self.kind != "map":
            raise EstimateError(f"selecting {name} of a {self.kind}")
        if name in self.fields:
            return self.fields[name]
        if self.item is not None:
            return self.item
        if self.closed and optional:
            return NULL
        raise EstimateError(f"no bound declared for {name}")

    def element(self) -> Shape:
        """Any element of a list, any value of a map, what iterating it binds (a map's keys)."""
        if self.kind == "list":
            return self.item or NULL
        if self.kind == "map":
            values = [*self.fields.values(), *([self.item] if self.item else [])]
            return _union_all(values)
        raise EstimateError(f"indexing a {self.kind}")

    def iterated(self) -> Shape:
        if self.kind == "map":
            keys = [text(len(k)) for k in self.fields] + ([self.key] if self.key else [])
            return _union_all(keys)
        return self.element()

    def traversal(self) -> int:
        """What the Kubernetes list functions charge to walk the value (library cost.go traversalCost)."""
        if self.kind == "string":
            return math.floor(self.size * STRING_FACTOR)
        if self.kind == "list":
            return self.size * (self.item.traversal() if self.item else 0)
        if self.kind == "map":
            return self.size * (self.iterated().traversal() + self.element().traversal())
        return 1


def _union(a: Shape | None, b: Shape | None) -> Shape | None:
    return b if a is None else a if b is None else a.union(b)


def _union_all(shapes: list[Shape]) -> Shape:
    found = NULL
    for shape in shapes:
        found = found.union(shape)
    return found


NULL = Shape("null", 1)
SCALAR = Shape("scalar", 1)


def text(length: int) -> Shape:
    return Shape("string", length)


def list_of(item: Shape, size: int) -> Shape:
    return Shape("list", size, item)


def map_of(key: Shape, value: Shape, size: int) -> Shape:
    """A map with arbitrary keys (labels, resource amounts)."""
    return Shape("map", size, value, key)


def record(**fields: Shape) -> Shape:
    """An object with these fields (names with dashes or dots given as ``**{"a.b": ...}``)."""
    return Shape("map", len(fields), None, None, fields)


def shape_of(value: Any) -> Shape:
    """The exact shape of literal data (the policy's classes, offers, tenants)."""
    if isinstance(value, str):
        return text(len(value))
    if isinstance(value, list):
        return Shape("list", len(value), _union_all([shape_of(v) for v in value]) if value else None)
    if isinstance(value, dict):
        return Shape("map", len(value), None, None, {k: shape_of(v) for k, v in value.items()}, closed=True)
    return NULL if value is None else SCALAR


# ---------------------------------------------------------------- parsing the CEL the compiler writes

_TOKEN = re.compile(r"""\s*(?:(?P<number>\d+)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
                        |(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
                        |(?P<op>\|\||&&|==|!=|<=|>=|\.\?|[-+*/%<>!?:.,()\[\]{}]))""", re.VERBOSE)
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


@dataclass(frozen=True)
class Node:
    """A parsed expression: const, ident, select, call, list, map or macro."""

    kind: str
    value: Any = None
    name: str = ""
    target: Node | None = None
    args: tuple[Node, ...] = ()
    optional: bool = False


def _tokens(source: str) -> Iterator[tuple[str, str]]:
    position = 0
    while position < len(source):
        if source[position:].strip() == "":
            return
        found = _TOKEN.match(source, position)
        if found is None:
            raise EstimateError(f"cannot read {source[position:position + 20]!r}")
        kind = found.lastgroup or ""
        yield kind, found[kind]
        position = found.end()


def _unquote(literal: str) -> str:
    body = literal[1:-1]
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", lambda m: chr(int(m[1][1:], 16)) if m[1][0] == "u" and len(m[1]) == 5
                  else {"n": "\n", "t": "\t"}.get(m[1], m[1]), body)


class _Parser:
    """Precedence climbing over CEL's grammar: ?:, ||, &&, relations, + -, * / %, unary, member."""

    def __init__(self, source: str) -> None:
        self.tokens = [*_tokens(source), ("end", "")]
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at][1] if self.tokens[self.at][0] in ("op", "ident") else self.tokens[self.at][0]

    def take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise EstimateError(f"expected {expected!r}, found {token[1]!r}")
        self.at += 1
        return token

    def parse(self) -> Node:
        node = self.conditional()
        if self.tokens[self.at][0] != "end":
            raise EstimateError(f"unexpected {self.tokens[self.at][1]!r}")
        return node

    def conditional(self) -> Node:
        node = self.binary(0)
        if self.peek() == "?":
            self.take()
            then = self.conditional()
            self.take(":")
            return Node("call", name="_?_:_", args=(node, then, self.conditional()))
        return node

    _LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()[1]
            name = "@in" if op == "in" else f"_{op}_"
            node = Node("call", name=name, args=(node, self.binary(level + 1)))
        return node

    def unary(self) -> Node:
        if self.peek() in ("!", "-"):
            op = self.take()[1]
            return Node("call", name=f"{op}_", args=(self.unary(),))
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.peek() in (".", ".?"):
                optional = self.take()[1] == ".?"
                name = self.take()[1]
                if self.peek() == "(" and not optional:
                    args = self.arguments(")")
                    node = Node("macro", name=name, target=node, args=args) if name in _MACROS else \
                        Node("call", name=name, target=node, args=args)
                else:
                    node = Node("select", name=name, target=node, optional=optional)
            elif self.peek() == "[":
                (index,) = self.arguments("]")
                node = Node("call", name="_[_]", args=(node, index))
            else:
                return node

    def arguments(self, close: str) -> tuple[Node, ...]:
        self.take()
        args: list[Node] = []
        while self.peek() != close:
            args.append(self.conditional())
            if self.peek() == ",":
                self.take()
        self.take(close)
        return tuple(args)

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "number":
            return Node("const", int(value))
        if kind == "string":
            return Node("const", _unquote(value))
        if value == "(":
            node = self.conditional()
            self.take(")")
            return node
        if value == "[":
            self.at -= 1
            return Node("list", args=self.arguments("]"))
        if value == "{":
            entries: list[Node] = []
            while self.peek() != "}":
                entries.append(self.conditional())
                self.take(":")
                entries.append(self.conditional())
                if self.peek() == ",":
                    self.take()
            self.take("}")
            return Node("map", args=tuple(entries))
        if kind == "ident":
            if value in ("true", "false", "null"):
                return Node("const", {"true": True, "false": False, "null": None}[value])
            if self.peek() == "(":
                return Node("call", name=value, args=self.arguments(")"))
            return Node("ident", name=value)
        raise EstimateError(f"unexpected {value!r}")


@functools.lru_cache(maxsize=1024)
def parse(source: str) -> Node:
    """The expression's tree (immutable, so one parse serves each policy path and context that repeats it)."""
    return _Parser(source).parse()


# ---------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class Estimate:
    cost: int
    shape: Shape


def estimate(source: str, scope: Mapping[str, Shape]) -> Estimate:
    """The most one evaluation of ``source`` may cost, and the largest value it may yield, over ``scope``'s bounds."""
    literal = _json_literal(source) if source[:1] in ("{", "[") else None
    if literal is not None:
        return literal
    return _estimate(parse(source), dict(scope))


@functools.lru_cache(maxsize=256)
def _json_literal(source: str) -> Estimate | None:
    """The estimate of an expression that is one JSON literal (the compiler writes the policy's data so: a
    thousand classes make 600 KB of it per policy), worked out from its value, as the parse would work it out;
    None for anything else. Only text both read alike: no escape anywhere, and leaves that are strings, booleans,
    null and non-negative integers (CEL reads a minus sign as an operator, a fraction as a selection)."""
    if "\\" in source:
        return None
    try:
        value = json.loads(source)
    except ValueError:
        return None
    return _value_estimate(value)


def _value_estimate(value: Any) -> Estimate | None:
    """`_estimate` of the literal node of ``value`` (leaves are constants; lists and maps as `_created`)."""
    if isinstance(value, list | dict):
        parts = [_value_estimate(v) for v in (value.values() if isinstance(value, dict) else value)]
        if any(p is None for p in parts):
            return None
        found = cast(list[Estimate], parts)
        if isinstance(value, list):
            return _created("list", found)
        return _created("map", [e for k, v in zip(value, found, strict=True) for e in (Estimate(0, shape_of(k)), v)])
    if value is None or isinstance(value, str | bool) or (type(value) is int and value >= 0):
        return Estimate(0, shape_of(value))
    return None


def _created(kind: str, parts: list[Estimate]) -> Estimate:
    """A list literal of ``parts``, or a map literal of ``parts`` as key, value, key, value...: their costs and one
    creation (common.ListCreateBaseCost, MapCreateBaseCost), the union of their shapes."""
    cost = sum(p.cost for p in parts) + (LIST_COST if kind == "list" else MAP_COST)
    if kind == "list":
        return Estimate(cost, Shape("list", len(parts), _union_all([p.shape for p in parts]) if parts else None))
    keys, values = parts[::2], parts[1::2]
    return Estimate(cost, Shape("map", len(keys), _union_all([v.shape for v in values]) if values else None,
                                _union_all([k.shape for k in keys]) if keys else None))


def _ceil(value: Fraction) -> int:
    return math.ceil(value)


def _size(shape: Shape) -> int:
    return shape.item.size if shape.kind == "optional" and shape.item else shape.size


#: Estimates of literal lists and maps (no identifier anywhere inside), which do not depend on the scope: the same
#: parsed node (parse() is cached) recurs in every policy path and context that repeats an expression, and at a
#: thousand classes the literals are most of the work. Keyed by identity, holding the node so the id stays its own.
_LITERALS: dict[int, tuple[Node, Estimate]] = {}
_LITERALS_MAX = 200_000


def _literal(node: Node) -> Estimate | None:
    found = _LITERALS.get(id(node))
    return found[1] if found is not None and found[0] is node else None


def _estimate(node: Node, scope: dict[str, Shape]) -> Estimate:
    if node.kind == "const":
        return Estimate(0, shape_of(node.value))
    if node.kind == "ident":
        if node.name not in scope:
            raise EstimateError(f"no bound declared for {node.name}")
        return Estimate(1, scope[node.name])
    if node.kind == "select":
        assert node.target is not None
        target = _estimate(node.target, scope)
        found = target.shape.member(node.name, node.optional)
        return Estimate(target.cost + 1, Shape("optional", item=found) if node.optional else found)
    if node.kind in ("list", "map"):
        known = _literal(node)
        if known is not None:
            return known
        found = _created(node.kind, [_estimate(a, scope) for a in node.args])
        if all(a.kind == "const" or _literal(a) is not None for a in node.args):
            if len(_LITERALS) >= _LITERALS_MAX:
                _LITERALS.clear()
            _LITERALS[id(node)] = (node, found)
        return found
    if node.kind == "macro":
        return _macro(node, scope)
    return _call(node, scope)


def _macro(node: Node, scope: dict[str, Shape]) -> Estimate:
    """A comprehension as cel-go expands it (parser/macro.go) and costs it (checker/cost.go costComprehension)."""
    assert node.target is not None
    over = _estimate(node.target, scope)
    variable = node.args[0]
    if variable.kind != "ident":
        raise EstimateError(f"{node.name}() needs a variable name")
    count = over.shape.size if over.shape.kind in ("list", "map") else 0
    inner = {**scope, variable.name: over.shape.iterated() if count else NULL, "__result__": SCALAR}
    bodies = [_estimate(arg, inner) if count else Estimate(0, NULL) for arg in node.args[1:]]
    accu = 1  # reading __result__
    if node.name == "all":  # cond @not_strictly_false(r); step r && p; result r
        init, cond, step, result, shape = 0, accu + 1, accu + bodies[0].cost, accu, SCALAR
    elif node.name == "exists":  # cond @not_strictly_false(!r); step r || p; result r
        init, cond, step, result, shape = 0, accu + 2, accu + bodies[0].cost, accu, SCALAR
    elif node.name == "exists_one":  # step p ? r + 1 : r; result r == 1
        init, cond, step, result, shape = 0, 0, bodies[0].cost + accu + 1, accu + 1, SCALAR
    elif node.name == "filter":  # init []; step p ? r + [x] : r; result r
        init, cond, step, result = LIST_COST, 0, bodies[0].cost + accu + LIST_COST + 1 + 1, accu
        shape = Shape("list", count, inner[variable.name] if count else None)
    elif len(bodies) == 1:  # map(x, f): step r + [f]
        init, cond, step, result = LIST_COST, 0, accu + LIST_COST + bodies[0].cost + 1, accu
        shape = Shape("list", count, bodies[0].shape if count else None)
    else:  # map(x, p, f): step p ? r + [f] : r
        init, cond, step, result = LIST_COST, 0, bodies[0].cost + accu + LIST_COST + bodies[1].cost + 1, accu
        shape = Shape("list", count, bodies[1].shape if count else None)
    return Estimate(over.cost + init + result + count * (cond + step), shape)


def _call(node: Node, scope: dict[str, Shape]) -> Estimate:
    name = node.name
    parts = ([_estimate(node.target, scope)] if node.target is not None else []) + [
        _estimate(a, scope) for a in node.args]
    cost = sum(p.cost for p in parts)
    shapes = [p.shape for p in parts]
    if name == "_?_:_":
        return Estimate(parts[0].cost + max(parts[1].cost, parts[2].cost), shapes[1].union(shapes[2]))
    if name in ("_&&_", "_||_"):
        return Estimate(cost, SCALAR)
    key = node.args[1] if name == "_[_]" else None
    if key is not None and key.kind == "const" and isinstance(key.value, str):
        return Estimate(cost + 1, shapes[0].member(key.value))
    charge, shape = _function(name, shapes)
    return Estimate(cost + charge, shape)


def _function(name: str, args: list[Shape]) -> tuple[int, Shape]:
    """(what one call charges at most, the shape of its result), per the runtime trackers named above."""
    first = args[0] if args else SCALAR
    if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
        return max(1, _ceil(min(_size(args[0]), _size(args[1])) * STRING_FACTOR)), SCALAR
    if name == "@in":
        return (args[1].size if args[1].kind == "list" else 1), SCALAR
    if name == "_+_":
        if first.kind == "string":
            return _ceil((first.size + args[1].size) * STRING_FACTOR), text(first.size + args[1].size)
        if first.kind == "list":
            return 1, Shape("list", first.size + args[1].size, _union(first.item, args[1].item))
        return 1, SCALAR
    if name == "_[_]":
        return 1, first.element()
    if name == "orValue":
        return 1, (first.item or NULL if first.kind == "optional" else first).union(args[1])
    if name == "startsWith":
        return _ceil(first.size * STRING_FACTOR), SCALAR
    if name == "matches":
        return _ceil((1 + first.size) * STRING_FACTOR) * _ceil(args[1].size * REGEX_FACTOR), SCALAR
    if name in ("sum", "max", "min", "indexOf"):
        return max(1, first.traversal()), (first.item or SCALAR) if name in ("max", "min") else SCALAR
    if name in ("quantity", "isQuantity"):
        return max(1, _ceil(first.size * STRING_FACTOR)), SCALAR
    if name == "join":
        separator = args[1].size if len(args) > 1 else 0
        item = first.item.size if first.item else 0
        length = first.size * item + max(0, first.size - 1) * separator
        return max(1, _ceil(length * 2 * STRING_FACTOR)), text(length)
    if name == "split":
        return max(1, _ceil(first.size * 2 * STRING_FACTOR)), list_of(text(first.size), first.size + 1)
    if name == "string":
        return 1, first if first.kind == "string" else text(_INT_TEXT)
    if name in ("size", "int", "asInteger", "isInteger", "compareTo", "!_", "-_", "_-_", "_*_", "_/_", "_%_",
                "@not_strictly_false"):
        return 1, SCALAR
    raise EstimateError(f"no cost model for {name}()")


def with_variables(scope: Mapping[str, Shape], variables: Mapping[str, Shape]) -> dict[str, Shape]:
    """``scope`` plus the ``variables`` map of a ValidatingAdmissionPolicy."""
    return {**scope, "variables": replace(record(), fields=dict(variables), size=len(variables))}
