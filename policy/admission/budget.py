"""A review's budget: what the engine may spend on one object before it must answer.

Two bounds, both decided by the caller. ``Expired`` is the time bound: the webhook passes a check of its
deadline (the engine reads no clock itself), and the engine asks it between steps that are each linear in the
object, raising ``OverBudget`` once it is true. The size bound needs no clock: a pod with more GPU containers than
one node of any class can hold is unsatisfiable whatever is edited, and is refused before any rule or fix runs
(``Engine`` ``beyond_every_class``).
"""

from __future__ import annotations

from collections.abc import Callable

Expired = Callable[[], bool]
"""True once the review's time is up."""


def never() -> bool:
    """The budget of offline callers (`gpupolicy admit`, `test`): no deadline."""
    return False


class OverBudget(Exception):
    """The review's time ran out before the engine reached a verdict; the caller denies, it never allows."""

    def __init__(self, step: str) -> None:
        super().__init__(f"the time budget ran out while {step}")
        self.step = step


def check(expired: Expired, step: str) -> None:
    """Raise OverBudget when the time is up; ``step`` says what was being done, for the log line."""
    if expired():
        raise OverBudget(step)
