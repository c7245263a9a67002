"""A group's projection (``--project metadata``) holds on every path that hands an object to a
handler or a store (issue 33, "Deliver" 2): a real shard worker, or a replica reader, on a real
redis-server, with a handler that keeps every object it is handed.

One test per path: the takeover's initial list; live additions and updates (old and new);
live deletions with their final state; tombstones, with their last state or with the stored
one; an object leaving the view; the takeover's deletions from the unacknowledged entries
(pending and undelivered), tombstones among them, a move's outgoing half among them and a key
that left the view there; version-1 entries live and in a takeover; a replicated resource's
snapshot and stream. Each runs with a view that selects and projects, and with one that only
projects (it keeps every object: the worker routes it all the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from prometheus_client import CollectorRegistry

from common.deltas import DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.redis_layout import PROCESSOR_GROUP as GROUP
from common.redis_layout import SHARD_CONSUMER as CONSUMER
from common.redis_layout import ShardKeys
from common.store import Indexer
from common.wire import FIELD, moved_out
from processor_svc.dispatch import HandlerDispatcher
from processor_svc.metrics import ProcessorMetrics
from processor_svc.replica_reader import ReplicaReader
from processor_svc.view import GroupView
from reflector_svc.publish_records import PendingDelta
from tests.processor.shard.support import (
    RESOURCE,
    TS,
    Shard,
    compact_envelopes,
    delivered_and_acknowledged,
    entry,
    pod,
)
from tests.support.recording_handler import Recorder, parts_of
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

METADATA = {"apiVersion", "kind", "metadata"}
"""What ``--project metadata`` keeps (:func:`tests.support.recording_handler.parts_of`)."""

VIEWS = {
    "selected": {"label_selector": "app=web", "project": "metadata"},
    "projected only": {"project": "metadata"},
}


@pytest.fixture(params=list(VIEWS))
def view(request: pytest.FixtureRequest) -> GroupView:
    return GroupView(RESOURCE, **VIEWS[request.param])


class Keeper(Recorder):
    """Records every call (:class:`Recorder`) and every object it is handed, as
    ``(call, key, object)``: an update's old and new, a tombstone's last state."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[tuple[str, str, Obj | None]] = []

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        kind = "initial add" if is_in_initial_list else "add"
        self.handed.append((kind, meta_namespace_key(obj), obj))
        super().on_add(obj, is_in_initial_list)

    def on_update(self, old: Obj, new: Obj) -> None:
        key = meta_namespace_key(new)
        self.handed += [("update old", key, old), ("update new", key, new)]
        super().on_update(old, new)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self.handed.append(("tombstone", obj.key, obj.obj))
        else:
            self.handed.append(("delete", meta_namespace_key(obj), obj))
        super().on_delete(obj)

    def told(self) -> list[tuple[str, str]]:
        """``(call, key)`` of every call, sorted, a tombstone as a deletion: what a takeover
        tells of a key that vanished (its final state, or as a tombstone its last one told)."""
        return sorted(("delete" if call == "tombstone" else call, key) for call, key, _ in
                      self.handed)  # fmt: skip

    def leaks(self) -> list[str]:
        """Every object handed over with more than the projection keeps."""
        return [
            f"{call} {key}: {parts_of(obj)}"
            for call, key, obj in self.handed
            if not set(parts_of(obj)) <= METADATA
        ]


def store_leaks(store: Indexer) -> list[str]:
    """Every object the store (what the listers read) keeps with more than the projection."""
    return [
        f"stored {meta_namespace_key(obj)}: {parts_of(obj)}"
        for obj in store.list()
        if not set(parts_of(obj)) <= METADATA
    ]


def live(shard: Shard, view: GroupView, *deltas: PendingDelta, store: Indexer | None = None
         ) -> tuple[Keeper, Indexer]:  # fmt: skip
    """Publish ``deltas`` after a worker with ``view`` took the (empty) shard over; returns what
    the handler was handed once every entry is acknowledged, and the store."""
    keeper = Keeper()
    with shard.running(("keep", keeper), store=store, block_ms=200, view=view) as (
        worker, used, _,
    ):  # fmt: skip
        assert worker.wait_for_sync(5)
        shard.publish(*deltas)
        wait_until(lambda: delivered_and_acknowledged(shard), what="every entry handled")
    return keeper, used


