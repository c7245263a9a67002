"""The reflector HA tests' fixtures: the simulator's history, reflectors as child processes or
in this process. The checks are in :mod:`tests.support.reflector_ha`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver_sim import Simulator
from common.settings import settings_of
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import (
    ReflectorProcess,
    closing_with_logs,
)
from tests.support.redis_server import RedisServer
from tests.support.reflector_ha import (
    LEASE,
    RENEW,
    RETRY,
    SHARDS,
    SimHistory,
    reflector_flags,
)


@pytest.fixture
def history(sim: Simulator) -> Iterator[SimHistory]:
    """Started before the test creates any pod, so every key's history is complete."""
    recorder = SimHistory(sim)
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.fixture
def spawn(
    redis_server: RedisServer, sim: Simulator, tmp_path: Path
) -> Iterator[Callable[..., ReflectorProcess]]:
    """``spawn("a", page_size=100)``: start a reflector child process with identity ``a``
    (its log: ``tmp_path/a-<n>.log``). All are killed at the end; their logs are printed when
    the test fails (pytest shows captured output)."""
    started: list[ReflectorProcess] = []

    def start(identity: str, **extra: object) -> ReflectorProcess:
        log = tmp_path / f"{identity}-{len(started)}.log"
        flags = reflector_flags(redis_server.url, sim.url, identity=identity, **extra)
        process = ReflectorProcess(flags, log)
        started.append(process)
        return process.start()

    with closing_with_logs(started):
        yield start


@pytest.fixture
def make_service(
    redis_server: RedisServer, sim: Simulator
) -> Iterator[Callable[..., ReflectorService]]:
    """``make_service("a", lease_duration=10.0)``: a started in-process reflector service."""
    services: list[ReflectorService] = []

    def make(identity: str, **changes: Any) -> ReflectorService:
        values: dict[str, Any] = {
            "resource": ("pods",), "redis_url": redis_server.url, "kube_url": sim.url,
            "http_host": "127.0.0.1", "http_port": 0, "shard_count": SHARDS,
            "lease_duration": LEASE, "renew_deadline": RENEW, "retry_period": RETRY,
            "checkpoint_interval": 0.2, "identity": identity,
        }  # fmt: skip
        service = ReflectorService(settings_of(ReflectorSettings, **{**values, **changes}))
        services.append(service)
        service.start()
        return service

    try:
        yield make
    finally:
        for service in services:
            service.stop()
