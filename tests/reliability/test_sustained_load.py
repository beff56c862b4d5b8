"""Sustained load: ten seconds of concurrent mixed requests across both workers, none failing, memory flat."""

from __future__ import annotations

from harness import Figures, https, soak, target_of

LOAD_SECONDS = 10.0
CLIENTS = 8  # as many as the server has threads (2 workers x 4)


def test_ten_seconds_of_concurrent_mixed_load_fail_no_request_reach_both_workers_and_leave_memory_flat(
    server: https.Server, figures: Figures
) -> None:
    generator = soak.LoadGenerator(target_of(server))
    warmup = generator.run(seconds=1.5, clients=CLIENTS)  # first requests fill caches and allocator pools
    offset = len(server.log.read_text())
    before = soak.memory_mib(server.process.pid)
    report = generator.run(seconds=LOAD_SECONDS, clients=CLIENTS, max_requests=100_000)
    after = soak.memory_mib(server.process.pid)
    served = soak.admissions_by_worker(server.log.read_text()[offset:])
    summary = report.summary()
    figures.record("load, 10 s in the suite", **summary, warmup_sent=warmup.sent, memory_before=before,
                   memory_after=after, reviews_by_worker=sorted(served.values()))

    assert (warmup.failures, report.failures) == (0, 0), report.errors[:5]
    assert report.sent > 100, summary  # real load, not a handful: the throughput figure belongs to bench/
    assert set(summary["by_call"]) == {call.name for call in soak.default_mix()}
    assert len(served) == 2 and min(served.values()) > 0.1 * sum(served.values()), served
    assert after["processes"] == before["processes"] == 3  # master and 2 workers: none died or was replaced
    assert after["rss_mib"] - before["rss_mib"] < 15, (before, after)
