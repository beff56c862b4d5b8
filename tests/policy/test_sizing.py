"""Tests for replica sizing and for parsing memory quantities and percents."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policy.hardware import sizing

# ---- size_replicas --------------------------------------------------------------------------------------------


def test_l20_with_4621mi_per_replica_and_10_percent_reserve_gets_8_replicas() -> None:
    result = sizing.size_replicas(46068, 4621, reserve_percent=10)
    assert result == sizing.Sizing(
        total_mib=46068, reserve_mib=4606, usable_mib=41462, per_replica_mib=4621, replicas=8, headroom_mib=4494
    )
    assert result.explain() == "floor((46068 - 4606 reserve) / 4621) = 8 replicas, 4494 MiB headroom"


def test_t4_with_4401mi_per_replica_and_10_percent_reserve_gets_3_replicas() -> None:
    result = sizing.size_replicas(15360, 4401, reserve_percent=10.0)
    assert (result.reserve_mib, result.usable_mib, result.replicas, result.headroom_mib) == (1536, 13824, 3, 621)


def test_a_percent_reserve_is_floored_to_whole_mib() -> None:
    assert sizing.size_replicas(46068, 1, reserve_percent=10).reserve_mib == 4606  # 4606.8
    assert sizing.size_replicas(1000, 1, reserve_percent=12.3).reserve_mib == 123  # not 122 from binary 12.3


def test_an_absolute_reserve_is_subtracted_as_given() -> None:
    result = sizing.size_replicas(23028, 5000, reserve_mib=1028)
    assert (result.usable_mib, result.replicas, result.headroom_mib) == (22000, 4, 2000)


def test_without_a_reserve_the_explanation_omits_it() -> None:
    assert sizing.size_replicas(46068, 4621).explain() == "floor(46068 / 4621) = 9 replicas, 4479 MiB headroom"


def test_one_replica_is_singular_and_zero_is_possible() -> None:
    assert sizing.size_replicas(15360, 10000).explain() == "floor(15360 / 10000) = 1 replica, 5360 MiB headroom"
    assert sizing.size_replicas(15360, 20000).replicas == 0
    assert sizing.size_replicas(100, 10, reserve_mib=100).replicas == 0


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [((0, 100), {}, "must be positive"), ((100, 0), {}, "must be positive"),
     ((100, 10), {"reserve_percent": 100}, r"\[0, 100\)"), ((100, 10), {"reserve_percent": -1}, r"\[0, 100\)"),
     ((100, 10), {"reserve_mib": -1}, "must not be negative"), ((100, 10), {"reserve_mib": 101}, "exceeds"),
     ((100, 10), {"reserve_mib": 5, "reserve_percent": 5}, "not both")],
)  # fmt: skip
def test_impossible_sizing_inputs_are_rejected(args: tuple[int, int], kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sizing.size_replicas(*args, **kwargs)  # type: ignore[arg-type]


@given(
    total=st.integers(1, 300_000),
    per_replica=st.integers(1, 100_000),
    percent=st.integers(0, 9999).map(lambda n: n / 100),
)
def test_replicas_are_the_most_that_fit_the_usable_memory(total: int, per_replica: int, percent: float) -> None:
    result = sizing.size_replicas(total, per_replica, reserve_percent=percent)
    exact_reserve = Fraction(str(percent)) * total / 100
    assert result.reserve_mib <= exact_reserve < result.reserve_mib + 1
    assert result.usable_mib == total - result.reserve_mib
    assert result.replicas * per_replica <= result.usable_mib < (result.replicas + 1) * per_replica
    assert result.headroom_mib == result.usable_mib - result.replicas * per_replica


# ---- parse_memory_mib -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mib"),
    [("4621Mi", 4621), ("4.5Gi", 4608), ("48Gi", 49152), ("1Ti", 1048576), ("2048Ki", 2), ("1536Ki", 1),
     ("45G", 42915), ("1000M", 953), ("5000000k", 4768), (".5Gi", 512), ("4621", 4621), (4621, 4621), (0, 0),
     (" 4621Mi ", 4621)],
)  # fmt: skip
def test_memory_quantities_convert_exactly_and_floor_to_mib(text: str | int, mib: int) -> None:
    assert sizing.parse_memory_mib(text) == mib


@pytest.mark.parametrize(
    ("text", "message"),
    [("4621MB", "did you mean 'M'"), ("4.5GiB", "did you mean 'Gi'"), ("4621m", "milli"),
     ("12Xi", "unknown unit 'Xi'"), ("", "not a memory quantity"), ("lots", "not a memory quantity"),
     ("-1Mi", "not a memory quantity"), ("4.5", "must be whole"), (-1, "must not be negative"),
     (4.5, "whole number of MiB"), (True, "whole number of MiB"), (None, "whole number of MiB")],
)  # fmt: skip
def test_bad_memory_quantities_raise_a_clear_value_error(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sizing.parse_memory_mib(text)  # type: ignore[arg-type]


# ---- parse_percent --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("10%", 10.0), ("12.5%", 12.5), (" 0% ", 0.0), ("99.9 %", 99.9), (5, 5.0)])
def test_percents_parse_to_their_number(text: str | float, value: float) -> None:
    assert sizing.parse_percent(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("10", "not a percent"), ("ten%", "not a percent"), ("-5%", "not a percent"), ("100%", "below 100"),
     (150, "below 100"), (True, "like '10%'"), (None, "like '10%'")],
)  # fmt: skip
def test_bad_percents_raise_a_clear_value_error(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sizing.parse_percent(text)  # type: ignore[arg-type]
