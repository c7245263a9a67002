"""The held set (``processor_svc.held_keys``) through real shard workers on a real Redis: what a
group's handlers hold, as recorded with the acknowledgements, and what a new owner tells them
of keys that vanished or left the view while nobody owned the shard."""

from __future__ import annotations

from typing import Any

import orjson

from common.deltas import DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj
from processor_svc.view import GroupView
from tests.processor.shard.support import (
    RESOURCE,
    Shard,
    delivered_and_acknowledged,
    entry,
    pod,
)
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until

LANE_B = {"label_selector": "app=web", "project": "metadata"}


class Objects(Recorder):
    """A recorder that also keeps every object (or tombstone) it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: list[Any] = []

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self.objects.append(obj)
        super().on_add(obj, is_in_initial_list)

    def on_update(self, old: Obj, new: Obj) -> None:
        self.objects += (old, new)
        super().on_update(old, new)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self.objects.append(obj)
        super().on_delete(obj)


def held(shard: Shard) -> dict[str, Obj | None]:
    """The held set: key -> the recorded state (``None``: recorded without one)."""
    raw: Any = shard.client.hgetall(shard.keys.held)
    return {key.decode(): orjson.loads(state) if state else None for key, state in raw.items()}


def owner(shard: Shard, *, view: GroupView | None, before: Any = (), after: Any = ()) -> Objects:
    """One owner's life: publish ``before`` (its snapshot), run until it synced, publish
    ``after``, wait until every entry is handled and acknowledged, stop."""
    if before:
        shard.publish(*before)
    recorder = Objects()
    with shard.running(("rec", recorder), block_ms=200, view=view) as (worker, _, _):
        assert worker.wait_for_sync(5)
        if after:
            shard.publish(*after)
        wait_until(lambda: delivered_and_acknowledged(shard), what="every entry handled")
    return recorder


def test_the_held_set_changes_when_a_key_enters_or_leaves_never_on_an_update(
    shard: Shard,
) -> None:
    view = GroupView(RESOURCE, **LANE_B)
    owner(
        shard,
        view=view,
        after=[
            entry(DeltaType.ADDED, pod("ns/a", "1")),
            entry(DeltaType.ADDED, pod("ns/b", "2", app="db")),  # never in the view
            entry(DeltaType.UPDATED, pod("ns/a", "3")),  # an update: no write
            entry(DeltaType.ADDED, pod("ns/c", "4")),
            entry(DeltaType.UPDATED, pod("ns/c", "5", app="db")),  # leaves
            entry(DeltaType.ADDED, pod("ns/d", "6")),
            entry(DeltaType.DELETED, pod("ns/d", "7")),
        ],
    )
    recorded = held(shard)
    assert list(recorded) == ["ns/a"]
    state = recorded["ns/a"]
    assert state is not None
    # The state it entered with, as the group keeps it (projected: no spec, no managedFields).
    assert state["metadata"]["resourceVersion"] == "1"
    assert set(state) == {"apiVersion", "kind", "metadata"}
    assert "managedFields" not in state["metadata"]


def test_a_group_without_a_view_records_keys_without_state(shard: Shard) -> None:
    owner(
        shard,
        view=None,
        before=[entry(DeltaType.ADDED, pod("ns/a", "1"))],
        after=[
            entry(DeltaType.ADDED, pod("ns/b", "2")),
            entry(DeltaType.DELETED, pod("ns/a", "3")),
        ],
    )
    assert held(shard) == {"ns/b": None}


def test_a_new_group_after_history_gets_the_list_and_no_deletion(shard: Shard) -> None:
    history = [entry(DeltaType.ADDED, pod(f"ns/p{i}", str(i + 1))) for i in range(6)]
    history += [entry(DeltaType.DELETED, pod(f"ns/p{i}", str(10 + i))) for i in range(3)]
    history.append(entry(DeltaType.UPDATED, pod("ns/p4", "20")))
    recorder = owner(shard, view=None, before=history)
    assert sorted(recorder.events) == [
        ("add", "ns/p3", "4", True),
        ("add", "ns/p4", "20", True),
        ("add", "ns/p5", "6", True),
    ]
    assert sorted(held(shard)) == ["ns/p3", "ns/p4", "ns/p5"]


def test_a_held_key_deleted_while_nobody_owned_the_shard_gets_its_final_state(
    shard: Shard,
) -> None:
    view = GroupView(RESOURCE, **LANE_B)
    owner(
        shard,
        view=view,
        before=[entry(DeltaType.ADDED, pod("ns/a", "1"))],
        after=[entry(DeltaType.ADDED, pod("ns/b", "2"))],
    )
    # Nobody owns the shard: a is updated and deleted, b updated.
    shard.publish(
        entry(DeltaType.UPDATED, pod("ns/a", "3")),
        entry(DeltaType.DELETED, pod("ns/a", "4")),
        entry(DeltaType.UPDATED, pod("ns/b", "5")),
    )
    recorder = owner(shard, view=view)
    assert recorder.events == [("delete", "ns/a", "4", False), ("add", "ns/b", "5", True)]
    final = recorder.objects[0]
    assert set(final) == {"apiVersion", "kind", "metadata"}  # projected like everything else
    assert list(held(shard)) == ["ns/b"]


def test_a_held_key_that_left_the_view_while_nobody_owned_it_gets_its_last_selected_state(
    shard: Shard,
) -> None:
    view = GroupView(RESOURCE, **LANE_B)
    owner(shard, view=view, after=[entry(DeltaType.ADDED, pod("ns/a", "1"))])
    shard.publish(
        entry(DeltaType.UPDATED, pod("ns/a", "2")),  # still selected
        entry(DeltaType.UPDATED, pod("ns/a", "3", app="db")),  # leaves
    )
    recorder = owner(shard, view=view)
    # As a selector-filtered informer reports a leave: the state before the leaving update.
    assert recorder.events == [("delete", "ns/a", "2", False)]
    assert held(shard) == {}


def test_a_leave_whose_last_selected_state_is_gone_from_the_stream_is_a_tombstone(
    shard: Shard,
) -> None:
    view = GroupView(RESOURCE, **LANE_B)
    owner(
        shard,
        view=view,
        after=[
            entry(DeltaType.ADDED, pod("ns/a", "1")),
            entry(DeltaType.UPDATED, pod("ns/a", "2")),
        ],
    )
    shard.publish(entry(DeltaType.UPDATED, pod("ns/a", "3", app="db")))
    recorder = owner(shard, view=view)
    # The handlers were given rv 2, acknowledged long ago; the held set recorded rv 1 (the
    # state a entered with): the deletion says its final state is not known.
    assert recorder.events == [("delete", "ns/a", "1", True)]
    tombstone = recorder.objects[0]
    assert isinstance(tombstone, DeletedFinalStateUnknown)
    assert tombstone.obj is not None and set(tombstone.obj) == {"apiVersion", "kind", "metadata"}
    assert tombstone.obj["metadata"]["labels"] == {"app": "web"}  # what the handlers indexed


def test_a_takeover_records_the_states_its_initial_list_gave(shard: Shard) -> None:
    view = GroupView(RESOURCE, **LANE_B)
    owner(shard, view=view, after=[entry(DeltaType.ADDED, pod("ns/a", "1"))])
    shard.publish(entry(DeltaType.UPDATED, pod("ns/a", "2")))
    owner(shard, view=view)
    state = held(shard)["ns/a"]
    assert state is not None and state["metadata"]["resourceVersion"] == "2"


def test_deletions_trimmed_away_still_reach_the_handlers_as_tombstones(shard: Shard) -> None:
    owner(shard, view=None, after=[entry(DeltaType.ADDED, pod("ns/a", "1"))])
    shard.publish(
        entry(DeltaType.DELETED, pod("ns/a", "2")), entry(DeltaType.ADDED, pod("ns/b", "3"))
    )
    shard.client.xtrim(shard.keys.stream, maxlen=0, approximate=False)  # a forced trim
    recorder = owner(shard, view=None)
    assert recorder.events == [("delete", "ns/a", "", True), ("add", "ns/b", "3", True)]
    assert recorder.objects[0] == DeletedFinalStateUnknown("ns/a", None)


def test_a_key_a_pending_entry_told_about_is_held_even_before_its_acknowledgement(
    shard: Shard,
) -> None:
    # A previous owner read a's add, told its handlers, and died before acknowledging it; a
    # was deleted afterwards. b was added and deleted after the crash: nobody ever heard of it.
    shard.create_group(at="$")
    shard.publish(entry(DeltaType.ADDED, pod("ns/a", "1")))
    stream, group = shard.keys.stream, shard.keys.group
    shard.client.xreadgroup(group, "owner", {stream: ">"})
    shard.publish(
        entry(DeltaType.DELETED, pod("ns/a", "2")),
        entry(DeltaType.ADDED, pod("ns/b", "3")),
        entry(DeltaType.DELETED, pod("ns/b", "4")),
    )
    recorder = owner(shard, view=None)
    assert recorder.events == [("delete", "ns/a", "2", False)]
    assert held(shard) == {}


def test_a_group_whose_view_changed_is_told_of_the_keys_it_no_longer_selects(
    shard: Shard,
) -> None:
    owner(
        shard,
        view=GroupView(RESOURCE, **LANE_B),
        after=[entry(DeltaType.ADDED, pod("ns/a", "1")), entry(DeltaType.ADDED, pod("ns/b", "2"))],
    )
    recorder = owner(shard, view=GroupView(RESOURCE, project="metadata", namespace="other"))
    assert sorted(recorder.events) == [("delete", "ns/a", "1", True), ("delete", "ns/b", "2", True)]
    assert held(shard) == {}
