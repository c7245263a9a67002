"""Write expectations across processes: the Redis store (``processor_svc.expectations``, against
a real redis-server) and a controller that saves every change and loads a shard's on takeover."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis

from common.deltas import Delta, DeltaType
from common.handlers import process_deltas
from common.redis_layout import ResourceKeys
from common.sharding import shard_for
from processor_svc.controller import Controller
from processor_svc.expectations import (
    RedisExpectationStore,
    decode_expectations,
    encode_expectations,
)
from processor_svc.handlers import ExpectationStore, HandlerContext
from processor_svc.lister import ShardedLister
from processor_svc.write_barrier import Expectation
from tests.support.controllers import make_context
from tests.support.objects import pod
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 4
KEY = "default/a"
SHARD = shard_for(KEY, SHARDS)


def store_for(client: redis.Redis, group: str = "processors") -> RedisExpectationStore:
    return RedisExpectationStore(client, prefix="ib", resource="pods", group=group)


def expectation(version: str = "7", *, deadline: float = 1e10, **fields: str) -> Expectation:
    return Expectation(
        fields.get("resource", "pods"), fields.get("object_key", KEY), version, deadline
    )


# --- the store ---------------------------------------------------------------------------------


def test_the_store_keeps_each_keys_expectations_per_shard(redis_client: redis.Redis) -> None:
    store = store_for(redis_client)
    assert store.hash_key(3) == "ib:{pods:3}:expectations"
    assert store_for(redis_client, "ops").hash_key(3) == "ib:{pods:3}:group:ops:expectations"
    assert store.hash_key(3) == ResourceKeys("ib", "pods").group().shard(3).expectations
    two = [expectation("7", resource="configmaps", object_key="default/c"), expectation("5")]
    store.save(3, "ctl default/a", two)
    store.save(3, "ctl default/b", [expectation("", deadline=123.5)])
    store.save(1, "ctl default/x", [expectation("9")])
    assert store.load(3) == {
        "ctl default/a": two,
        "ctl default/b": [expectation("", deadline=123.5)],
    }
    assert store.load(2) == {}
    store.save(3, "ctl default/a", [])  # forgotten
    assert not redis_client.hexists(store.hash_key(3), "ctl default/a")
    assert list(store.load(3)) == ["ctl default/b"]
    assert store_for(redis_client, "ops").load(3) == {}  # another group's are its own


def test_an_unreadable_value_is_skipped_with_a_warning(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_for(redis_client)
    store.save(0, "ctl good", [expectation()])
    redis_client.hset(store.hash_key(0), "ctl bad", b"{not json")
    redis_client.hset(store.hash_key(0), "ctl odd", b'[{"resource": "pods"}]')
    with caplog.at_level(logging.WARNING, logger="processor_svc.expectations"):
        assert store.load(0) == {"ctl good": [expectation()]}
    assert len(caplog.records) == 2
    assert "ctl bad" in caplog.text
    assert "ctl odd" in caplog.text


def test_values_round_trip_and_refuse_what_they_do_not_hold() -> None:
    values = [expectation("12", deadline=1700000000.25), expectation("", deadline=3)]
    assert decode_expectations(encode_expectations(values)) == values
    for bad in (b"{}", b"[1]", b'[{"resource": "p", "object_key": "k", "version": "1", '
                b'"deadline": true}]'):  # fmt: skip
        with pytest.raises(ValueError, match="expect"):
            decode_expectations(bad)


@pytest.fixture
def minimal_client(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """A client whose user may run HSET, HDEL and HGETALL on ``ib:*`` and nothing else (plus
    the connection's own HELLO and PING)."""
    user, password = f"exp-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    redis_client.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=["ib:*"],
        commands=["-@all", "+hello", "+ping", "+hset", "+hdel", "+hgetall"],
    )
    redis_client.acl_log_reset()
    client = redis.Redis.from_url(redis_server.url, username=user, password=password)
    try:
        yield client
    finally:
        client.close()
        redis_client.acl_deluser(user)


def test_the_store_needs_only_hset_hdel_and_hgetall(
    minimal_client: redis.Redis, redis_client: redis.Redis
) -> None:
    store = store_for(minimal_client)
    store.save(2, "ctl k", [expectation()])
    assert store.load(2) == {"ctl k": [expectation()]}
    store.save(2, "ctl k", [])
    assert store.load(2) == {}
    assert redis_client.acl_log() == []


# --- a controller saves every change ------------------------------------------------------------


