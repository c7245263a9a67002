"""The whole pipeline on a 3-primary Redis Cluster (issue 7, point 2): the shards spread over
the nodes, and a reflector and processors started with ``--redis-cluster`` keep the same
promises as on one Redis (the checks of ``tests/processor/ha``), ``status`` and
``subscribe`` included."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from apiserver_sim import Simulator
from common.redis_config import redis_client
from common.redis_layout import ResourceKeys, ShardKeys
from tests.support.bus import Bus, ProcessorProcess, ReflectorProcess, closing_with_logs
from tests.support.cli import one_line_error, run_command
from tests.support.processor_ha import (
    deletion_problems,
    handler_order_problems,
    ownership_problems,
    processor_settings,
    stream_problems,
    wait_balanced,
    wait_converged,
)
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 16
CLI = (sys.executable, "-m", "informer_bus.cli")


def _node_of(client: redis.Redis, key: str) -> str:
    node: str = client.get_node_from_key(key).name  # type: ignore[attr-defined]
    return node


def test_every_primary_serves_shards_and_each_shard_is_one_slot(
    cluster_client: redis.Redis,
) -> None:
    primaries = {node.name for node in cluster_client.get_primaries()}  # type: ignore[attr-defined]
    assert len(primaries) == 3
    served: dict[str, list[int]] = {}
    for shard in range(SHARDS):
        keys = ShardKeys("ib", "pods", shard)
        slots = {cluster_client.keyslot(name) for name in keys.all_keys()}  # type: ignore[attr-defined]
        assert len(slots) == 1, f"shard {shard}'s keys span slots {slots}"
        served.setdefault(_node_of(cluster_client, keys.stream), []).append(shard)
    assert served.keys() == primaries, served
    resource = ResourceKeys("ib", "pods")
    assert len({cluster_client.keyslot(name) for name in resource.all_keys()}) == 1  # type: ignore[attr-defined]


@pytest.fixture
def bus(cluster_client: redis.Redis) -> Bus:
    return Bus(cluster_client, "pods", shard_count=SHARDS)


@pytest.fixture
def services(
    redis_cluster: LocalRedisCluster, sim: Simulator, tmp_path: Path
) -> Iterator[Callable[..., ProcessorProcess | ReflectorProcess]]:
    """``services("reflector")`` or ``services("p1")``: a reflector or a recording processor
    as a child process with ``--redis-cluster``; all killed at the end, logs printed."""
    started: list[ProcessorProcess | ReflectorProcess] = []

    def start(name: str) -> ProcessorProcess | ReflectorProcess:
        process: ProcessorProcess | ReflectorProcess
        if name == "reflector":
            args = [
                "--resource", "pods", "--redis-url", redis_cluster.url, "--redis-cluster",
                "--kube-url", sim.url, "--http-host", "127.0.0.1", "--http-port", "0",
                "--shard-count", str(SHARDS), "--lease-duration", "2", "--renew-deadline",
                "1.5", "--retry-period", "0.2", "--checkpoint-interval", "0.2",
                "--identity", "reflector",
            ]  # fmt: skip
            process = ReflectorProcess(args, tmp_path / "reflector.log")
        else:
            settings = processor_settings(redis_cluster.url, name, shard_count=SHARDS)
            args = ["--redis-cluster"]
            for field, value in settings.items():
                args += ["--" + field.replace("_", "-"), value]
            env = {"IB_RECORD_FILE": str(tmp_path / f"{name}.jsonl"), "IB_MEMBER": name}
            process = ProcessorProcess(args, tmp_path / f"{name}.log", env=env)
        started.append(process)
        return process.start()

    with closing_with_logs(started):
        yield start


def test_pipeline_on_a_cluster_under_churn_with_a_kill(
    redis_cluster: LocalRedisCluster,
    sim: Simulator,
    bus: Bus,
    services: Callable[..., ProcessorProcess | ReflectorProcess],
    tmp_path: Path,
) -> None:
    sim.populate("pods", 300, seed=21)
    reflector = services("reflector")
    wait_until(bus.synced, 30, what="the reflector to sync on the cluster")
    p1, p2 = services("p1"), services("p2")
    assert isinstance(p1, ProcessorProcess) and isinstance(p2, ProcessorProcess)
    wait_balanced(bus, [p1, p2])

    churn = sim.start_churn(rate=300, seconds=5, seed=21)
    try:
        time.sleep(1.5)
        p1.kill()  # its shards, on every node, are taken over by p2 and p3
        killed_at = time.time()
        p3 = services("p3")
        assert isinstance(p3, ProcessorProcess)
    finally:
        stats = churn.wait(30)
    assert churn.error is None
    assert stats is not None and stats.deletes > 50

    calls = wait_converged(bus, sim, [p2, p3], tmp_path)
    entries = bus.all_entries()
    assert {e.shard for e in entries} == set(range(SHARDS))
    assert ownership_problems(calls, {"p1": killed_at}) == []
    assert handler_order_problems(calls) == []
    assert stream_problems(calls, entries) == []
    gone = {e.key for e in entries} - sim.ground_truth("pods").keys()
    assert gone == {e.key for e in entries if e.is_deletion}
    assert deletion_problems(calls, entries) == []
    logs = [process.log() for process in (reflector, p2, p3)]
    # Every node was reached directly: no redirection, no cluster error, nothing crashed.
    for word in ("Traceback", "MOVED", "RedisClusterException"):
        assert not any(word in log for log in logs), word

    # status and subscribe find every shard on every node.
    result = run_command(
        CLI, "status", "--redis-url", redis_cluster.url, "--redis-cluster", "--output", "json"
    )
    assert result.returncode == 0, result.stderr
    (pods,) = json.loads(result.stdout)["resources"]
    assert pods["resource"] == "pods" and pods["synced"] is True
    assert [shard["shard"] for shard in pods["shards"]] == list(range(SHARDS))
    assert sum(shard["stream_length"] for shard in pods["shards"]) == len(entries)
    [group] = pods["groups"]
    assert (group["name"], group["synced"], group["owned_shards"]) == ("processors", True, SHARDS)
    live = {p["member"].split("/")[0] for p in group["processors"] if p["live"]}
    assert live == {"p2", "p3"}
    assert {shard["owner"].split("/")[0] for shard in group["shards"]} == {"p2", "p3"}
    result = run_command(
        CLI, "subscribe", "pods", "--redis-url", redis_cluster.url, "--redis-cluster",
        "--from-beginning", "--count", str(len(entries)),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((line["key"], line["id"]) for line in lines) == sorted(
        (e.key, e.stream_id) for e in entries
    )


def test_cluster_flag_against_a_standalone_redis_is_one_line(redis_server: RedisServer) -> None:
    result = run_command(
        (sys.executable, "-m", "processor_svc"), "--resource", "pods", "--redis-url",
        redis_server.url, "--redis-cluster", "--handler",
        "informer_bus.examples.pod_phase_counter:PodPhaseCounter",
    )  # fmt: skip
    line = one_line_error(result, "informer-bus processor")
    assert "cannot use the Redis Cluster" in line
    assert "Cluster mode is not enabled on this node" in line


def test_closing_a_cluster_client_closes_every_node_socket(
    redis_cluster: LocalRedisCluster,
) -> None:
    client = redis_client(redis_cluster.url, cluster=True)
    client.flushall()  # a connection to every primary
    cluster: Any = client
    pools = [node.redis_connection.connection_pool for node in cluster.get_primaries()]
    connections = [c for pool in pools for c in pool._available_connections]
    assert len(connections) == len(redis_cluster.nodes)
    assert all(c._sock is not None for c in connections)

    client.close()

    # Left open, these sockets would surface later as a ResourceWarning in whatever code
    # happens to trigger a garbage collection.
    assert all(c._sock is None for c in connections)
