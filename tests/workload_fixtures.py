"""The real-world workload fixtures (tests/fixtures/workloads/<verdict>/*.yaml) and what each file's header states.

A header is the file's first comment lines, ``# key: value``: ``expect`` (the verdict, then the rule ids that
fire), ``cluster`` (the example whose policy admits or denies it) and ``namespace-labels`` (``k=v,k=v``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "workloads"
FILES = sorted(FIXTURES.glob("*/*.yaml"))
_HEADER_LINES = 4


def header(path: Path) -> dict[str, str]:
    """The ``# key: value`` lines at the top of a fixture."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines()[:_HEADER_LINES]:
        key, _, value = line.removeprefix("# ").partition(": ")
        found[key] = value.strip()
    return found


def namespace_labels(found: dict[str, str]) -> dict[str, str]:
    """The labels of the namespace the fixture is admitted in."""
    return dict(pair.split("=", 1) for pair in found.get("namespace-labels", "").split(",") if pair)


def documents(path: Path) -> list[dict[str, Any]]:
    """The fixture's objects."""
    return [obj for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")) if obj is not None]
