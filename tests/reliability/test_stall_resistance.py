"""Stall resistance: 500 slow, idle and malicious connections held open cannot delay a valid review."""

# The attack the event-loop worker exists for. Under gthread (2 workers x 4 threads) 8 clients idle after
# the TLS handshake delayed a review by 9.1 s, and 16 clients sending headers at 1 byte/s let 9 of 72 reviews
# through in time: with failurePolicy Fail, GPU pods were refused for as long as the attack lasted.
# scripts/stall.py holds 100 connections of each kind open (reopening every one the server drops at its
# deadline) from a process of its own, while valid reviews go out at 100/s, open loop, for 30 s. The
# production timeouts apply (5 s for headers, 10 s for a request), so every hostile connection is dropped
# and reopened a few times. p99 < 100 ms is the acceptance figure (Gatekeeper's advice for a webhook's
# p99); measured here it is about 7 ms. On a machine too loaded to meet it the test fails, it is not skipped.

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Figures, stall

pytestmark = pytest.mark.slow


def test_500_hostile_connections_held_open_fail_no_review_and_delay_none_past_100_ms(
    tmp_path: Path, figures: Figures
) -> None:
    report = stall.measure(per_kind=100, rate=100, seconds=30, workdir=tmp_path)
    figures.record("stall resistance", reviews=report["reviews"], healthz_max_s=report["healthz_max_s"],
                   hostile=report["hostile"], memory_during_mib=report["memory_during_mib"],
                   memory_end_mib=report["memory_end_mib"])
    assert stall.verdict(report, max_p99_ms=100.0) == [], report
    assert report["reviews"]["requests"] == 3000
    hostile = report["hostile"]
    # The attack really ran: every connection was opened, and the server dropped them at their deadlines.
    assert hostile["opened"] >= 500 and hostile["dropped"] >= 500, hostile
    assert report["healthz_probes"] >= 50
