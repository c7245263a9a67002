"""A local 3-primary Redis Cluster for the session, from three private ``redis-server``
processes (:class:`tests.support.redis_server.RedisServer` with cluster flags) joined by
``redis-cli --cluster create``; stopped at the end."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from common.redis_config import redis_client
from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_until

NODES = 3


@dataclass(frozen=True)
class LocalCluster:
    """The nodes of a running cluster; ``url`` names the first one (the services find the
    others from it)."""

    nodes: tuple[RedisServer, ...]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"


def _cluster_ok(node: RedisServer) -> bool:
    client = redis.Redis.from_url(node.url, socket_timeout=2)
    try:
        info = client.execute_command("CLUSTER", "INFO")
    finally:
        client.close()
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed (it ships with redis-server)")
    root = Path(tmp_path_factory.mktemp("redis-cluster"))
    nodes: list[RedisServer] = []
    try:
        for index in range(NODES):
            workdir = root / f"node-{index}"
            node = RedisServer(
                workdir,
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(workdir / "nodes.conf"),
                "--cluster-node-timeout", "2000",
                # The bus port defaults to port + 10000, which may be taken or out of range.
                "--cluster-port", str(free_port()),
            )  # fmt: skip
            node.start()
            nodes.append(node)
        addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        wait_until(
            lambda: all(_cluster_ok(node) for node in nodes), 20, interval=0.1,
            what="cluster_state:ok on every node",
        )  # fmt: skip
        yield LocalCluster(tuple(nodes))
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster) -> Iterator[redis.Redis]:
    """A cluster client (responses not decoded) on an emptied cluster."""
    client = redis_client(redis_cluster.url, cluster=True)
    client.flushall()  # every primary (redis-py's cluster routing for FLUSHALL)
    try:
        yield client
    finally:
        client.close()
