"""A group's view (``processor_svc.view``) through a real shard worker on a real Redis: what a
selector-filtered client-go informer would see, and what the store keeps."""

from __future__ import annotations

from typing import Any

import pytest

from common.deltas import DeltaType
from common.object_keys import Obj
from common.store import Indexer
from processor_svc.view import GroupView
from reflector_svc.publish_records import PendingDelta
from tests.processor.shard.support import (
    RESOURCE,
    Shard,
    delivered_and_acknowledged,
    entry,
    pod,
)
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until


def run(shard: Shard, view: GroupView, *batches: list[PendingDelta]) -> tuple[Recorder, Indexer]:
    """Publish the first batch before the worker starts (its takeover's snapshot), the others
    after it synced; returns what the handler saw and the store."""
    recorder = Recorder()
    store = Indexer()
    if batches and batches[0]:
        shard.publish(*batches[0])
    with shard.running(("rec", recorder), store=store, block_ms=200, view=view) as (worker, _, _):
        assert worker.wait_for_sync(5)
        for batch in batches[1:]:
            shard.publish(*batch)
        wait_until(lambda: delivered_and_acknowledged(shard), what="every entry handled")
    return recorder, store


def test_an_object_moves_in_and_out_of_a_label_view_as_add_and_delete(shard: Shard) -> None:
    view = GroupView(RESOURCE, label_selector="app=web")
    recorder, store = run(
        shard,
        view,
        [],
        [
            entry(DeltaType.ADDED, pod("ns/a", "1")),
            entry(DeltaType.ADDED, pod("ns/b", "2", app="db")),  # never in the view
            entry(DeltaType.UPDATED, pod("ns/a", "3", app="db")),  # leaves it
            entry(DeltaType.UPDATED, pod("ns/b", "4", app="db")),
            entry(DeltaType.UPDATED, pod("ns/a", "5")),  # comes back
            entry(DeltaType.UPDATED, pod("ns/a", "6")),
            entry(DeltaType.DELETED, pod("ns/b", "7", app="db")),  # not ours: nothing
            entry(DeltaType.DELETED, pod("ns/a", "8")),
        ],
    )
    assert recorder.events == [
        ("add", "ns/a", "1", False),
        ("delete", "ns/a", "1", False),  # its last matching state, not rv 3
        ("add", "ns/a", "5", False),
        ("update", "ns/a", "5", "6"),
        ("delete", "ns/a", "8", False),
    ]
    assert store.list_keys() == []
    assert shard.sample("informer_bus_processor_entries_outside_view_total", shard="0") == 3


def test_a_tombstone_of_a_held_object_arrives_with_its_last_state(shard: Shard) -> None:
    view = GroupView(RESOURCE, namespace="ns")
    recorder, _ = run(
        shard,
        view,
        [],
        [
            entry(DeltaType.ADDED, pod("ns/a", "1")),
            entry(DeltaType.ADDED, pod("other/z", "2")),
            entry(DeltaType.DELETED, pod("ns/a", "1"), tombstone=True),
            entry(DeltaType.DELETED, pod("other/z", "2"), tombstone=True),
        ],
    )
    assert recorder.events == [("add", "ns/a", "1", False), ("delete", "ns/a", "1", True)]


def test_a_takeover_snapshot_goes_through_the_view(shard: Shard) -> None:
    view = GroupView(RESOURCE, field_selector="spec.nodeName=n2,status.phase!=Failed")
    recorder, store = run(
        shard,
        view,
        [
            entry(DeltaType.ADDED, pod("ns/a", "1", node="n2")),
            entry(DeltaType.ADDED, pod("ns/b", "2", node="n1")),
            entry(DeltaType.ADDED, pod("ns/c", "3", node="n2", phase="Failed")),
        ],
        [entry(DeltaType.UPDATED, pod("ns/b", "4", node="n2"))],  # scheduled onto n2: an add
    )
    assert recorder.initial() == [("add", "ns/a", "1", True)]
    assert recorder.live() == [("add", "ns/b", "4", False)]
    assert sorted(store.list_keys()) == ["ns/a", "ns/b"]


@pytest.mark.parametrize(
    ("project", "kept"),
    [
        ("metadata", {"apiVersion", "kind", "metadata"}),
        ("status.phase", {"apiVersion", "kind", "metadata", "status"}),
    ],
)
def test_a_projection_is_what_the_store_and_the_handlers_get(
    shard: Shard, project: str, kept: set[str]
) -> None:
    seen: list[Any] = []

    class Keep(Recorder):
        def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
            seen.append(obj)
            super().on_add(obj, is_in_initial_list)

    view = GroupView(RESOURCE, project=project)
    store = Indexer()
    shard.publish(entry(DeltaType.ADDED, pod("ns/a", "1")))
    with shard.running(("rec", Keep()), store=store, block_ms=200, view=view) as (worker, _, _):
        assert worker.wait_for_sync(5)
        shard.publish(entry(DeltaType.ADDED, pod("ns/b", "2")))
        wait_until(lambda: len(seen) == 2, what="both adds")
    for obj in [*seen, *store.list()]:
        assert set(obj) == kept
        assert "managedFields" not in obj["metadata"]
        assert {"name", "namespace", "uid", "resourceVersion"} <= obj["metadata"].keys()


def test_a_view_that_keeps_everything_is_skipped_altogether() -> None:
    assert GroupView(RESOURCE).is_identity
    assert not GroupView(RESOURCE, project="metadata").is_identity
    assert GroupView(RESOURCE, project="metadata").selects_everything


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"label_selector": "app in (a"}, 'label selector "app in (a"'),
        ({"field_selector": "spec.foo=x"}, "field label not supported for pods: spec.foo"),
        ({"project": "spec..x"}, "spec..x"),
    ],
)
def test_a_malformed_view_names_the_mistake(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        GroupView(RESOURCE, **flags)


def test_a_field_selector_on_the_name_decides_from_the_header() -> None:
    view = GroupView(RESOURCE, field_selector="metadata.name=a,metadata.namespace!=kube-system")
    store = Indexer()
    kept = view.route(entry(DeltaType.ADDED, pod("ns/a", "1")).envelope, store, 1 << 22)
    assert kept.delta is not None and kept.key == "ns/a"
    for other in (pod("ns/b", "2"), pod("kube-system/a", "3")):
        assert view.route(entry(DeltaType.ADDED, other).envelope, store, 1 << 22).delta is None
