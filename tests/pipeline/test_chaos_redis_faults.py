"""Short versions of the Redis fault scenarios (``make chaos`` runs the long ones).

Each kills or hangs the private Redis of a running pipeline mid-churn (see
:mod:`bench.chaos.scenarios`) and checks issue 7's promises: the final stores equal the
simulator's ground truth, every deletion reaches ``on_delete``, nothing is published twice for
an unchanged object, per-object order holds on the streams and in the handler calls; and every
component is the same process afterwards, having logged its failed Redis calls a bounded number
of times (retries with backoff, not a spin).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from bench.chaos.catalogue import REDIS_FAULTS, SHORT, Scenario
from bench.chaos.scenarios import run
from common.lease import RedisLease
from common.redis_config import lease_client
from tests.pipeline.chaos_checks import assert_recovered_with_every_promise
from tests.support.redis_server import RedisServer

SCENARIOS = [s for s in SHORT if s.fault in REDIS_FAULTS]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.fault for s in SCENARIOS])
def test_the_pipeline_survives_and_converges(scenario: Scenario, tmp_path: Path) -> None:
    result = run(scenario, tmp_path)
    assert_recovered_with_every_promise(result, scenario)
    # Every component saw the fault and retried, each failure logged once per attempt: a few
    # lines per shard and second at most, not thousands.
    assert set(result.retries_logged) == {"reflector.log", "p1.log", "p2.log"}
    for name, lines in result.retries_logged.items():
        assert 0 < lines < 40 + 10 * scenario.downtime, (name, lines)


def test_a_lease_lost_with_redis_data_comes_back_with_a_higher_epoch(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """A Redis restarted without persistence forgets leases and epoch counters. A holder that
    renews then must not get its old epoch back (it would not notice that its lease lapsed, and
    fenced writes of someone who held that epoch before would pass): the new epoch is higher
    than the one it held (the server's clock gives that too, and keeps it even after the lease
    was given up: it is at or above Redis's TIME in ms)."""
    client = lease_client(redis_server.url, timeout=1.0)
    try:
        lease = RedisLease(client, key="t{x}:lease", epoch_key="t{x}:epoch", holder="a")
        first = lease.try_acquire_or_renew().epoch
        redis_client.flushall()  # what a restart without persistence leaves
        renewed = lease.try_acquire_or_renew()
        assert renewed.held and renewed.epoch > first
        assert redis_client.get("t{x}:epoch") == str(renewed.epoch).encode()
        assert lease.release()
        redis_client.flushall()
        time.sleep(0.01)  # a millisecond at least: Redis's clock moved on
        assert lease.try_acquire_or_renew().epoch > renewed.epoch
    finally:
        client.close()
