"""The pipeline a soak runs, as real processes: the simulator, a private redis-server, the
reflector and the processors (``p1`` lives throughout, ``p2`` is restarted), and how to read
their state.
"""

from __future__ import annotations

import itertools
import json
import time
from contextlib import ExitStack
from pathlib import Path

import redis

from apiserver_sim import SimulatorProcess, SimulatorSettings
from bench.soak.handler import DUMP_REQUEST
from bench.soak.results import SoakConfig
from informer_bus import local_redis
from tests.support.bus import Bus, ProcessorProcess, ReflectorProcess
from tests.support.processor_ha import processor_settings, wait_balanced
from tests.support.reflector_ha import reflector_flags
from tests.support.waiting import wait_until

HANDLER = "bench.soak.handler:SoakCounter"
LONG_LIVED = "p1"
RESTARTED = "p2"


class Pipeline:
    """The running processes of one soak, all stopped by the ``ExitStack`` they were given."""

    def __init__(self, stack: ExitStack, config: SoakConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.redis = local_redis.RedisServer(workdir / "redis")
        self.redis.start()
        stack.callback(self.redis.stop)
        self.client = redis.Redis.from_url(self.redis.url, socket_timeout=5)
        stack.callback(self.client.close)
        self.bus = Bus(self.client, "pods", shard_count=config.shards)
        # History capped at ~5 s of churn: the simulator's memory is flat once it is full.
        history = max(10_000, int(config.rate * 5))
        self.sim = SimulatorProcess(
            SimulatorSettings(populate=config.pods, seed=config.seed, history_max_events=history)
        )
        self.sim.start()
        stack.callback(self.sim.stop)
        self.reflector = ReflectorProcess(self._reflector_args(), workdir / "reflector.log")
        stack.callback(self.reflector.close)
        self.processors: list[ProcessorProcess] = []
        stack.callback(self._close_processors)
        self._incarnations = itertools.count(1)

    def _reflector_args(self) -> list[str]:
        c = self.config
        return reflector_flags(
            self.redis.url, self.sim.url, shard_count=c.shards, identity="reflector",
            lease_duration=15.0, renew_deadline=10.0, retry_period=2.0,
            retention_min_entries=c.retention_min_entries,
            retention_interval=c.retention_interval, log_level="warning",
        )  # fmt: skip

    def spawn(self, member: str, log_name: str) -> ProcessorProcess:
        c = self.config
        settings = processor_settings(
            self.redis.url, member, handler=HANDLER, shard_count=c.shards,
            lease_duration=c.lease, renew_deadline=c.lease * 0.75, retry_period=c.lease / 8,
            heartbeat_interval=0.5, member_ttl=2.0,
        )  # fmt: skip
        args: list[str] = []
        for name, value in settings.items():
            args += ["--" + name.replace("_", "-"), value]
        env = {"IB_SOAK_DIR": str(self.workdir)}
        process = ProcessorProcess(args, self.workdir / f"{log_name}.log", env=env)
        self.processors.append(process)
        return process.start()

    def _close_processors(self) -> None:
        for process in self.processors:
            process.close()

    def live(self) -> list[ProcessorProcess]:
        return [p for p in self.processors if p.running()]

    def start(self) -> None:
        self.reflector.start()
        wait_until(self.bus.synced, 120, interval=0.2, what="the reflector to sync")
        self.spawn(LONG_LIVED, LONG_LIVED)
        self.spawn(RESTARTED, f"{RESTARTED}#1")
        wait_balanced(self.bus, self.live(), timeout=60)

    def caches(self, timeout: float = 10.0) -> tuple[dict[str, str], list[str]]:
        """Ask every live processor for its cache; the union and what is wrong with the shard
        split (a shard owned twice or by nobody, a processor not synced)."""
        token = f"{time.monotonic():.6f}"
        (self.workdir / DUMP_REQUEST).write_text(token)
        paths = [self.workdir / f"{p.member_id}-{p.pid}.cache.json" for p in self.live()]

        def dumps() -> list[dict[str, object]] | None:
            found = []
            for path in paths:
                try:
                    document = json.loads(path.read_text())
                except FileNotFoundError:
                    return None
                if document["token"] != token:
                    return None
                found.append(document)
            return found

        documents = wait_until(dumps, timeout, interval=0.1, what="the cache dumps")
        union: dict[str, str] = {}
        problems: list[str] = []
        owners: dict[int, int] = {}
        for document in documents:
            union.update(document["objects"])  # type: ignore[call-overload]
            for shard in document["shards"]:  # type: ignore[attr-defined]
                owners[shard] = owners.get(shard, 0) + 1
            if not document["synced"]:
                problems.append(f"a processor is not synced: shards {document['shards']}")
        split = [s for s in range(self.config.shards) if owners.get(s) != 1]
        problems += [f"shard {s} is in {owners.get(s, 0)} caches" for s in split]
        return union, problems