class RecordingStore:
    """An in-memory ExpectationStore that records every save; ``fail`` makes saves raise."""

    def __init__(self) -> None:
        self.saved: dict[int, dict[str, list[Expectation]]] = {}
        self.saves: list[tuple[int, str, list[str]]] = []
        self.fail = False

    def save(self, shard: int, key: str, expectations: Sequence[Expectation]) -> None:
        if self.fail:
            raise ConnectionError("Redis is away")
        self.saves.append((shard, key, [e.version for e in expectations]))
        if expectations:
            self.saved.setdefault(shard, {})[key] = list(expectations)
        else:
            self.saved.get(shard, {}).pop(key, None)

    def load(self, shard: int) -> dict[str, list[Expectation]]:
        return dict(self.saved.get(shard, {}))


def sharded_lister(*objects: Any, shards: Sequence[int] = range(SHARDS)) -> ShardedLister:
    """A lister over ``shards`` of ``SHARDS``, synced, holding ``objects`` in their shards."""
    lister = ShardedLister(SHARDS)
    stores = {shard: lister.new_store() for shard in shards}
    for obj in objects:
        meta = obj["metadata"]
        stores[shard_for(f"{meta['namespace']}/{meta['name']}", SHARDS)].add(obj)
    for shard, store in stores.items():
        lister.attach(shard, store)
        lister.mark_synced(shard)
    return lister


class Writer(Controller):
    """Each reconcile "writes" its pod (rv + 1) and tells the barrier; records what it read."""

    workers = 1

    def __init__(self, context: HandlerContext, **options: Any) -> None:
        super().__init__(context, **options)
        self.lock = threading.Lock()
        self.read: list[str | None] = []
        self.writes = True

    def reconcile(self, key: str) -> None:
        obj = self.lister.get_by_key(key)
        version = None if obj is None else obj["metadata"]["resourceVersion"]
        with self.lock:
            self.read.append(version)
        if version is not None and self.writes:
            self.expect_version(key, str(int(version) + 1))

    def reads(self) -> list[str | None]:
        with self.lock:
            return list(self.read)


def writer(
    lister: ShardedLister, store: ExpectationStore | None, controllers: list[Controller], **kw: Any
) -> Writer:
    controller = Writer(make_context(lister, expectations=store), **kw)
    controllers.append(controller)
    return controller


def test_every_change_of_a_keys_expectations_is_saved_for_its_shard(
    controllers: list[Controller],
) -> None:
    store = RecordingStore()
    controller = writer(sharded_lister(), store, controllers, write_barrier_timeout=5.0)
    field = f"writer {KEY}"
    controller.expect_version(KEY, "7")
    controller.expect_deleted(KEY, object_key="default/old")
    assert store.saves == [(SHARD, field, ["7"]), (SHARD, field, ["7", ""])]
    (saved, _) = store.saved[SHARD][field]
    assert saved.deadline == pytest.approx(time.time() + 5.0, abs=1.0)  # wall-clock seconds
    controller.on_update(pod("a", rv="6"), pod("a", rv="7"))  # meets the write
    assert store.saves[-1] == (SHARD, field, [""])
    controller.on_delete(pod("old"))  # meets the deletion: nothing left, the field goes
    assert store.saves[-1] == (SHARD, field, [])
    assert store.saved[SHARD] == {}


def test_what_a_check_settles_is_forgotten_in_the_store(controllers: list[Controller]) -> None:
    store = RecordingStore()
    lister = sharded_lister(pod("a", rv="1"))
    controller = writer(lister, store, controllers, write_barrier_timeout=0.3)
    controller.start()
    controller.enqueue(KEY)  # reads rv 1, expects rv 2, which the cache never shows
    wait_until(lambda: controller.reads() == ["1"])
    controller.writes = False
    assert store.saved[SHARD][f"writer {KEY}"][0].version == "2"
    controller.enqueue(KEY)  # held back until the deadline
    wait_until(lambda: controller.reads() == ["1", "1"], what="the retry after the deadline")
    assert store.saved[SHARD] == {}  # expired: forgotten


def test_nothing_is_saved_for_a_key_that_does_not_tell_its_shard(
    controllers: list[Controller],
) -> None:
    store = RecordingStore()
    lister = sharded_lister()
    lister.route_keys(None)  # the primary is sharded by owner or label
    controller = writer(lister, store, controllers)
    controller.expect_version(KEY, "7")
    assert store.saves == []
    assert len(controller.barrier) == 1  # still honoured in this process


