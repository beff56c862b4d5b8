"""A worker over its share leaves a pending connection to its siblings, for a bounded time (worker.py
_defer_to_others, balance.py).

The worker here is the real EventLoopWorker class with only the state the decision reads (its gunicorn
constructor needs an arbiter); the loop, the listening socket and the shared counts are real. The spread itself,
across two real worker processes, is tests/webhook/test_https.py's.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from webhook import balance
from webhook.worker import EventLoopWorker


class Worker(EventLoopWorker):
    def __init__(self, loop: asyncio.AbstractEventLoop, counts: balance.ConnectionCounts, slot: int) -> None:
        # Only the fields _accept/_defer_to_others read; base.Worker's constructor is not run.
        self.loop, self._counts, self._slot, self.alive = loop, counts, slot, True
        self.connections: set[object] = set()  # type: ignore[assignment]
        self._deferring_since = None
        self.accepted = 0

    def _accept(self, *_: object) -> None:  # what the re-added reader calls: counted, not served
        self.accepted += 1


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


def over_its_share(loop: asyncio.AbstractEventLoop) -> Worker:
    counts = balance.ConnectionCounts(slots=2)
    counts.publish(0, 1)  # this worker holds one connection
    counts.publish(1, 0)  # its sibling holds none
    worker = Worker(loop, counts, 0)
    worker.connections = {object()}  # type: ignore[assignment]
    return worker


def test_a_worker_at_its_share_takes_the_connection(loop: asyncio.AbstractEventLoop, listener: socket.socket) -> None:
    counts = balance.ConnectionCounts(slots=2)
    counts.publish(0, 0)
    counts.publish(1, 0)
    assert not Worker(loop, counts, 0)._defer_to_others(listener, set(), None)  # type: ignore[arg-type]


def test_a_worker_over_its_share_stops_watching_and_looks_again(loop: asyncio.AbstractEventLoop,
                                                              listener: socket.socket) -> None:
    worker = over_its_share(loop)
    loop.add_reader(listener.fileno(), worker._accept)
    assert worker._defer_to_others(listener, set(), None)  # type: ignore[arg-type]
    assert not loop.remove_reader(listener.fileno())  # the listener is not watched while it waits
    client = socket.create_connection(listener.getsockname())  # still pending: nobody accepted it
    try:
        loop.run_until_complete(asyncio.sleep(balance.RECHECK_SECONDS * 5))
        assert worker._deferring_since is not None  # the connection is still there: the same wait goes on
        assert loop.remove_reader(listener.fileno())  # watched again after the recheck
    finally:
        client.close()


def test_a_connection_another_worker_took_starts_a_new_wait(loop: asyncio.AbstractEventLoop,
                                                          listener: socket.socket) -> None:
    worker = over_its_share(loop)
    assert worker._defer_to_others(listener, set(), None)  # type: ignore[arg-type]
    loop.run_until_complete(asyncio.sleep(balance.RECHECK_SECONDS * 5))  # nothing pending: "someone took it"
    assert worker._deferring_since is None


def test_after_the_longest_wait_the_worker_over_its_share_takes_it(loop: asyncio.AbstractEventLoop,
                                                                 listener: socket.socket) -> None:
    worker = over_its_share(loop)
    assert worker._defer_to_others(listener, set(), None)  # type: ignore[arg-type]
    worker._deferring_since = loop.time() - balance.MAX_WAIT_SECONDS  # it has waited the longest already
    assert not worker._defer_to_others(listener, set(), None)  # type: ignore[arg-type]
    assert worker._deferring_since is None  # and the next connection gets a wait of its own


def test_a_draining_worker_stops_watching_for_good(loop: asyncio.AbstractEventLoop, listener: socket.socket) -> None:
    worker = over_its_share(loop)
    assert worker._defer_to_others(listener, set(), None)  # type: ignore[arg-type]
    worker.alive = False
    loop.run_until_complete(asyncio.sleep(balance.RECHECK_SECONDS * 5))
    assert not loop.remove_reader(listener.fileno())
