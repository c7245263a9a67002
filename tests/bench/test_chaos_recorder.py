"""The chaos recorder records a call made while Redis is away at once, and claims no more than
it knows: no lease read, the process's own lease as last seen, and since when reads failed. A
read Redis answered only after the recorder's timeout is no more the call's than a failed one."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis

from bench.chaos.recorder import OutageRecorder
from common.redis_layout import ShardKeys
from common.settings import RedisConnection
from common.sharding import shard_for
from tests.support.processor_ha import Call, ownership_problems, read_calls
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.redis_server import RedisServer

SHARDS = 4


POD = {"metadata": {"name": "a", "namespace": "default", "resourceVersion": "7"}}
LEASE = ShardKeys("ib", "pods", shard_for("default/a", SHARDS)).for_group().lease


def p1_recorder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_connection: RedisConnection
) -> tuple[OutageRecorder, Path]:
    """p1's recorder, as the processor builds it, and the file it records in."""
    record = tmp_path / "p1.jsonl"
    monkeypatch.setenv("IB_RECORD_FILE", str(record))
    monkeypatch.setenv("IB_MEMBER", "p1")
    settings = SimpleNamespace(
        member_id="p1",
        prefix="ib",
        group="processors",
        shard_count=SHARDS,
        redis=redis_connection,
    )
    return OutageRecorder(SimpleNamespace(settings=settings, resource="pods")), record


def test_a_call_while_redis_is_down_is_recorded_at_once_with_the_last_own_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    recorder, record = p1_recorder(tmp_path, monkeypatch, RedisConnection(url=server.url))
    pod, lease = POD, LEASE
    try:
        client = redis.Redis.from_url(server.url)
        client.hset(lease, mapping={"holder": f"p1/{os.getpid()}/x", "epoch": "3"})
        client.close()
        recorder.on_add(pod, True)
        server.stop()
        recorder.on_update(pod, {**pod, "metadata": {**pod["metadata"], "resourceVersion": "8"}})
        recorder.on_delete(pod)
    finally:
        recorder.stop()
        server.stop()

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["kind"], r["epoch"], r["mine"], r["lease_read"]) for r in lines] == [
        ("add", 3, True, True),
        ("update", 3, True, False),
        ("delete", 3, True, False),
    ]
    assert lines[1]["end"] - lines[1]["t"] < 1.0, "no waiting for Redis"
    assert lines[1]["unread_since"] == lines[1]["t"] == lines[2]["unread_since"]
    calls = read_calls(tmp_path)
    assert ownership_problems(calls, {}, renew_deadline=1.5) == []
    late = Call(**{**lines[2], "t": lines[2]["t"] + 2.5}, seq=3)
    assert len(ownership_problems([*calls, late], {}, renew_deadline=1.5)) == 1


def test_a_lease_read_answered_after_the_timeout_is_recorded_as_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI failure: through a primary's kill -9, redis-py's cluster client retried p1's lease
    read for 2.6 s and it came back naming nobody (or the next owner), stamped at the call's
    start, so the call fell outside every ownership period. Here the lease's node is frozen
    for 1.5 s (the cluster client retries through it) after the lease passed to p2."""
    with LocalRedisCluster(tmp_path / "cluster", primaries=3) as cluster:
        recorder, record = p1_recorder(
            tmp_path, monkeypatch, RedisConnection(url=cluster.url, cluster=True)
        )
        client = redis.RedisCluster.from_url(cluster.url)
        node = cluster.primary_for(LEASE)
        assert node.process is not None
        try:
            client.hset(LEASE, mapping={"holder": f"p1/{os.getpid()}/x", "epoch": "3"})
            recorder.on_add(POD, True)
            client.hset(LEASE, mapping={"holder": "p2/1/y", "epoch": "4"})
            os.kill(node.process.pid, signal.SIGSTOP)
            thaw = threading.Timer(1.5, os.kill, (node.process.pid, signal.SIGCONT))
            thaw.start()
            recorder.on_update(
                POD, {**POD, "metadata": {**POD["metadata"], "resourceVersion": "8"}}
            )
            thaw.join()
            recorder.on_delete(POD)
        finally:
            os.kill(node.process.pid, signal.SIGCONT)
            recorder.stop()
            client.close()

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert lines[1]["end"] - lines[1]["t"] > 1.0, "the cluster client waited for the node"
    assert [(r["kind"], r["epoch"], r["mine"], r["lease_read"]) for r in lines] == [
        ("add", 3, True, True),
        ("update", 3, True, False),
        ("delete", 4, False, True),
    ]
    assert lines[1]["unread_since"] == lines[1]["t"]
    assert lines[2]["unread_since"] is None