def test_a_failed_save_is_logged_and_the_barrier_still_holds_the_write(
    controllers: list[Controller], caplog: pytest.LogCaptureFixture
) -> None:
    store = RecordingStore()
    store.fail = True
    controller = writer(sharded_lister(), store, controllers)
    with caplog.at_level(logging.WARNING, logger="tests.processor_api"):
        controller.expect_version(KEY, "7")
    assert "could not save the write expectations of default/a" in caplog.text
    assert len(controller.barrier) == 1


def test_controllers_with_one_primary_keep_their_own_expectations(
    controllers: list[Controller],
) -> None:
    store = RecordingStore()
    lister = sharded_lister()
    first = writer(lister, store, controllers, name="first")
    second = writer(lister, store, controllers, name="second")
    first.expect_version(KEY, "7")
    second.expect_version(KEY, "9")
    assert sorted(store.saved[SHARD]) == [f"first {KEY}", f"second {KEY}"]
    second.barrier.forget(KEY)
    first.barrier.forget(KEY)
    second.shards_acquired([SHARD])
    assert [e.version for e in second.barrier.expectations(KEY)] == ["9"]
    with pytest.raises(ValueError, match="whitespace"):
        writer(lister, store, controllers, name="two words")


# --- a shard's next owner honours them ----------------------------------------------------------


def test_a_new_owner_does_not_reconcile_on_a_cache_older_than_the_last_owners_write(
    redis_client: redis.Redis, controllers: list[Controller]
) -> None:
    store = store_for(redis_client)
    old_owner = writer(sharded_lister(pod("a", rv="1")), store, controllers)
    old_owner.start()
    old_owner.enqueue(KEY)
    wait_until(lambda: old_owner.reads() == ["1"])  # wrote rv 2, saved in Redis; then it dies
    old_owner.stop()

    # The next owner's cache is the reflector's known state, still at rv 1.
    new_lister = ShardedLister(SHARDS)
    new_store = new_lister.new_store()
    new_owner = writer(new_lister, store, controllers)
    new_owner.writes = False
    new_owner.start()
    new_lister.attach(SHARD, new_store)
    new_owner.shards_acquired([SHARD])  # before the shard's events
    process_deltas(new_owner, new_store, [Delta(DeltaType.ADDED, pod("a", rv="1"))], True)
    new_lister.mark_synced(SHARD)
    time.sleep(0.2)
    assert new_owner.reads() == []  # held back: rv 2 is not cached
    process_deltas(new_owner, new_store, [Delta(DeltaType.UPDATED, pod("a", rv="2"))], False)
    wait_until(lambda: new_owner.reads() == ["2"], what="the reconcile once the write shows")
    assert store.load(SHARD) == {}  # met, so forgotten


def test_a_new_owner_honours_the_deadline_the_last_owner_saved(
    redis_client: redis.Redis, controllers: list[Controller]
) -> None:
    store = store_for(redis_client)
    deadline = time.time() + 0.5
    store.save(SHARD, f"writer {KEY}", [Expectation("pods", KEY, "2", deadline)])
    new_lister = sharded_lister(pod("a", rv="1"), shards=[SHARD])
    new_owner = writer(new_lister, store, controllers)  # its own timeout would be 30 s
    new_owner.writes = False
    new_owner.shards_acquired([SHARD])
    new_owner.start()  # no event: the loaded key is queued for its deadline by itself
    wait_until(lambda: new_owner.reads() == ["1"], what="the reconcile after the saved deadline")
    assert time.time() >= deadline
    assert store.load(SHARD) == {}


def test_acquiring_a_shard_replaces_what_the_barrier_held_for_its_keys(
    controllers: list[Controller],
) -> None:
    store = RecordingStore()
    other_key = next(
        f"default/p{i}" for i in range(100) if shard_for(f"default/p{i}", SHARDS) != SHARD
    )
    controller = writer(sharded_lister(), store, controllers)
    controller.expect_version(KEY, "3")
    controller.expect_version(other_key, "4")
    store.saved[SHARD] = {
        f"writer {KEY}": [expectation("8")],
        f"writer {KEY}x": [expectation("9", resource="secrets")],  # not a resource it hears
        f"someone-else {KEY}": [expectation("1")],
    }
    controller.shards_acquired([SHARD])
    assert [e.version for e in controller.barrier.expectations(KEY)] == ["8"]
    assert controller.barrier.expectations(f"{KEY}x") == []
    assert [e.version for e in controller.barrier.expectations(other_key)] == ["4"]  # untouched
    store.saved[SHARD] = {}
    controller.shards_acquired([SHARD])
    assert controller.barrier.pending_keys() == [other_key]
