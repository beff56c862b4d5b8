"""Kubernetes resource quantities read the way the API server reads them, and as whole device counts.

The grammar and its errors follow k8s.io/apimachinery pkg/api/resource (quantity.go parseQuantityString and
ParseQuantity, suffix.go interpret, at v0.37.0-beta.0): an optional sign, ASCII digits with at most one '.', then
a suffix made of the characters ``eEinumkKMGTP`` that must be a decimal-SI suffix (n u m k M G T P E), a binary-SI
one (Ki Mi Gi Ti Pi Ei) or an exponent (e3, E-2). Quantity.UnmarshalJSON trims surrounding white space and reads
JSON null as zero. Anything else is refused when the object is decoded, with the messages below.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

#: The API server's decode errors (quantity.go ErrFormatWrong, ErrSuffix).
FORMAT_ERROR = ("quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
SUFFIX_ERROR = "unable to parse quantity's suffix"
#: apimachinery pkg/api/validation IsNegativeErrorMsg, and pkg/apis/core/validation isNotIntegerErrorMsg.
NEGATIVE_ERROR = "must be greater than or equal to 0"
NOT_INTEGER_ERROR = "must be an integer"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's str.strip also takes \x1c-\x1f).
_GO_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"
# Exponents beyond this are computed as this: 10^400 devices is as unsatisfiable as 10^4000, and a value below
# 10^-400 is as fractional (the API server rounds it up to 1n, a non-integer).
_EXPONENT_BOUND = 400
MAX_TEXT = 256
"""Longer quantity text is not read (Python refuses integers of more than 4300 digits); it is reported instead."""


@dataclass(frozen=True)
class Unreadable:
    """A value the API server refuses to decode as a quantity, with its reason."""

    reason: str


def read_quantity(value: Any) -> Fraction | Unreadable:
    """The exact value of a quantity written as a JSON/YAML number or as quantity text, or why it is not one.

    ``None`` (JSON null) is zero, as Quantity.UnmarshalJSON reads it. Booleans, lists, mappings and text
    outside the grammar are Unreadable: the API server cannot decode the object, so it never exists.
    """
    if value is None:
        return Fraction(0)
    if isinstance(value, bool):
        return Unreadable(FORMAT_ERROR)  # YAML `true` reaches the decoder as the text "true"
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if value == value and abs(value) != float("inf") else Unreadable(FORMAT_ERROR)
    if not isinstance(value, str):
        return Unreadable(FORMAT_ERROR)
    return _parse_text(value.strip(_GO_SPACE))


def parse_quantity(value: Any) -> Fraction | None:
    """The exact value of a quantity, or None when the API server would refuse to decode it."""
    found = read_quantity(value)
    return None if isinstance(found, Unreadable) else found


def parse_count(value: Any) -> int | None:
    """A whole, non-negative device count, or None for anything the API server would refuse.

    Extended resources such as nvidia.com/gpu must be integers (API validation), so "1.5" and "-1"
    yield None, while "1", 1, 1.0, "1k" and "1000m" are counted.
    """
    return count_problem(value)[0]


def count_problem(value: Any) -> tuple[int | None, str | None]:
    """(count, None) for a valid extended-resource amount, else (None, the API server's reason).

    pkg/apis/core/validation ValidateResourceQuantityValue: not negative, and for integer resources (every
    extended resource) a whole number."""
    # The common spellings, 1 and "1", without the general parser (a review reads every container's amounts).
    if type(value) is int:
        return (value, None) if value >= 0 else (None, NEGATIVE_ERROR)
    if type(value) is str and value.isascii() and value.isdigit() and len(value) <= MAX_TEXT:
        return int(value), None
    found = read_quantity(value)
    if isinstance(found, Unreadable):
        return None, found.reason
    if found < 0:
        return None, NEGATIVE_ERROR
    if found.denominator != 1:
        return None, NOT_INTEGER_ERROR
    return int(found), None


def _parse_text(text: str) -> Fraction | Unreadable:
    if not text:
        return Unreadable(FORMAT_ERROR)
    if len(text) > MAX_TEXT:
        return Unreadable(f"longer than {MAX_TEXT} characters, which gpupolicy does not read")
    parts = _split(text)
    if parts is None:
        return Unreadable(FORMAT_ERROR)
    negative, num, denom, suffix = parts
    scale = _interpret(suffix)
    if scale is None:
        return Unreadable(SUFFIX_ERROR)
    base, exponent = scale
    number = Fraction(int(num + denom), 10 ** len(denom))
    if base == 2:
        number *= 2**exponent
    elif number:
        number *= Fraction(10) ** max(-_EXPONENT_BOUND, min(exponent, _EXPONENT_BOUND))
    return -number if negative else number


def _split(text: str) -> tuple[bool, str, str, str] | None:
    """(negative, numerator digits, denominator digits, suffix), scanned like parseQuantityString; None for a
    format error. Only ASCII digits count: "٢" (Arabic-Indic two) is not a quantity."""
    pos, end = 0, len(text)
    negative = text[0] == "-"
    if text[0] in "+-":
        pos = 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        return None
    return negative, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int] | None:
    """(base, exponent) of a suffix (suffix.go interpret), or None for an unknown one."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if not body or not set(body) <= _DIGITS:
            return None
        parsed = int(digits)
        if not -(2**63) <= parsed < 2**63:
            return None  # strconv.ParseInt fails: ErrSuffix
        return 10, (parsed + 2**31) % 2**32 - 2**31  # ParseQuantity keeps int32(parsed)
    return None
