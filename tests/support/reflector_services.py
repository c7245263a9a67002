"""In-process reflector services for tests, with test-friendly timings, and what the tests read of
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from apiserver_sim import Simulator
from common.settings import settings_of
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings
from tests.support.waiting import wait_until

SHARDS = 4
PATIENCE = 15.0
"""Seconds these tests wait for a state: generous, since they never assert tight timings."""


@dataclass
class Reflectors:
    """Starts reflector services with test-friendly timings; stops them all at teardown."""

    redis_url: str
    sim: Simulator
    started: list[ReflectorService] = field(default_factory=list)

    def settings(self, **overrides: object) -> ReflectorSettings:
        values: dict[str, object] = {
            "resource": ("pods",),
            "redis_url": self.redis_url,
            "kube_url": self.sim.url,
            "http_host": "127.0.0.1",
            "http_port": 0,
            "shard_count": SHARDS,
            "lease_duration": 2.0,
            "renew_deadline": 1.5,
            "retry_period": 0.2,
            "checkpoint_interval": 0.2,
            "backoff_initial": 0.05,
            "backoff_max": 0.5,
            "inactivity_timeout": 5.0,
            "identity": "test",
        }
        values.update(overrides)
        return settings_of(ReflectorSettings, **values)  # type: ignore[arg-type]

    def start(self, **overrides: object) -> ReflectorService:
        service = ReflectorService(self.settings(**overrides), registry=CollectorRegistry())
        service.start()
        self.started.append(service)
        return service

    def stop_all(self) -> None:
        for service in self.started:
            service.stop()


def wait_synced(service: ReflectorService, timeout: float = 20.0) -> None:
    wait_until(lambda: service.readyz()[0] and service.is_synced(), timeout, "synced")


def metric(service: ReflectorService, name: str, **labels: str) -> float:
    value = service.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
