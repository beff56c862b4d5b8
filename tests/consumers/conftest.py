"""The consumer harnesses as a session fixture: each one built on first use (or found in the cache), so plain
`pytest` runs them; Go or the module proxy missing fails the tests that need them, loudly, never a skip."""

from __future__ import annotations

import harnesses
import pytest


@pytest.fixture(scope="session")
def consumers() -> harnesses.Consumers:
    return harnesses.Consumers()
