"""External tools the tests drive (kubectl, promtool): found, skipped, or required by CI."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    """The path of an external tool a test needs.  Missing, the test is skipped, unless CI named the tool in
    GPUPOLICY_REQUIRE_TOOLS (comma-separated; .ci/run sets it): then it fails, so CI can never go green by
    skipping a check."""
    found = shutil.which(name)
    if found:
        return found
    required = set(filter(None, os.environ.get("GPUPOLICY_REQUIRE_TOOLS", "").split(",")))
    if name in required:
        pytest.fail(f"{name} is not on PATH, and GPUPOLICY_REQUIRE_TOOLS names it: CI must run this check")
    pytest.skip(f"{name} is not on PATH")
