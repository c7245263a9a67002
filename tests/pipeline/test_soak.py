"""The short soak ``make test`` runs: 18 s at 500 events/s, ``p2`` stopped twice (SIGTERM at
7 s, kill -9 at 14 s). ``make soak-short`` runs issue 7's 60 s at 2k events/s and ``make soak``
30 minutes (docs/reliability.md, "Soak").

What it holds the pipeline to: nothing lost (the processors' real caches equal the ground
truth, the deletion of every object the handlers were told of reached ``on_delete``), no delta
published twice, lag and stream lengths
within their bounds and the lag back to 0 after the churn, clean graceful stops. Memory is
sampled and computed but not judged here: 18 s leave no room for a warm-up and two windows
that mean anything (the long runs judge it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.report import table
from bench.soak.results import SoakConfig
from bench.soak.run import run

SHORT = SoakConfig(
    seconds=18.0, rate=500.0, restart_every=7.0, pods=1000, warmup_seconds=5.0, window_seconds=3.0
)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_short_soak_loses_nothing_and_stays_within_its_bounds(tmp_path: Path) -> None:
    result = run(SHORT, tmp_path)
    print(table(result))  # shown when the test fails
    assert result.problems == []
    assert result.lost == 0
    assert [line.split(": ")[1].split(" p2")[0] for line in result.restarts] == [
        "SIGTERM",
        "kill -9",
    ]
    # The churn ran at the asked rate, deletions included, and every deletion owed to the
    # handlers reached them (the checks behind result.problems name any that did not).
    assert result.churn["events"] >= SHORT.rate * SHORT.seconds * 0.95
    assert result.churn["deletes"] > 0
    assert result.churn["deletes"] * 0.9 <= result.deletions_owed <= result.deletions_delivered
    assert result.drain_seconds is not None
    assert result.converge_seconds is not None
    # Every process was sampled, a restarted p2 as a series of its own.
    labels = {label for sample in result.samples for label in sample.rss_kb}
    assert {"apiserver-sim", "redis-server", "reflector", "p1", "p2#1", "p2#2", "p2#3"} <= labels
    assert {g.label for g in result.growth if g.judged} == {"reflector", "p1"}
