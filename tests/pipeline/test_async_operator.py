"""The async example operator (``informer_bus.examples.async_widget_operator``) converges.

Real pieces, in process: the simulator over HTTP (the operator writes through
``kubernetes_asyncio``), a private redis-server, a reflector (Widgets by key, ConfigMaps by
their controlling owner) and a processor loading the operator by its ``--handler`` reference,
with ``--max-concurrent-reconciles``. Widgets are created, their specs changed and some deleted;
at the end every Widget has exactly its ConfigMap and status, and no write was refused with 409
(each was decided on a cache that held the operator's own previous writes: the write barrier).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from apiserver_sim.resources import WIDGETS
from common.settings import settings_of
from informer_bus.examples.async_widget_operator import AsyncWidgetOperator
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings
from tests.pipeline.test_operator import (
    SHARDS,
    convergence_problems,
    reflector,  # noqa: F401 (the fixture, used by name)
)
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

HANDLER = "informer_bus.examples.async_widget_operator:AsyncWidgetOperator"
NAMESPACES = ("ns-a", "ns-b")


@pytest.fixture
def processor(redis_server: RedisServer, sim: Simulator) -> Iterator[ProcessorService]:
    service = ProcessorService(
        settings_of(
            ProcessorSettings,
            handler=(HANDLER,), redis_url=redis_server.url, kube_url=sim.url,
            shard_count=SHARDS, http_host="127.0.0.1", http_port=0, lease_duration=2.0,
            renew_deadline=1.5, retry_period=0.2, heartbeat_interval=0.1, member_ttl=0.6,
            block_ms=200, shutdown_grace=5.0, max_concurrent_reconciles=8,
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    service.start()
    try:
        yield service
    finally:
        service.stop()


def widget(namespace: str, name: str, size: int) -> dict[str, object]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, "color": "r"},
    }


@pytest.mark.usefixtures("reflector")
def test_the_async_operator_converges_through_creates_updates_and_deletes(
    sim: Simulator, processor: ProcessorService
) -> None:
    for namespace in NAMESPACES:
        sim.create("namespaces", {"metadata": {"name": namespace}})
    keys = [f"{NAMESPACES[i % 2]}/w{i:02d}" for i in range(20)]
    for index, key in enumerate(keys):
        namespace, name = key.split("/")
        sim.create(WIDGETS, widget(namespace, name, index))
    wait_until(lambda: not convergence_problems(sim), 60, what="the created Widgets converged")
    for index, key in enumerate(keys[:10]):
        sim.update(WIDGETS, key, {"spec": {"size": 100 + index}})
    for key in keys[15:]:
        sim.delete(WIDGETS, key)
    wait_until(lambda: not convergence_problems(sim), 60, what="the changes converged")
    assert sim.conflicts() == {}, "a write was decided on a stale cache"
    (operator,) = [h.handler for h in processor.handlers]
    assert isinstance(operator, AsyncWidgetOperator)
    assert operator.max_concurrent_reconciles == 8
    assert processor.event_loop.started
