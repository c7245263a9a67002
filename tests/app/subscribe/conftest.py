"""Shard streams to subscribe to: written by a real reflector, or by the publisher directly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator, SimulatorSettings
from common.settings import settings_of
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import Bus
from tests.support.redis_server import RedisServer
from tests.support.subscribe_cli import (
    SHARDS,
    Pipeline,
    Publisher,
)
from tests.support.waiting import wait_until


@pytest.fixture
def publisher(redis_client: redis.Redis) -> Publisher:
    return Publisher(redis_client)


@pytest.fixture
def pipeline(redis_server: RedisServer, bus: Bus) -> Iterator[Pipeline]:
    with Simulator(SimulatorSettings(bookmark_interval=0.1)) as sim:
        sim.populate("pods", 30)
        settings = settings_of(
            ReflectorSettings,
            resource=("pods",), redis_url=redis_server.url, kube_url=sim.url,
            http_host="127.0.0.1", http_port=0, shard_count=SHARDS, lease_duration=2.0,
            renew_deadline=1.5, retry_period=0.2, checkpoint_interval=0.2, identity="test",
        )  # fmt: skip
        reflector = ReflectorService(settings, registry=CollectorRegistry())
        reflector.start()
        try:
            running = Pipeline(sim, reflector, bus)
            wait_until(reflector.is_synced, 20, what="the reflector to sync")
            wait_until(running.caught_up, 20, what="the bus to hold every pod")
            yield running
        finally:
            reflector.stop()
