"""A processor with an async handler: its calls run on the processor's event loop, at most
``--max-concurrent-reconciles`` at once and never two of one key; the loop's thread exists
only with async code, and ends with the processor."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.settings import settings_of
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.recording_handler import Recorder
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 4
LIMIT = 4


class LastVersions:
    """Keeps each key's last resourceVersion (``None`` once deleted), awaiting a little per
    call; records the calls in flight, overall and per key."""

    def __init__(self) -> None:
        self.versions: dict[str, str | None] = {}
        self.in_flight: Counter[str] = Counter()
        self.most = 0
        self.overlaps = 0
        self.threads: set[str] = set()

    async def _call(self, key: str, rv: str | None) -> None:
        self.threads.add(threading.current_thread().name)
        self.in_flight[key] += 1
        self.overlaps += self.in_flight[key] > 1
        self.most = max(self.most, sum(self.in_flight.values()))
        try:
            await asyncio.sleep(0.005)
            self.versions[key] = rv
        finally:
            self.in_flight[key] -= 1

    async def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        await self._call(meta_namespace_key(obj), obj["metadata"]["resourceVersion"])

    async def on_update(self, old: Obj, new: Obj) -> None:
        await self._call(meta_namespace_key(new), new["metadata"]["resourceVersion"])

    async def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        await self._call(meta_namespace_key(obj), None)

    def live(self) -> dict[str, str]:
        return {key: rv for key, rv in self.versions.items() if rv is not None}


def _apart(seen: dict[str, str], truth: dict[str, str]) -> list[str]:
    """The first keys where the handler's view and the simulator's disagree, for the report."""
    keys = sorted(k for k in seen.keys() | truth.keys() if seen.get(k) != truth.get(k))
    return [f"{k}: {seen.get(k)} vs {truth.get(k)}" for k in keys[:5]]


def _cached(service: ProcessorService) -> dict[str, str]:
    """What the processor's cache holds: the deltas the bus delivered, handler aside."""
    return {
        meta_namespace_key(obj): obj["metadata"]["resourceVersion"] for obj in service.lister.list()
    }


@pytest.fixture
def reflector(
    redis_server: RedisServer, redis_client: redis.Redis, sim: Simulator
) -> Iterator[ReflectorService]:
    # redis_client flushes the session's Redis first: a reflector resuming from an earlier
    # test's checkpoint (same prefix and resource) never deleted that test's objects, and the
    # handler kept them (seen in full runs only, where another test ran before on the worker).
    service = ReflectorService(
        settings_of(
            ReflectorSettings,
            resource=("pods",), redis_url=redis_server.url, kube_url=sim.url,
            http_host="127.0.0.1", http_port=0, shard_count=SHARDS, checkpoint_interval=0.2,
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    service.start()
    try:
        yield service
    finally:
        service.stop()


def processor(redis_server: RedisServer, *handlers: tuple[str, Any]) -> ProcessorService:
    service = ProcessorService(
        settings_of(
            ProcessorSettings,
            resource="pods", redis_url=redis_server.url, shard_count=SHARDS,
            http_host="127.0.0.1", http_port=0, block_ms=200, shutdown_grace=5.0,
            max_concurrent_reconciles=LIMIT,
        ),
        registry=CollectorRegistry(),
        extra_handlers=list(handlers),
    )  # fmt: skip
    service.start()
    return service


@pytest.mark.usefixtures("reflector")
def test_an_async_handler_follows_the_api_on_the_processors_event_loop(
    sim: Simulator, redis_server: RedisServer
) -> None:
    sim.populate("pods", 200, seed=1)
    handler, recorder = LastVersions(), Recorder()
    service = processor(redis_server, ("async", handler), ("sync", recorder))
    try:
        wait_until(service.is_synced, 30, what="the processor synced")
        sim.churn(rate=300, seconds=1.0, seed=2)
        wait_until(
            lambda: handler.live() == sim.ground_truth("pods"),
            30,
            what=lambda: (
                f"the handler (apart: {_apart(handler.live(), sim.ground_truth('pods'))}; "
                f"the processor's cache: {_apart(_cached(service), sim.ground_truth('pods'))})"
            ),
        )
        assert service.event_loop.started
    finally:
        service.stop()
    assert handler.overlaps == 0
    assert 1 < handler.most <= LIMIT
    assert handler.threads == {f"processor-event-loop[{service.resource}]"}
    assert not any(t.name in handler.threads for t in threading.enumerate())  # it ended
    assert recorder.events  # the sync handler beside it is called as before


@pytest.mark.usefixtures("reflector")
def test_a_processor_without_async_code_starts_no_event_loop(
    sim: Simulator, redis_server: RedisServer
) -> None:
    sim.populate("pods", 20, seed=1)
    service = processor(redis_server, ("sync", Recorder()))
    try:
        wait_until(service.is_synced, 30, what="the processor synced")
        assert not service.event_loop.started
    finally:
        service.stop()
