"""Consumption: poison entries, acknowledgement after handlers, backpressure, fencing, stop."""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref

import orjson
import pytest

from common.store import Indexer
from processor_svc.ack_tracker import AckToken
from tests.processor.shard.support import MEMBER, Shard
from tests.reflector.publisher.support import TS, added, obj, updated
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until


def envelope_doc(key: str, rv: str) -> dict[str, object]:
    return {
        "v": 1,
        "t": "Added",
        "k": key,
        "rv": rv,
        "uid": f"uid-{key}",
        "ts": TS,
        "tomb": False,
        "o": obj(key, rv),
    }


def test_poison_entries_are_dead_lettered_acknowledged_and_skipped(shard: Shard) -> None:
    # One poison entry is already unacknowledged at takeover, the others arrive live.
    shard.create_group()
    early = shard.xadd_raw({"d": b"{not json}"})
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=200) as (worker, store, _):
        assert worker.wait_for_sync(5)
        shard.publish(added("ns/a", "1"))
        garbage = shard.xadd_raw({"d": b"\x00\x01garbage"})
        shard.publish(added("ns/b", "2"))
        wrong_version = shard.xadd_raw({"d": orjson.dumps({**envelope_doc("ns/x", "3"), "v": 99})})
        no_field = {k: v for k, v in envelope_doc("ns/y", "4").items() if k != "uid"}
        missing_field = shard.xadd_raw({"d": orjson.dumps(no_field)})
        wrong_layout = shard.xadd_raw({"x": b"1", "y": b"2"})
        shard.publish(added("ns/c", "5"))
        wait_until(lambda: len(recorder.events) == 3, what="the valid entries")
        wait_until(lambda: shard.pending() == 0, what="acknowledgements")
        assert recorder.events == [
            ("add", "ns/a", "1", False),
            ("add", "ns/b", "2", False),
            ("add", "ns/c", "5", False),
        ]
        assert sorted(store.list_keys()) == ["ns/a", "ns/b", "ns/c"]
        assert shard.group()["lag"] == 0
        assert worker.alive and worker.error is None

    letters = {letter["id"].decode(): letter for letter in shard.dead_letters()}
    assert list(letters) == [early, garbage, wrong_version, missing_field, wrong_layout]
    assert letters[early]["payload"] == b"{not json}"
    assert b"not valid JSON" in letters[early]["reason"]
    assert letters[garbage]["payload"] == b"\x00\x01garbage"
    assert b"one JSON object" in letters[garbage]["reason"]
    assert b"schema version 99" in letters[wrong_version]["reason"]
    assert b"missing ['uid']" in letters[missing_field]["reason"]
    assert letters[wrong_layout]["field:x"] == b"1"
    assert b"exactly one field" in letters[wrong_layout]["reason"]
    assert shard.sample("informer_bus_processor_dead_letters_total", shard="0") == 5


def test_an_entry_is_acknowledged_only_after_every_handler_returned(shard: Shard) -> None:
    fast, slow = Recorder(), Recorder()
    with shard.running(("fast", fast), ("slow", slow), block_ms=200) as (worker, _, _):
        assert worker.wait_for_sync(5)
        slow.gate.clear()
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: fast.events and slow.events, what="both handlers called")
        time.sleep(0.4)  # several ack rounds pass
        assert shard.pending() == 1
        slow.gate.set()
        wait_until(lambda: shard.pending() == 0, what="the acknowledgement")


def test_a_blocked_handler_with_a_full_buffer_stops_the_stream_read(shard: Shard) -> None:
    blocked = Recorder()
    with shard.running(
        ("blocked", blocked), dispatcher_kwargs={"buffer_size": 2}, count=5, block_ms=200
    ) as (worker, _, _):
        assert worker.wait_for_sync(5)
        blocked.gate.clear()
        shard.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(50)))
        wait_until(lambda: blocked.events, what="the handler to block")
        time.sleep(0.3)
        group = shard.group()
        # At most one batch (5) was taken from the stream: 1 in the handler, 2 buffered, 1 in
        # a blocked deliver, 1 read but not yet applied. The rest stays undelivered in Redis.
        assert group["lag"] == 45
        assert group["pending"] == 5
        buffered = shard.sample("informer_bus_processor_handler_buffer", handler="blocked")
        assert buffered == 2
        time.sleep(0.3)
        assert shard.group()["lag"] == 45  # still nothing more read
        blocked.gate.set()
        wait_until(lambda: len(blocked.events) == 50, what="every delta")
        wait_until(lambda: shard.pending() == 0 and shard.group()["lag"] == 0, what="acks")
        assert [e[1] for e in blocked.events] == [f"ns/p{i}" for i in range(50)]


