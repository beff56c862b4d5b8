"""Evaluate ValidatingAdmissionPolicy objects the way kube-apiserver does, for tests.

The CEL engine is cel-expr-python (Google's cel-cpp), as in cel_k8s.py; Kubernetes runs cel-go, so this is a close
mirror, not the API server (reference cel-monitoring.md §1.7). On top of it this module implements, once, the
Kubernetes CEL library functions the compiled policies use, each checked against the examples in its Kubernetes
documentation (tests/test_cel_vap.py; the doc comments of k8s.io/apiserver pkg/cel/library quantity.go and
lists.go, cel-go ext/strings.go, rendered at kubernetes.io/docs/reference/using-api/cel):

* quantity library (Kubernetes 1.29+): ``quantity(s)``, ``isQuantity(s)`` and on a Quantity ``isInteger()``,
  ``asInteger()``, ``compareTo(q)``, ``isGreaterThan(q)``, ``isLessThan(q)``. cel-cpp cannot return an opaque
  Python type, so a Quantity travels as the map ``{"__k8s_quantity__": "<numerator>/<denominator>"}``;
* lists library (every version): ``sum()``, ``min()``, ``max()``, ``indexOf(x)``;
* strings extension: ``split(sep)`` (version 0) and ``join()``/``join(sep)`` (version 2, Kubernetes 1.30+),
  declared here rather than loaded from cel-cpp's ExtStrings, whose ``indexOf`` would clash with the lists one.

`environment(minor)` declares only what the API server at that minor accepts in a new expression (libraries are
written against the n-1 compatibility version: k8s.io/apiserver pkg/cel/environment/base.go), so an expression
using a later function fails to compile here as it would there. `evaluate_policy` runs one policy like the
ValidatingAdmissionPolicy plugin (k8s.io/apiserver pkg/admission/plugin/policy/validating/validator.go):
matchConditions (false skips the policy, an error goes to failurePolicy), variables in order (an erroring one is
left out, so using it errors, as lazy evaluation would), then every validation, each failing one with its
messageExpression (or, when that errors, is blank or spans lines, its message).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional
from cel_k8s import CelError, to_unstructured

from policy.kube.quantity import read_quantity

__all__ = ["LIBRARY", "Decision", "PolicyResult", "Undecodable", "activation", "as_integer", "compile_in",
           "environment", "evaluate_policy", "is_integer", "is_quantity", "parse_quantity"]

T = cel.Type
_QUANTITY_TYPE = T.Map(T.STRING, T.STRING)
_QUANTITY_KEY = "__k8s_quantity__"
_INT64 = (-(2**63), 2**63 - 1)
VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables", "params")

# ---------------------------------------------------------------- quantity (k8s.io/apimachinery resource)

def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity; ValueError for text ParseQuantity refuses.

    The grammar is the product's reading of the API server's (policy/kube/quantity.py), without the white space
    Quantity.UnmarshalJSON trims: quantity() gets the text as it is. Values keep nano precision, their magnitude
    rounded up (resource.Quantity, scale Nano)."""
    found = read_quantity(text) if isinstance(text, str) and text == text.strip() else None
    if not isinstance(found, Fraction):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    nanos = abs(found) * 10**9
    magnitude = Fraction(-(-nanos.numerator // nanos.denominator), 10**9)
    return -magnitude if found < 0 else magnitude


def _carry(value: Fraction) -> dict[str, str]:
    return {_QUANTITY_KEY: f"{value.numerator}/{value.denominator}"}


def _value(carrier: Mapping[str, str]) -> Fraction:
    return Fraction(carrier[_QUANTITY_KEY])


def _quantity(text: str) -> dict[str, str]:
    return _carry(parse_quantity(text))


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def is_integer(value: Fraction) -> bool:
    """Quantity.isInteger: a whole number an int64 holds."""
    return value.denominator == 1 and _INT64[0] <= value <= _INT64[1]


def as_integer(value: Fraction) -> int:
    """Quantity.asInteger, or the error it raises."""
    if not is_integer(value):
        raise ValueError("cannot convert value to integer")
    return int(value)


def _compare(a: Mapping[str, str], b: Mapping[str, str]) -> int:
    x, y = _value(a), _value(b)
    return (x > y) - (x < y)


# ---------------------------------------------------------------- lists and strings


def _sum(items: Sequence[Any]) -> Any:
    return sum(items, 0)


def _extreme(pick: Callable[[Sequence[Any]], Any], name: str) -> Callable[[Sequence[Any]], Any]:
    def run(items: Sequence[Any]) -> Any:
        if not items:
            raise ValueError(f"{name} called on empty list")
        return pick(items)
    return run


def _index_of(items: Sequence[Any] | str, item: Any) -> int:
    """lists indexOf (an element of the same type), or the strings extension's on a string."""
    if isinstance(items, str):
        return items.find(item)
    return next((i for i, x in enumerate(items) if x == item and type(x) is type(item)), -1)


def _split(text: str, separator: str) -> list[str]:
    return text.split(separator) if separator else list(text)


def _join(items: Sequence[str], separator: str = "") -> str:
    return separator.join(items)


#: The Kubernetes library functions over plain values (a quantity as its exact Fraction), by CEL name, each
#: implemented once: the environment below declares them for cel-cpp, and the cost interpreter (cel_cost.py)
#: calls them as they are.
LIBRARY: Mapping[str, Callable[..., Any]] = {
    "sum": _sum, "min": _extreme(min, "min"), "max": _extreme(max, "max"), "indexOf": _index_of,
    "split": _split, "join": _join,
    "quantity": parse_quantity, "isQuantity": is_quantity, "isInteger": is_integer, "asInteger": as_integer,
}


# ---------------------------------------------------------------- the environment per Kubernetes minor


def _decl(name: str, *overloads: tuple[str, cel.Type, list[cel.Type], bool, Callable[..., Any]]) -> cel.FunctionDecl:
    return cel.FunctionDecl(name, [cel.Overload(i, r, p, is_member=m, impl=f) for i, r, p, m, f in overloads])


def _lists() -> list[cel.FunctionDecl]:
    any_list = T.List(T.DYN)
    # cel-cpp dispatches on argument kinds at run time, so indexOf gets one overload per element kind and
    # sum/min/max one on list(dyn) (cel-monitoring.md §1.7).
    return [
        _decl("sum", ("list_sum", T.DYN, [any_list], True, LIBRARY["sum"])),
        _decl("min", ("list_min", T.DYN, [any_list], True, LIBRARY["min"])),
        _decl("max", ("list_max", T.DYN, [any_list], True, LIBRARY["max"])),
        _decl("indexOf",
              ("list_indexOf_string", T.INT, [any_list, T.STRING], True, LIBRARY["indexOf"]),
              ("list_indexOf_int", T.INT, [any_list, T.INT], True, LIBRARY["indexOf"]),
              ("string_indexOf", T.INT, [T.STRING, T.STRING], True, LIBRARY["indexOf"])),
    ]


def _quantities() -> list[cel.FunctionDecl]:
    q = _QUANTITY_TYPE
    return [
        _decl("quantity", ("string_to_quantity", q, [T.STRING], False, _quantity)),
        _decl("isQuantity", ("is_quantity_string", T.BOOL, [T.STRING], False, LIBRARY["isQuantity"])),
        _decl("isInteger", ("quantity_is_integer", T.BOOL, [q], True, lambda c: is_integer(_value(c)))),
        _decl("asInteger", ("quantity_get_int", T.INT, [q], True, lambda c: as_integer(_value(c)))),
        _decl("compareTo", ("quantity_compareTo", T.INT, [q, q], True, _compare)),
        _decl("isGreaterThan", ("quantity_isGreaterThan", T.BOOL, [q, q], True, lambda a, b: _compare(a, b) > 0)),
        _decl("isLessThan", ("quantity_isLessThan", T.BOOL, [q, q], True, lambda a, b: _compare(a, b) < 0)),
    ]


def _strings(minor: int) -> list[cel.FunctionDecl]:
    found = [_decl("split", ("string_split_string", T.List(T.STRING), [T.STRING, T.STRING], True, LIBRARY["split"]))]
    if minor >= 30:  # strings version 2 (join) is introduced in 1.29, so writable from 1.30
        found.append(_decl("join",
                           ("list_join", T.STRING, [T.List(T.STRING)], True, LIBRARY["join"]),
                           ("list_join_string", T.STRING, [T.List(T.STRING), T.STRING], True, LIBRARY["join"])))
    return found


@functools.cache
def environment(minor: int) -> cel.Env:
    """The CEL environment of a new ValidatingAdmissionPolicy expression on Kubernetes 1.<minor>."""
    functions = _lists() + _strings(minor)
    extensions = []
    if minor >= 29:  # optionals and the quantity library are introduced in 1.28
        functions += _quantities()
        extensions.append(ext_optional.ExtOptional())
    return cel.NewEnv(variables={name: T.DYN for name in VARIABLES}, extensions=extensions, functions=functions)


@functools.lru_cache(maxsize=4096)
def compile_in(expression: str, minor: int) -> cel.Expression:
    """Compile an expression as the API server at 1.<minor> would accept it, or raise CelError."""
    try:
        return environment(minor).compile(expression)
    except RuntimeError as err:
        raise CelError(f"compile error: {err}") from err


def _run(expression: str, minor: int, data: Mapping[str, Any]) -> Any:
    try:
        result = compile_in(expression, minor).eval(data=data)
    except RuntimeError as err:
        raise CelError(f"evaluation error: {err}") from err
    if result.type() == T.ERROR:
        raise CelError(f"evaluation error: {result.value()}")
    return result.plain_value()


# ---------------------------------------------------------------- one policy, like the admission plugin


class Undecodable(Exception):
    """The API server cannot decode the object (a resource amount that is no quantity): no admission step sees it."""


def _as_the_api_server_shows(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    try:
        return to_unstructured(obj)
    except (TypeError, ArithmeticError) as err:
        raise Undecodable(str(err)) from err


@dataclass(frozen=True)
class Decision:
    """One validation that did not pass: its index, the message the user would read, or the evaluation error."""

    index: int
    message: str
    error: str | None = None


@dataclass(frozen=True)
class PolicyResult:
    matched: bool
    """Every matchCondition was true (else the policy was skipped)."""
    decisions: tuple[Decision, ...] = ()
    variables: Mapping[str, Any] | None = None
    """Every variable that evaluated, by name (for tests that look inside)."""


def activation(*, object: Mapping[str, Any] | None, old_object: Mapping[str, Any] | None = None,
               operation: str = "CREATE", namespace: Mapping[str, Any] | None = None,
               user_info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a policy's expressions see of an admission request, as plain values (``variables`` still empty);
    Undecodable where the API server could not decode the object. ``user_info`` is request.userInfo as the API
    server shows it (authentication.k8s.io UserInfo with its empty fields left out: username, groups, ...)."""
    request: dict[str, Any] = {"operation": operation}
    if user_info is not None:
        request["userInfo"] = dict(user_info)
    return {
        "object": _as_the_api_server_shows(object),
        "oldObject": _as_the_api_server_shows(old_object),
        "request": request,
        "namespaceObject": to_unstructured(namespace),
        "params": None,
        "variables": {},
    }


def evaluate_policy(policy: Mapping[str, Any], *, object: Mapping[str, Any] | None,
                    old_object: Mapping[str, Any] | None = None, operation: str = "CREATE",
                    namespace: Mapping[str, Any] | None = None, minor: int = 30,
                    user_info: Mapping[str, Any] | None = None) -> PolicyResult:
    """Run one ValidatingAdmissionPolicy over an admission request (matching by resource is the caller's)."""
    spec = policy["spec"]
    data = activation(object=object, old_object=old_object, operation=operation, namespace=namespace,
                      user_info=user_info)
    for condition in spec.get("matchConditions", []):
        if _run(condition["expression"], minor, data) is False:
            return PolicyResult(False)
    known: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        data["variables"] = known
        try:
            known[variable["name"]] = _run(variable["expression"], minor, data)
        except CelError:
            continue  # lazily evaluated in the API server: the error surfaces where the variable is used
    data["variables"] = known
    decisions = []
    for index, validation in enumerate(spec.get("validations", [])):
        try:
            passed = _run(validation["expression"], minor, data)
        except CelError as err:
            decisions.append(Decision(index, "", str(err)))
            continue
        if passed is not True:
            decisions.append(Decision(index, _message(validation, minor, data)))
    return PolicyResult(True, tuple(decisions), known)


def _message(validation: Mapping[str, Any], minor: int, data: Mapping[str, Any]) -> str:
    message = ""
    if "messageExpression" in validation:
        try:
            found = _run(validation["messageExpression"], minor, data)
        except CelError:
            found = ""
        message = found.strip() if isinstance(found, str) else ""
        if "\n" in message or len(message) > 5 * 1024:  # MaxEvaluatedMessageExpressionSizeBytes
            message = ""
    return message or validation.get("message", "").strip() or f"failed expression: {validation['expression']}"
