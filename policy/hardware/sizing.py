"""Replica sizing for time-slicing and MPS: how many replicas of a given memory fit one GPU, with the arithmetic."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Sizing", "parse_memory_mib", "parse_percent", "size_replicas"]

_MIB = 2**20
# Kubernetes resource.Quantity suffixes (k8s.io/apimachinery/pkg/api/resource): binary and decimal SI.
_MULTIPLIERS = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_QUANTITY = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<unit>[A-Za-z]*)")
_PERCENT = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)\s*%")
_UNITS_HELP = "use Ki, Mi, Gi, Ti (binary) or k, M, G, T (decimal), or a whole number of MiB without a unit"


@dataclass(frozen=True)
class Sizing:
    """Replicas that fit one GPU: floor((total - reserve) / per_replica), all in MiB."""

    total_mib: int
    reserve_mib: int
    usable_mib: int
    per_replica_mib: int
    replicas: int
    headroom_mib: int  # usable - replicas * per_replica: memory no replica can use

    def explain(self) -> str:
        """The arithmetic as one line, e.g. "floor((46068 - 4606 reserve) / 4621) = 8 replicas, 4494 MiB headroom"."""
        numerator = f"({self.total_mib} - {self.reserve_mib} reserve)" if self.reserve_mib else str(self.total_mib)
        noun = "replica" if self.replicas == 1 else "replicas"
        return (f"floor({numerator} / {self.per_replica_mib}) = {self.replicas} {noun}, "
                f"{self.headroom_mib} MiB headroom")


def size_replicas(
    total_mib: int, per_replica_mib: int, *, reserve_percent: float = 0.0, reserve_mib: int = 0
) -> Sizing:
    """Size replicas from memory: floor((total - reserve) / per_replica).

    The reserve is either a percent of the total, floored to whole MiB (10% of 46068 is 4606), or absolute MiB;
    giving both is an error. Raises ValueError for a non-positive total or per-replica size, a percent outside
    [0, 100) or a reserve larger than the total. Replicas can come out 0 or 1; whether that is enough is the
    caller's rule (the device plugin wants >= 2).
    """
    if total_mib <= 0 or per_replica_mib <= 0:
        raise ValueError(f"total ({total_mib} MiB) and memory per replica ({per_replica_mib} MiB) must be positive")
    if not 0 <= reserve_percent < 100:
        raise ValueError(f"reserve percent must be in [0, 100), got {reserve_percent}")
    if reserve_mib < 0:
        raise ValueError(f"reserve must not be negative, got {reserve_mib} MiB")
    if reserve_percent and reserve_mib:
        raise ValueError("give the reserve as a percent or as MiB, not both")
    # Fraction(str(x)) keeps the decimal the user wrote (12.3, not its binary neighbour) before flooring.
    reserve = reserve_mib or math.floor(Fraction(str(reserve_percent)) * total_mib / 100)
    if reserve > total_mib:
        raise ValueError(f"reserve of {reserve} MiB exceeds the GPU's {total_mib} MiB")
    usable = total_mib - reserve
    replicas = usable // per_replica_mib
    return Sizing(
        total_mib=total_mib,
        reserve_mib=reserve,
        usable_mib=usable,
        per_replica_mib=per_replica_mib,
        replicas=replicas,
        headroom_mib=usable - replicas * per_replica_mib,
    )


def parse_memory_mib(text: str | int) -> int:
    """Whole MiB in a Kubernetes-style memory quantity, floored: "4621Mi" -> 4621, "4.5Gi" -> 4608, "45G" -> 42915.

    A bare whole number (int or string) is already MiB. Decimal units are converted exactly before flooring.
    Raises ValueError, naming the accepted units, for anything else.
    """
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"memory must be a quantity like '4621Mi' or a whole number of MiB, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"memory must not be negative, got {text}")
        return text
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a memory quantity; write e.g. '4621Mi' or '4.5Gi' ({_UNITS_HELP})")
    number, unit = Fraction(match["number"]), match["unit"]
    if not unit:
        if number.denominator != 1:
            raise ValueError(f"{text!r}: a number without a unit is MiB and must be whole; write e.g. '4.5Gi'")
        return int(number)
    if unit not in _MULTIPLIERS:
        raise ValueError(f"{text!r}: unknown unit {unit!r}{_unit_hint(unit)}; {_UNITS_HELP}")
    return math.floor(number * _MULTIPLIERS[unit] / _MIB)


def _unit_hint(unit: str) -> str:
    if unit == "m":
        return " ('m' means milli in Kubernetes quantities; did you mean 'Mi'?)"
    stem = unit.removesuffix("B").removesuffix("b")
    if stem != unit and stem in _MULTIPLIERS:
        return f" (did you mean {stem!r}?)"
    return ""


def parse_percent(text: str | float) -> float:
    """The number in a percent string such as "10%" (returns 10.0); a bare number is taken as percent.

    Raises ValueError unless 0 <= value < 100.
    """
    if isinstance(text, bool):
        raise ValueError(f"percent must be like '10%', got {text!r}")
    if isinstance(text, str):
        match = _PERCENT.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not a percent; write e.g. '10%'")
        value = float(match["number"])
    elif isinstance(text, int | float):
        value = float(text)
    else:
        raise ValueError(f"percent must be like '10%', got {text!r}")
    if not 0 <= value < 100:
        raise ValueError(f"percent must be at least 0 and below 100, got {text!r}")
    return value
