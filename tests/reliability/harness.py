"""Shared pieces of the reliability suite: the webhook suite's server helpers, the soak load, figures."""

# The real-server helpers live in tests/webhook (conftest.py builds reviews; test_https.py starts and speaks
# to `gpupolicy webhook serve`). Both are plain files, not a package, and test_https.py does
# `from conftest import ...`, which pytest resolves to whichever conftest it imported last. So they are
# loaded here under their own names, with `conftest` pointing at tests/webhook/conftest.py while
# test_https.py runs its imports. scripts/soak.py is loaded the same way: the suite runs its LoadGenerator.

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


def _load_webhook_suite() -> tuple[ModuleType, ModuleType]:
    helpers = _load("reliability_webhook_helpers", ROOT / "tests" / "webhook" / "conftest.py")
    saved = sys.modules.get("conftest")
    sys.modules["conftest"] = helpers
    try:
        https = _load("reliability_webhook_https", ROOT / "tests" / "webhook" / "test_https.py")
    finally:
        if saved is None:
            sys.modules.pop("conftest", None)
        else:
            sys.modules["conftest"] = saved
    return helpers, https


helpers, https = _load_webhook_suite()
soak = _load("reliability_soak", ROOT / "scripts" / "soak.py")

#: Every request a test server gets must be complete within this (tls.DeadlineSSLSocket): short, so the
#: slow-loris tests finish quickly, yet far above what any honest request here takes (milliseconds).
REQUEST_TIMEOUT_SECONDS = 2.0


def target_of(server: Any) -> Any:
    """The soak script's Target for a server started by test_https.start_server."""
    return soak.Target(port=server.port, ca_files=tuple(server.cas))


class Figures:
    """Numbers the suite measured, for docs/reliability.md: written as JSON to $GPUPOLICY_RELIABILITY_FIGURES."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def record(self, scenario: str, **values: Any) -> None:
        self.values.setdefault(scenario, {}).update(values)

    def write(self) -> None:
        destination = os.environ.get("GPUPOLICY_RELIABILITY_FIGURES")
        if destination:
            Path(destination).write_text(json.dumps(self.values, indent=2, sort_keys=True, default=str) + "\n")
