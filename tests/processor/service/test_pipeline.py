"""The whole pipeline in one process: simulator -> reflector -> Redis -> processors -> handlers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator, SimulatorSettings
from common.object_keys import meta_namespace_key
from common.settings import SettingsError, settings_of
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import Bus
from tests.support.recording_handler import Recorder
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 8


@dataclass
class Pipeline:
    sim: Simulator
    redis_url: str
    started: list[Any] = field(default_factory=list)
    recorders: dict[str, Recorder] = field(default_factory=dict)

    def reflector(self) -> ReflectorService:
        service = ReflectorService(
            settings_of(
                ReflectorSettings,
                resource=("pods",), redis_url=self.redis_url, kube_url=self.sim.url,
                http_host="127.0.0.1", http_port=0, shard_count=SHARDS, lease_duration=2.0,
                renew_deadline=1.5, retry_period=0.2, checkpoint_interval=0.2,
            ),
            registry=CollectorRegistry(),
        )  # fmt: skip
        service.start()
        self.started.append(service)
        return service

    def processor(self, name: str, **overrides: Any) -> ProcessorService:
        values: dict[str, Any] = {
            "resource": "pods", "redis_url": self.redis_url, "shard_count": SHARDS,
            "http_host": "127.0.0.1", "http_port": 0, "lease_duration": 2.0,
            "renew_deadline": 1.5, "retry_period": 0.2, "heartbeat_interval": 0.1,
            "member_ttl": 0.6, "member_id": name, "block_ms": 200, "shutdown_grace": 5.0,
        }  # fmt: skip
        values.update(overrides)
        recorder = self.recorders.setdefault(name, Recorder())
        service = ProcessorService(
            settings_of(ProcessorSettings, **values),
            registry=CollectorRegistry(),
            extra_handlers=[("recorder", recorder)],
        )
        service.start()
        self.started.append(service)
        return service

    def stop(self, service: Any) -> None:
        service.stop()
        self.started.remove(service)

    def stop_all(self) -> None:
        for service in reversed(self.started):
            service.stop()


@pytest.fixture
def pipeline(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[Pipeline]:
    with Simulator(SimulatorSettings(bookmark_interval=0.1)) as sim:
        running = Pipeline(sim, redis_server.url)
        try:
            yield running
        finally:
            running.stop_all()


def cache_of(processors: list[ProcessorService]) -> dict[str, str] | None:
    """The union of the processors' caches as {key: resourceVersion}; ``None`` while a key is
    cached twice (a moved shard is attached at its new owner before the old one detaches it)."""
    union: dict[str, str] = {}
    for processor in processors:
        for obj in processor.lister.list():
            key = meta_namespace_key(obj)
            if key in union:
                return None
            union[key] = obj["metadata"]["resourceVersion"]
    return union


def converged(pipeline: Pipeline, processors: list[ProcessorService]) -> Callable[[], bool]:
    """Every key cached exactly once, at the API server's version."""
    return lambda: cache_of(processors) == pipeline.sim.ground_truth("pods")


def test_processors_split_the_shards_and_their_caches_equal_the_api_state(
    pipeline: Pipeline,
) -> None:
    pipeline.sim.populate("pods", 400, seed=1)
    pipeline.reflector()
    a, b = pipeline.processor("a"), pipeline.processor("b")

    # Synced covers the shards each owns so far; the split completes (balanced, each shard
    # owned once) once the first owner has handed over the shards beyond its quota.
    def split() -> bool:
        owned_a, owned_b = a.owned_shards(), b.owned_shards()
        return (
            a.is_synced()
            and b.is_synced()
            and sorted(owned_a + owned_b) == list(range(SHARDS))
            and abs(len(owned_a) - len(owned_b)) <= 1
        )

    wait_until(split, 20, what="both synced, the shards split evenly")
    wait_until(converged(pipeline, [a, b]), 20, what="caches equal the API state")
    pipeline.sim.churn(rate=400, seconds=1.0, seed=2)
    wait_until(converged(pipeline, [a, b]), 20, what="caches follow the churn")
    assert a.readyz()[0] and b.readyz()[0]


def test_a_plain_cache_processor_and_a_default_compact_one_serve_a_resource_side_by_side(
    pipeline: Pipeline,
) -> None:
    pipeline.sim.populate("pods", 300, seed=3)
    pipeline.reflector()
    compact, plain = pipeline.processor("compact"), pipeline.processor("plain", cache="plain")
    wait_until(converged(pipeline, [compact, plain]), 20, what="caches equal the API state")
    held = plain.lister.list_keys()[0]
    assert plain.lister.get_by_key(held) is plain.lister.get_by_key(held)  # shared dicts
    pipeline.sim.churn(rate=300, seconds=1.0, seed=4)
    pipeline.stop(plain)  # its shards move to the compact one, which loads them as bytes
    wait_until(converged(pipeline, [compact]), 20, what="the compact cache holds everything")
    assert sorted(compact.owned_shards()) == list(range(SHARDS))
    key = next(iter(pipeline.sim.ground_truth("pods")))
    first, second = compact.lister.get_by_key(key), compact.lister.get_by_key(key)
    assert first == second and first is not second  # every read is a private copy


