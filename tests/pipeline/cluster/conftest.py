"""A local 3-primary Redis Cluster for the session (:class:`tests.support.redis_cluster.
LocalRedisCluster`, no replicas); stopped at the end. Without ``redis-cli`` (it ships with
redis-server) the fixture fails with one line: a skip would hide a missing dependency."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from common.redis_config import redis_client
from tests.support.redis_cluster import LocalRedisCluster, RedisCliMissingError


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    cluster = LocalRedisCluster(Path(tmp_path_factory.mktemp("redis-cluster")), primaries=3)
    try:
        cluster.start()
    except RedisCliMissingError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_client(redis_cluster: LocalRedisCluster) -> Iterator[redis.Redis]:
    """A cluster client (responses not decoded) on an emptied cluster."""
    client = redis_client(redis_cluster.url, cluster=True)
    client.flushall()  # every primary (redis-py's cluster routing for FLUSHALL)
    try:
        yield client
    finally:
        client.close()
