"""The lease tests' fixture: lease clients on the session's redis-server, closed after the
test (the timings, keys and ``make_lease`` are in :mod:`tests.support.leases`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_server import RedisServer


@pytest.fixture
def clients(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[list[redis.Redis]]:
    """Lease clients on the (flushed) session server; closed after the test."""
    made: list[redis.Redis] = []
    yield made
    for client in made:
        client.close()
