"""A controller follows shard ownership (``ShardAware``) and waits for a key's caches: a hand-over
waits for the running reconcile, skips the rest, and a key is reconciled only on loaded caches."""

from __future__ import annotations

import threading
import time
from typing import Any

from common.sharding import shard_for
from processor_svc.controller import Controller
from processor_svc.handlers import HandlerContext, ShardAware
from processor_svc.lister import ShardedLister
from tests.processor.handler_api.test_expectations import RecordingStore
from tests.support.controllers import make_context
from tests.support.waiting import wait_until

SHARDS = 4


def keys_of(shard: int, count: int) -> list[str]:
    """``count`` keys that hash to ``shard``."""
    keys = (f"default/k{i}" for i in range(10_000))
    found = [key for key in keys if shard_for(key, SHARDS) == shard]
    return found[:count]


def owning_everything() -> ShardedLister:
    lister = ShardedLister(SHARDS)
    for shard in range(SHARDS):
        lister.attach(shard, lister.new_store())
        lister.mark_synced(shard)
    return lister


class Timed(Controller):
    """Records each reconcile's (key, start, end) on a shared list; a key in ``block`` waits
    for its event first."""

    workers = 2

    def __init__(
        self, context: HandlerContext, log: list[tuple[str, str, float, float]], **kw: Any
    ) -> None:
        super().__init__(context, **kw)
        self.log = log
        self.lock = threading.Lock()
        self.block: dict[str, threading.Event] = {}
        self.started: set[str] = set()

    def reconcile(self, key: str) -> None:
        start = time.monotonic()
        with self.lock:
            self.started.add(key)
            gate = self.block.get(key)
        if gate is not None:
            gate.wait(10)
        with self.lock:
            self.log.append((self.name, key, start, time.monotonic()))

    def reconciled(self, key: str) -> int:
        with self.lock:
            return sum(1 for name, k, _, _ in self.log if (name, k) == (self.name, key))


def test_a_hand_over_waits_for_the_running_reconcile_and_the_next_owner_starts_after_it(
    controllers: list[Controller],
) -> None:
    shard = 1
    key, queued_key = keys_of(shard, 2)
    (elsewhere,) = keys_of(2, 1)
    log: list[tuple[str, str, float, float]] = []
    old = Timed(make_context(owning_everything()), log, name="old")
    new = Timed(make_context(owning_everything()), log, name="new")
    controllers += [old, new]
    assert isinstance(old, ShardAware)
    release = old.block[key] = threading.Event()
    old.start()
    new.start()
    old.enqueue(key)
    wait_until(lambda: key in old.started, what="the reconcile in hand")

    old.shards_leaving([shard])
    old.enqueue(queued_key)  # taken off the queue after the mark: skipped, never reconciled
    old.enqueue(elsewhere)  # another shard's keys go on
    wait_until(lambda: old.reconciled(elsewhere) == 1)
    assert old.wait_shards_idle([2], timeout=1.0)  # not the leaving shard: idle already
    assert not old.wait_shards_idle([shard], timeout=0.1)  # still reconciling

    returned: list[float] = []

    def hand_over() -> None:  # what the processor does: release the leases only once idle
        if old.wait_shards_idle([shard], timeout=5.0):
            returned.append(time.monotonic())
            new.shards_acquired([shard])
            new.enqueue(key)
            new.enqueue(queued_key)

    service = threading.Thread(target=hand_over)
    service.start()
    time.sleep(0.2)
    assert returned == []  # the reconcile still runs
    release.set()
    service.join(5)
    wait_until(lambda: new.reconciled(key) == 1 and new.reconciled(queued_key) == 1)
    assert old.reconciled(queued_key) == 0
    ((_, _, _, old_end),) = [entry for entry in log if entry[:2] == ("old", key)]
    ((_, _, new_start, _),) = [entry for entry in log if entry[:2] == ("new", key)]
    assert old_end <= returned[0] <= new_start  # no overlap: the wait ended after the reconcile


def test_acquiring_a_shard_again_clears_its_leaving_mark(controllers: list[Controller]) -> None:
    shard = 3
    (key,) = keys_of(shard, 1)
    controller = Timed(make_context(owning_everything()), [])
    controllers.append(controller)
    controller.start()
    controller.shards_leaving([shard])
    controller.enqueue(key)
    time.sleep(0.1)
    assert controller.reconciled(key) == 0
    controller.shards_acquired([shard])
    controller.enqueue(key)
    wait_until(lambda: controller.reconciled(key) == 1)


def test_once_idle_the_barrier_drops_a_leaving_shards_keys_and_the_store_keeps_them(
    controllers: list[Controller],
) -> None:
    (leaving,) = keys_of(0, 1)
    (staying,) = keys_of(1, 1)
    store = RecordingStore()
    controller = Timed(make_context(owning_everything(), expectations=store), [])
    controllers.append(controller)
    controller.expect_version(leaving, "5")
    controller.expect_version(staying, "6")
    controller.shards_leaving([0])
    assert controller.wait_shards_idle([0], timeout=1.0)
    assert controller.barrier.pending_keys() == [staying]
    assert f"timed {leaving}" in store.saved[0]  # for the next owner


def test_a_key_waits_for_its_shards_caches_without_counting_a_failure(
    controllers: list[Controller],
) -> None:
    loading, loaded = keys_of(0, 1)[0], keys_of(1, 1)[0]
    synced = {0: False, 1: True}
    asked: list[str] = []

    def key_synced(key: str) -> bool:
        asked.append(key)
        return synced[shard_for(key, SHARDS)]

    context = make_context(owning_everything(), key_synced=key_synced)
    controller = Timed(context, [])
    controllers.append(controller)
    controller.start()
    controller.enqueue(loading)
    controller.enqueue(loaded)
    wait_until(lambda: controller.reconciled(loaded) == 1)  # other keys go on meanwhile
    time.sleep(0.8)
    assert controller.reconciled(loading) == 0
    assert controller.num_requeues(loading) == 0  # re-added, not rate limited
    assert 2 <= asked.count(loading) <= 5  # after 0.1 s, then 0.2, 0.4: the pause doubles
    synced[0] = True  # the takeover's initial list is in
    wait_until(lambda: controller.reconciled(loading) == 1, timeout=2.0)


def test_workers_first_wait_for_every_served_resources_cache(
    controllers: list[Controller],
) -> None:
    primary = owning_everything()
    children = ShardedLister(SHARDS)
    children.attach(0, children.new_store())  # not synced yet
    context = make_context(primary, listers={"configmaps": children}, key_synced=lambda k: True)
    controller = Timed(context, [])
    controllers.append(controller)
    controller.start()
    controller.enqueue("default/a")
    time.sleep(0.2)
    assert controller.reconciled("default/a") == 0
    children.mark_synced(0)
    wait_until(lambda: controller.reconciled("default/a") == 1)


def test_a_reconcile_of_a_key_that_does_not_tell_its_shard_holds_every_hand_over(
    controllers: list[Controller],
) -> None:
    lister = owning_everything()
    lister.route_keys(None)  # the primary is sharded by owner or label
    controller = Timed(make_context(lister), [])
    controllers.append(controller)
    release = controller.block["default/a"] = threading.Event()
    controller.start()
    controller.enqueue("default/a")
    wait_until(lambda: "default/a" in controller.started)
    controller.shards_leaving([2])
    assert not controller.wait_shards_idle([2], timeout=0.1)  # it might be one of shard 2's
    release.set()
    assert controller.wait_shards_idle([2], timeout=5.0)
