"""The workers' shared connection counts (webhook/balance.py): which worker leaves a new connection to another."""

from __future__ import annotations

import os

from webhook.balance import ConnectionCounts


def test_a_worker_holding_more_than_another_live_worker_is_over_its_share() -> None:
    counts = ConnectionCounts(slots=4)
    a, b = counts.assign([]), counts.assign([0])
    assert (a, b) == (0, 1)
    counts.publish(a, 0)  # both accepting (worker.py publishes once it serves)
    counts.publish(b, 0)
    assert not counts.over_share(a, 0) and not counts.over_share(b, 0)  # equal: either may take it
    counts.publish(a, 1)
    assert counts.over_share(a, 1) and not counts.over_share(b, 0)  # a leaves the next connection to b
    counts.publish(b, 1)
    assert not counts.over_share(a, 1) and not counts.over_share(b, 1)


def test_an_exited_worker_no_longer_counts_and_its_slot_is_given_again() -> None:
    counts = ConnectionCounts(slots=2)
    a, b = counts.assign([]), counts.assign([0])
    counts.publish(a, 3)
    counts.release(b)  # b exited with none: a alone is never over its share
    assert not counts.over_share(a, 3)
    assert counts.assign([a]) == b
    assert counts.assign([a, b]) is None  # all slots taken: that worker just accepts (no slot, no balance)


def test_counts_written_in_a_forked_worker_are_seen_by_the_others() -> None:
    counts = ConnectionCounts(slots=2)
    a, b = counts.assign([]), counts.assign([0])
    pid = os.fork()
    if pid == 0:  # the "worker" b
        counts.publish(b, 5)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    counts.publish(a, 1)
    assert counts.over_share(b, 5) and not counts.over_share(a, 1)


def test_a_booting_or_draining_worker_draws_no_connections_from_the_others() -> None:
    counts = ConnectionCounts(slots=2)
    a, b = counts.assign([]), counts.assign([0])
    counts.publish(a, 2)
    assert not counts.over_share(a, 2)  # b is assigned but not accepting yet: a takes its connections itself
    counts.publish(b, 0)
    assert counts.over_share(a, 2)  # b accepts now: a leaves the next one to it
    counts.release(b)  # b drains (worker.py _drain releases its slot first)
    assert not counts.over_share(a, 2)