def test_stop_while_blocked_on_a_full_buffer_ends_within_the_grace_period(shard: Shard) -> None:
    blocked = Recorder()
    store = Indexer()
    dispatcher = shard.dispatcher(("blocked", blocked), buffer_size=1)
    worker = shard.worker(store, dispatcher, count=10, block_ms=200)
    dispatcher.start()
    worker.start()
    try:
        assert worker.wait_for_sync(5)
        blocked.gate.clear()
        shard.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(10)))
        wait_until(lambda: blocked.events, what="the handler to block")
        started = time.monotonic()
        worker.stop(0.3)
        assert 0.25 < time.monotonic() - started < 2.0
        assert not worker.alive
        assert shard.pending() == 10  # nothing completed, nothing acknowledged
    finally:
        blocked.gate.set()
        worker.stop(0)
        dispatcher.stop(2)


def test_handler_exceptions_are_counted_and_logged_and_do_not_affect_others(
    shard: Shard, caplog: pytest.LogCaptureFixture
) -> None:
    failing, healthy = Recorder(fail=True), Recorder()
    caplog.set_level(logging.ERROR, logger="processor_svc.dispatch")
    with shard.running(("failing", failing), ("healthy", healthy), block_ms=200) as (w, _, _):
        shard.publish(added("ns/a", "1"))
        assert w.wait_for_sync(5)
        shard.publish(updated("ns/a", "2"), added("ns/b", "3"))
        wait_until(lambda: len(healthy.events) == 3, what="the healthy handler")
        wait_until(lambda: shard.pending() == 0, what="acknowledgements despite the errors")
        assert len(failing.events) == 3
        assert w.alive and w.error is None
    assert shard.sample("informer_bus_processor_handler_errors_total", handler="failing") == 3
    assert shard.sample("informer_bus_processor_handler_errors_total", handler="healthy") == 0
    messages = [r.getMessage() for r in caplog.records]
    assert "handler 'failing' failed on the add of ns/a" in messages
    assert "handler 'failing' failed on the update of ns/a" in messages
    assert "handler 'failing' failed on the add of ns/b" in messages
    assert caplog.records[0].exc_info is not None  # the first one with its traceback


def test_a_fenced_acknowledgement_is_refused_and_the_worker_stops(shard: Shard) -> None:
    slow = Recorder()
    store = Indexer()
    dispatcher = shard.dispatcher(("slow", slow))
    worker = shard.worker(store, dispatcher, block_ms=200)
    dispatcher.start()
    worker.start()
    try:
        assert worker.wait_for_sync(5)
        slow.gate.clear()
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: slow.events, what="the handler call")
        # A graceful stop waits for the handler; meanwhile the lease lapsed and someone else
        # took the shard: the final acknowledgement must be refused.
        stopper = threading.Thread(target=worker.stop, args=(5,))
        stopper.start()
        time.sleep(0.3)
        shard.client.hset(shard.keys.lease, mapping={"holder": "member-b", "epoch": 99})
        slow.gate.set()
        stopper.join()
        assert not worker.alive
        assert worker.ownership_lost
        assert "member-b" in str(worker.error)
        assert shard.pending() == 1  # the refused acknowledgement did not happen
    finally:
        slow.gate.set()
        worker.stop(0)
        dispatcher.stop(1)
    assert shard.sample("informer_bus_processor_ownership_lost_total", shard="0") == 1


def test_a_worker_that_finds_itself_fenced_starts_no_more_handler_calls(shard: Shard) -> None:
    """The lease moved on (a slow hand-over, a stall) and this worker learns it from a refused
    read before its ownership thread stops it. Its notifications still queued for the handlers
    must not run: the next owner may be calling handlers for the shard already. They did run
    (the worker ended without setting its stop event), and the chaos checks saw the old
    owner's update inside the new owner's period ("update of an object the store did not
    have")."""
    slow = Recorder()
    with shard.running(("slow", slow), block_ms=200) as (worker, _, dispatcher):
        assert worker.wait_for_sync(5)
        slow.gate.clear()
        shard.publish(added("ns/a", "1"), added("ns/b", "2"), updated("ns/a", "3"))
        wait_until(lambda: slow.events, what="the first handler call (held at the gate)")
        # The chosen moment: the other two notifications are queued behind the held call.
        shard.client.hset(shard.keys.lease, mapping={"holder": "member-b", "epoch": 99})
        wait_until(lambda: not worker.alive, what="the worker to find itself fenced")
        assert worker.ownership_lost
        slow.gate.set()
        drained = AckToken("drained")
        assert dispatcher.barrier(drained)
        drained.release()
        assert drained.wait(5)  # every queued notification was called or skipped by now
        assert slow.events == [("add", "ns/a", "1", False)]


