"""Durable subscribers (``group=``): acknowledgement, resume, the initial list, refusals."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from common.deltas import DeltaType
from common.lease import RedisLease
from common.redis_layout import ResourceKeys, ShardKeys
from common.wire import FIELD
from informer_bus.durable_subscription import initial_list_key
from informer_bus.subscribe import (
    FROM_BEGINNING,
    SubscribedDelta,
    SubscribeError,
    UndecodableEntry,
    subscribe,
)
from processor_svc.membership import Membership
from reflector_svc.retention import trim_shard
from tests.app.subscribe.conftest import SHARDS, Deadline, Pipeline, Publisher, add_raw_entry
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.bus import Bus
from tests.support.waiting import wait_until

GROUP = "audit"


class Crash(Exception):
    """What a caller's handler raises in the tests: the process died while handling a delta."""


def durable(client: redis.Redis, seconds: float = 1.0, **options: Any) -> Any:
    options.setdefault("group", GROUP)
    options.setdefault("shard_count", SHARDS)
    return subscribe(client, "pods", stop=Deadline(seconds), block_ms=100, **options)


def take(deltas: Any, count: int) -> list[SubscribedDelta]:
    return [next(deltas) for _ in range(count)]


def pending(client: redis.Redis, group: str = GROUP) -> int:
    """Entries delivered to the group and not acknowledged, over every shard."""
    return sum(
        int(client.xpending(ShardKeys("ib", "pods", shard).stream, group)["pending"])
        for shard in range(SHARDS)
    )


def markers(client: redis.Redis, group: str = GROUP) -> int:
    """Shards whose initial list the group has not acknowledged yet."""
    return sum(
        int(client.exists(initial_list_key(ShardKeys("ib", "pods", shard).for_group(group))))
        for shard in range(SHARDS)
    )


def versions(deltas: list[SubscribedDelta]) -> list[tuple[str, str]]:
    return [(d.key, d.resource_version) for d in deltas]


def test_a_new_group_gets_the_known_state_then_resumes_after_what_was_acknowledged(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(6)))
    publisher.publish(updated("ns/p0", "2"), deleted("ns/p5", "3"))
    ends, known = bus.positions(), bus.known_versions()
    with durable(redis_client) as deltas:
        initial = take(deltas, 5)
        publisher.publish(*(updated(f"ns/p{i}", str(10 + i)) for i in range(5)))
        publisher.publish(*(updated(f"ns/p{i}", str(20 + i)) for i in range(5)))
        live = take(deltas, 4)
        with pytest.raises(Crash), deltas:
            fifth = next(deltas)
            raise Crash  # while the fifth live delta is being handled
    assert all(d.initial and d.type.value == "Added" for d in initial)
    assert sorted(versions(initial)) == sorted(known.items())
    # the known state is as of the stream's end when the group was created (its entry_id)
    assert {(d.shard, d.entry_id) for d in initial} <= set(ends.items())
    assert not any(d.initial for d in [*live, fifth])
    assert markers(redis_client) == 0
    assert pending(redis_client) == 10 - 4  # the fifth and all that was read behind it

    with durable(redis_client) as deltas:
        again = list(deltas)
    assert pending(redis_client) == 0
    # exactly what was not acknowledged, the fifth first (one shard's order is stream order)
    assert sorted(versions(again)) == sorted(
        {(f"ns/p{i}", str(n + i)) for n in (10, 20) for i in range(5)} - set(versions(live))
    )
    assert next(d for d in again if d.shard == fifth.shard).entry_id == fifth.entry_id
    for key in {d.key for d in again}:
        rvs = [int(d.resource_version) for d in again if d.key == key]
        assert rvs == sorted(rvs)

    publisher.publish(deleted("ns/p1", "40"))
    with durable(redis_client) as deltas:
        assert versions(list(deltas)) == [("ns/p1", "40")]  # closed normally: all acknowledged


