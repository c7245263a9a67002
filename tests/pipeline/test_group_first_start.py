"""A processor group started for the first time on a pipeline that has been churning starts
from the known state, like a new client-go informer (issue 33, "Deliver" 0).

Everything real: the simulator over HTTP, a private redis-server, a reflector process (retention
off: the streams keep the whole history, deletions included) and the new group's processors as
child processes recording every handler call. After churn with deletions, a group nobody ran
before starts: its handlers, taken together (``tests/support/held_objects.py``), must get the
initial list (``on_add(obj, True)`` for every object there is) and then only deltas of objects
they hold -- no deletion and no update of a key they were never told about -- and end holding
exactly the simulator's objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from apiserver_sim import Simulator
from tests.support.group_pipeline import GroupPipeline
from tests.support.held_objects import replay
from tests.support.redis_server import RedisServer

PODS = 1000
CHURN_SECONDS, CHURN_RATE = 20.0, 100.0
"""Before the group starts: about 400 creations and 400 deletions, all on the streams."""
GROUP = "late"

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def pipeline(
    redis_client: redis.Redis, redis_server: RedisServer, sim: Simulator, tmp_path: Path
) -> Iterator[GroupPipeline]:
    pipeline = GroupPipeline(redis_client, redis_server.url, sim, tmp_path)
    try:
        yield pipeline
    finally:
        pipeline.close()


def test_a_group_started_after_churn_gets_the_known_state_then_only_deltas_of_what_it_holds(
    sim: Simulator, pipeline: GroupPipeline
) -> None:
    sim.populate("pods", PODS, seed=33)
    pipeline.start_reflector()
    before = sim.churn(rate=CHURN_RATE, seconds=CHURN_SECONDS, seed=33)
    assert before.deletes > 100 and before.creates > 100, before
    pipeline.wait_settled([])  # everything published: the history the group starts on
    known = sim.ground_truth("pods")

    members = [pipeline.start_member(GROUP, "late-1"), pipeline.start_member(GROUP, "late-2")]
    pipeline.wait_settled([GROUP])
    after = sim.churn(rate=CHURN_RATE, seconds=3.0, seed=34)  # deltas after the initial list
    assert after.events > 100, after
    pipeline.wait_settled([GROUP])

    calls = pipeline.calls(GROUP)
    initial = {c.key for c in calls if c.kind == "add" and c.initial}
    assert known.keys() <= initial, f"{len(known.keys() - initial)} objects not in an initial list"
    told = replay(calls, sim.ground_truth("pods"))
    assert told.counts() == {}, told.report(
        f"group {GROUP!r}, started after {before.deletes} deletions "
        f"({len(calls)} calls, {len(initial)} keys in initial lists)"
    )
    assert all(p.running() for p in members)
    assert [p.log_path.name for p in members if "Traceback" in p.log()] == []
