"""Reliability fixtures: one shared real server for the read-only scenarios, and the figures they measured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import REQUEST_TIMEOUT_SECONDS, Figures, https, log_problems


@pytest.fixture(scope="session")
def figures() -> Iterator[Figures]:
    collected = Figures()
    yield collected
    collected.write()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, figures: Figures) -> Iterator[https.Server]:
    """`gpupolicy webhook serve`, 2 workers x 4 threads, for every scenario that leaves it as it found it.

    When the session ends its whole log, fuzzing, slow clients and load included, is checked: no key,
    no object contents, no traceback.
    """
    running = https.start_server(tmp_path_factory.mktemp("shared-server"),
                                 GPUPOLICY_REQUEST_TIMEOUT_SECONDS=str(REQUEST_TIMEOUT_SECONDS))
    yield running
    assert https.stop_server(running) == 0, running.log_tail()
    text = Path(running.log).read_text(errors="replace")
    figures.record("log hygiene, whole session", log_lines=text.count("\n"),
                   reviews_logged=text.count(" admission uid="), problems=log_problems(text))
    assert log_problems(text) == [], running.log_tail()