def test_a_group_created_after_retention_trimmed_the_stream_starts_with_the_known_state(
    pipeline: Pipeline,
) -> None:
    keys = sorted(pipeline.sim.ground_truth("pods"))
    for key in keys[:4]:
        pipeline.sim.update("pods", key, {"metadata": {"labels": {"touched": "yes"}}})
    for key in keys[4:7]:
        pipeline.sim.delete("pods", key)
    wait_until(pipeline.caught_up, 20, what="the updates and deletions on the bus")
    client = pipeline.bus.client
    for shard in pipeline.bus.shards:  # what the hard cap does to a stream nobody held
        trim_shard(client, shard, min_entries=0, hard_max_entries=0)
    assert pipeline.bus.all_entries() == []
    truth = pipeline.sim.ground_truth("pods")

    with durable(client, seconds=15) as deltas:
        initial = take(deltas, len(truth))
        changed = pipeline.sim.update("pods", keys[0], {"metadata": {"labels": {"v": "2"}}})
        pipeline.sim.delete("pods", keys[1])
        after = take(deltas, 2)

    assert len(truth) == 30 - 3
    assert sorted(versions(initial)) == sorted((key, str(rv)) for key, rv in truth.items())
    assert all(d.initial and d.type is DeltaType.ADDED and d.obj is not None for d in initial)
    # two keys, maybe two shards: no order between them
    assert sorted((d.key, d.type, d.initial) for d in after) == [
        (keys[0], DeltaType.UPDATED, False), (keys[1], DeltaType.DELETED, False),
    ]  # fmt: skip
    assert {d.key: d.resource_version for d in after}[keys[0]] == str(changed.rv)
    assert [d.as_json_dict()["initial"] for d in (initial[0], after[0])] == [True, False]


def test_a_crash_during_the_initial_list_delivers_it_again(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(20)))
    with pytest.raises(Crash), durable(redis_client) as deltas:
        take(deltas, 7)
        raise Crash
    assert markers(redis_client) >= 1  # the shards whose list was cut short
    publisher.publish(updated("ns/p3", "5"))  # after the first snapshot, before the second

    with durable(redis_client) as deltas:
        redone = list(deltas)
        assert markers(redis_client) == 0  # asking past the list acknowledged it
    redone_shards = {d.shard for d in redone}
    assert all(d.initial for d in redone)
    expected = {
        (key, rv)
        for key, rv in bus.known_versions().items()
        if ShardKeys.for_key("ib", "pods", key, SHARDS).shard in redone_shards
    }
    assert set(versions(redone)) == expected  # whole lists, as of the new snapshot
    if ShardKeys.for_key("ib", "pods", "ns/p3", SHARDS).shard in redone_shards:
        assert ("ns/p3", "5") in versions(redone)
    assert pending(redis_client) == 0

    publisher.publish(updated("ns/p4", "6"))
    with durable(redis_client) as deltas:
        assert [(d.key, d.initial) for d in deltas] == [("ns/p4", False)]


def test_filtered_out_and_undecodable_entries_are_acknowledged(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(added("shop/a", "1"))
    with durable(redis_client, namespace="shop") as deltas:
        assert versions(list(deltas)) == [("shop/a", "1")]
    publisher.publish(*(added(f"{ns}/p{i}", "2") for ns in ("shop", "blog") for i in range(6)))
    garbage = add_raw_entry(redis_client, bus.shards[2].stream, FIELD, b"not an envelope")
    publisher.publish(updated("shop/a", "3"))
    reported: list[UndecodableEntry] = []

    with durable(redis_client, namespace="shop", on_undecodable=reported.append) as deltas:
        seen = list(deltas)

    assert sorted(versions(seen)) == sorted(
        [("shop/a", "3")] + [(f"shop/p{i}", "2") for i in range(6)]
    )
    assert [r.entry_id for r in reported] == [garbage]
    assert pending(redis_client) == 0


def test_groups_processors_use_and_bad_arguments_are_refused(
    redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(added("ns/a", "1"))
    member = Membership(redis_client, prefix="ib", resource="pods", member_id="m-1", ttl=30,
                        group="billing")  # fmt: skip
    member.heartbeat()
    with pytest.raises(SubscribeError, match="group 'billing' has 1 live processor member"):
        durable(redis_client, group="billing")
    keys = ShardKeys("ib", "pods", 2).for_group("payroll")
    lease = RedisLease(redis_client, key=keys.lease, epoch_key=keys.lease_epoch, holder="m-2")
    assert lease.try_acquire_or_renew().held
    with pytest.raises(SubscribeError, match=r"holds processor shard leases \(ib:\{pods:2\}"):
        durable(redis_client, group="payroll")
    with pytest.raises(SubscribeError, match="processors' default group"):
        durable(redis_client, group="processors")
    with pytest.raises(SubscribeError, match="group name 'a:b' is invalid"):
        durable(redis_client, group="a:b")
    with pytest.raises(SubscribeError, match="a start position and group 'audit' exclude"):
        durable(redis_client, start=FROM_BEGINNING)
    # a member whose deadline passed is no one: its group is free
    redis_client.zadd(ResourceKeys("ib", "pods").group("gone").members, {"m-3": 1})
    with durable(redis_client, group="gone") as deltas:
        assert [d.key for d in deltas] == ["ns/a"]
    assert not redis_client.exists(ShardKeys("ib", "pods", 0).for_group("billing").lease)
    for stream in (ShardKeys("ib", "pods", s).stream for s in range(SHARDS)):
        assert {g["name"] for g in redis_client.xinfo_groups(stream)} == {b"gone"}
