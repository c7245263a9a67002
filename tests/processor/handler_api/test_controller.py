"""Controller: events become keys, workers reconcile them, failures retry, then give up."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import process_deltas
from common.object_keys import DeletedFinalStateUnknown
from common.rate_limiters import ItemExponentialFailureRateLimiter
from common.sharding import shard_for
from processor_svc.controller import DEFAULT_MAX_RETRIES, DEFAULT_WORKERS, Controller
from processor_svc.handlers import HandlerContext
from processor_svc.lister import ShardedLister
from tests.support.controllers import make_context, synced_lister
from tests.support.objects import pod
from tests.support.waiting import wait_until


class Recording(Controller):
    """Records reconciles; fails a key while ``failures[key]`` is positive (or forever if -1)."""

    def __init__(self, context: HandlerContext, **options: Any) -> None:
        super().__init__(context, **options)
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.seen: dict[str, object] = {}
        self.failures: dict[str, int] = {}
        self.hold = 0.0

    def reconcile(self, key: str) -> None:
        if self.hold:
            time.sleep(self.hold)
        with self.lock:
            self.calls.append(key)
            self.seen[key] = self.lister.get_by_key(key)
            remaining = self.failures.get(key, 0)
            if remaining:
                self.failures[key] = remaining - 1
                raise RuntimeError(f"{key} is not ready")

    def count(self, key: str) -> int:
        with self.lock:
            return self.calls.count(key)


def test_defaults_and_naming() -> None:
    lister, _ = synced_lister()
    controller = Recording(make_context(lister))
    try:
        assert controller.workers == DEFAULT_WORKERS == 2
        assert controller.max_retries == DEFAULT_MAX_RETRIES == 5
        assert controller.name == "recording"
        assert controller.queue.name == "recording"
        assert controller.lister is lister
    finally:
        controller.stop()

    class Tuned(Recording):
        name = "tuned-one"
        workers = 3
        max_retries = 1

    tuned = Tuned(make_context(lister), workers=4)
    try:
        assert (tuned.name, tuned.workers, tuned.max_retries) == ("tuned-one", 4, 1)
    finally:
        tuned.stop()
    with pytest.raises(ValueError, match="workers"):
        Recording(make_context(lister), workers=0)


def test_added_updated_deleted_and_tombstone_keys_are_reconciled(
    controllers: list[Controller],
) -> None:
    lister, store = synced_lister()
    controller = Recording(make_context(lister))
    controllers.append(controller)
    controller.start()

    a, b, c = pod("a"), pod("b", "other"), pod("c")
    process_deltas(controller, store, [Delta(DeltaType.ADDED, a)], is_in_initial_list=True)
    process_deltas(controller, store, [Delta(DeltaType.ADDED, b)], is_in_initial_list=False)
    process_deltas(controller, store, [Delta(DeltaType.ADDED, c)], is_in_initial_list=False)
    wait_until(lambda: controller.count("default/c") == 1)
    b2 = pod("b", "other", rv="2")
    process_deltas(controller, store, [Delta(DeltaType.UPDATED, b2)], is_in_initial_list=False)
    wait_until(lambda: controller.count("other/b") == 2)
    assert controller.seen["other/b"] == b2  # reconcile reads the current state
    process_deltas(controller, store, [Delta(DeltaType.DELETED, a)], is_in_initial_list=False)
    tombstone = DeletedFinalStateUnknown("default/c", c)
    process_deltas(controller, store, [Delta(DeltaType.DELETED, tombstone)], False)
    wait_until(lambda: controller.count("default/a") == 2 and controller.count("default/c") == 2)
    assert controller.seen["default/a"] is None
    assert controller.seen["default/c"] is None
    controller.on_delete(DeletedFinalStateUnknown("gone/never-seen", None))
    wait_until(lambda: controller.count("gone/never-seen") == 1)


def test_a_failing_key_is_retried_then_forgotten_on_success(controllers: list[Controller]) -> None:
    lister, _ = synced_lister(pod("flaky"))
    controller = Recording(make_context(lister), workers=1)
    controllers.append(controller)
    controller.failures["default/flaky"] = 2
    controller.start()
    controller.enqueue("default/flaky")
    wait_until(lambda: controller.count("default/flaky") == 3)
    wait_until(lambda: controller.num_requeues("default/flaky") == 0)
    time.sleep(0.05)  # no further attempt after the success
    assert controller.count("default/flaky") == 3


def test_gives_up_after_max_retries_with_a_log(
    controllers: list[Controller], caplog: pytest.LogCaptureFixture
) -> None:
    lister, _ = synced_lister(pod("broken"))
    controller = Recording(make_context(lister), max_retries=3)
    controllers.append(controller)
    controller.failures["default/broken"] = -1  # never succeeds
    caplog.set_level(logging.WARNING, logger="tests.processor_api")
    controller.start()
    controller.enqueue("default/broken")
    wait_until(lambda: any("giving up" in r.getMessage() for r in caplog.records))
    time.sleep(0.05)  # backoff is at most 10 ms: a retry after giving up would show by now
    assert controller.count("default/broken") == 1 + 3
    assert controller.num_requeues("default/broken") == 0
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 3 and all(r.levelno == logging.WARNING for r in retries)
    (gave_up,) = [r for r in caplog.records if "giving up" in r.getMessage()]
    assert gave_up.levelno == logging.ERROR
    assert gave_up.getMessage().startswith("giving up on default/broken after 3 retries")
    assert gave_up.exc_info is not None
    # A new event for the key starts over.
    controller.failures["default/broken"] = 0
    controller.enqueue("default/broken")
    wait_until(lambda: controller.count("default/broken") == 5)


def test_retries_are_spaced_by_the_given_rate_limiter(controllers: list[Controller]) -> None:
    lister, _ = synced_lister(pod("slow"))
    limiter = ItemExponentialFailureRateLimiter[str](0.02, 1.0)
    controller = Recording(make_context(lister), max_retries=2, workers=1, rate_limiter=limiter)
    controllers.append(controller)
    controller.failures["default/slow"] = -1
    started = time.monotonic()
    controller.start()
    controller.enqueue("default/slow")
    wait_until(lambda: controller.count("default/slow") == 3)
    assert time.monotonic() - started >= 0.02 + 0.04  # 20 ms, then 40 ms
    wait_until(lambda: limiter.num_requeues("default/slow") == 0)  # forgotten on giving up


def test_success_forgets_in_the_given_rate_limiter(controllers: list[Controller]) -> None:
    lister, _ = synced_lister(pod("x"))
    limiter = ItemExponentialFailureRateLimiter[str](0.001, 0.005)
    controller = Recording(make_context(lister), workers=1, rate_limiter=limiter)
    controllers.append(controller)
    controller.failures["default/x"] = 2
    controller.start()
    controller.enqueue("default/x")
    wait_until(lambda: controller.count("default/x") == 3)
    wait_until(lambda: limiter.num_requeues("default/x") == 0)
    assert controller.num_requeues("default/x") == 0


def test_one_key_is_never_reconciled_concurrently(controllers: list[Controller]) -> None:
    keys = [f"default/k{i}" for i in range(5)]
    lister, _ = synced_lister(*(pod(f"k{i}") for i in range(5)))

    class Probe(Controller):
        def __init__(self, context: HandlerContext) -> None:
            super().__init__(context, workers=4)
            self.lock = threading.Lock()
            self.in_flight: Counter[str] = Counter()
            self.max_per_key = 0
            self.max_total = 0
            self.done = 0

        def reconcile(self, key: str) -> None:
            with self.lock:
                self.in_flight[key] += 1
                self.max_per_key = max(self.max_per_key, self.in_flight[key])
                self.max_total = max(self.max_total, sum(self.in_flight.values()))
            time.sleep(0.002)
            with self.lock:
                self.in_flight[key] -= 1
                self.done += 1

    probe = Probe(make_context(lister))
    controllers.append(probe)
    probe.start()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # keep re-adding keys that are being processed
        for key in keys:
            probe.enqueue(key)
        time.sleep(0.0005)
    probe.stop()
    assert probe.done >= 20
    assert probe.max_per_key == 1
    assert probe.max_total > 1  # different keys did run in parallel


def test_stop_drains_the_queue_and_joins_the_workers() -> None:
    lister, _ = synced_lister()
    controller = Recording(make_context(lister), workers=2)
    controller.hold = 0.002
    controller.start()
    keys = [f"default/p{i}" for i in range(30)]
    for key in keys:
        controller.enqueue(key)
    assert controller.stop()
    assert sorted(controller.calls) == sorted(keys)
    assert not controller.running
    controller.enqueue("default/late")  # ignored after stop
    assert controller.stop()  # idempotent
    with pytest.raises(RuntimeError, match="stopped"):
        controller.start()


def test_stop_with_a_timeout_reports_a_stuck_worker() -> None:
    lister, _ = synced_lister()
    release = threading.Event()

    class Stuck(Controller):
        def reconcile(self, key: str) -> None:
            release.wait()

    controller = Stuck(make_context(lister), workers=1)
    controller.start()
    controller.enqueue("default/stuck")
    wait_until(lambda: controller.queue.len() == 0)
    assert not controller.stop(timeout=0.05)
    assert controller.running
    release.set()
    assert controller.stop()


def test_stop_without_start_leaves_no_thread() -> None:
    lister, _ = synced_lister()
    controller = Recording(make_context(lister))
    controller.enqueue("default/a")
    assert controller.stop()
    assert controller.calls == []


def test_workers_wait_for_cache_sync(controllers: list[Controller]) -> None:
    lister = ShardedLister()
    store = lister.new_store()
    store.add(pod("a"))
    lister.attach(0, store)
    controller = Recording(make_context(lister))
    controllers.append(controller)
    controller.start()
    controller.on_add(pod("a"), True)
    time.sleep(0.05)
    assert controller.calls == []
    lister.mark_synced(0)
    wait_until(lambda: controller.calls == ["default/a"])


def test_stop_while_waiting_for_sync(controllers: list[Controller]) -> None:
    lister = ShardedLister()  # never synced
    controller = Recording(make_context(lister))
    controller.start()
    controller.enqueue("default/a")
    started = time.monotonic()
    assert controller.stop(timeout=5.0)
    assert time.monotonic() - started < 2.0
    assert controller.calls == []


def test_not_waiting_for_sync_when_told(controllers: list[Controller]) -> None:
    controller = Recording(make_context(ShardedLister()), wait_for_sync=False)
    controllers.append(controller)
    controller.start()
    controller.enqueue("default/a")
    wait_until(lambda: controller.calls == ["default/a"])


def test_keys_of_shards_handed_over_are_skipped(controllers: list[Controller]) -> None:
    shard_count = 2
    lister = ShardedLister(shard_count)
    pods = [pod(f"p{i}") for i in range(10)]
    stores = {shard: lister.new_store() for shard in range(shard_count)}
    for p in pods:
        stores[shard_for(f"default/{p['metadata']['name']}", shard_count)].add(p)
    for shard, store in stores.items():
        lister.attach(shard, store)
        lister.mark_synced(shard)
    lister.detach(1)
    owned = sorted(k for k in stores[0].list_keys())
    moved = sorted(k for k in stores[1].list_keys())
    assert owned and moved

    controller = Recording(make_context(lister))
    controllers.append(controller)
    controller.start()
    for key in owned + moved:
        controller.enqueue(key)
    assert controller.stop()
    assert sorted(controller.calls) == owned  # moved keys were not mistaken for deletions

    everything = Recording(make_context(lister), reconcile_only_owned=False)
    controllers.append(everything)
    everything.start()
    for key in owned + moved:
        everything.enqueue(key)
    assert everything.stop()
    assert sorted(everything.calls) == sorted(owned + moved)


def test_reconcile_may_stop_its_own_controller() -> None:
    lister, _ = synced_lister()
    stopped: list[bool] = []

    class StopsItself(Controller):
        def reconcile(self, key: str) -> None:
            stopped.append(self.stop())

    controller = StopsItself(make_context(lister), workers=1)
    controller.start()
    controller.enqueue("default/a")
    wait_until(lambda: stopped == [True])
    wait_until(lambda: not controller.running)
    assert controller.stop()