def taken_over(
    shard: Shard,
    view: GroupView,
    handled: list[PendingDelta],
    in_flight: list[PendingDelta],
    unread: list[PendingDelta],
    *,
    write: Callable[[], None] | None = None,
    store: Indexer | None = None,
) -> tuple[Keeper, Indexer]:
    """A previous owner (a worker with ``view``) handled ``handled`` and acknowledged it, then
    read ``in_flight`` and died before handling it (pending); ``unread`` (and whatever ``write``
    writes) came after. A worker with ``view`` takes the shard over: returns what its handler
    was handed by the time it synced, and its store."""
    client, stream = shard.client, shard.keys.stream
    if handled:
        shard.publish(*handled)
    with shard.running(("keep", Keeper()), block_ms=200, view=view) as (worker, _, _):
        assert worker.wait_for_sync(5)
        wait_until(lambda: delivered_and_acknowledged(shard), what="the previous owner's acks")
    if in_flight:
        ids = shard.publish(*in_flight)
        client.xreadgroup(GROUP, CONSUMER, {stream: ">"}, count=len(ids))
    if unread:
        shard.publish(*unread)
    if write is not None:
        write()
    keeper = Keeper()
    with shard.running(("keep", keeper), store=store, block_ms=200, view=view) as (
        worker, used, _,
    ):  # fmt: skip
        assert worker.wait_for_sync(5)
    return keeper, used


def added(name: str, rv: str, app: str = "web") -> PendingDelta:
    return entry(DeltaType.ADDED, pod(f"ns/{name}", rv, app=app))


def updated(name: str, rv: str, app: str = "web") -> PendingDelta:
    return entry(DeltaType.UPDATED, pod(f"ns/{name}", rv, app=app))


def deleted(name: str, rv: str, *, tombstone: bool = False) -> PendingDelta:
    return entry(DeltaType.DELETED, pod(f"ns/{name}", rv), tombstone=tombstone)


# --- live entries ------------------------------------------------------------------------------


STORES = [Indexer, compact_envelopes]
"""A plain store, and one that keeps entries as they came unless the view changed them."""


@pytest.mark.parametrize("store_class", STORES)
def test_the_initial_list_is_projected(
    shard: Shard, view: GroupView, store_class: Callable[[], Indexer]
) -> None:
    keeper, store = taken_over(shard, view, [added("a", "1")], [added("b", "2")],
                               [added("c", "3")], store=store_class())  # fmt: skip
    assert [call for call, _, _ in keeper.handed] == ["initial add"] * 3
    assert keeper.leaks() == [] and store_leaks(store) == []


@pytest.mark.parametrize("store_class", STORES)
def test_live_adds_and_updates_are_projected_old_and_new(
    shard: Shard, view: GroupView, store_class: Callable[[], Indexer]
) -> None:
    keeper, store = live(shard, view, added("a", "1"), updated("a", "2"), updated("a", "3"),
                         store=store_class())  # fmt: skip
    assert [call for call, _, _ in keeper.handed] == ["add", *["update old", "update new"] * 2]
    assert keeper.leaks() == [] and store_leaks(store) == []


def test_a_live_deletion_hands_over_its_final_state_projected(
    shard: Shard, view: GroupView
) -> None:
    keeper, _ = live(shard, view, added("a", "1"), deleted("a", "2"))
    assert [(call, rv(obj)) for call, _, obj in keeper.handed] == [("add", "1"), ("delete", "2")]
    assert keeper.leaks() == []


def test_a_live_tombstone_hands_over_its_last_state_projected(
    shard: Shard, view: GroupView
) -> None:
    keeper, _ = live(shard, view, added("a", "1"), deleted("a", "1", tombstone=True))
    assert [call for call, _, _ in keeper.handed] == ["add", "tombstone"]
    assert keeper.leaks() == []


