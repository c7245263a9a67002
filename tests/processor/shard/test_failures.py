"""Failures around the worker: Redis errors, unknown read outcomes, unappliable and corrupt data."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from common.backoff import Backoff
from common.compact_store import CompactIndexer
from common.object_keys import Obj
from common.redis_layout.shard_scripts import FENCED_READ
from common.store import NAMESPACE_INDEX, Indexer, meta_namespace_index_func
from tests.processor.shard.support import Shard, compact_envelopes
from tests.reflector.publisher.support import added, updated
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until


def quick_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


def test_a_read_whose_reply_was_lost_is_replayed_from_the_pending_list(shard: Shard) -> None:
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=200, backoff=quick_backoff()) as (w, _, _):
        assert w.wait_for_sync(5)
        real = w._stream._call
        failures: list[int] = []

        def read_then_lose_the_reply(script: Any, *args: Any, **kwargs: Any) -> Any:
            reply = real(script, *args, **kwargs)
            if script is FENCED_READ and reply[1] and not failures:
                failures.append(len(reply[1]))
                raise redis.ConnectionError("connection lost after the script ran")
            return reply

        w._stream._call = read_then_lose_the_reply  # type: ignore[method-assign]
        shard.publish(added("ns/a", "1"), added("ns/b", "2"))
        shard.publish(updated("ns/a", "3"))
        wait_until(lambda: len(recorder.events) == 3, what="every delta despite the lost reply")
        assert failures and failures[0] >= 2  # a batch went into the pending list, reply lost
        assert recorder.events == [
            ("add", "ns/a", "1", False),
            ("add", "ns/b", "2", False),
            ("update", "ns/a", "1", "3"),
        ]
        wait_until(lambda: shard.pending() == 0 and w.error is None, what="recovery")
    assert shard.sample("informer_bus_processor_redis_errors_total", shard="0") == 1
    assert shard.sample("informer_bus_processor_takeovers_total", shard="0") == 1


def test_killed_connections_are_survived(shard: Shard) -> None:
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=300, backoff=quick_backoff()) as (w, _, _):
        assert w.wait_for_sync(5)
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: recorder.events, what="the first delta")
        shard.client.client_kill_filter(_type="normal", skipme=True)  # every other client
        shard.publish(added("ns/b", "2"))
        wait_until(lambda: len(recorder.events) == 2, what="the delta after the kill")
        wait_until(lambda: shard.pending() == 0, what="acknowledgements")
        assert w.alive
    assert recorder.events == [("add", "ns/a", "1", False), ("add", "ns/b", "2", False)]


def picky_index(obj: Obj) -> list[str]:
    if obj["metadata"]["name"] == "bad":
        raise ValueError("no bad pods in my index")
    return meta_namespace_index_func(obj)


def test_an_entry_the_store_refuses_is_dead_lettered_and_the_shard_goes_on(shard: Shard) -> None:
    store = Indexer(indexers={NAMESPACE_INDEX: picky_index})
    recorder = Recorder()
    with shard.running(("rec", recorder), store=store, block_ms=200) as (w, _, _):
        assert w.wait_for_sync(5)
        bad_id, _ = shard.publish(added("ns/bad", "1"), added("ns/good", "2"))
        wait_until(lambda: recorder.events, what="the good delta")
        wait_until(lambda: shard.pending() == 0, what="acknowledgements")
        assert recorder.events == [("add", "ns/good", "2", False)]
        assert store.list_keys() == ["ns/good"]
    [letter] = shard.dead_letters()
    assert letter["id"].decode() == bad_id
    assert letter["reason"].startswith(b"apply: IndexFuncError")
    assert b'"name":"bad"' in letter["payload"]


def test_corrupt_snapshot_objects_are_dead_lettered_and_skipped(shard: Shard) -> None:
    shard.publish(added("ns/a", "1"), added("ns/bad", "2"))
    shard.client.hset(shard.keys.objects, "ns/bad", b"{garbage}")
    recorder = Recorder()
    with shard.running(("rec", recorder)) as (w, store, _):
        assert w.wait_for_sync(5)
        assert recorder.events == [("add", "ns/a", "1", True)]
        assert store.list_keys() == ["ns/a"]
        wait_until(lambda: shard.pending() == 0 and shard.dead_letters(), what="the commit")
    [letter] = shard.dead_letters()
    assert letter["id"] == b"objects:ns/bad"
    assert letter["payload"] == b"{garbage}"
    assert letter["reason"].startswith(b"snapshot: envelope is not valid JSON")


@pytest.mark.parametrize("store_class", [Indexer, CompactIndexer, compact_envelopes])
def test_a_snapshot_object_the_store_refuses_is_dead_lettered_once_with_the_corrupt_ones(
    shard: Shard, store_class: type[Indexer]
) -> None:
    shard.publish(added("ns/a", "1"), added("ns/bad", "2"), added("ns/corrupt", "3"))
    shard.publish(added("ns/c", "4"))
    shard.client.hset(shard.keys.objects, "ns/corrupt", b"{garbage}")
    store = store_class(indexers={NAMESPACE_INDEX: picky_index})
    recorder = Recorder()
    with shard.running(("rec", recorder), store=store) as (w, _, _):
        assert w.wait_for_sync(5)
        assert sorted(recorder.events) == [("add", "ns/a", "1", True), ("add", "ns/c", "4", True)]
        assert sorted(store.list_keys()) == ["ns/a", "ns/c"]
        assert store.by_index(NAMESPACE_INDEX, "ns") == [
            store.get_by_key("ns/a"),
            store.get_by_key("ns/c"),
        ]
        wait_until(lambda: len(shard.dead_letters()) == 2, what="the commit")
    reasons = {bytes(letter["id"]): bytes(letter["reason"]) for letter in shard.dead_letters()}
    assert sorted(reasons) == [b"objects:ns/bad", b"objects:ns/corrupt"]
    assert reasons[b"objects:ns/bad"].startswith(b"snapshot: index function")
    assert reasons[b"objects:ns/corrupt"].startswith(b"snapshot: envelope is not valid JSON")


def test_a_stopped_dispatcher_ends_the_worker_with_an_error(shard: Shard) -> None:
    recorder = Recorder()
    store = Indexer()
    dispatcher = shard.dispatcher(("rec", recorder))
    worker = shard.worker(store, dispatcher, block_ms=200)
    dispatcher.start()
    worker.start()
    try:
        assert worker.wait_for_sync(5)
        dispatcher.stop(1)
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: not worker.alive, what="the worker to end")
        assert "stopping" in str(worker.error)
        assert shard.pending() == 1  # read, never delivered, never acknowledged
    finally:
        worker.stop(0)
