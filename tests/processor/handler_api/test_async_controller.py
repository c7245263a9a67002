"""AsyncController: ``async def reconcile`` on an event loop, with the sync controller's rules."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections import Counter
from typing import Any

import pytest

from common.settings import settings_of
from processor_svc.async_controller import AsyncController
from processor_svc.controller import Controller
from processor_svc.event_loop import EventLoopThread
from processor_svc.handlers import HandlerContext
from processor_svc.settings import ProcessorSettings
from tests.support.controllers import make_context, synced_lister
from tests.support.objects import pod
from tests.support.waiting import wait_until


class Probe(AsyncController):
    """Awaits ``delay`` per reconcile; records calls in flight, overall and per key; fails a
    key while ``failures[key]`` is positive."""

    def __init__(self, context: HandlerContext, delay: float = 0.02, **options: Any) -> None:
        super().__init__(context, **options)
        self.delay = delay
        self.lock = threading.Lock()
        self.in_flight: Counter[str] = Counter()
        self.max_per_key = 0
        self.max_total = 0
        self.calls: list[str] = []
        self.failures: dict[str, int] = {}
        self.threads: set[str] = set()

    async def reconcile(self, key: str) -> None:
        with self.lock:
            self.threads.add(threading.current_thread().name)
            self.in_flight[key] += 1
            self.max_per_key = max(self.max_per_key, self.in_flight[key])
            self.max_total = max(self.max_total, sum(self.in_flight.values()))
        try:
            await asyncio.sleep(self.delay)
        finally:
            with self.lock:
                self.in_flight[key] -= 1
                self.calls.append(key)
        remaining = self.failures.get(key, 0)
        if remaining:
            self.failures[key] = remaining - 1
            raise RuntimeError(f"{key} is not ready")

    def count(self, key: str) -> int:
        with self.lock:
            return self.calls.count(key)


def test_at_most_the_limit_in_flight_and_never_two_reconciles_of_one_key(
    controllers: list[Controller],
) -> None:
    keys = [f"default/k{i}" for i in range(40)]
    lister, _ = synced_lister(*(pod(f"k{i}") for i in range(40)))
    probe = Probe(make_context(lister), max_concurrent_reconciles=8)
    controllers.append(probe)
    probe.start()
    for _ in range(5):  # re-add keys that are being reconciled: they come back, one at a time
        for key in keys:
            probe.enqueue(key)
        wait_until(lambda: probe.max_total == 8, what="eight reconciles in flight")
    assert probe.stop(5)
    assert probe.max_total == 8
    assert probe.max_per_key == 1
    assert set(probe.calls) == set(keys)
    assert len(probe.threads) == 1  # one event loop thread, not a thread per reconcile


def test_the_limit_defaults_to_the_processors_setting() -> None:
    lister, _ = synced_lister()
    settings = settings_of(ProcessorSettings, resource="pods", max_concurrent_reconciles=3)
    for context, limit in (
        (make_context(lister, settings=settings), 3),
        (make_context(lister), 10),
    ):
        probe = Probe(context)
        assert probe.max_concurrent_reconciles == limit
        assert probe.stop()
    with pytest.raises(ValueError, match="max_concurrent_reconciles"):
        Probe(make_context(lister), max_concurrent_reconciles=-1)


def test_a_failing_key_is_retried_with_backoff_then_given_up(
    controllers: list[Controller], caplog: pytest.LogCaptureFixture
) -> None:
    lister, _ = synced_lister(pod("flaky"), pod("broken"))
    probe = Probe(make_context(lister), delay=0.001, max_retries=3)
    controllers.append(probe)
    probe.failures = {"default/flaky": 2, "default/broken": 100}
    with caplog.at_level(logging.WARNING):
        probe.start()
        probe.enqueue("default/flaky")
        probe.enqueue("default/broken")
        wait_until(lambda: probe.count("default/flaky") == 3, what="two retries, then success")
        wait_until(lambda: probe.count("default/broken") == 4, what="three retries")
        wait_until(lambda: any("giving up on default/broken" in r.message for r in caplog.records))
    assert probe.num_requeues("default/flaky") == 0
    assert probe.num_requeues("default/broken") == 0
    assert probe.max_per_key == 1


def test_the_write_barrier_holds_a_key_until_the_cache_shows_the_write(
    controllers: list[Controller],
) -> None:
    lister, store = synced_lister(pod("a", rv="1"))

    class Writer(Probe):
        async def reconcile(self, key: str) -> None:
            await super().reconcile(key)
            self.expect_version(key, "5")  # as after a write the API answered with rv 5

    writer = Writer(make_context(lister), delay=0.001)
    controllers.append(writer)
    writer.start()
    writer.enqueue("default/a")
    wait_until(lambda: writer.count("default/a") == 1)
    writer.on_update(pod("a", rv="1"), pod("a", rv="2"))  # an older event: still held
    wait_until(lambda: writer.queue.len() == 0)
    assert writer.count("default/a") == 1
    newer = pod("a", rv="5")
    store.update(newer)
    writer.on_update(pod("a", rv="2"), newer)
    wait_until(lambda: writer.count("default/a") == 2, what="reconciled once the write showed")


def test_stop_drains_the_queue_and_waits_for_the_reconciles_in_flight() -> None:
    lister, _ = synced_lister()
    probe = Probe(make_context(lister), delay=0.05, max_concurrent_reconciles=4)
    probe.start()
    keys = [f"default/p{i}" for i in range(12)]
    for key in keys:
        probe.enqueue(key)
    assert probe.stop(5)
    assert sorted(probe.calls) == sorted(keys)  # all of them, none cancelled
    assert not probe.running
    with pytest.raises(RuntimeError, match="stopped"):
        probe.start()


def test_a_reconcile_stuck_past_the_timeout_is_cancelled_when_its_loop_closes() -> None:
    lister, _ = synced_lister()
    loop = EventLoopThread("test-loop")
    probe = Probe(dataclasses.replace(make_context(lister), event_loop=loop), delay=60)
    probe.start()
    probe.enqueue("default/stuck")
    wait_until(lambda: probe.in_flight["default/stuck"] == 1)
    assert not probe.stop(timeout=0.05)
    loop.close()  # what the processor does after its grace period
    wait_until(lambda: not probe.running, what="the feeder ends once its reconcile was cancelled")


def test_an_async_reconcile_on_a_sync_controller_is_refused_when_the_class_is_defined() -> None:
    with pytest.raises(TypeError, match="needs AsyncController"):

        class Wrong(Controller):
            async def reconcile(self, key: str) -> None: ...
