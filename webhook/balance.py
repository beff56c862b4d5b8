"""Connections spread over the workers: each worker's count of open connections, in memory all of them share.

The API server keeps a few keep-alive connections to the webhook and sends every review over them, so which worker
accepted each connection decides which CPUs review: with the listener shared by every worker, whichever woke
first took them, and a short run put all 4 of a client's connections on one of 2 workers (`conns/worker 4/0` in
bench/webhook_bench.py). So each worker publishes how many connections it holds, and a worker holding more than
the least loaded of the others lets a pending connection wait a moment for them (worker.py `_accept`); once it has
waited MAX_WAIT_SECONDS it takes the connection itself, so a busy or stuck sibling delays a new connection by about
that much and never refuses one.

Why not SO_REUSEPORT (gunicorn's `reuse_port`, which gives each worker a listener of its own): the kernel
spreads connections by a hash of their addresses, not by load, so 4 connections land all on one of 2 workers
one time in 8, and the connections waiting in a worker's own queue are reset when that worker exits
(socket(7) SO_REUSEPORT; Linux `inet_csk_listen_stop`).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable

#: Workers tracked (gunicorn can be told to add workers at run time); a worker beyond them just accepts.
SLOTS = 64
#: How long a worker over its share waits before it looks at a pending connection again.
RECHECK_SECONDS = 0.002
#: How long a worker over its share leaves a pending connection to the others before it takes it itself.
MAX_WAIT_SECONDS = 0.020
_UNUSED = -1


class ConnectionCounts:
    """Open connections per worker slot, in an anonymous shared mapping made before gunicorn forks.

    The master gives each worker a free slot before forking it (``assign``) and frees it when the worker exits
    (``release``); the worker writes only its own slot and reads the others'. Each slot is one aligned 64-bit word,
    written and read whole, so a reader sees an old count or the new one, never a mixture; a count read a moment
    late only makes one accept less balanced, never wrong.
    """

    def __init__(self, slots: int = SLOTS) -> None:
        self._memory = mmap.mmap(-1, slots * 8)  # MAP_SHARED | MAP_ANONYMOUS: children see the same pages
        self._counts = memoryview(self._memory).cast("q")
        for slot in range(slots):
            self._counts[slot] = _UNUSED

    def assign(self, taken: Iterable[int | None]) -> int | None:
        """A slot no live worker holds (``taken``: theirs); None when all are taken. It reads as unused until
        the new worker publishes its first count, once it accepts: a booting worker draws no connections."""
        busy = set(taken)
        return next((slot for slot in range(len(self._counts)) if slot not in busy), None)

    def release(self, slot: int | None) -> None:
        if slot is not None:
            self._counts[slot] = _UNUSED

    def publish(self, slot: int, count: int) -> None:
        self._counts[slot] = count

    def over_share(self, slot: int, count: int) -> bool:
        """Whether a worker holding ``count`` connections holds more than some other live worker."""
        return any(other != slot and 0 <= theirs < count for other, theirs in enumerate(self._counts))
