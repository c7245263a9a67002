"""The write barrier (``processor_svc.write_barrier``): no reconcile acts on a cache older than
its own write -- the rules on a fake clock, then a real controller whose reconcile writes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import process_deltas
from common.keys import DeletedFinalStateUnknown
from processor_svc.controller import Controller
from processor_svc.handlers import HandlerContext
from processor_svc.write_barrier import Verdict, WriteBarrier
from tests.processor.handler_api.conftest import make_context, pod, synced_lister
from tests.support.waiting import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cached(obj: Any) -> Any:
    return lambda: obj


def test_a_key_waits_until_the_cache_holds_the_written_version_or_later() -> None:
    clock = Clock()
    barrier = WriteBarrier(10.0, clock=clock)
    assert barrier.check("ns/a", cached(None)) is Verdict.RECONCILE  # no expectation
    barrier.expect("ns/a", "12")
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="11"))) is Verdict.WAIT
    assert barrier.check("ns/a", cached(None)) is Verdict.WAIT  # a create not seen yet
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="9"))) is Verdict.WAIT  # "9" < "12"
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="13"))) is Verdict.RECONCILE
    assert len(barrier) == 0  # met: forgotten
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="1"))) is Verdict.RECONCILE


def test_an_event_with_the_write_or_later_meets_the_expectation() -> None:
    barrier = WriteBarrier(10.0, clock=Clock())
    barrier.expect("ns/a", "12")
    barrier.observe("ns/a", pod("a", "ns", rv="11"), deleted=False)
    assert barrier.remaining("ns/a") is not None
    barrier.observe("ns/a", pod("a", "ns", rv="12"), deleted=False)
    assert barrier.remaining("ns/a") is None
    # A deletion by someone else after our write also shows the cache passed it.
    barrier.expect("ns/b", "20")
    barrier.observe("ns/b", DeletedFinalStateUnknown("ns/b", pod("b", "ns", rv="21")), deleted=True)
    assert barrier.check("ns/b", cached(None)) is Verdict.RECONCILE


def test_a_deletion_is_met_once_the_cache_no_longer_holds_the_key() -> None:
    barrier = WriteBarrier(10.0, clock=Clock())
    barrier.expect_deleted("ns/a")
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="5"))) is Verdict.WAIT
    barrier.observe("ns/a", pod("a", "ns", rv="6"), deleted=False)  # an update: not it
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="6"))) is Verdict.WAIT
    assert barrier.check("ns/a", cached(None)) is Verdict.RECONCILE


def test_an_expectation_expires_once_and_versions_that_are_not_numbers_need_equality() -> None:
    clock = Clock()
    barrier = WriteBarrier(10.0, clock=clock)
    barrier.expect("ns/a", "abc")
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="abd"))) is Verdict.WAIT
    assert barrier.remaining("ns/a") == 10.0
    clock.now += 10.0
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="abd"))) is Verdict.EXPIRED
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="abd"))) is Verdict.RECONCILE
    barrier.expect("ns/a", "abc")
    assert barrier.check("ns/a", cached(pod("a", "ns", rv="abc"))) is Verdict.RECONCILE
    with pytest.raises(ValueError, match="timeout"):
        WriteBarrier(0)
    with pytest.raises(ValueError, match="resource_version"):
        barrier.expect("ns/a", "")


def test_the_cache_is_read_only_for_keys_with_an_expectation() -> None:
    barrier = WriteBarrier(10.0, clock=Clock())

    def unexpected() -> Any:
        raise AssertionError("read the cache without an expectation")

    assert barrier.check("ns/a", unexpected) is Verdict.RECONCILE


class Writer(Controller):
    """Each reconcile "writes" its object: the version it would get back is the cached one + 1,
    which it tells the barrier; it records the version it read."""

    workers = 1

    def __init__(self, context: HandlerContext, **options: Any) -> None:
        super().__init__(context, **options)
        self.lock = threading.Lock()
        self.read: list[str | None] = []

    def reconcile(self, key: str) -> None:
        obj = self.lister.get_by_key(key)
        version = None if obj is None else obj["metadata"]["resourceVersion"]
        with self.lock:
            self.read.append(version)
        if version is not None:
            self.expect_version(key, str(int(version) + 1))

    def reads(self) -> list[str | None]:
        with self.lock:
            return list(self.read)


def test_a_reconcile_never_reads_a_cache_older_than_its_own_write(
    controllers: list[Controller],
) -> None:
    lister, store = synced_lister()
    controller = Writer(make_context(lister))
    controllers.append(controller)
    controller.start()
    process_deltas(controller, store, [Delta(DeltaType.ADDED, pod("a", rv="1"))], False)
    wait_until(lambda: controller.reads() == ["1"], what="the first reconcile")
    # Its write would come back as rv 2. Meanwhile an unrelated event for the key (a resync,
    # another field) enqueues it again with the cache still at rv 1: no reconcile.
    controller.on_update(pod("a", rv="1"), pod("a", rv="1"))
    time.sleep(0.2)
    assert controller.reads() == ["1"]
    # The write reaches the cache: the key is reconciled, on a cache that holds it.
    process_deltas(controller, store, [Delta(DeltaType.UPDATED, pod("a", rv="2"))], False)
    wait_until(lambda: controller.reads() == ["1", "2"], what="the reconcile after the write")


def test_a_write_the_cache_never_shows_is_retried_after_the_timeout(
    controllers: list[Controller],
) -> None:
    lister, store = synced_lister()
    controller = Writer(make_context(lister), write_barrier_timeout=0.3)
    controllers.append(controller)
    controller.start()
    process_deltas(controller, store, [Delta(DeltaType.ADDED, pod("a", rv="1"))], False)
    wait_until(lambda: controller.reads() == ["1"], what="the first reconcile")
    controller.enqueue("default/a")  # the cache stays at rv 1 (its write was lost)
    time.sleep(0.1)
    assert controller.reads() == ["1"]
    started = time.monotonic()
    wait_until(lambda: controller.reads() == ["1", "1"], what="the retry after the timeout")
    assert time.monotonic() - started >= 0.1  # not before the deadline
