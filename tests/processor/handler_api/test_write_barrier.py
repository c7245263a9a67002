"""The write barrier (``processor_svc.write_barrier``): no reconcile acts on a cache older than
its own write -- the rules on a fake clock, then a real controller whose reconcile writes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import process_deltas
from common.object_keys import DeletedFinalStateUnknown
from processor_svc.controller import Controller
from processor_svc.handlers import HandlerContext
from processor_svc.predicates import generation_changed
from processor_svc.write_barrier import Expectation, Verdict, WriteBarrier
from tests.support.controllers import make_context, synced_lister
from tests.support.objects import pod
from tests.support.waiting import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cached(obj: Any) -> Any:
    """A cache reader that holds ``obj`` under every key."""
    return lambda resource, key: obj


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

    def unexpected(resource: str, key: str) -> Any:
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


# --- several expectations per key, across resources -----------------------------------------


def config_map(name: str, namespace: str = "ns", *, rv: str = "1") -> Any:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv}}


class Caches:
    """A cache reader over ``{(resource, key): obj}``, recording what it was asked."""

    def __init__(self, objects: dict[tuple[str, str], Any]) -> None:
        self.objects = objects
        self.asked: list[tuple[str, str]] = []

    def __call__(self, resource: str, key: str) -> Any:
        self.asked.append((resource, key))
        return self.objects.get((resource, key))


def test_a_key_waits_for_every_write_each_in_its_own_resources_cache() -> None:
    barrier = WriteBarrier(10.0, resource="widgets", clock=Clock())
    barrier.expect("ns/w", "7", resource="configmaps", object_key="ns/w-config")
    barrier.expect("ns/w", "5")  # the Widget's status: the primary, the key itself
    caches = Caches({("configmaps", "ns/w-config"): config_map("w-config", rv="7")})
    assert barrier.check("ns/w", caches) is Verdict.WAIT  # the status write is not cached yet
    assert sorted(caches.asked) == [("configmaps", "ns/w-config"), ("widgets", "ns/w")]
    assert [(e.resource, e.object_key) for e in barrier.expectations("ns/w")] == [
        ("widgets", "ns/w")  # the met one is forgotten, the other still waits
    ]
    caches.objects[("widgets", "ns/w")] = pod("w", "ns", rv="5")
    assert barrier.check("ns/w", caches) is Verdict.RECONCILE
    assert len(barrier) == 0


def test_an_event_meets_only_the_expectation_of_its_own_resource() -> None:
    barrier = WriteBarrier(10.0, resource="widgets", clock=Clock())
    barrier.expect("ns/w", "7", resource="configmaps", object_key="ns/w")
    barrier.observe("ns/w", pod("w", "ns", rv="9"), deleted=False)  # a Widget event, same key
    assert len(barrier.expectations("ns/w")) == 1
    barrier.observe("ns/w", config_map("w", rv="9"), deleted=False, resource="configmaps")
    assert barrier.expectations("ns/w") == []
    # A deletion of a child meets an expect_deleted of that child, for every key waiting on it.
    barrier.expect_deleted("ns/a", resource="configmaps", object_key="ns/shared")
    barrier.expect_deleted("ns/b", resource="configmaps", object_key="ns/shared")
    barrier.observe("ns/shared", config_map("shared"), deleted=True, resource="configmaps")
    assert len(barrier) == 0


def test_expecting_an_object_again_replaces_its_earlier_expectation() -> None:
    barrier = WriteBarrier(10.0, resource="widgets", clock=Clock())
    barrier.expect("ns/w", "3", resource="configmaps", object_key="ns/c")
    barrier.expect("ns/w", "8", resource="configmaps", object_key="ns/c")
    (only,) = barrier.expectations("ns/w")
    assert only.version == "8"
    caches = Caches({("configmaps", "ns/c"): config_map("c", rv="5")})
    assert barrier.check("ns/w", caches) is Verdict.WAIT  # 5 meets the first write, not the second


def test_a_waiting_key_is_released_by_the_event_that_meets_its_last_expectation() -> None:
    barrier = WriteBarrier(10.0, resource="widgets", clock=Clock())
    barrier.expect("ns/w", "7", resource="configmaps", object_key="ns/w-config")
    barrier.expect("ns/w", "5")
    # Not waiting yet (nobody asked to reconcile it): meeting it releases nothing.
    assert barrier.observe("ns/w", pod("w", "ns", rv="5"), deleted=False) == ()
    assert barrier.check("ns/w", Caches({})) is Verdict.WAIT
    assert barrier.observe("ns/other", pod("other", "ns", rv="99"), deleted=False) == ()
    released = barrier.observe(
        "ns/w-config", config_map("w-config", rv="7"), deleted=False, resource="configmaps"
    )
    assert released == ("ns/w",)
    assert barrier.check("ns/w", Caches({})) is Verdict.RECONCILE


def test_each_expectation_expires_at_its_own_deadline() -> None:
    clock = Clock()
    barrier = WriteBarrier(10.0, resource="widgets", clock=clock)
    barrier.expect("ns/w", "7", resource="configmaps", object_key="ns/c")
    clock.now += 6
    barrier.expect("ns/w", "5")
    assert barrier.remaining("ns/w") == 4.0  # the earliest deadline
    clock.now += 4
    assert barrier.check("ns/w", Caches({})) is Verdict.EXPIRED  # the ConfigMap's write
    assert [e.resource for e in barrier.expectations("ns/w")] == ["widgets"]
    assert barrier.check("ns/w", Caches({})) is Verdict.WAIT  # the status write has 6 s left
    clock.now += 6
    assert barrier.check("ns/w", Caches({})) is Verdict.EXPIRED
    assert barrier.check("ns/w", Caches({})) is Verdict.RECONCILE


def test_deadlines_are_wall_clock_seconds_by_default() -> None:
    barrier = WriteBarrier(10.0, resource="widgets")
    before = time.time()
    barrier.expect("ns/w", "5")
    (expectation,) = barrier.expectations("ns/w")
    assert before + 10.0 <= expectation.deadline <= time.time() + 10.0


def test_every_change_is_reported_and_what_a_store_installs_is_not() -> None:
    clock = Clock()
    changes: list[tuple[str, list[str]]] = []

    def changed(key: str) -> None:  # called outside the lock: reading back must not deadlock
        changes.append((key, [e.version for e in barrier.expectations(key)]))

    barrier = WriteBarrier(10.0, resource="widgets", clock=clock, on_change=changed)
    barrier.expect("ns/w", "7", resource="configmaps", object_key="ns/c")
    barrier.expect_deleted("ns/w", resource="configmaps", object_key="ns/old")
    barrier.observe("ns/c", config_map("c", rv="7"), deleted=False, resource="configmaps")
    assert barrier.check("ns/w", Caches({})) is Verdict.RECONCILE  # ns/old is not cached: met
    barrier.expect("ns/x", "3")
    clock.now += 10
    assert barrier.check("ns/x", Caches({})) is Verdict.EXPIRED
    assert changes == [
        ("ns/w", ["7"]),
        ("ns/w", ["7", ""]),  # by resource and object key: ns/c, ns/old
        ("ns/w", [""]),
        ("ns/w", []),
        ("ns/x", ["3"]),
        ("ns/x", []),
    ]
    changes.clear()
    assert barrier.check("ns/w", Caches({})) is Verdict.RECONCILE  # nothing changed: no report
    restored = [Expectation("configmaps", "ns/c", "9", clock.now + 5)]
    barrier.restore("ns/w", restored)
    assert barrier.expectations("ns/w") == restored
    assert barrier.pending_keys() == ["ns/w"]
    barrier.forget("ns/w")
    assert len(barrier) == 0
    assert changes == []


def test_a_held_back_key_is_reconciled_when_its_write_shows_even_if_a_predicate_filters_it(
    controllers: list[Controller],
) -> None:
    """The status write a controller expects comes back as an update its generation predicate
    filters: the key it held back must still be reconciled then, not at the deadline."""

    class StatusWriter(Writer):
        predicates = (generation_changed,)

    lister, store = synced_lister()
    controller = StatusWriter(make_context(lister))  # the deadline is 30 s away
    controllers.append(controller)
    controller.start()
    process_deltas(controller, store, [Delta(DeltaType.ADDED, pod("a", rv="1"))], False)
    wait_until(lambda: controller.reads() == ["1"], what="the first reconcile")
    controller.enqueue("default/a")  # someone wants it reconciled: held back, rv 2 not cached
    time.sleep(0.2)
    assert controller.reads() == ["1"]
    status = pod("a", rv="2")  # same generation (none): generation_changed lets no update by
    status["metadata"]["generation"] = 1
    old = pod("a", rv="1")
    old["metadata"]["generation"] = 1
    store.update(status)
    controller.on_update(old, status)
    wait_until(lambda: controller.reads() == ["1", "2"], what="the held-back key, released")


def test_a_write_can_be_expected_only_of_a_resource_the_controller_hears(
    controllers: list[Controller],
) -> None:
    lister, _ = synced_lister()
    controller = Writer(make_context(lister))
    controllers.append(controller)
    with pytest.raises(ValueError, match=r"'configmaps'.*declare it with Owns or Watches"):
        controller.expect_version("default/a", "3", resource="configmaps")
    controller.expect_version("default/a", "3", resource="pods", object_key="default/b")
    (expectation,) = controller.barrier.expectations("default/a")
    assert (expectation.resource, expectation.object_key) == ("pods", "default/b")
