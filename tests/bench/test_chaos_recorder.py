"""The chaos recorder records a call made while Redis is away at once, and claims no more than
it knows: no lease read, the process's own lease as last seen, and since when reads failed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis

from bench.chaos.recorder import OutageRecorder
from common.redis_layout import ShardKeys
from common.settings import RedisConnection
from common.sharding import shard_for
from tests.processor.ha.conftest import Call, ownership_problems, read_calls
from tests.support.redis_server import RedisServer

SHARDS = 4


def test_a_call_while_redis_is_down_is_recorded_at_once_with_the_last_own_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    record = tmp_path / "p1.jsonl"
    monkeypatch.setenv("IB_RECORD_FILE", str(record))
    monkeypatch.setenv("IB_MEMBER", "p1")
    settings = SimpleNamespace(
        member_id="p1",
        prefix="ib",
        group="processors",
        shard_count=SHARDS,
        redis=RedisConnection(url=server.url),
    )
    recorder = OutageRecorder(SimpleNamespace(settings=settings, resource="pods"))
    pod = {"metadata": {"name": "a", "namespace": "default", "resourceVersion": "7"}}
    lease = ShardKeys("ib", "pods", shard_for("default/a", SHARDS)).for_group().lease
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
