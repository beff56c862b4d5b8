"""Shared pieces of the reliability suite: the webhook suite's server helpers, the soak load, figures."""

# The real-server helpers live in tests/webhook (webhook_support.py builds reviews; test_https.py starts and
# speaks to `gpupolicy webhook serve`). They are plain files, not a package, so they are loaded here by path;
# scripts/soak.py is loaded the same way: the suite runs its LoadGenerator.

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
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
    # test_https.py imports `webhook_support`, so that name must resolve before it runs
    helpers = sys.modules.get("webhook_support") or _load("webhook_support",
                                                          ROOT / "tests" / "webhook" / "webhook_support.py")
    return helpers, _load("reliability_webhook_https", ROOT / "tests" / "webhook" / "test_https.py")


helpers, https = _load_webhook_suite()
soak = _load("reliability_soak", ROOT / "scripts" / "soak.py")
sys.modules.setdefault("soak", soak)  # scripts/stall.py imports it by name
#: The compiler's admission-manifest tests: their CEL-evaluated `called()` and Pod Security checks.
manifests = _load("reliability_admission_manifests", ROOT / "tests" / "compiler" / "test_admission_manifests.py")

#: Every request a test server gets must be complete within this (tls.DeadlineSSLSocket): short, so the
#: slow-loris tests finish quickly, yet far above what any honest request here takes (milliseconds).
REQUEST_TIMEOUT_SECONDS = 2.0


#: What the suite puts into request bodies (container images, an env value): none of it may reach a log.
OBJECT_CONTENTS = ("registry.example/infer:1.0", "registry.example/soak:1.0", "hf_security_SECRET_value",
                   "registry.example/security-image:secret-tag")


def log_problems(text: str) -> list[str]:
    """What must never be in a server log: key material, object contents, tracebacks (each one a bug)."""
    needles = ("PRIVATE KEY", "BEGIN CERTIFICATE", "Traceback", *OBJECT_CONTENTS)
    return [needle for needle in needles if needle in text]


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


def paths_in(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON-like value, the root included: where a fuzz mutation may strike."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths_in(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from paths_in(value, (*prefix, index))
#: The stall check: hostile connections held open while reviews are measured (its own process for them).
stall = _load("reliability_stall", ROOT / "scripts" / "stall.py")