def test_handlers_see_each_objects_changes_in_stream_order_and_every_deletion(
    pipeline: Pipeline, redis_client: redis.Redis
) -> None:
    pipeline.sim.populate("pods", 100, seed=3)
    pipeline.reflector()
    processor = pipeline.processor("solo")
    wait_until(processor.is_synced, 20, what="synced")
    pipeline.sim.churn(rate=300, seconds=1.0, seed=4)
    keys = sorted(pipeline.sim.ground_truth("pods"))
    pipeline.sim.delete("pods", keys[0])
    wait_until(converged(pipeline, [processor]), 20, what="converged")
    bus = Bus(redis_client, "pods", shard_count=SHARDS)
    wait_until(lambda: bus.length() > 0, 5)
    seen = pipeline.recorders["solo"].per_key()
    for key, entries in bus.by_key().items():
        expected = [(e.type, e.rv) for e in entries]
        calls = [(kind, rv) for kind, rv, _ in seen.get(key, [])]
        # one owner from the start: the handler saw exactly the stream, in its order
        kinds = {"Added": "add", "Updated": "update", "Deleted": "delete"}
        assert calls == [(kinds[t], rv) for t, rv in expected], key
    assert ("delete", keys[0]) in {(c[0], c[1]) for c in pipeline.recorders["solo"].events}


def test_the_initial_list_is_flagged_and_live_changes_are_not(pipeline: Pipeline) -> None:
    pipeline.sim.populate("pods", 20, seed=5)
    pipeline.reflector()
    processor = pipeline.processor("solo")
    wait_until(processor.is_synced, 20, what="synced")
    pipeline.sim.create("pods", {"metadata": {"name": "live", "namespace": "default"}})
    wait_until(lambda: "default/live" in pipeline.recorders["solo"].per_key(), 10)
    calls = pipeline.recorders["solo"].per_key()
    assert calls["default/live"] == [("add", calls["default/live"][0][1], False)]
    initial = [v for k, v in calls.items() if k != "default/live"]
    assert len(initial) == 20 and all(c[0][0] == "add" for c in initial)


def test_a_joining_processor_takes_a_balanced_share_and_a_leaving_one_hands_over_at_once(
    pipeline: Pipeline,
) -> None:
    pipeline.sim.populate("pods", 300, seed=6)
    pipeline.reflector()
    a, b = pipeline.processor("a"), pipeline.processor("b")

    def split_between_a_and_b() -> bool:
        # Synced alone can hold while a shard a handed over is not yet b's (between release
        # and acquire): every shard must have its owner before "before" is taken.
        owned = sorted(a.owned_shards() + b.owned_shards())
        return a.is_synced() and b.is_synced() and owned == list(range(SHARDS))

    wait_until(split_between_a_and_b, 20, what="a and b synced, every shard owned")
    before = dict.fromkeys(a.owned_shards(), "a") | dict.fromkeys(b.owned_shards(), "b")
    c = pipeline.processor("c")
    wait_until(lambda: c.is_synced() and len(c.owned_shards()) >= 2, 20, what="c joined")
    owners = Counter({"a": len(a.owned_shards()), "b": len(b.owned_shards())})
    owners["c"] = len(c.owned_shards())
    assert max(owners.values()) - min(owners.values()) <= 1
    after = dict.fromkeys(a.owned_shards(), "a") | dict.fromkeys(b.owned_shards(), "b")
    assert all(before[shard] == owner for shard, owner in after.items()), "a and b only shrank"
    pipeline.stop(b)  # graceful: leases released, so a and c take over well before expiry
    wait_until(
        lambda: sorted(a.owned_shards() + c.owned_shards()) == list(range(SHARDS)),
        1.5,  # less than the 2 s lease: no waiting for expiry
        what="b's shards handed over at once",
    )
    pipeline.sim.churn(rate=300, seconds=1.0, seed=7)
    wait_until(converged(pipeline, [a, c]), 20, what="converged after the handover")


def test_a_takeover_redelivers_the_shard_as_an_initial_list(pipeline: Pipeline) -> None:
    pipeline.sim.populate("pods", 50, seed=8)
    pipeline.reflector()
    a = pipeline.processor("a")
    wait_until(a.is_synced, 20, what="a synced")
    b = pipeline.processor("b")
    wait_until(lambda: b.is_synced() and len(b.owned_shards()) == SHARDS // 2, 20)
    moved = {meta_namespace_key(obj) for obj in b.lister.list()}
    initial = {k for k, calls in pipeline.recorders["b"].per_key().items() if calls[0][2]}
    assert moved and moved == initial, "b saw each object of its shards as an initial add"


def test_bad_settings_are_refused_with_one_line() -> None:
    with pytest.raises(SettingsError, match="renew_deadline"):
        settings_of(ProcessorSettings, lease_duration=2.0, renew_deadline=3.0)
    with pytest.raises(SettingsError, match="invalid resource 'po ds'"):
        settings_of(ProcessorSettings, resource="po ds")


def test_a_controller_loaded_with_handler_runs_its_workers(pipeline: Pipeline) -> None:
    from tests.processor.service import controllers

    controllers.RECONCILED.clear()
    pipeline.sim.populate("pods", 30, seed=9)
    pipeline.reflector()
    processor = pipeline.processor(
        "ctl", handler=("tests.processor.service.controllers:KeyCollector",)
    )
    wait_until(processor.is_synced, 20, what="synced")
    truth = set(pipeline.sim.ground_truth("pods"))
    wait_until(lambda: truth <= controllers.RECONCILED, 20, what="every key reconciled")
