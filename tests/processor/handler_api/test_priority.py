"""A controller's queue puts the initial list, takeovers and resyncs behind fresh events.

The measured promise (issue 37): with 20,000 keys of an initial list queued and a 1 ms
reconcile, a fresh change is reconciled before 90 % of that backlog. The same measurement on a
FIFO queue (``priority=False``) is run too, and must miss the promise: otherwise the measurement
could not tell the two queues apart.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

from common.priority_queue import LOW_PRIORITY, NORMAL_PRIORITY, PriorityQueue
from common.workqueue import QueueShutDown
from processor_svc.controller import Controller
from processor_svc.handlers import HandlerContext
from tests.support.controllers import make_context, synced_lister
from tests.support.objects import pod
from tests.support.waiting import wait_until

BACKLOG = 20_000
RECONCILE_SECONDS = 0.001
PROMISE = 0.10
"""At most this share of the backlog may be reconciled before the fresh change."""
FRESH = "default/fresh"


class Measured(Controller):
    """One worker; each reconcile takes 1 ms until the fresh key has been reconciled, then
    none (so stopping, which drains the queue, is quick). Records the order of reconciles."""

    workers = 1

    def __init__(self, context: HandlerContext, **options: Any) -> None:
        super().__init__(context, **options)
        self.lock = threading.Lock()
        self.reconciled: list[str] = []
        self.fast = threading.Event()

    def reconcile(self, key: str) -> None:
        if not self.fast.is_set():
            time.sleep(RECONCILE_SECONDS)
        with self.lock:
            self.reconciled.append(key)
        if key == FRESH:
            self.fast.set()

    def backlog_done(self) -> int:
        with self.lock:
            return sum(1 for key in self.reconciled if key != FRESH)


def backlog_before_the_fresh_change(*, priority: bool) -> tuple[int, bool]:
    """Start a controller, deliver a 20k initial list, then a fresh update; return how many
    backlog keys were reconciled before the fresh one, and whether it was reconciled at all
    (the wait ends, on a FIFO queue, as soon as the promise is missed)."""
    initial = [pod(f"pod-{i:05}") for i in range(BACKLOG)]
    fresh_v1 = pod("fresh")
    lister, _ = synced_lister(fresh_v1, *initial)
    controller = Measured(make_context(lister, priority=priority))
    try:
        controller.start()
        for obj in initial:
            controller.on_add(obj, True)  # a takeover's or a start's initial list
        wait_until(lambda: controller.backlog_done() > 0)  # the worker is into the backlog
        controller.on_update(fresh_v1, pod("fresh", rv="2"))  # the change a user just made
        wait_until(
            lambda: FRESH in controller.reconciled or controller.backlog_done() > PROMISE * BACKLOG,
            timeout=30.0,
            what="the fresh change, or 10 % of the backlog, reconciled",
        )
        controller.fast.set()
        with controller.lock:
            reconciled = list(controller.reconciled)
    finally:
        assert controller.stop(timeout=30.0)
    if FRESH not in reconciled:
        return len(reconciled), False
    return reconciled.index(FRESH), True


def test_a_fresh_change_is_reconciled_before_90_percent_of_a_20k_initial_list() -> None:
    before, reconciled = backlog_before_the_fresh_change(priority=True)

    assert reconciled
    assert before < PROMISE * BACKLOG, f"{before} of {BACKLOG} backlog keys went first"


def test_a_fifo_queue_misses_that_promise() -> None:
    before, reconciled = backlog_before_the_fresh_change(priority=False)

    assert not reconciled
    assert before > PROMISE * BACKLOG


def take_all(queue: PriorityQueue[str]) -> list[tuple[str, int]]:
    taken: list[tuple[str, int]] = []
    queue.shut_down()
    while True:
        try:
            taken.append(queue.get_with_priority(timeout=1.0))
        except QueueShutDown:
            return taken


def test_initial_list_and_resync_keys_are_low_priority_fresh_events_normal() -> None:
    a, b, c, d, e = (pod(name) for name in "abcde")
    lister, _ = synced_lister(a, b, c, d, e)
    controller = Measured(make_context(lister))  # never started: the queue is read here
    try:
        controller.on_add(a, True)  # initial list / takeover
        controller.on_update(b, b)  # a resync hands the cached object twice
        controller.on_update(pod("c", rv="7"), pod("c", rv="7"))  # a relist's unchanged object
        controller.on_add(d, False)
        controller.on_update(e, pod("e", rv="2"))
        controller.on_delete(pod("gone"))
        controller.on_add(a, False)  # a fresh event for a key waiting from the initial list
        queue = controller.queue
        assert isinstance(queue, PriorityQueue)
        assert take_all(queue) == [
            ("default/a", NORMAL_PRIORITY),  # promoted, and it was queued first
            ("default/d", NORMAL_PRIORITY),
            ("default/e", NORMAL_PRIORITY),
            ("default/gone", NORMAL_PRIORITY),
            ("default/b", LOW_PRIORITY),
            ("default/c", LOW_PRIORITY),
        ]
    finally:
        controller.stop()


def test_a_failed_low_priority_key_is_retried_at_low_priority() -> None:
    lister, _ = synced_lister(pod("a"))

    class FailsOnce(Controller):
        workers = 1
        seen: ClassVar[list[str]] = []

        def reconcile(self, key: str) -> None:
            self.seen.append(key)
            if len(self.seen) == 1:
                raise RuntimeError("not yet")

    controller = FailsOnce(make_context(lister))
    queue = controller.queue
    assert isinstance(queue, PriorityQueue)
    retried: list[int] = []
    original = queue.add_after

    def recording_add_after(item: str, delay: float, priority: int = NORMAL_PRIORITY) -> None:
        retried.append(priority)
        original(item, delay, priority)

    queue.add_after = recording_add_after  # type: ignore[method-assign]
    try:
        controller.start()
        controller.on_add(pod("a"), True)
        wait_until(lambda: len(FailsOnce.seen) == 2)
        assert retried == [LOW_PRIORITY]
    finally:
        controller.stop()
