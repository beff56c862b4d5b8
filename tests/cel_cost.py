"""The runtime cost kube-apiserver charges a CEL expression, for tests: a small tracking interpreter.

The API server limits every ValidatingAdmissionPolicy evaluation at run time: 1,000,000 cost units per expression
(``PerCallLimit``) and 10,000,000 per (policy, binding), shared by the validations and the variables they use, with
messageExpressions paid from what is left (k8s.io/apiserver pkg/apis/cel/config.go, pkg/admission/plugin/policy/
validating/validator.go). VAPs have no write-time estimate; the cost is counted as the expression runs.

This module counts it the way cel-go's CostTracker does (cel-go v0.17.8 interpreter/runtimecost.go, common/cost.go,
and Kubernetes' library CallCost in k8s.io/apiserver pkg/cel/library/cost.go): an identifier, a field selection or
an index costs 1, a constant 0, a list literal 10, a map literal 30, a call 1 unless it traverses a string (0.1 per
character: equality, startsWith, +, matches as string x pattern) or a list (``in``: its size; the Kubernetes list
functions sum/max/indexOf: 1 per element), and a comprehension the cost of its steps. To know the sizes it runs the
expression: cel-expr-python's checked AST (``Expression.serialize()``, a cel.expr.CheckedExpr) is decoded here and
interpreted over plain Python values. The value it computes is checked against cel-expr-python's in the tests, so
the interpreter cannot drift from the engine it mirrors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cel_vap

__all__ = ["CostError", "Node", "cost_of", "parse"]

SELECT_COST, LIST_COST, MAP_COST, STRING_FACTOR, REGEX_FACTOR = 1, 10, 30, 0.1, 0.25


class CostError(Exception):
    """The expression uses something this interpreter does not model."""


# ---------------------------------------------------------------- protobuf wire decoding (cel.expr.CheckedExpr)


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise CostError(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, i


@dataclass
class Node:
    """One cel.expr.Expr: kind is const, ident, select, call, list, map or comprehension."""

    id: int
    kind: str
    value: Any = None
    name: str = ""
    test_only: bool = False
    target: Node | None = None
    args: list[Node] = field(default_factory=list)
    entries: list[tuple[Node, Node, bool]] = field(default_factory=list)
    optional_indices: list[int] = field(default_factory=list)
    comprehension: dict[str, Any] = field(default_factory=dict)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _constant(data: bytes) -> Any:
    for number, _, value in _fields(data):
        if number == 1:
            return None
        if number == 2:
            return bool(value)
        if number in (3, 4):
            return _signed(value) if number == 3 else value
        if number == 5:
            import struct
            return struct.unpack("<d", value)[0]
        if number == 6:
            return value.decode()
    raise CostError("unsupported constant")


#: Field number -> (Node attribute, decoder) of the messages cel.expr.Expr holds (checked.proto, syntax.proto):
#: Expr.Select {operand 1, field 2, test_only 3}, Expr.Call {target 1, function 2, args 3 (repeated)}.
_SELECT = {1: ("target", lambda v: _expr(v)), 2: ("name", bytes.decode), 3: ("test_only", bool)}
_CALL = {1: ("target", lambda v: _expr(v)), 2: ("name", bytes.decode), 3: ("args", lambda v: _expr(v))}
_COMPREHENSION = {1: "iter_var", 2: "iter_range", 3: "accu_var", 4: "accu_init", 5: "loop_condition",
                  6: "loop_step", 7: "result"}


def _fill(node: Node, layout: dict[int, tuple[str, Any]], data: bytes) -> None:
    for number, _, value in _fields(data):
        if number in layout:
            name, decode = layout[number]
            current = getattr(node, name)
            if isinstance(current, list):
                current.append(decode(value))
            else:
                setattr(node, name, decode(value))


def _entry(data: bytes) -> tuple[Node, Node, bool]:
    """Expr.CreateStruct.Entry {map_key 3, value 4, optional_entry 5}."""
    parts = {n: v for n, _, v in _fields(data)}
    return _expr(parts[3]), _expr(parts[4]), bool(parts.get(5, 0))


def _expr(data: bytes) -> Node:
    node = Node(0, "")
    for number, _, value in _fields(data):
        if number == 2:
            node.id = value
        elif number == 3:
            node.kind, node.value = "const", _constant(value)
        elif number == 4:
            node.kind, node.name = "ident", _fields(value)[0][2].decode()
        elif number in (5, 6):
            node.kind = "select" if number == 5 else "call"
            _fill(node, _SELECT if number == 5 else _CALL, value)
        elif number == 7:
            node.kind = "list"
            for n, w, v in _fields(value):
                if n == 1:
                    node.args.append(_expr(v))
                elif n == 2:
                    node.optional_indices += [_varint(v, i)[0] for i in range(len(v))] if w == 2 else [v]
        elif number == 8:
            node.kind = "map"
            node.entries = [_entry(v) for n, _, v in _fields(value) if n == 2]
        elif number == 9:
            node.kind = "comprehension"
            for n, _, v in _fields(value):
                if n in (1, 3):
                    node.comprehension[_COMPREHENSION[n]] = v.decode()
                elif n in _COMPREHENSION:
                    node.comprehension[_COMPREHENSION[n]] = _expr(v)
    return node


def parse(expression: str) -> Node:
    """The checked AST of an expression as the cel_vap environment (Kubernetes 1.30) compiles it."""
    packed = cel_vap.compile_in(expression, 30).serialize()
    any_value = dict((n, v) for n, _, v in _fields(packed))[2]
    checked = dict((n, v) for n, _, v in _fields(any_value))
    return _expr(checked[4])


# ---------------------------------------------------------------- the interpreter


class _Error(Exception):
    """A CEL evaluation error (absorbed by || and && as in CEL)."""


_MISSING = object()


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | dict | bytes) else 1


def _ceil(x: float) -> int:
    return math.ceil(x)


class _Run:
    def __init__(self, variables: Mapping[str, Any]) -> None:
        self.cost = 0
        self.scopes: list[dict[str, Any]] = [dict(variables)]

    def lookup(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise _Error(f"undeclared {name}")

    def eval(self, node: Node) -> Any:
        handler = getattr(self, f"_{node.kind}")
        return handler(node)

    def _const(self, node: Node) -> Any:
        return node.value

    def _ident(self, node: Node) -> Any:
        self.cost += SELECT_COST
        return self.lookup(node.name)

    def _select(self, node: Node) -> Any:
        assert node.target is not None
        target = self.eval(node.target)
        self.cost += SELECT_COST
        if node.test_only:
            return isinstance(target, dict) and node.name in target
        if not isinstance(target, dict) or node.name not in target:
            raise _Error(f"no such key {node.name}")
        return target[node.name]

    def _list(self, node: Node) -> Any:
        self.cost += LIST_COST
        return [self.eval(a) for a in node.args]

    def _map(self, node: Node) -> Any:
        self.cost += MAP_COST
        return {self.eval(k): self.eval(v) for k, v, _ in node.entries}

    def _comprehension(self, node: Node) -> Any:
        c = node.comprehension
        items = self.eval(c["iter_range"])
        accu = self.eval(c["accu_init"])
        for item in (list(items) if isinstance(items, dict) else items):
            self.scopes.append({c["iter_var"]: item, c["accu_var"]: accu})
            try:
                if not self._truthy_or_error(c["loop_condition"]):
                    break
                accu = self._catch(c["loop_step"])
            finally:
                self.scopes.pop()
        self.scopes.append({c["accu_var"]: accu})
        try:
            if isinstance(accu, _Error):
                self.eval(c["result"])  # the result reads the accumulator: the error surfaces
                raise accu
            return self.eval(c["result"])
        finally:
            self.scopes.pop()

    def _truthy_or_error(self, node: Node) -> bool:
        value = self._catch(node)
        return value is not False

    def _catch(self, node: Node) -> Any:
        try:
            return self.eval(node)
        except _Error as err:
            return err

    def _call(self, node: Node) -> Any:
        name = node.name
        if name in ("_&&_", "_||_"):
            return self._logic(node, name == "_&&_")
        if name == "_?_:_":
            condition = self.eval(node.args[0])
            return self.eval(node.args[1] if condition else node.args[2])
        if name == "@not_strictly_false":
            value = self._catch(node.args[0])
            self.cost += 1  # a call like any other (cel-go evalUnary), with no traversal
            return value is not False
        args = ([self.eval(node.target)] if node.target is not None else []) + [self._strict(a) for a in node.args]
        if name == "_?._":
            self.cost += SELECT_COST
            return args[0].get(args[1], _MISSING) if isinstance(args[0], dict) else _MISSING
        function = _FUNCTIONS.get(name)
        if function is None:
            raise CostError(f"no model for {name}")
        self.cost += _call_cost(name, args)
        try:
            return function(*args)
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError) as err:
            raise _Error(str(err)) from err

    def _strict(self, node: Node) -> Any:
        value = self.eval(node)
        if isinstance(value, _Error):
            raise value
        return value

    def _logic(self, node: Node, conjunction: bool) -> Any:
        errors = []
        for arg in node.args:
            value = self._catch(arg)
            if isinstance(value, _Error):
                errors.append(value)
            elif value is (not conjunction):
                return value
        if errors:
            raise errors[0]
        return conjunction


def _call_cost(name: str, args: list[Any]) -> int:
    if name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_") and all(isinstance(a, str) for a in args):
        return _ceil(min(len(args[0]), len(args[1])) * STRING_FACTOR)
    if name in ("_==_", "_!=_") and any(isinstance(a, list | dict) for a in args):
        return _ceil(min(_size(args[0]), _size(args[1])) * STRING_FACTOR)
    if name == "@in":
        return _size(args[1]) if isinstance(args[1], list) else 1
    if name == "_+_" and isinstance(args[0], str):
        return _ceil((len(args[0]) + len(args[1])) * STRING_FACTOR)
    if name == "startsWith":
        return _ceil(len(args[0]) * STRING_FACTOR)
    if name == "matches":
        return _ceil((1 + len(args[0])) * STRING_FACTOR) * _ceil(len(args[1]) * REGEX_FACTOR)
    # Kubernetes' library functions cost 1 without StrictCostEnforcementForVAP (off in 1.30 and 1.31) and their
    # traversal with it (on from 1.32, k8s.io/apiserver pkg/cel/library/cost.go CallCost): the larger is charged.
    if name in ("sum", "max", "min", "indexOf"):
        return max(1, _traversal(args[0]))
    if name in ("quantity", "isQuantity"):
        return max(1, _ceil(len(args[0]) * STRING_FACTOR))
    if name == "join":
        return max(1, _ceil(len((args[1] if len(args) > 1 else "").join(args[0])) * 2 * STRING_FACTOR))
    if name == "split":
        return max(1, _ceil(len(args[0]) * 2 * STRING_FACTOR))
    return 1


def _traversal(value: Any) -> int:
    """library cost.go traversalCost: 0.1 per character, truncated per string; 1 per other scalar."""
    if isinstance(value, str):
        return int(len(value) * STRING_FACTOR)
    if isinstance(value, list):
        return sum(_traversal(item) for item in value)
    if isinstance(value, dict):
        return sum(_traversal(k) + _traversal(v) for k, v in value.items())
    return 1


def _index(container: Any, key: Any) -> Any:
    if isinstance(container, list):
        if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key < len(container):
            raise IndexError("index out of range")
    elif key not in container:
        raise KeyError(key)
    return container[key]


def _or_value(optional: Any, default: Any) -> Any:
    return default if optional is _MISSING else optional


def _add(a: Any, b: Any) -> Any:
    if type(a) is not type(b) and not (isinstance(a, int) and isinstance(b, int)):
        raise TypeError("no matching overload for _+_")
    return a + b


def _string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def run(a: Any, b: Any) -> bool:
        if isinstance(a, str) != isinstance(b, str):
            raise TypeError("no matching overload")
        return op(a, b)
    return run


def _matches(text: str, pattern: str) -> bool:
    import re
    return re.search(pattern, text) is not None


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "_==_": lambda a, b: (a == b and type(a) is type(b)) or (isinstance(a, int) and isinstance(b, int) and a == b),
    "_!=_": lambda a, b: not (a == b and type(a) is type(b)),
    "_<_": _compare(lambda a, b: a < b), "_<=_": _compare(lambda a, b: a <= b),
    "_>_": _compare(lambda a, b: a > b), "_>=_": _compare(lambda a, b: a >= b),
    "_+_": _add, "_-_": lambda a, b: a - b, "_*_": lambda a, b: a * b,
    "!_": lambda a: not a,
    "@in": lambda x, container: x in container,
    "_[_]": _index,
    "orValue": _or_value,
    "size": _size,
    "startsWith": lambda s, p: s.startswith(p),
    "matches": _matches,
    "string": _string,
    "int": lambda s: int(s),
    **cel_vap.LIBRARY,  # Kubernetes' library functions, as the cel-cpp environment runs them
}


@dataclass(frozen=True)
class Cost:
    cost: int
    value: Any
    """The expression's value, or the error text when it failed."""
    error: bool = False


def cost_of(expression: str, variables: Mapping[str, Any]) -> Cost:
    """Run the expression over plain values (object, oldObject, request, namespaceObject, variables) and count."""
    run = _Run(variables)
    try:
        value = run.eval(parse(expression))
    except _Error as err:
        return Cost(run.cost, str(err), True)
    if value is _MISSING:
        value = None
    return Cost(run.cost, value)
