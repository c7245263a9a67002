"""A reflector service in-process against the simulator and a private redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from apiserver_sim import Simulator
from tests.support.redis_server import RedisServer
from tests.support.reflector_services import (
    Reflectors,
)


@pytest.fixture
def reflectors(
    redis_server: RedisServer, redis_client: redis.Redis, sim: Simulator
) -> Iterator[Reflectors]:
    """Reflectors on a flushed Redis (``redis_client`` flushes it)."""
    running = Reflectors(redis_server.url, sim)
    try:
        yield running
    finally:
        running.stop_all()
