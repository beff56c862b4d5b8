"""Evaluate webhook matchCondition CEL against admission objects the way kube-apiserver does, for tests."""

# The engine is cel-expr-python (Google's cel-cpp; import name `cel_expr_python`). Kubernetes runs cel-go, so
# this is a close mirror, not the apiserver itself (reference cel-monitoring.md §1.7). What it mirrors:
#
# * Variables. A webhook matchCondition sees `object` and `oldObject` (declared `dyn`; `oldObject` is null on
#   CREATE, `object` null on DELETE) and `request`, the AdmissionRequest without the objects (webhook.md §1.9;
#   kube-apiserver `plugin/cel/compile.go` createEnvForOpts). `request` is typed in the apiserver, so a
#   misspelt field is a compile error there but a runtime error here. `authorizer` is not provided.
# * Object shape. The apiserver hands CEL the object as unstructured JSON
#   (`runtime.DefaultUnstructuredConverter.ToUnstructured`). Pass objects as JSON-like dicts (what
#   `json.loads` or `yaml.safe_load` of a manifest gives). `evaluate` round-trips them through JSON and, like
#   the apiserver, turns every `resources.limits` / `resources.requests` value into its canonical quantity
#   string: YAML `nvidia.com/gpu: 2` arrives as "2", and `1000` as "1k" (`Quantity.String()`;
#   cel-monitoring.md §1.3). Expressions must therefore treat quantities as strings.
# * Errors. `has()` on a missing intermediate field, a missing map key, a type mismatch: all are errors, not
#   false. The apiserver sends an erroring condition to failurePolicy, so `evaluate` raises `CelError` instead
#   of returning False. `||` and `&&` still absorb an error when the other side decides, as in cel-go.
# * Libraries. Standard macros and functions (`has`, `in`, `exists`, `all`, `exists_one`, `map`, `filter`,
#   `size`, `startsWith`, `endsWith`, `contains`, `matches`), optionals (`x.?f`, `m[?k]`, `orValue`,
#   Kubernetes 1.29+) and the strings extension (`split`, `join`, `lowerAscii`, `replace`, ...). The
#   Kubernetes libraries (quantity, lists, regex find, URLs, IP/CIDR, sets, semver, authorizer) are not
#   registered: the matchConditions below need none of them.
# * Result type. A condition must evaluate to bool: a statically non-bool expression fails to compile (the
#   apiserver rejects it on write) and a `dyn` one that yields a non-bool raises `CelError`.

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from decimal import ROUND_UP, Decimal
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional, ext_strings

__all__ = ["CelError", "canonical_quantity", "evaluate", "to_unstructured"]

#: Kubernetes allows at most 64 matchConditions per webhook (webhook.md §1.9).
MAX_MATCH_CONDITIONS = 64

_VARIABLES = ("object", "oldObject", "request")

# DecimalSI suffixes by power of ten (k8s.io/apimachinery resource/suffix.go).
_DECIMAL_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


class CelError(Exception):
    """A CEL expression failed to compile or to evaluate; kube-apiserver would apply failurePolicy."""


@functools.cache
def _env() -> cel.Env:
    return cel.NewEnv(
        variables={name: cel.Type.DYN for name in _VARIABLES},
        extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()],
    )


@functools.lru_cache(maxsize=512)
def compile_expression(expression: str) -> cel.Expression:
    """Compile an expression once, raising CelError where the apiserver would reject it on write."""
    try:
        compiled = _env().compile(expression)
    except RuntimeError as err:
        raise CelError(f"compile error: {err}") from err
    result_type = compiled.return_type()
    if result_type not in (cel.Type.BOOL, cel.Type.DYN):
        raise CelError(f"compile error: expression must evaluate to bool, not {result_type.name()}")
    return compiled


def evaluate(
    expression: str,
    *,
    object: Mapping[str, Any] | None,
    old_object: Mapping[str, Any] | None = None,
    request: Mapping[str, Any] | None = None,
) -> bool:
    """Evaluate a matchCondition expression; raise CelError on any compile or evaluation error."""
    data = {
        "object": to_unstructured(object),
        "oldObject": to_unstructured(old_object),
        "request": to_unstructured(request),
    }
    try:
        result = compile_expression(expression).eval(data=data)
    except RuntimeError as err:
        raise CelError(f"evaluation error: {err}") from err
    if result.type() == cel.Type.ERROR:
        raise CelError(f"evaluation error: {result.value()}")
    value = result.value()
    if not isinstance(value, bool):
        raise CelError(f"evaluation error: expression returned {result.type().name()}, not bool")
    return value


def to_unstructured(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Return a JSON copy of obj with resource quantities canonical, as the apiserver shows objects to CEL."""
    if obj is None:
        return None
    return _canonicalise_resources(json.loads(json.dumps(obj)))


def _canonicalise_resources(node: Any) -> Any:
    if isinstance(node, list):
        return [_canonicalise_resources(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _canonicalise_resources(value) for key, value in node.items()}
    resources = out.get("resources")
    if isinstance(resources, dict):
        for field in ("limits", "requests"):
            amounts = resources.get(field)
            if isinstance(amounts, dict):
                # Only quantities: a custom resource's own table may nest (Dynamo's requests.custom).
                resources[field] = {name: canonical_quantity(amount) if isinstance(amount, str | int | float)
                                    and not isinstance(amount, bool) else amount for name, amount in amounts.items()}
    return out


def canonical_quantity(value: int | float | str) -> str:
    """Kubernetes' canonical DecimalSI string of a plain number (1000 -> "1k", 0.5 -> "500m").

    Strings that already carry a suffix ("1Gi", "500m") are returned unchanged; they are assumed canonical.
    """
    if isinstance(value, bool):
        raise TypeError(f"a quantity cannot be a bool: {value!r}")
    if isinstance(value, str) and not _PLAIN_NUMBER.fullmatch(value):
        return value
    # repr() keeps a float's shortest round-trip digits (0.1 stays 0.1, not 0.1000000000000000055...).
    exact = Decimal(repr(value) if isinstance(value, float) else value)
    # Quantities keep nano precision and round up (resource.Quantity, scale Nano).
    nano = Decimal("1e-9")
    number = exact.quantize(nano, rounding=ROUND_UP) if exact.as_tuple().exponent < -9 else exact
    if number == 0:
        return "0"
    sign, digits, exponent = number.normalize().as_tuple()
    mantissa = int("".join(map(str, digits)))
    while exponent % 3 or exponent > 18:
        mantissa, exponent = mantissa * 10, exponent - 1
    return f"{'-' if sign else ''}{mantissa}{_DECIMAL_SUFFIX[exponent]}"
