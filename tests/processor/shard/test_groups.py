"""Two groups on one shard: each its own lease, position, dead letters and metrics, so one
group's poison, view or stop never changes what the other is delivered."""

from __future__ import annotations

from typing import Any

import redis

from common.redis_layout import GroupShardKeys, ShardKeys
from processor_svc.view import GroupView
from tests.processor.shard.support import RESOURCE, Shard
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.recording_handler import Recorder
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

AUDIT = GroupShardKeys(ShardKeys("ib", RESOURCE, 0), "audit")


def dead_ids(client: redis.Redis, keys: GroupShardKeys) -> list[str]:
    entries: Any = client.xrange(keys.dead_letters)
    return [fields[b"id"].decode() for _, fields in entries]


def handled(client: redis.Redis, keys: GroupShardKeys) -> bool:
    """The group was handed the stream's last entry and acknowledged everything."""
    info = client.xinfo_stream(keys.stream)
    group = next(g for g in client.xinfo_groups(keys.stream) if g["name"] == keys.group.encode())
    pending = int(client.xpending(keys.stream, keys.group)["pending"])
    return group["last-delivered-id"] == info["last-generated-id"] and pending == 0


def test_each_group_gets_every_delta_parks_poison_apart_and_counts_under_its_label(
    shard: Shard, redis_server: RedisServer
) -> None:
    audit = Shard(shard.client, redis_server.url, keys=AUDIT)
    default_recorder, audit_recorder = Recorder(), Recorder()
    try:
        shard.publish(added("ns/a", "1"))
        with (
            shard.running(("rec", default_recorder), block_ms=200) as (default_worker, _, _),
            audit.running(
                ("rec", audit_recorder), block_ms=200, view=GroupView(RESOURCE, namespace="ns")
            ) as (audit_worker, _, _),
        ):
            assert default_worker.wait_for_sync(5) and audit_worker.wait_for_sync(5)
            poison = shard.xadd_raw({"d": b"{not json}"})
            shard.publish(updated("ns/a", "2"), added("other/b", "3"), deleted("ns/a", "4"))
            wait_until(lambda: handled(shard.client, shard.keys), what="the default group")
            wait_until(lambda: handled(shard.client, AUDIT), what="the audit group")
        assert default_recorder.events == [
            ("add", "ns/a", "1", True),
            ("update", "ns/a", "1", "2"),
            ("add", "other/b", "3", False),
            ("delete", "ns/a", "4", False),
        ]
        # The audit group's view keeps namespace ns only: other/b never reaches it.
        assert audit_recorder.events == [
            ("add", "ns/a", "1", True),
            ("update", "ns/a", "1", "2"),
            ("delete", "ns/a", "4", False),
        ]
        assert dead_ids(shard.client, shard.keys) == [poison]
        assert dead_ids(shard.client, AUDIT) == [poison]
        assert shard.keys.dead_letters != AUDIT.dead_letters
        for keys, member in ((shard.keys, shard), (AUDIT, audit)):
            value = member.registry.get_sample_value(
                "informer_bus_processor_dead_letters_total",
                {"resource": RESOURCE, "group": keys.group, "shard": "0"},
            )
            assert value == 1
    finally:
        audit.close()


def test_a_stopped_group_holds_back_neither_the_other_nor_its_own_backlog(
    shard: Shard, redis_server: RedisServer
) -> None:
    audit = Shard(shard.client, redis_server.url, keys=AUDIT)
    try:
        with audit.running(("rec", Recorder()), block_ms=200) as (worker, _, _):
            assert worker.wait_for_sync(5)  # the audit group exists, then stops
        recorder = Recorder()
        with shard.running(("rec", recorder), block_ms=200) as (worker, _, _):
            assert worker.wait_for_sync(5)
            shard.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(50)))
            wait_until(lambda: handled(shard.client, shard.keys), what="the default group")
        assert len(recorder.live()) == 50
        # Everything is still waiting for audit; restarted, it takes the shard over from the
        # known state (the 50 pods as its initial list) and acknowledges the backlog.
        audit_group = next(
            g for g in shard.client.xinfo_groups(AUDIT.stream) if g["name"] == b"audit"
        )
        assert audit_group["lag"] == 50
        late = Recorder()
        with audit.running(("rec", late), block_ms=200) as (worker, _, _):
            assert worker.wait_for_sync(5)
            wait_until(lambda: handled(shard.client, AUDIT), what="the audit group")
        assert sorted(key for _, key, _, _ in late.initial()) == sorted(
            f"ns/p{i}" for i in range(50)
        )
        assert late.live() == []
    finally:
        audit.close()
