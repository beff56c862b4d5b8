"""Waiting for something another process does (a server starting, a configuration taking effect, a reconciler
writing a label): ask again until the answer comes or a deadline passes, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(probe: Callable[[], T | None], *, timeout: float = 15.0, what: str = "condition",
         interval: float = 0.05) -> T:
    """probe() until it returns something other than None, which is returned; an AssertionError naming `what`
    once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
