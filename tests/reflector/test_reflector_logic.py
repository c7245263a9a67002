"""Reflector logic against the in-memory source and sink (``tests/support/fake_source.py``):
the relist diff, 410s, closed watches and bad lines, with no socket and no Redis."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import pytest
from prometheus_client import CollectorRegistry

from common.deltas import Delta, DeltaType
from common.publication import ResourceLayout
from common.shard_routing import ShardKeyChoice
from common.wire import DeltaEnvelope, decode_envelope, encode_envelope
from reflector_svc.api_errors import MalformedWatchEventError, ResourceExpiredError
from reflector_svc.bad_lines import BAD_LINE_RELIST_AFTER
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.publish_records import PendingDelta, PublishResult
from reflector_svc.reflector import Reflector
from reflector_svc.service import reflector_options
from reflector_svc.settings import ReflectorSettings
from reflector_svc.watch_events import WatchEvent
from tests.support.fake_source import CLOSE, HOLD, FakeSink, FakeSource, pod
from tests.support.waiting import wait_until

FAST = reflector_options(ReflectorSettings(backoff_initial=0.01, backoff_max=0.02, page_size=2))


@dataclass
class Run:
    reflector: Reflector
    source: FakeSource
    sink: FakeSink
    metrics: ReflectorMetrics

    def count(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, {"resource": "pods", **labels})
        return value or 0.0


Start = Callable[..., Run]


@pytest.fixture
def start() -> Iterator[Start]:
    running: list[tuple[threading.Event, threading.Thread, Reflector, FakeSource]] = []

    def run(
        source: FakeSource, sink: FakeSink | None = None, layout: ResourceLayout | None = None
    ) -> Run:
        sink = sink if sink is not None else FakeSink()
        metrics = ReflectorMetrics(CollectorRegistry())
        reflector = Reflector(
            resource="pods", kind="Pod", source=source, sink=sink, options=FAST,
            metrics=metrics, rng=random.Random(7), layout=layout,
        )  # fmt: skip
        stop = threading.Event()
        thread = threading.Thread(target=reflector.run, args=(1, stop), name="reflector")
        thread.start()
        running.append((stop, thread, reflector, source))
        return Run(reflector, source, sink, metrics)

    yield run
    for stop, thread, reflector, source in running:
        stop.set()
        reflector.interrupt()
        for stream in source.open_watches:
            stream.close()
        thread.join(10)
        assert not thread.is_alive()


def test_a_relist_tombstones_a_vanished_key_with_its_last_object(start: Start) -> None:
    sink = FakeSink()
    for obj in (pod("a", 1), pod("gone", 1)):
        envelope = DeltaEnvelope.from_delta(Delta(DeltaType.ADDED, obj), observed_at=0.0)
        sink.versions[envelope.key] = envelope.resource_version
        sink.objects[envelope.key] = encode_envelope(envelope)
    run = start(FakeSource([pod("a", 1), pod("b", 4)], rv=5), sink)
    wait_until(run.reflector.synced.is_set, 5, what="sync")
    assert sink.history() == [("Added", "ns/b", "4"), ("Deleted", "ns/gone", "1")]
    tombstone = decode_envelope(sink.published[-1].envelope)
    assert (tombstone.key, tombstone.tombstone) == ("ns/gone", True)
    assert tombstone.obj is not None and tombstone.obj["metadata"]["name"] == "gone"
    assert "ns/gone" not in sink.versions and sink.synced_rv == "5"


def test_a_paginated_list_follows_its_continue_tokens(start: Start) -> None:
    run = start(FakeSource([pod(name, 1) for name in "abcde"]))
    wait_until(run.reflector.synced.is_set, 5, what="sync")
    assert [call["continue"] for call in run.source.lists] == [None, "1:2", "1:4"]
    assert len(run.sink.published) == 5


def test_a_410_in_the_watch_relists(start: Start) -> None:
    source = FakeSource([pod("a", 1)])
    source.watch_plans.append([ResourceExpiredError("too old resource version: 1 (5)")])
    run = start(source)
    wait_until(lambda: len(source.lists) >= 2, 5, what="the relist")
    assert run.count("informer_bus_reflector_expired_total") == 1
    assert run.count("informer_bus_reflector_relists_total") == 1


def test_a_closed_watch_is_resumed_from_the_last_rv_without_a_relist(start: Start) -> None:
    source = FakeSource([pod("a", 1)])
    source.watch_plans.append([[WatchEvent("MODIFIED", pod("a", 2))], CLOSE])
    run = start(source)
    wait_until(lambda: len(source.watches) >= 2, 5, what="the re-watch")
    assert [w["resource_version"] for w in source.watches[:2]] == ["1", "2"]
    assert len(source.lists) == 1
    assert run.count("informer_bus_reflector_watch_restarts_total", reason="closed") >= 1


def test_a_bad_line_rewatches_from_the_last_event_then_relists_when_it_persists(
    start: Start,
) -> None:
    source = FakeSource([pod("a", 1)])
    changed = WatchEvent("MODIFIED", pod("a", 2))
    bad = MalformedWatchEventError("invalid_json", "invalid JSON", b"{garbage")
    source.watch_plans.append([[changed], bad])
    source.watch_plans.extend([[bad]] * (BAD_LINE_RELIST_AFTER - 1))
    source.watch_plans.append([HOLD])
    run = start(source)
    wait_until(lambda: len(source.lists) >= 2, 10, what="the relist after repeated bad lines")
    resumed_at = [w["resource_version"] for w in source.watches[1:BAD_LINE_RELIST_AFTER]]
    assert resumed_at == ["2"] * (BAD_LINE_RELIST_AFTER - 1)
    reasons = run.count("informer_bus_reflector_bad_watch_lines_total", reason="invalid_json")
    assert reasons == BAD_LINE_RELIST_AFTER
    assert [key for _, key, _ in run.sink.history()] == ["ns/a", "ns/a"]


def test_bookmarks_move_the_resume_point(start: Start) -> None:
    source = FakeSource([pod("a", 1)])
    source.watch_plans.append([[source.bookmark(9)], CLOSE])
    run = start(source)
    wait_until(lambda: len(source.watches) >= 2, 5, what="the re-watch")
    assert source.watches[1]["resource_version"] == "9"
    assert run.sink.history() == [("Added", "ns/a", "1")]


def test_an_event_without_a_name_is_counted_and_skipped(start: Start) -> None:
    source = FakeSource([pod("a", 1)])
    nameless = WatchEvent("ADDED", {"kind": "Pod", "metadata": {"resourceVersion": "3"}})
    source.watch_plans.append([[nameless, WatchEvent("MODIFIED", pod("a", 4))], HOLD])
    run = start(source)
    wait_until(lambda: len(run.sink.published) == 2, 5, what="the good event")
    assert run.count("informer_bus_reflector_bad_input_total", reason="no_name") == 1


BY_KEY = ResourceLayout(4, ShardKeyChoice(), "Pod", "v1", namespaced=True)
BY_OWNER = replace(BY_KEY, shard_key=ShardKeyChoice.parse("owner"))


class LayoutFirstSink(FakeSink):
    """Remembers the layout recorded when the first delta is published."""

    layout_at_first_publish: ResourceLayout | None = None
    published_any = False

    def publish(
        self, epoch: int, deltas: Sequence[PendingDelta], *, checkpoint_rv: str | None
    ) -> PublishResult:
        if deltas and not self.published_any:
            self.published_any = True
            self.layout_at_first_publish = self.layout
        return super().publish(epoch, deltas, checkpoint_rv=checkpoint_rv)


def synced_sink(layout: ResourceLayout | None) -> FakeSink:
    """A sink a leader left synced at rv 5 with ``ns/a`` (and ``layout`` recorded)."""
    sink = LayoutFirstSink(checkpoint="5", synced_rv="5", layout=layout)
    envelope = DeltaEnvelope.from_delta(Delta(DeltaType.ADDED, pod("a", 1)), observed_at=0.0)
    sink.versions[envelope.key] = "1"
    sink.objects[envelope.key] = encode_envelope(envelope)
    return sink


def test_the_leader_records_its_layout_before_its_first_publish(start: Start) -> None:
    sink = LayoutFirstSink()
    run = start(FakeSource([pod("a", 1)]), sink, BY_OWNER)
    wait_until(run.reflector.synced.is_set, 5, what="sync")
    assert sink.published_any
    assert sink.layout_at_first_publish == BY_OWNER


@pytest.mark.parametrize(
    ("recorded", "ours", "relists"),
    [
        (BY_KEY, BY_OWNER, True),
        (BY_OWNER, BY_KEY, True),
        (None, BY_OWNER, True),  # no layout: a reflector from before layouts, sharded by key
        (None, BY_KEY, False),
        (BY_OWNER, BY_OWNER, False),
    ],
)
def test_a_leader_whose_shard_key_is_not_the_recorded_one_relists_first(
    start: Start,
    caplog: pytest.LogCaptureFixture,
    recorded: ResourceLayout | None,
    ours: ResourceLayout,
    relists: bool,
) -> None:
    caplog.set_level(logging.INFO, logger="reflector_svc.reflector")
    sink = synced_sink(recorded)
    source = FakeSource([pod("a", 1)], rv=5)
    run = start(source, sink, ours)
    wait_until(lambda: source.watches, 5, what="the watch")
    assert sink.layout == ours
    assert len(source.lists) == (1 if relists else 0)
    assert sink.synced_rv == "5" and not sink.relisting
    said = [
        r.getMessage() for r in caplog.records if "relisting so that every object" in r.getMessage()
    ]
    assert len(said) == (1 if relists else 0), said
    if relists:
        before = recorded.shard_key if recorded is not None else "key"
        assert f"sharded by {before}, this leader shards by {ours.shard_key}" in said[0]
    assert run.count("informer_bus_reflector_lists_total") == len(source.lists)


class OrderedSink(LayoutFirstSink):
    """Remembers the order of the calls that mark a relist and record a layout."""

    calls: list[str]

    def begin_relist(self, epoch: int) -> None:
        self.calls.append("begin_relist")
        super().begin_relist(epoch)

    def record_layout(self, layout: ResourceLayout) -> None:
        self.calls.append(f"record_layout {layout.shard_key}")
        super().record_layout(layout)


def test_a_relist_forced_by_a_new_shard_key_is_marked_before_the_layout_is_recorded(
    start: Start,
) -> None:
    """A leader that dies between the two leaves the next one a relist to do (the shards are
    marked relisting), though the layout that one finds is already its own."""
    sink = OrderedSink(checkpoint="5", synced_rv="5", layout=BY_KEY)
    sink.calls = []
    source = FakeSource([pod("a", 1)], rv=5)
    run = start(source, sink, BY_OWNER)
    wait_until(run.reflector.synced.is_set, 5, what="sync")
    wait_until(lambda: source.watches, 5, what="the watch")
    assert sink.calls[:2] == ["begin_relist", "record_layout owner"]


def test_a_recorded_shard_count_not_ours_is_an_error_in_the_log_not_a_stop(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="reflector_svc.reflector")
    sink = synced_sink(replace(BY_KEY, shard_count=16))
    source = FakeSource([pod("a", 1)], rv=5)
    start(source, sink, BY_KEY)
    wait_until(lambda: source.watches, 5, what="the watch")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "16 shards" in errors[0] and "writes 4" in errors[0], errors
    assert sink.layout == BY_KEY
