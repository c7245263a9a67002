"""Reference section 3: process_deltas and the handler adapters, against the real Indexer."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import (
    FilteringResourceEventHandler,
    ResourceEventHandler,
    ResourceEventHandlerFuncs,
    process_deltas,
)
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.store import Indexer


def pod(name: str, rv: str = "1", *, app: str = "web") -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "labels": {"app": app},
        }
    }


@dataclass
class Recorder:
    calls: list[tuple[object, ...]] = field(default_factory=list)

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self.calls.append(("add", obj["metadata"]["resourceVersion"], is_in_initial_list))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.calls.append(
            ("update", old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"])
        )

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        kind = "tombstone" if isinstance(obj, DeletedFinalStateUnknown) else "final"
        self.calls.append(("delete", kind))


def test_recorder_satisfies_the_protocol() -> None:
    handler: ResourceEventHandler = Recorder()
    assert handler is not None


@pytest.mark.parametrize(
    "delta_type", [DeltaType.ADDED, DeltaType.UPDATED, DeltaType.REPLACED, DeltaType.SYNC]
)
def test_3_1_any_upsert_for_a_missing_key_adds_and_fires_on_add(delta_type: DeltaType) -> None:
    store, handler = Indexer(), Recorder()
    process_deltas(handler, store, [Delta(delta_type, pod("a", "3"))], is_in_initial_list=True)
    assert handler.calls == [("add", "3", True)]
    assert store.get_by_key("ns/a") == pod("a", "3")


@pytest.mark.parametrize(
    "delta_type", [DeltaType.ADDED, DeltaType.UPDATED, DeltaType.REPLACED, DeltaType.SYNC]
)
def test_3_1_any_upsert_for_a_present_key_updates_and_fires_on_update(
    delta_type: DeltaType,
) -> None:
    store, handler = Indexer(), Recorder()
    store.add(pod("a", "3"))
    process_deltas(handler, store, [Delta(delta_type, pod("a", "4"))], is_in_initial_list=False)
    assert handler.calls == [("update", "3", "4")]
    assert store.get_by_key("ns/a") == pod("a", "4")


def test_3_1_is_in_initial_list_is_passed_through_to_on_add() -> None:
    store, handler = Indexer(), Recorder()
    process_deltas(handler, store, [Delta(DeltaType.ADDED, pod("a"))], is_in_initial_list=False)
    assert handler.calls == [("add", "1", False)]


def test_3_1_deltas_apply_oldest_first() -> None:
    store, handler = Indexer(), Recorder()
    deltas = [Delta(DeltaType.ADDED, pod("a", "1")), Delta(DeltaType.UPDATED, pod("a", "2"))]
    process_deltas(handler, store, deltas, is_in_initial_list=False)
    assert handler.calls == [("add", "1", False), ("update", "1", "2")]


def test_3_2_deleted_removes_from_store_then_fires_on_delete_with_final_state() -> None:
    store, handler = Indexer(), Recorder()
    store.add(pod("a"))
    process_deltas(handler, store, [Delta(DeltaType.DELETED, pod("a", "9"))], False)
    assert handler.calls == [("delete", "final")]
    assert store.get_by_key("ns/a") is None
    assert store.by_index("namespace", "ns") == []


def test_3_2_tombstone_deletion_reaches_on_delete_as_a_tombstone() -> None:
    store, seen = Indexer(), []
    store.add(pod("a"))
    tombstone = DeletedFinalStateUnknown("ns/a", pod("a"))
    process_deltas(
        ResourceEventHandlerFuncs(delete=seen.append),
        store,
        [Delta(DeltaType.DELETED, tombstone)],
        False,
    )
    assert seen == [tombstone]
    assert store.get_by_key("ns/a") is None


def test_3_2_tombstone_without_last_object_is_still_delivered() -> None:
    store, seen = Indexer(), []
    tombstone = DeletedFinalStateUnknown("ns/never-seen", None)
    process_deltas(
        ResourceEventHandlerFuncs(delete=seen.append),
        store,
        [Delta(DeltaType.DELETED, tombstone)],
        False,
    )
    assert seen == [tombstone]


def test_a_handler_error_leaves_the_store_written() -> None:
    def explode(obj: Obj, initial: bool) -> None:
        raise RuntimeError("handler bug")

    store = Indexer()
    with pytest.raises(RuntimeError, match="handler bug"):
        process_deltas(
            ResourceEventHandlerFuncs(add=explode), store, [Delta(DeltaType.ADDED, pod("a"))], False
        )
    assert store.get_by_key("ns/a") == pod("a")


def test_an_upsert_carrying_a_tombstone_is_refused() -> None:
    bad = Delta(DeltaType.UPDATED, DeletedFinalStateUnknown("ns/a", None))
    with pytest.raises(TypeError, match="tombstone"):
        process_deltas(Recorder(), Indexer(), [bad], False)


def test_functions_adapter_ignores_events_without_a_function() -> None:
    adds: list[Obj] = []
    handler = ResourceEventHandlerFuncs(add=lambda obj, _initial: adds.append(obj))
    handler.on_update(pod("a"), pod("a", "2"))
    handler.on_delete(pod("a"))
    handler.on_add(pod("a"), True)
    assert adds == [pod("a")]


def only_web(obj: Obj) -> bool:
    return bool(obj["metadata"]["labels"].get("app") == "web")


def filtered() -> tuple[Recorder, FilteringResourceEventHandler]:
    inner = Recorder()
    return inner, FilteringResourceEventHandler(only_web, inner)


def test_3_3_update_pass_to_pass_is_an_update() -> None:
    inner, handler = filtered()
    handler.on_update(pod("a", "1"), pod("a", "2"))
    assert inner.calls == [("update", "1", "2")]


def test_3_3_update_pass_to_fail_is_a_delete_of_the_old_object() -> None:
    inner, handler = filtered()
    handler.on_update(pod("a", "1"), pod("a", "2", app="db"))
    assert inner.calls == [("delete", "final")]


def test_3_3_update_fail_to_pass_is_an_add_not_in_initial_list() -> None:
    inner, handler = filtered()
    handler.on_update(pod("a", "1", app="db"), pod("a", "2"))
    assert inner.calls == [("add", "2", False)]


def test_3_3_update_fail_to_fail_is_nothing() -> None:
    inner, handler = filtered()
    handler.on_update(pod("a", "1", app="db"), pod("a", "2", app="db"))
    assert inner.calls == []


def test_3_3_add_and_delete_are_filtered() -> None:
    inner, handler = filtered()
    handler.on_add(pod("a", app="db"), True)
    handler.on_delete(pod("a", app="db"))
    handler.on_add(pod("b"), True)
    handler.on_delete(pod("b"))
    assert inner.calls == [("add", "1", True), ("delete", "final")]


def test_3_3_tombstones_are_filtered_on_their_last_object_and_kept_when_unknown() -> None:
    inner, handler = filtered()
    handler.on_delete(DeletedFinalStateUnknown("ns/a", pod("a", app="db")))
    assert inner.calls == []
    handler.on_delete(DeletedFinalStateUnknown("ns/b", pod("b")))
    handler.on_delete(DeletedFinalStateUnknown("ns/c", None))
    assert inner.calls == [("delete", "tombstone"), ("delete", "tombstone")]
