from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.processor.shard.support import Shard
from tests.support.redis_server import RedisServer


@pytest.fixture
def shard(redis_client: redis.Redis, redis_server: RedisServer) -> Iterator[Shard]:
    """Shard 0 of ``pods`` on a flushed Redis, its lease held by the test's member."""
    shard = Shard(redis_client, redis_server.url)
    try:
        yield shard
    finally:
        shard.close()
