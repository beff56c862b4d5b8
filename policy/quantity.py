"""Kubernetes resource quantities ("1", 1, "2", "1k", "1000m") read as whole device counts."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

# The quantity grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go): a signed decimal number,
# then a binary-SI suffix (Ki..Ei), a decimal-SI suffix (n, u, m, k, M, G, T, P, E) or an exponent.
_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_TEXT = 64  # the API server caps quantities far below this; longer text is not a quantity
_MAX_EXPONENT = 30  # no node has 10^30 devices; refusing larger exponents keeps parsing O(1)


def parse_quantity(value: Any) -> Fraction | None:
    """The exact value of a quantity given as a JSON number or Kubernetes quantity text; None if it is neither."""
    if isinstance(value, bool):
        return None  # YAML `true` is not a count, though Python treats it as 1
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if value == value and abs(value) != float("inf") else None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    sign, digits, suffix = match.groups()
    number = Fraction(digits)
    if suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix:
        exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            return None
        number *= Fraction(10) ** exponent
    return -number if sign == "-" else number


def parse_count(value: Any) -> int | None:
    """A whole, non-negative device count, or None for anything the API server would refuse.

    Extended resources such as nvidia.com/gpu must be integers (API validation), so "1.5" and "-1"
    yield None, while "1", 1, 1.0, "1k" and "1000m" are counted.
    """
    number = parse_quantity(value)
    if number is None or number < 0 or number.denominator != 1:
        return None
    return int(number)