def test_a_tombstone_without_its_object_hands_over_the_stored_state(
    shard: Shard, view: GroupView
) -> None:
    """A relist tombstone whose last object is unknown carries the object the group holds."""
    keeper = Keeper()
    with shard.running(("keep", keeper), block_ms=200, view=view) as (worker, _, _):
        assert worker.wait_for_sync(5)
        shard.publish(added("a", "1"))
        bare = b'{"v":1,"t":"Deleted","k":"ns/a","rv":"","uid":"","ts":1.0,"tomb":true,"o":null}'
        shard.xadd_raw({FIELD: bare})
        wait_until(lambda: delivered_and_acknowledged(shard), what="every entry handled")
    assert [(call, rv(obj)) for call, _, obj in keeper.handed] == [("add", "1"), ("tombstone", "1")]
    assert keeper.leaks() == []


def test_an_object_leaving_the_view_hands_over_its_last_projected_state(shard: Shard) -> None:
    view = GroupView(RESOURCE, **VIEWS["selected"])
    keeper, _ = live(shard, view, added("a", "1"), updated("a", "2", app="db"))
    assert [(call, rv(obj)) for call, _, obj in keeper.handed] == [("add", "1"), ("delete", "1")]
    assert keeper.leaks() == []


def test_a_live_move_out_hands_over_the_projected_state(shard: Shard, view: GroupView) -> None:
    keeper = Keeper()
    with shard.running(("keep", keeper), block_ms=200, view=view) as (worker, _, _):
        assert worker.wait_for_sync(5)
        shard.publish(added("a", "1"))
        wait_until(lambda: delivered_and_acknowledged(shard), what="the add")
        move_out(shard, "ns/a")
        wait_until(lambda: delivered_and_acknowledged(shard), what="the move's outgoing half")
    assert [(call, rv(obj)) for call, _, obj in keeper.handed] == [("add", "1"), ("delete", "1")]
    assert keeper.leaks() == []


def test_version_1_entries_are_projected_live(shard: Shard, view: GroupView) -> None:
    keeper, store = live(
        shard, view, v1(DeltaType.ADDED, "a", "1"), v1(DeltaType.UPDATED, "a", "2"),
        v1(DeltaType.DELETED, "a", "3"), v1(DeltaType.ADDED, "b", "4"),
    )  # fmt: skip
    assert [call for call, _, _ in keeper.handed] == [
        "add", "update old", "update new", "delete", "add",
    ]  # fmt: skip
    assert keeper.leaks() == [] and store_leaks(store) == []


# --- a takeover's deletions from the unacknowledged entries ------------------------------------


def test_a_takeover_hands_over_unacknowledged_deletions_projected(
    shard: Shard, view: GroupView
) -> None:
    """The previous owner's handlers held a and b; it died with a's deletion in flight and
    b's unread: the new owner tells its handlers of both (with the final state, or the last one
    told as a tombstone), projected."""
    keeper, _ = taken_over(
        shard, view, [added("a", "1"), added("b", "2"), added("c", "3")],
        [deleted("a", "4")], [deleted("b", "5")],
    )  # fmt: skip
    assert keeper.told() == [("delete", "ns/a"), ("delete", "ns/b"), ("initial add", "ns/c")]
    assert keeper.leaks() == []


def test_a_takeover_hands_over_unacknowledged_tombstones_projected(
    shard: Shard, view: GroupView
) -> None:
    keeper, _ = taken_over(
        shard, view, [added("a", "1"), added("b", "2")],
        [deleted("a", "1", tombstone=True)], [deleted("b", "2", tombstone=True)],
    )  # fmt: skip
    assert keeper.told() == [("delete", "ns/a"), ("delete", "ns/b")]
    assert keeper.leaks() == []


def test_a_takeover_hands_over_an_unacknowledged_move_out_projected(
    shard: Shard, view: GroupView
) -> None:
    """The object moved to another shard (a resource sharded by label or owner) while nobody
    held this one: its outgoing half is a deletion here."""
    keeper, _ = taken_over(shard, view, [added("a", "1")], [], [],
                           write=lambda: move_out(shard, "ns/a"))  # fmt: skip
    assert keeper.told() == [("delete", "ns/a")]
    assert keeper.leaks() == []


def test_a_takeover_hands_over_a_key_that_left_the_view_in_flight_projected(shard: Shard) -> None:
    """The previous owner read a's add and died (its handlers may have been told); a then left
    the view: the new owner tells the deletion of a's last selected state, projected."""
    view = GroupView(RESOURCE, **VIEWS["selected"])
    keeper, _ = taken_over(shard, view, [], [added("a", "1")], [updated("a", "2", app="db")])
    assert [(call, key, rv(obj)) for call, key, obj in keeper.handed] == [("delete", "ns/a", "1")]
    assert keeper.leaks() == []


