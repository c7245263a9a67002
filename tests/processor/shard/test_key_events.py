"""Handlers that need only keys: live changes are applied from entry headers (issue 35.3).

A handler implementing ``on_key_event`` (``processor_svc.key_events``) is told which key
changed; when every handler of the resource is one, the group has no view and the store's only
index is the namespace index, nothing of an entry's object is decoded, yet the cache holds every
object as it came and its namespace index answers. Real redis-server; a compact store as the
processor builds it.
"""

from __future__ import annotations

from typing import Any

from common.compact_store import CompactIndexer
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.store import NAMESPACE_INDEX, meta_namespace_index_func
from common.wire import ENVELOPE_CODEC
from tests.processor.shard.support import Shard, delivered_and_acknowledged
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.waiting import wait_until


class KeyRecorder:
    """Records object calls and key events apart."""

    def __init__(self) -> None:
        self.objects: list[tuple[str, Any]] = []
        self.keys: list[tuple[str, str, bool]] = []

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self.objects.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.objects.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self.objects.append(("delete", obj))

    def on_key_event(self, key: str, change: str, is_in_initial_list: bool) -> None:
        self.keys.append((key, change, is_in_initial_list))


class ObjectRecorder(KeyRecorder):
    """The same, without on_key_event: a handler that reads objects."""

    on_key_event = None  # type: ignore[assignment]


def _store(**extra: Any) -> CompactIndexer:
    indexers = {NAMESPACE_INDEX: meta_namespace_index_func, **extra}
    return CompactIndexer(indexers=indexers, codec=ENVELOPE_CODEC)


def _by_name(obj: Obj) -> list[str]:
    return [obj["metadata"]["name"]]


def test_key_handlers_get_live_changes_as_keys_and_the_cache_still_holds_every_object(
    shard: Shard,
) -> None:
    shard.publish(added("ns-a/before", "1"))
    handler = KeyRecorder()
    store = _store()
    with shard.running(("keys", handler), store=store) as (worker, _, _):
        assert worker.wait_for_sync(10)
        assert handler.objects == [("add", "before")]  # the initial list: objects
        shard.publish(
            added("ns-a/x", "2"), updated("ns-a/x", "3"), added("ns-b/y", "4"),
            deleted("ns-a/before", "5"),
        )  # fmt: skip
        wait_until(lambda: len(handler.keys) == 4, what="four key events")
        wait_until(lambda: delivered_and_acknowledged(shard), what="acknowledged")
    assert handler.keys == [
        ("ns-a/x", "add", False), ("ns-a/x", "update", False), ("ns-b/y", "add", False),
        ("ns-a/before", "delete", False),
    ]  # fmt: skip
    assert handler.objects == [("add", "before")]  # no object call for a live change
    held = store.get_by_key("ns-a/x")
    assert held is not None and held["metadata"]["resourceVersion"] == "3"
    assert store.index_keys(NAMESPACE_INDEX, "ns-b") == ["ns-b/y"]
    assert store.index_keys(NAMESPACE_INDEX, "ns-a") == ["ns-a/x"]
    assert store.get_by_key("ns-a/before") is None


def test_a_user_index_or_a_handler_that_reads_objects_gets_objects(shard: Shard) -> None:
    # A user indexer reads the object: the header cannot answer it.
    handler = KeyRecorder()
    with shard.running(("keys", handler), store=_store(by_name=_by_name)) as (worker, store, _):
        assert worker.wait_for_sync(10)
        shard.publish(added("ns-a/x", "2"))
        wait_until(lambda: handler.objects == [("add", "x")], what="an object call")
        assert store.index_keys("by_name", "x") == ["ns-a/x"]
    assert handler.keys == []

    # One handler that reads objects: every handler of the resource gets objects.
    keys, objects = KeyRecorder(), ObjectRecorder()
    with shard.running(("keys", keys), ("objects", objects), store=_store()) as (worker, _, _):
        assert worker.wait_for_sync(10)
        shard.publish(updated("ns-a/x", "3"))
        wait_until(lambda: ("update", "x") in objects.objects, what="the update as objects")
        wait_until(lambda: ("update", "x") in keys.objects, what="the key handler too")
    assert keys.keys == [] and objects.keys == []
