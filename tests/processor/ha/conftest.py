"""The processor HA tests' fixtures: a reflector in this process and processors as child
processes recording every handler call. Their settings and the checks on those calls are in
:mod:`tests.support.processor_ha`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from apiserver_sim import Simulator
from common.settings import settings_of
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.bus import ProcessorProcess, closing_with_logs
from tests.support.processor_ha import (
    LEASE,
    RENEW,
    RETRY,
    SHARDS,
    processor_settings,
)
from tests.support.redis_server import RedisServer

# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def start_reflector(
    redis_server: RedisServer, sim: Simulator
) -> Iterator[Callable[[], ReflectorService]]:
    """Starts an in-process reflector for pods (fast failover settings); stopped at the end."""
    services: list[ReflectorService] = []

    def start() -> ReflectorService:
        settings = settings_of(
            ReflectorSettings,
            resource=("pods",), redis_url=redis_server.url, kube_url=sim.url,
            http_host="127.0.0.1", http_port=0, shard_count=SHARDS, lease_duration=LEASE,
            renew_deadline=RENEW, retry_period=RETRY, checkpoint_interval=0.2,
            identity="reflector", retention_interval=3600.0,
        )  # fmt: skip
        service = ReflectorService(settings)
        services.append(service)
        service.start()
        return service

    try:
        yield start
    finally:
        for service in services:
            service.stop()


@pytest.fixture
def spawn(redis_server: RedisServer, tmp_path: Path) -> Iterator[Callable[..., ProcessorProcess]]:
    """``spawn("p1", env={...}, buffer_size=100)``: start a processor child process named
    ``p1`` that records its handler calls in ``tmp_path/p1.jsonl`` (its log:
    ``tmp_path/p1.log``); ``by_env=True`` passes its settings as ``INFORMER_BUS_*`` variables
    instead of flags. All are killed at the end; their logs are printed (pytest shows them
    when the test fails)."""
    started: list[ProcessorProcess] = []

    def start(
        member: str, *, env: Mapping[str, str] | None = None, by_env: bool = False, **extra: object
    ) -> ProcessorProcess:
        environment = {"IB_RECORD_FILE": str(tmp_path / f"{member}.jsonl"), "IB_MEMBER": member}
        settings = processor_settings(redis_server.url, member, **extra)
        args: list[str] = []
        if by_env:
            environment.update({f"INFORMER_BUS_{k.upper()}": v for k, v in settings.items()})
        else:
            for name, value in settings.items():
                args += ["--" + name.replace("_", "-"), value]
        process = ProcessorProcess(
            args, tmp_path / f"{member}.log", env={**environment, **(env or {})}
        )
        started.append(process)
        return process.start()

    with closing_with_logs(started):
        yield start


@pytest.fixture
def bus_shards() -> int:
    """These tests run several processors: eight shards to share between them."""
    return SHARDS
