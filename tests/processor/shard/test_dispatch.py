"""The dispatcher and the ack tracker on their own (no Redis)."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry

from common.object_keys import Obj
from processor_svc.ack_tracker import AckToken
from processor_svc.dispatch import (
    AddNotification,
    DeleteNotification,
    DispatcherClosedError,
    HandlerDispatcher,
    UpdateNotification,
)
from processor_svc.metrics import ProcessorMetrics
from processor_svc.resync import MIN_RESYNC_PERIOD, ResyncPeriodError, checked_resync_period
from tests.reflector.publisher.support import obj
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until


def dispatcher(*handlers: tuple[str, Recorder], **kwargs: object) -> HandlerDispatcher:
    metrics = ProcessorMetrics(CollectorRegistry())
    return HandlerDispatcher(list(handlers), metrics=metrics, resource="pods", **kwargs)  # type: ignore[arg-type]


def test_a_token_completes_when_every_handler_processed_it() -> None:
    first, second = Recorder(), Recorder()
    done: list[str] = []
    hub = dispatcher(("first", first), ("second", second))
    hub.start()
    try:
        second.gate.clear()
        token = AckToken("1-0", on_done=lambda t: done.append(t.entry_id))
        assert hub.deliver(AddNotification(obj("ns/a", "1"), False), token)
        token.release()  # the creator's own hold
        wait_until(lambda: first.events and second.events, what="both handlers")
        assert not token.done and done == []
        second.gate.set()
        assert token.wait(2)
        assert done == ["1-0"]
    finally:
        second.gate.set()
        hub.stop(1)


def test_each_handler_sees_every_notification_in_order() -> None:
    first, second = Recorder(), Recorder()
    hub = dispatcher(("first", first), ("second", second), buffer_size=3)
    hub.start()
    a1, a2 = obj("ns/a", "1"), obj("ns/a", "2")
    for notification in (
        AddNotification(a1, True),
        UpdateNotification(a1, a2),
        DeleteNotification(a2),
    ) * 20:
        hub.deliver(notification)
    barrier = AckToken()
    hub.barrier(barrier)
    barrier.release()
    assert barrier.wait(5)
    assert hub.stop(1) == {"first": 0, "second": 0}
    expected = [
        ("add", "ns/a", "1", True),
        ("update", "ns/a", "1", "2"),
        ("delete", "ns/a", "2", False),
    ] * 20
    assert first.events == expected
    assert second.events == expected


def test_a_full_buffer_blocks_deliver_until_cancelled() -> None:
    blocked = Recorder()
    blocked.gate.clear()
    hub = dispatcher(("blocked", blocked), buffer_size=2)
    hub.start()
    try:
        for i in range(2):  # one in the handler, one queued: the capacity counts both
            assert hub.deliver(AddNotification(obj(f"ns/p{i}", "1"), False))
            if i == 0:
                wait_until(lambda: blocked.events, what="the handler to take the first")
        cancel = threading.Event()
        result: list[bool] = []
        waiter = threading.Thread(
            target=lambda: result.append(
                hub.deliver(AddNotification(obj("ns/q", "1"), False), cancel=cancel)
            )
        )
        waiter.start()
        time.sleep(0.2)
        assert result == []  # blocked: backpressure
        cancel.set()
        hub.wake()
        waiter.join(2)
        assert result == [False]
    finally:
        blocked.gate.set()
        left = hub.stop(1)
    assert left == {"blocked": 0}
    assert [e[1] for e in blocked.events] == ["ns/p0", "ns/p1"]


def test_deliver_all_keeps_order_and_the_buffer_bound_for_batches_larger_than_it() -> None:
    slow, fast = Recorder(), Recorder()
    hub = dispatcher(("slow", slow), ("fast", fast), buffer_size=4)
    peak: list[int] = []
    original = slow.on_add

    def on_add_watching_the_buffer(o: Obj, initial: bool) -> None:
        peak.append(max(runner.buffered() for runner in hub._runners))
        original(o, initial)

    slow.on_add = on_add_watching_the_buffer  # type: ignore[method-assign]
    hub.start()
    try:
        done: list[str] = []
        tokens = [AckToken(f"1-{i}", on_done=lambda t: done.append(t.entry_id)) for i in range(25)]
        batch = [(AddNotification(obj(f"ns/p{i:02}", "1"), False), tokens[i]) for i in range(25)]
        # Two notifications for one entry (a Replaced delta can give several): one token.
        batch.insert(6, (AddNotification(obj("ns/p05-b", "1"), False), tokens[5]))
        assert hub.deliver_all(batch)
        for token in tokens:
            token.release()  # the creator's holds, after the batch was queued
        assert all(token.wait(5) for token in tokens)
    finally:
        left = hub.stop(1)
    assert left == {"slow": 0, "fast": 0}
    expected = [n.obj["metadata"]["name"] for n, _ in batch]
    assert [e[1].split("/")[1] for e in slow.events] == expected
    assert [e[1].split("/")[1] for e in fast.events] == expected
    assert sorted(done) == sorted(t.entry_id for t in tokens)  # each completed exactly once
    assert max(peak) <= 4


def test_deliver_all_returns_false_when_cancelled_waiting_for_room() -> None:
    blocked = Recorder()
    blocked.gate.clear()
    hub = dispatcher(("blocked", blocked), buffer_size=2)
    hub.start()
    try:
        cancel = threading.Event()
        token = AckToken("1-0")
        batch = [(AddNotification(obj(f"ns/p{i}", "1"), False), token) for i in range(5)]
        result: list[bool] = []
        waiter = threading.Thread(
            target=lambda: result.append(hub.deliver_all(batch, cancel=cancel))
        )
        waiter.start()
        wait_until(lambda: blocked.events, what="the handler to take the first")
        time.sleep(0.1)
        assert result == []  # blocked on the full buffer: backpressure
        cancel.set()
        hub.wake()
        waiter.join(2)
        assert result == [False]
        token.release()
        assert not token.done  # the queued and the skipped notifications never release
    finally:
        blocked.gate.set()
        hub.stop(1)
    assert len(blocked.events) <= 2


def test_stop_drops_what_the_grace_period_could_not_drain_and_refuses_more() -> None:
    blocked = Recorder()
    blocked.gate.clear()
    hub = dispatcher(("blocked", blocked))
    hub.start()
    for i in range(5):
        hub.deliver(AddNotification(obj(f"ns/p{i}", "1"), False))
    wait_until(lambda: blocked.events, what="the first call")
    threading.Timer(0.3, blocked.gate.set).start()
    started = time.monotonic()
    assert hub.stop(0.1) == {"blocked": 4}
    assert time.monotonic() - started < 1.5
    assert len(blocked.events) == 1
    with pytest.raises(DispatcherClosedError):
        hub.deliver(AddNotification(obj("ns/late", "1"), False))


def test_resync_replays_on_update_from_the_lister_on_the_handlers_own_period() -> None:
    resyncing, quiet = Recorder(), Recorder()
    objects: list[Obj] = [obj("ns/a", "1"), obj("ns/b", "2")]
    hub = dispatcher(
        ("resyncing", resyncing),
        ("quiet", quiet),
        resync_periods={"resyncing": 1.0, "quiet": 0},  # 1 s: the minimum
        lister=lambda: objects,
    )
    started = time.monotonic()
    hub.start()
    try:
        wait_until(lambda: len(resyncing.events) == 2, timeout=3, what="a resync")
        assert time.monotonic() - started >= 0.95
        assert resyncing.events == [("update", "ns/a", "1", "1"), ("update", "ns/b", "2", "2")]
        assert quiet.events == []
    finally:
        hub.stop(1)


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        dispatcher(("a", Recorder()), ("a", Recorder()))
    with pytest.raises(ValueError, match="lister"):
        dispatcher(("a", Recorder()), resync_periods={"a": 5})
    with pytest.raises(ValueError, match="unknown handlers"):
        dispatcher(("a", Recorder()), resync_periods={"b": 5}, lister=list)
    with pytest.raises(ValueError, match="buffer_size"):
        dispatcher(("a", Recorder()), buffer_size=0)


@pytest.mark.parametrize("period", [0.2, 0.999, -1.0, float("nan")])
def test_a_resync_period_below_the_minimum_is_refused_as_on_the_command_line(
    period: float,
) -> None:
    # One rule with `--handler mod:attr@0.2s`: refused, never raised to the minimum.
    with pytest.raises(ResyncPeriodError, match="handler 'a': resync period"):
        dispatcher(("a", Recorder()), resync_periods={"a": period}, lister=list)
    assert checked_resync_period(MIN_RESYNC_PERIOD) == MIN_RESYNC_PERIOD
    assert checked_resync_period(0) is None
