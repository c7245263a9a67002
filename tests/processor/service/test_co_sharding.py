"""One processor serving several resources: co-sharded ones owned shard number by shard number
together, replicated ones read whole by every member (simulator -> reflector -> Redis ->
processors, all real, in one process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator, SimulatorSettings
from common.object_keys import meta_namespace_key
from common.redis_layout import ResourceKeys
from common.settings import settings_of
from informer_bus.status.collect import collect_status, status_client
from processor_svc.handlers import HandlerLoadError
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.recording_handler import Recorder
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 8


@dataclass
class Stack:
    sim: Simulator
    redis_url: str
    started: list[Any] = field(default_factory=list)

    def reflector(self, *resources: str) -> ReflectorService:
        service = ReflectorService(
            settings_of(
                ReflectorSettings,
                resource=resources, redis_url=self.redis_url, kube_url=self.sim.url,
                http_host="127.0.0.1", http_port=0, shard_count=SHARDS, lease_duration=2.0,
                renew_deadline=1.5, retry_period=0.2, checkpoint_interval=0.2,
            ),
            registry=CollectorRegistry(),
        )  # fmt: skip
        service.start()
        self.started.append(service)
        return service

    def processor(
        self, name: str, *, handlers: list[tuple[str, Any]] | None = None, **overrides: Any
    ) -> ProcessorService:
        values: dict[str, Any] = {
            "redis_url": self.redis_url, "shard_count": SHARDS, "http_host": "127.0.0.1",
            "http_port": 0, "lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.2,
            "heartbeat_interval": 0.1, "member_ttl": 0.6, "member_id": name, "block_ms": 200,
            "shutdown_grace": 5.0,
        }  # fmt: skip
        values.update(overrides)
        service = ProcessorService(
            settings_of(ProcessorSettings, **values),
            registry=CollectorRegistry(),
            extra_handlers=handlers if handlers is not None else [("recorder", Recorder())],
        )
        service.start()
        self.started.append(service)
        return service

    def stop(self, service: Any) -> None:
        service.stop()
        self.started.remove(service)


@pytest.fixture
def stack(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[Stack]:
    with Simulator(SimulatorSettings(bookmark_interval=0.1)) as sim:
        running = Stack(sim, redis_server.url)
        try:
            yield running
        finally:
            for service in reversed(running.started):
                service.stop()


def keys_of(service: ProcessorService, resource: str) -> set[str]:
    return {meta_namespace_key(obj) for obj in service.listers[resource].list()}


def lease_holders(client: redis.Redis, resource: str) -> dict[int, str | None]:
    keys = ResourceKeys("ib", resource).group()
    holders: dict[int, str | None] = {}
    for shard in range(SHARDS):
        holder: Any = client.hget(keys.shard(shard).lease, "holder")
        holders[shard] = None if holder is None else holder.decode()
    return holders


def test_shard_n_of_every_co_sharded_resource_is_owned_together(
    stack: Stack, redis_client: redis.Redis
) -> None:
    stack.sim.populate("pods", 200, seed=1)
    stack.sim.populate("configmaps", 120, seed=2)
    stack.reflector("pods", "configmaps")
    a = stack.processor("a", resource=("pods", "configmaps"))
    wait_until(a.is_synced, 30, what="a synced")
    assert a.listers["pods"].shards() == a.listers["configmaps"].shards() == list(range(SHARDS))
    assert keys_of(a, "pods") == set(stack.sim.ground_truth("pods"))
    assert keys_of(a, "configmaps") == set(stack.sim.ground_truth("configmaps"))
    assert a.readyz()[0]

    b = stack.processor("b", resource=("pods", "configmaps"))

    def split() -> bool:
        owned = a.owned_shards(), b.owned_shards()
        return (
            a.is_synced()
            and b.is_synced()
            and sorted(owned[0] + owned[1]) == list(range(SHARDS))
            and abs(len(owned[0]) - len(owned[1])) <= 1
        )

    wait_until(split, 30, what="the shard numbers split between a and b")
    for service in (a, b):
        assert service.listers["pods"].shards() == service.owned_shards()
        assert service.listers["configmaps"].shards() == service.owned_shards()
    # One assignment: the lease of shard N of both resources has one holder.
    pods, configmaps = (
        lease_holders(redis_client, "pods"),
        lease_holders(redis_client, "configmaps"),
    )
    assert pods == configmaps
    assert set(pods.values()) == {a.member_id, b.member_id}
    union = keys_of(a, "configmaps") | keys_of(b, "configmaps")
    assert union == set(stack.sim.ground_truth("configmaps"))
    assert not keys_of(a, "configmaps") & keys_of(b, "configmaps")
    # status: the owners of the co-sharded resource are live members of the primary's group.
    client = status_client(stack.redis_url)
    try:
        snapshot = collect_status(client, member_ttl=0.6)
    finally:
        client.close()
    [configmaps_status] = [r for r in snapshot.resources if r.resource == "configmaps"]
    [group] = configmaps_status.groups
    assert {p.member for p in group.processors} == {a.member_id, b.member_id}
    assert all(p.live and p.member_of == "pods" for p in group.processors)
    assert group.owned_shards == SHARDS


def test_handlers_get_the_events_of_their_own_resource(stack: Stack) -> None:
    stack.sim.populate("pods", 50, seed=1)
    stack.sim.populate("configmaps", 30, seed=2)
    stack.reflector("pods", "configmaps")
    primary, other = Recorder(), Recorder()

    class Both:
        """A handler serving two resources through one object each."""

        def resource_handlers(self) -> dict[str, Any]:
            return {"configmaps": other}

        on_add = on_update = on_delete = staticmethod(lambda *args: None)

    a = stack.processor(
        "a", resource=("pods", "configmaps"), handlers=[("pods", primary), ("both", Both())]
    )
    wait_until(a.is_synced, 30, what="a synced")
    wait_until(lambda: len(primary.initial()) == 50 and len(other.initial()) == 30, 10)
    assert {e[1] for e in primary.initial()} == set(stack.sim.ground_truth("pods"))
    assert {e[1] for e in other.initial()} == set(stack.sim.ground_truth("configmaps"))


def test_a_replicated_resource_is_read_whole_by_every_member(stack: Stack) -> None:
    stack.sim.populate("pods", 100, seed=1)
    stack.reflector("pods", "namespaces")
    namespaces = set(stack.sim.ground_truth("namespaces"))
    assert len(namespaces) >= 3
    a = stack.processor("a", resource=("pods",), replicate=("namespaces",))
    b = stack.processor("b", resource=("pods",), replicate=("namespaces",))

    def split() -> bool:
        return (
            a.is_synced()
            and b.is_synced()
            and sorted(a.owned_shards() + b.owned_shards()) == list(range(SHARDS))
        )

    wait_until(split, 30, what="pods split, namespaces read")
    for service in (a, b):
        assert keys_of(service, "namespaces") == namespaces
        assert service.listers["namespaces"].has_synced()
    stack.sim.create("namespaces", {"metadata": {"name": "late"}})
    wait_until(lambda: all("late" in keys_of(s, "namespaces") for s in (a, b)), 10)
    stack.sim.delete("namespaces", "late")
    wait_until(lambda: all("late" not in keys_of(s, "namespaces") for s in (a, b)), 10)


def test_a_resource_nobody_reflects_keeps_the_processor_waiting_and_says_which(
    stack: Stack,
) -> None:
    stack.sim.populate("pods", 10, seed=1)
    stack.reflector("pods")
    a = stack.processor("a", resource=("pods", "configmaps"))
    wait_until(lambda: "no reflector has published" in a.readyz()[1], 10)
    ready, reason = a.readyz()
    assert not ready
    assert "no reflector has published resource 'configmaps'" in reason
    assert a.owned_shards() == []  # nothing taken before every resource is published


def test_a_handler_for_a_resource_not_served_is_refused_in_one_line(stack: Stack) -> None:
    with pytest.raises(HandlerLoadError) as caught:
        ProcessorService(
            settings_of(
                ProcessorSettings, redis_url=stack.redis_url, resource=("pods",),
                handler=("configmaps=tests.support.recording_handler:FileRecorder",),
            )
        )  # fmt: skip
    message = str(caught.value)
    assert "wants the events of configmaps, which this processor does not serve" in message
    assert "--resource configmaps" in message
    assert "\n" not in message


def test_an_owns_of_a_resource_nobody_reflects_keeps_the_processor_waiting_and_says_which(
    stack: Stack,
) -> None:
    stack.sim.populate("pods", 10, seed=1)
    stack.reflector("pods")
    a = stack.processor(
        "a", handlers=[], handler=("tests.processor.service.controllers:PodsOwningConfigMaps",)
    )
    assert a.plan.co_sharded == ("pods", "configmaps")  # from the class, no --resource
    wait_until(lambda: "no reflector has published" in a.readyz()[1], 10)
    ready, reason = a.readyz()
    assert not ready
    assert "resource 'configmaps'" in reason
    assert a.owned_shards() == []
