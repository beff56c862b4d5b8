"""Reliability fixtures: one shared real server for the read-only scenarios, and the figures they measured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import REQUEST_TIMEOUT_SECONDS, Figures, https


@pytest.fixture(scope="session")
def figures() -> Iterator[Figures]:
    collected = Figures()
    yield collected
    collected.write()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[https.Server]:
    """`gpupolicy webhook serve`, 2 workers x 4 threads, for every scenario that leaves it as it found it."""
    running = https.start_server(tmp_path_factory.mktemp("shared-server"),
                                 GPUPOLICY_REQUEST_TIMEOUT_SECONDS=str(REQUEST_TIMEOUT_SECONDS))
    yield running
    assert https.stop_server(running) == 0, running.log_tail()


@pytest.fixture(scope="session")
def server_log(server: https.Server) -> Path:
    return Path(server.log)