def test_a_takeover_whose_lease_moved_on_delivers_no_initial_list(shard: Shard) -> None:
    """The snapshot read is fenced like the scripts: a worker started (or retrying its
    takeover) after its lease moved on must not tell the handlers about the shard."""
    shard.publish(added("ns/a", "1"), added("ns/b", "2"))
    shard.client.hset(shard.keys.lease, mapping={"holder": "member-b", "epoch": 99})
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=200) as (worker, _, _):
        wait_until(lambda: not worker.alive, what="the worker to find itself fenced")
        assert worker.ownership_lost
        assert not worker.has_synced
    assert recorder.events == []


def test_a_fenced_read_is_refused_after_an_epoch_change(shard: Shard) -> None:
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=200) as (worker, _, _):
        assert worker.wait_for_sync(5)
        # Same holder, newer epoch (we lost the lease and re-acquired it): this worker's
        # epoch is over.
        shard.client.hset(shard.keys.lease, mapping={"holder": MEMBER, "epoch": shard.epoch + 1})
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: not worker.alive, what="the worker to stop")
        assert worker.ownership_lost
        assert recorder.events == []
        # The stale owner did not move the group: the entry is still undelivered.
        assert shard.group()["lag"] == 1
        assert shard.pending() == 0


def test_lost_stops_without_acknowledging(shard: Shard) -> None:
    slow = Recorder()
    with shard.running(("slow", slow), block_ms=200) as (worker, _, _):
        assert worker.wait_for_sync(5)
        slow.gate.clear()
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: slow.events, what="the handler call")
        releaser = threading.Timer(0.1, slow.gate.set)
        releaser.start()
        worker.lost()
        releaser.join()
        assert not worker.alive
        time.sleep(0.2)
        assert shard.pending() == 1


def test_stop_finishes_the_running_call_acks_it_and_leaves_the_backlog_to_the_next_owner(
    shard: Shard,
) -> None:
    """A stop must not drain a backlog: the next owner could start while the old owner's
    handlers still run. Notifications not started yet are skipped and stay unacknowledged."""
    slow = Recorder(delay=0.05)
    store = Indexer()
    dispatcher = shard.dispatcher(("slow", slow))
    worker = shard.worker(store, dispatcher, block_ms=200)
    dispatcher.start()
    worker.start()
    try:
        assert worker.wait_for_sync(5)
        shard.publish(*(added(f"ns/p{i}", str(i + 1)) for i in range(10)))
        wait_until(lambda: slow.events, what="the first handler call")
        worker.stop(5)
        assert not worker.alive
        handled = len(slow.events)
        assert 1 <= handled < 10, "the call in progress finished; the backlog did not run"
        time.sleep(0.3)
        assert len(slow.events) == handled, "nothing of the stopped shard is applied later"
        assert shard.pending() + shard.group()["lag"] == 10 - handled, "the rest is unacked"
    finally:
        worker.stop(0)
        dispatcher.stop(1)


def test_a_block_longer_than_redis_pys_default_socket_timeout_is_fine_and_stop_is_quick(
    shard: Shard,
) -> None:
    recorder = Recorder()
    with shard.running(("rec", recorder), block_ms=6000) as (worker, _, _):
        assert worker.wait_for_sync(5)
        time.sleep(5.5)  # the worker blocks past redis-py's default 5 s socket timeout
        assert worker.alive and worker.error is None
        assert shard.sample("informer_bus_processor_redis_errors_total", shard="0") == 0
        shard.publish(added("ns/a", "1"))
        wait_until(lambda: recorder.events, timeout=1, what="the delta, without waiting out BLOCK")
        time.sleep(0.3)  # blocking again, for another 6 s
        started = time.monotonic()
        worker.stop(1)
        assert time.monotonic() - started < 1.0  # CLIENT UNBLOCK, not the end of the BLOCK


def test_a_stopped_worker_is_freed_without_waiting_for_a_full_garbage_collection(
    shard: Shard,
) -> None:
    # A processor hands shards back and forth; each stopped worker holds its shard's store. If
    # anything long-lived (here: the blocking connection's connect hook, kept by redis-py's
    # cyclic pool) still referenced it, the store would stay in memory until a rare full
    # collection: the soak test saw a processor's RSS climb with every rebalance.
    gc.disable()
    try:
        with shard.running(("rec", Recorder()), block_ms=100) as (worker, store, dispatcher):
            assert worker.wait_for_sync(5)
            wait_until(lambda w=worker: w._loop._wait.connected, what="a blocking read")
            freed = weakref.ref(worker)
        worker.join(5)
        del worker, store, dispatcher
        assert freed() is None
    finally:
        gc.enable()
