"""Async handlers (``async def on_update``) on a real shard: concurrency, key order, acks.

The handler's coroutines run on an event loop, up to ``max_concurrent`` at once
(``--max-concurrent-reconciles``), never two of one key, each entry acknowledged only after its
coroutine returned (processor_svc/async_dispatch.py).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from typing import Any

import pytest
import redis

from common.deltas import DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.store import Indexer
from processor_svc.ack_tracker import AckToken
from processor_svc.async_dispatch import is_async_handler
from processor_svc.dispatch import AddNotification
from tests.processor.shard.support import Shard, delivered_and_acknowledged, entry, pod
from tests.support.waiting import wait_until

KEYS = 200
UPDATES = 1000
LIMIT = 50


class AsyncRecorder:
    """Awaits ``delay`` seconds of "I/O" per call and records what the test checks: calls in
    flight (overall and per key), the order per key, and whether each call's entry was still
    unacknowledged when the call was about to return."""

    def __init__(self, shard: Shard | None = None, delay: float = 0.05) -> None:
        self.shard = shard
        self.delay = delay
        self.entry_ids: dict[tuple[str, str], str] = {}
        self.ids_known = threading.Event()  # set once ``entry_ids`` is filled
        self.in_flight = 0
        self.most_in_flight = 0
        self.per_key: collections.Counter[str] = collections.Counter()
        self.overlaps: list[str] = []
        self.seen: dict[str, list[str]] = collections.defaultdict(list)
        self.acked_early: list[str] = []
        self.calls = 0
        self.fail_on: set[str] = set()

    async def _call(self, obj: Obj | DeletedFinalStateUnknown, rv: str) -> None:
        key = meta_namespace_key(obj)
        while self.shard is not None and not self.ids_known.is_set():
            await asyncio.sleep(0.001)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.per_key[key] += 1
        if self.per_key[key] > 1:
            self.overlaps.append(key)
        try:
            self.seen[key].append(rv)
            await asyncio.sleep(self.delay)
            if self.shard is not None and (key, rv) in self.entry_ids:
                entry_id = self.entry_ids[key, rv]
                keys = self.shard.keys
                pending = self.shard.client.xpending_range(
                    keys.stream, keys.group, min=entry_id, max=entry_id, count=1
                )
                if not pending:
                    self.acked_early.append(entry_id)
            if key in self.fail_on:
                raise RuntimeError(f"failing on {key}")
        finally:
            self.per_key[key] -= 1
            self.in_flight -= 1
            self.calls += 1

    async def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        await self._call(obj, obj["metadata"]["resourceVersion"])

    async def on_update(self, old: Obj, new: Obj) -> None:
        await self._call(new, new["metadata"]["resourceVersion"])

    async def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        await self._call(obj, "deleted")


def keys_and_updates() -> list[tuple[DeltaType, Obj]]:
    """``KEYS`` additions, then ``UPDATES`` updates round-robin over the keys."""
    keys = [f"ns/pod-{index:03d}" for index in range(KEYS)]
    deltas: list[tuple[DeltaType, Obj]] = [(DeltaType.ADDED, pod(key, "1")) for key in keys]
    rv = 1
    for index in range(UPDATES):
        rv += 1
        deltas.append((DeltaType.UPDATED, pod(keys[index % KEYS], str(rv))))
    return deltas


def test_async_handler_runs_the_limit_at_once_in_key_order_and_acks_after_returning(
    shard: Shard, redis_client: redis.Redis
) -> None:
    handler = AsyncRecorder(shard)
    deltas = keys_and_updates()
    with shard.running(
        ("async", handler), dispatcher_kwargs={"max_concurrent": LIMIT}, block_ms=200
    ) as (worker, _, _):
        assert worker.wait_for_sync(5)
        ids = shard.publish(*(entry(kind, obj) for kind, obj in deltas))
        for (_, obj), entry_id in zip(deltas, ids, strict=True):
            rv = obj["metadata"]["resourceVersion"]
            handler.entry_ids[meta_namespace_key(obj), rv] = entry_id
        handler.ids_known.set()
        wait_until(
            lambda: handler.calls == len(deltas) and delivered_and_acknowledged(shard),
            timeout=30,
            what=lambda: f"{handler.calls} of {len(deltas)} calls, {shard.pending()} pending",
        )
    assert handler.most_in_flight == LIMIT
    assert handler.overlaps == []
    expected: dict[str, list[str]] = collections.defaultdict(list)
    for _, obj in deltas:
        expected[meta_namespace_key(obj)].append(obj["metadata"]["resourceVersion"])
    assert handler.seen == expected
    assert handler.acked_early == []
    assert shard.pending() == 0


def test_an_async_handler_that_raises_is_counted_and_its_entry_still_acknowledged(
    shard: Shard, caplog: pytest.LogCaptureFixture
) -> None:
    handler = AsyncRecorder(delay=0.001)
    handler.fail_on = {"ns/bad"}
    with caplog.at_level(logging.ERROR), shard.running(("async", handler), block_ms=200) as (
        worker, _, _,
    ):  # fmt: skip
        assert worker.wait_for_sync(5)
        shard.publish(*(entry(DeltaType.ADDED, pod(key, "1")) for key in ("ns/bad", "ns/ok")))
        wait_until(lambda: handler.calls == 2 and delivered_and_acknowledged(shard))
    assert shard.sample("informer_bus_processor_handler_errors_total", handler="async") == 1
    assert any("failed on the add of ns/bad" in record.getMessage() for record in caplog.records)


class SlowAsync(AsyncRecorder):
    """Holds every call until ``release`` is set (a threading event: set from the test)."""

    def __init__(self) -> None:
        super().__init__(delay=0.0)
        self.release = threading.Event()
        self.started = 0

    async def _call(self, obj: Obj | DeletedFinalStateUnknown, rv: str) -> None:
        self.started += 1
        while not self.release.is_set():
            await asyncio.sleep(0.005)
        await super()._call(obj, rv)


def test_a_stopping_shard_waits_for_its_running_coroutines_and_skips_the_others(
    shard: Shard,
) -> None:
    handler = SlowAsync()
    limits = {"max_concurrent": 2}
    with shard.running(("async", handler), dispatcher_kwargs=limits, block_ms=200) as (
        worker, _, dispatcher,
    ):  # fmt: skip
        assert worker.wait_for_sync(5)
        shard.publish(*(entry(DeltaType.ADDED, pod(f"ns/p{i}", str(i + 1))) for i in range(5)))
        wait_until(lambda: handler.started == 2, what="two calls running")
        assert dispatcher.running_calls() == 2
        stopper = threading.Thread(target=worker.stop, args=(5.0,))
        stopper.start()
        time.sleep(0.2)
        assert stopper.is_alive()  # waiting for the two running coroutines (wait_quiet)
        handler.release.set()
        stopper.join(5)
        assert not stopper.is_alive()
        assert dispatcher.running_calls() == 0
    assert handler.started == 2  # the other three were skipped: their shard had stopped
    assert handler.calls == 2
    assert shard.pending() == 3


def test_stopping_the_dispatcher_lets_running_coroutines_finish_within_the_grace_period(
    shard: Shard,
) -> None:
    handler = AsyncRecorder(delay=0.3)
    dispatcher = shard.dispatcher(("async", handler), max_concurrent=4)
    worker = shard.worker(Indexer(), dispatcher, block_ms=200)
    dispatcher.start()
    worker.start()
    try:
        assert worker.wait_for_sync(5)
        shard.publish(*(entry(DeltaType.ADDED, pod(f"ns/p{i}", str(i + 1))) for i in range(4)))
        wait_until(lambda: handler.in_flight == 4, what="four calls running")
    finally:
        worker.stop(5.0)
        left = dispatcher.stop(5.0)
    assert left == {"async": 0}
    assert handler.calls == 4  # finished, not cancelled
    assert shard.pending() == 0


def test_mixed_sync_and_async_methods_are_refused() -> None:
    class Mixed:
        async def on_add(self, obj: Any, is_in_initial_list: bool) -> None: ...

        def on_update(self, old: Any, new: Any) -> None: ...

        def on_delete(self, obj: Any) -> None: ...

    with pytest.raises(ValueError, match="mixes async"):
        is_async_handler(Mixed())
    assert is_async_handler(AsyncRecorder())


def test_a_barrier_completes_only_after_every_coroutine_handed_over_before_it(
    shard: Shard,
) -> None:
    handler = SlowAsync()
    dispatcher = shard.dispatcher(("async", handler), max_concurrent=4)
    dispatcher.start()
    try:
        tokens = [AckToken(f"{i}-0") for i in range(3)]
        for index, token in enumerate(tokens):
            assert dispatcher.deliver(AddNotification(pod(f"ns/p{index}", "1"), False), token)
            token.release()  # the creator's own hold
        barrier = AckToken("barrier")
        assert dispatcher.barrier(barrier)
        barrier.release()
        wait_until(lambda: handler.started == 3, what="three calls running")
        assert not barrier.wait(0.1)
        assert not any(token.done for token in tokens)
        handler.release.set()
        assert barrier.wait(5)
        assert all(token.done for token in tokens)
    finally:
        handler.release.set()
        dispatcher.stop(5)