def test_a_takeover_hands_over_a_held_key_that_left_the_view_projected(shard: Shard) -> None:
    """The previous owner's handlers were told of a and acknowledged it; a left the view while
    nobody owned the shard: the new owner tells the deletion (what the group's handlers hold
    must be known to it: fails before issue 33's held set, the deletion is never told), with
    the state the held set recorded, projected: a tombstone, since updates acknowledged after
    that state are not recorded and the stream no longer has the last one given."""
    view = GroupView(RESOURCE, **VIEWS["selected"])
    keeper, _ = taken_over(shard, view, [added("a", "1")], [], [updated("a", "2", app="db")])
    told = [(call, key, rv(obj)) for call, key, obj in keeper.handed]
    assert told == [("tombstone", "ns/a", "1")]
    assert keeper.leaks() == []


def test_version_1_entries_are_projected_in_a_takeover(shard: Shard, view: GroupView) -> None:
    """A v1 known state in the snapshot, a v1 deletion among the unacknowledged entries."""
    keeper, store = taken_over(
        shard, view, [v1(DeltaType.ADDED, "a", "1"), v1(DeltaType.ADDED, "b", "2")],
        [v1(DeltaType.DELETED, "a", "3")], [],
    )  # fmt: skip
    assert keeper.told() == [("delete", "ns/a"), ("initial add", "ns/b")]
    assert keeper.leaks() == [] and store_leaks(store) == []


# --- a replicated resource ---------------------------------------------------------------------


def test_a_replicated_resource_is_projected_in_its_snapshot_and_its_stream(
    redis_server: RedisServer, shard: Shard, view: GroupView
) -> None:
    """A replica reader (no lease, no group) reads the same shard whole: snapshot, then the
    stream (an update, a deletion, an addition)."""
    shard.publish(added("a", "1"), added("b", "2"))
    client = redis.Redis.from_url(redis_server.url)
    metrics = ProcessorMetrics(CollectorRegistry())
    keeper, store = Keeper(), Indexer()
    dispatcher = HandlerDispatcher([("keep", keeper)], metrics=metrics, resource=RESOURCE)
    dispatcher.start()
    reader = ReplicaReader(client, ShardKeys("ib", RESOURCE, 0), store=store, sink=dispatcher,
                           metrics=metrics, block_ms=100, view=view)  # fmt: skip
    try:
        reader.start()
        wait_until(lambda: reader.has_synced, what="the replica's snapshot")
        shard.publish(updated("a", "3"), deleted("b", "4"), added("c", "5"))
        wait_until(lambda: len(keeper.handed) == 6, what=lambda: f"6 objects: {keeper.handed}")
    finally:
        reader.stop()
        dispatcher.stop(2.0)
        client.close()
    assert keeper.leaks() == [] and store_leaks(store) == []


# --- entries written as the reflector writes them ----------------------------------------------


def rv(obj: Obj | None) -> str:
    return "" if obj is None else str(obj["metadata"]["resourceVersion"])


def v1(kind: DeltaType, name: str, rv: str) -> PendingDelta:
    """A version-1 entry (one JSON document: no header; still decoded by every reader)."""
    obj = pod(f"ns/{name}", rv)
    document: dict[str, Any] = {
        "v": 1, "t": kind.value, "k": f"ns/{name}", "rv": rv, "uid": f"uid-ns/{name}", "ts": TS,
        "tomb": False, "o": obj,
    }  # fmt: skip
    return PendingDelta(kind, f"ns/{name}", rv, orjson.dumps(document))


def move_out(shard: Shard, key: str) -> None:
    """The outgoing half of a move to shard 1, as the reflector writes it: a deletion carrying
    the known state, which the shard then forgets."""
    keys = ShardKeys("ib", RESOURCE, 0)
    known: Any = shard.client.hget(keys.objects, key)
    shard.client.xadd(keys.stream, {FIELD: moved_out(known, 1, observed_at=TS)})
    shard.client.hdel(keys.versions, key)
    shard.client.hdel(keys.objects, key)
