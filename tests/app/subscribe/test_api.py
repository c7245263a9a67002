"""The Python iterator: start positions, filters, shard discovery, bad input, poison entries."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from common.deltas import DeltaType
from common.wire import FIELD, WireDecodeError
from informer_bus.discovery import discover_shard_count
from informer_bus.subscription import (
    FROM_BEGINNING,
    SubscribedDelta,
    SubscribeError,
    UndecodableEntry,
    resource_id_of,
    subscribe,
)
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.bus import Bus
from tests.support.redis_server import RedisServer
from tests.support.subscribe_cli import (
    SHARDS,
    Deadline,
    Publisher,
    Row,
    add_raw_entry,
    as_rows,
    id_order,
    wait_for_a_later_millisecond,
)


def rows(deltas: list[SubscribedDelta]) -> list[Row]:
    return [(d.shard, d.entry_id, d.type.value, d.key, d.resource_version) for d in deltas]


def read_all(client: redis.Redis, **options: Any) -> list[SubscribedDelta]:
    """Everything the subscription yields within half a second (Redis is local)."""
    options.setdefault("start", FROM_BEGINNING)
    with subscribe(client, "pods", stop=Deadline(0.5), block_ms=100, **options) as deltas:
        return list(deltas)


def test_from_now_yields_only_what_is_published_afterwards(
    redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(*(added(f"ns/before-{i}", str(10 + i)) for i in range(4)))
    with subscribe(redis_client, "pods", stop=Deadline(1.5), block_ms=100) as deltas:
        publisher.publish(*(added(f"ns/after-{i}", str(20 + i)) for i in range(4)))
        publisher.publish(updated("ns/before-0", "30"))
        seen = list(deltas)
    assert sorted((d.key, d.resource_version) for d in seen) == [
        *((f"ns/after-{i}", str(20 + i)) for i in range(4)),
        ("ns/before-0", "30"),
    ]


def test_from_beginning_yields_every_entry_and_per_key_order(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(20)))
    publisher.publish(*(updated(f"ns/p{i}", str(100 + i)) for i in range(20)))
    publisher.publish(*(deleted(f"ns/p{i}", str(200 + i)) for i in range(0, 20, 3)))
    seen = read_all(redis_client)
    assert sorted(rows(seen)) == sorted(as_rows(bus.all_entries()))
    for i in range(0, 20, 3):
        assert [d.type for d in seen if d.key == f"ns/p{i}"] == [
            DeltaType.ADDED, DeltaType.UPDATED, DeltaType.DELETED,
        ]  # fmt: skip


def test_from_id_starts_after_that_id_on_every_shard(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(*(added(f"ns/early-{i}", str(i + 1)) for i in range(12)))
    mark = max((e.stream_id for e in bus.all_entries()), key=id_order)
    wait_for_a_later_millisecond(redis_client, mark)
    publisher.publish(*(added(f"ns/late-{i}", str(100 + i)) for i in range(12)))

    seen = read_all(redis_client, start=mark)

    expected = [row for row in as_rows(bus.all_entries()) if id_order(row[1]) > id_order(mark)]
    assert sorted(rows(seen)) == sorted(expected)
    assert {d.key for d in seen} == {f"ns/late-{i}" for i in range(12)}


def test_type_and_namespace_filters(redis_client: redis.Redis, publisher: Publisher) -> None:
    publisher.publish(*(added(f"{ns}/p{i}", "1") for ns in ("shop", "blog") for i in range(5)))
    publisher.publish(*(updated(f"{ns}/p{i}", "2") for ns in ("shop", "blog") for i in range(5)))
    publisher.publish(deleted("shop/p0", "3"), deleted("blog/p0", "3"), added("node-1", "4"))

    shop_changes = read_all(redis_client, types=["updated", DeltaType.DELETED], namespace="shop")
    assert sorted((d.type.value, d.key) for d in shop_changes) == sorted(
        [("Updated", f"shop/p{i}") for i in range(5)] + [("Deleted", "shop/p0")]
    )
    cluster_scoped = read_all(redis_client, namespace="")
    assert [(d.key, d.namespace) for d in cluster_scoped] == [("node-1", "")]


def test_shard_discovery_override_and_resource_specs(
    redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(*(added(f"ns/p{i}", "1") for i in range(40)))
    assert discover_shard_count(redis_client, "ib", "pods") == SHARDS
    assert discover_shard_count(redis_client, "ib", "pod") == 0
    assert discover_shard_count(redis_client, "other", "pods") == 0

    only_two = read_all(redis_client, shard_count=2)
    assert only_two
    assert {d.shard for d in only_two} == {0, 1}

    apps = Publisher(redis_client, resource="deployments.apps")
    apps.publish(added("ns/web", "7"))
    assert resource_id_of("deployments.v1.apps") == "deployments.apps"
    assert resource_id_of("pods@shop?labelSelector=app%3Dweb") == "pods@shop"
    with pytest.raises(SubscribeError, match="'Not_A_Spec' is not a lowercase DNS label"):
        resource_id_of("Not_A_Spec")  # the reflector's rule: no reflector could publish it
    with subscribe(
        redis_client, "deployments.v1.apps", start=FROM_BEGINNING, stop=Deadline(1), block_ms=100
    ) as deltas:
        assert [(d.key, d.stream) for d in deltas] == [
            ("ns/web", apps.shards.shards[apps.shards.shard_of("ns/web")].stream)
        ]


def test_an_undecodable_entry_is_reported_and_skipped(
    redis_client: redis.Redis, publisher: Publisher, bus: Bus
) -> None:
    publisher.publish(added("ns/a", "1"))
    stream = bus.shards[0].stream
    garbage_id = add_raw_entry(redis_client, stream, FIELD, b"not an envelope")
    wrong_field_id = add_raw_entry(redis_client, stream, b"x", b"{}")
    publisher.publish(added("ns/b", "2"), updated("ns/a", "3"))
    reported: list[UndecodableEntry] = []

    seen = read_all(redis_client, on_undecodable=reported.append)

    assert sorted((d.key, d.resource_version) for d in seen) == [
        ("ns/a", "1"), ("ns/a", "3"), ("ns/b", "2"),
    ]  # fmt: skip
    assert [(r.stream, r.shard, r.entry_id) for r in reported] == [
        (stream, 0, garbage_id), (stream, 0, wrong_field_id),
    ]  # fmt: skip
    assert all(isinstance(r.error, WireDecodeError) for r in reported)


def test_mistakes_raise_subscribe_error(
    redis_server: RedisServer, redis_client: redis.Redis, publisher: Publisher
) -> None:
    publisher.publish(added("ns/a", "1"))
    with pytest.raises(SubscribeError, match=r"looked for ib:\{widgets:\*\}:deltas"):
        subscribe(redis_client, "widgets").open()  # the one mistake that takes Redis to see
    with pytest.raises(SubscribeError, match="invalid stream entry ID 'yesterday'"):
        subscribe(redis_client, "pods", start="yesterday")
    with pytest.raises(SubscribeError, match="Added, Updated, Deleted, Replaced, Sync"):
        subscribe(redis_client, "pods", types=["Modified"])
    decoding = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        with pytest.raises(SubscribeError, match="decode_responses=False"):
            subscribe(decoding, "pods")
    finally:
        decoding.close()
    short_timeout = redis.Redis.from_url(redis_server.url, socket_timeout=1)
    try:
        with pytest.raises(SubscribeError, match="socket_timeout"):
            subscribe(short_timeout, "pods", block_ms=900)
        with subscribe(short_timeout, "pods", start=FROM_BEGINNING, stop=Deadline(0.5)) as deltas:
            assert [d.key for d in deltas] == ["ns/a"]  # the default block fits the timeout
    finally:
        short_timeout.close()
