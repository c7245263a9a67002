"""Reference 1.4-1.7: which resourceVersion a LIST asks for, and what happens on 410.

The reflector runs with the real KubeSource (HTTP to the simulator) and the real publisher (a
private redis-server); a thin wrapper records every LIST request and can compact the
simulator's history at an exact moment, which no timing-based test could hit reliably.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from common.settings import settings_of
from reflector_svc.lister_watcher import KubeSource
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.publish_records import FencedError
from reflector_svc.publisher import ShardPublisher
from reflector_svc.reflector import Reflector, Watch
from reflector_svc.resources import ResourceSpec, resolve
from reflector_svc.service import reflector_options
from reflector_svc.settings import ReflectorSettings
from reflector_svc.transport import load_api_client
from reflector_svc.watch_events import ListPage
from tests.support.bus import Bus
from tests.support.reflector_services import PATIENCE, SHARDS
from tests.support.waiting import wait_until


@dataclass
class RecordingSource:
    """The real source, recording LIST requests; ``after_first_page`` runs once, mid-list."""

    inner: KubeSource
    lists: list[dict[str, Any]] = field(default_factory=list)
    after_first_page: Callable[[], None] | None = None

    def list_page(self, **kwargs: Any) -> ListPage:
        self.lists.append(kwargs)
        page = self.inner.list_page(**kwargs)
        if kwargs.get("continue_token") is None and self.after_first_page is not None:
            hook, self.after_first_page = self.after_first_page, None
            hook()
        return page

    def watch(self, **kwargs: Any) -> Watch:
        return self.inner.watch(**kwargs)


@dataclass
class Running:
    reflector: Reflector
    source: RecordingSource
    metrics: ReflectorMetrics


def lead_until_stopped_or_fenced(reflector: Reflector, epoch: int, stop: threading.Event) -> None:
    """What the service does with a leader's run: a newer leader's fence means step down.

    The tests below start a second leader while the first still runs, as a real handover
    can; the first may be fenced before or after it notices, so both outcomes are normal.
    """
    with contextlib.suppress(FencedError):
        reflector.run(epoch, stop)


@pytest.fixture
def run_reflector(sim: Simulator, redis_client: redis.Redis) -> Iterator[Callable[..., Running]]:
    api_client = load_api_client(url=sim.url)
    stops: list[tuple[threading.Event, threading.Thread, Reflector]] = []

    def start(
        epoch: int = 1, after_first_page: Callable[[], None] | None = None, **settings: Any
    ) -> Running:
        values: dict[str, Any] = {"page_size": 50, "shard_count": SHARDS, "backoff_initial": 0.05}
        values.update(settings)
        resolved = resolve(api_client, ResourceSpec.parse("pods"))
        source = RecordingSource(
            KubeSource(api_client, resolved), after_first_page=after_first_page
        )
        metrics = ReflectorMetrics(CollectorRegistry())
        reflector = Reflector(
            resource="pods",
            kind="Pod",
            source=source,
            sink=ShardPublisher(redis_client, prefix="ib", resource="pods", shard_count=SHARDS),
            options=reflector_options(settings_of(ReflectorSettings, **values)),
            metrics=metrics,
        )
        stop = threading.Event()
        thread = threading.Thread(
            target=lead_until_stopped_or_fenced, args=(reflector, epoch, stop), name="reflector"
        )
        thread.start()
        stops.append((stop, thread, reflector))
        return Running(reflector, source, metrics)

    try:
        yield start
    finally:
        for stop, thread, reflector in stops:
            stop.set()
            reflector.interrupt()
            thread.join(10)
        api_client.close()


def lists_total(running: Running) -> float:
    value = running.metrics.registry.get_sample_value(
        "informer_bus_reflector_lists_total", {"resource": "pods"}
    )
    return value or 0.0


def test_1_4_and_1_5_first_list_asks_for_rv_0_in_pages_of_page_size(
    sim: Simulator, run_reflector: Callable[..., Running], bus: Bus
) -> None:
    sim.populate("pods", 120, seed=1)
    running = run_reflector()
    wait_until(running.reflector.synced.is_set, PATIENCE, what="synced")
    first, *rest = running.source.lists
    assert first["resource_version"] == "0" and first["continue_token"] is None
    assert first["limit"] == 50
    assert len(rest) == 2, "120 objects in pages of 50"
    assert all(p["resource_version"] is None and p["continue_token"] for p in rest)
    assert bus.known_versions() == sim.ground_truth("pods")


def test_1_4_a_relist_asks_for_the_last_synced_rv_not_the_latest(
    sim: Simulator, run_reflector: Callable[..., Running], bus: Bus
) -> None:
    sim.populate("pods", 10, seed=2)
    first = run_reflector(epoch=1)
    wait_until(first.reflector.synced.is_set, PATIENCE, what="first sync")
    assert first.reflector.last_rv is not None
    synced_at = int(first.reflector.last_rv)
    sim.create("pods", {"metadata": {"name": "late", "namespace": "default"}})
    wait_until(lambda: "default/late" in bus.known_versions(), PATIENCE, what="late pod")
    # a new leader whose resume point says "relist" (as after a crash mid-relist)
    bus.client.hset(bus.shards[0].checkpoint, "relisting", "1")
    second = run_reflector(epoch=2)
    wait_until(second.reflector.synced.is_set, PATIENCE, what="second sync")
    asked = int(second.source.lists[0]["resource_version"])
    assert asked >= synced_at, "never an RV older than what the shards hold (1.4, 1.10)"
    assert asked == int(max(sim.ground_truth("pods").values(), key=int))


def test_1_6_expired_continue_token_falls_back_to_one_unpaginated_list(
    sim: Simulator, run_reflector: Callable[..., Running], bus: Bus
) -> None:
    sim.populate("pods", 120, seed=3)

    def expire_the_continue_token() -> None:
        sim.create("pods", {"metadata": {"name": "during-list", "namespace": "default"}})
        sim.compact()

    started = run_reflector(after_first_page=expire_the_continue_token)
    wait_until(started.reflector.synced.is_set, PATIENCE, what="synced")
    requests = started.source.lists
    assert [r["limit"] for r in requests] == [50, 50, 0], "page 1, page 2 refused, one full list"
    assert requests[-1]["continue_token"] is None
    assert requests[-1]["resource_version"] == requests[0]["resource_version"], "original RV"
    wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="all pods")
    history = bus.history()
    assert all(len(events) == 1 for events in history.values()), "nothing published twice"


def test_1_7_a_list_refused_with_410_is_retried_at_once_for_the_latest_state(
    sim: Simulator, run_reflector: Callable[..., Running], bus: Bus
) -> None:
    sim.populate("pods", 30, seed=4)
    first = run_reflector(epoch=1)
    wait_until(first.reflector.synced.is_set, PATIENCE, what="first sync")
    first.reflector.interrupt()
    keys = sorted(sim.ground_truth("pods"))
    sim.silent_delete("pods", keys[0])
    sim.compact()
    bus.client.hset(bus.shards[0].checkpoint, "relisting", "1")
    second = run_reflector(epoch=2)
    wait_until(second.reflector.synced.is_set, PATIENCE, what="second sync")
    asked = [r["resource_version"] for r in second.source.lists if r["continue_token"] is None]
    assert asked[0] not in ("", "0") and asked[1] == "", "410 at the old RV, then the latest"
    wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), PATIENCE, what="tombstone")
    assert bus.history()[keys[0]][-1] == ("Deleted", bus.history()[keys[0]][0][1], True)
