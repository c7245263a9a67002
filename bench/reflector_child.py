"""The informer-bus reflector under test: ``python -m reflector_svc`` as a child process into a
private Redis, timed by its log lines and checked by counting what it wrote to Redis.

Each run starts a fresh reflector on an empty Redis (retention off, so stream lengths count
every delta of the run), times its initial list from its "leading ... listing" log line to its
"synced" line, then one burst by the Redis stream IDs of the first and last burst entries
(Redis' own millisecond clock). ``--py-spy`` attaches :class:`profiling.PySpy` per workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import redis
from harness import BenchError, ServiceChild
from proc_stats import process_cpu_seconds
from profiling import PySpy
from run_control import timeout_for, wait_for
from sim_control import RESOURCE, Sim

SHARDS = 16
PAGE_SIZE = 500
PREFIX = "ib"


class RunSizes(Protocol):
    """The initial list and burst sizes of one reflector run."""

    @property
    def pods(self) -> int: ...

    @property
    def burst(self) -> int: ...


class ReflectorChild(ServiceChild):
    """``python -m reflector_svc`` into the private Redis; its log lines mark the moments the
    list starts and ends."""

    label = "reflector"

    def __init__(self, sim_url: str, redis_url: str, log_path: Path) -> None:
        flags = {
            "resource": RESOURCE, "kube-url": sim_url, "redis-url": redis_url,
            "prefix": PREFIX, "shard-count": SHARDS, "page-size": PAGE_SIZE,
            "http-host": "127.0.0.1", "http-port": 0, "identity": "bench", "log-level": "info",
            # Retention off: stream lengths must count every delta published in this run.
            "retention-min-entries": 10**9, "retention-max-entries": 10**9,
            "retention-interval": 86400,
        }  # fmt: skip
        super().__init__("reflector_svc", flags, log_path)
        self.listing = 0.0
        self.synced = 0.0
        self.synced_deltas = -1

    def on_message(self, message: str, arrived: float) -> None:
        if message.startswith(f"leading {RESOURCE} ") and message.endswith("listing"):
            self.listing = arrived
        elif message.startswith(f"{RESOURCE}: synced at rv ") and not self.synced:
            self.synced_deltas = int(message.rsplit("(", 1)[1].split(maxsplit=1)[0])
            self.synced = arrived


def stream_keys() -> list[str]:
    return [f"{PREFIX}:{{{RESOURCE}:{shard}}}:deltas" for shard in range(SHARDS)]


def stream_entries(client: redis.Redis) -> int:
    pipe = client.pipeline(transaction=False)
    for key in stream_keys():
        pipe.xlen(key)
    return sum(pipe.execute())


def last_ids(client: redis.Redis) -> list[bytes]:
    pipe = client.pipeline(transaction=False)
    for key in stream_keys():
        pipe.xrevrange(key, count=1)
    return [entries[0][0] if entries else b"0-0" for entries in pipe.execute()]


def _id_ms(stream_id: bytes) -> int:
    return int(stream_id.split(b"-")[0])


def burst_span(client: redis.Redis, before: list[bytes]) -> float:
    """Seconds from the first to the last stream entry after ``before`` (per-shard last IDs),
    by the millisecond timestamps Redis put in the IDs."""
    pipe = client.pipeline(transaction=False)
    for key, last in zip(stream_keys(), before, strict=True):
        pipe.xrange(key, min=b"(" + last, count=1)
        pipe.xrevrange(key, count=1)
    replies = pipe.execute()
    firsts = [_id_ms(first[0][0]) for first in replies[0::2] if first]
    lasts = [_id_ms(last[0][0]) for last in replies[1::2] if last]
    return max(1e-3, (max(lasts) - min(firsts)) / 1000)


def synced_shards(client: redis.Redis) -> int:
    pipe = client.pipeline(transaction=False)
    for shard in range(SHARDS):
        pipe.hget(f"{PREFIX}:{{{RESOURCE}:{shard}}}:checkpoint", "synced_rv")
    return sum(1 for rv in pipe.execute() if rv)


@dataclass
class ReflectorRun:
    list_seconds: float
    wall_seconds: float
    burst_seconds: float
    list_cpu_seconds: float
    """CPU (user + system) the reflector process used from spawn to synced."""
    burst_cpu_seconds: float
    """CPU the reflector process used from the burst's start until all of it was in Redis."""
    redis_burst_cpu_seconds: float = 0.0
    """CPU redis-server used over the same span (its own ``INFO cpu``; the bench's few
    polling calls included)."""
    redis_commandstats: dict[str, dict[str, float]] = field(default_factory=dict)
    """``INFO commandstats`` of the burst alone (reset at its start): calls, usec, usec_per_call
    per command, which says where redis-server's CPU went."""
    listed_entries: int = 0
    """Stream entries in Redis once the reflector said it synced (``XLEN`` of every shard)."""
    synced_shards: int = 0
    """Shards whose checkpoint in Redis says synced, then."""
    burst_entries: int = 0
    """Stream entries the burst added in Redis."""


def redis_cpu_seconds(client: redis.Redis) -> float:
    """User + system CPU redis-server used so far, by its own account (``INFO cpu``)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def commandstats(client: redis.Redis) -> dict[str, dict[str, float]]:
    """``INFO commandstats``, keyed by command name without the ``cmdstat_`` prefix."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): {
            key: value for key, value in fields.items() if key in ("calls", "usec", "usec_per_call")
        }
        for name, fields in stats.items()
    }


def reflector_run(
    sim: Sim,
    redis_url: str,
    sizes: RunSizes,
    seed: int,
    *,
    log_path: Path,
    spy: PySpy,
    root: Path | None = None,
) -> ReflectorRun:
    """One fresh reflector on an empty Redis: its initial list, then one burst. ``root``: run
    the reflector of that checkout instead of this one's."""
    pods, burst = sizes.pods, sizes.burst
    client = redis.Redis.from_url(redis_url, socket_timeout=60)
    child = ReflectorChild(sim.url, redis_url, log_path)
    if root is not None:
        child.cwd = root
    try:
        client.flushall()
        child.start()
        spy.start({"reflector": child.pid}, "list")
        wait_for(
            lambda: child.synced > 0,
            "the reflector's initial list",
            timeout_for(pods),
            alive=child.check_alive,
        )
        spy.stop()
        list_cpu = process_cpu_seconds(child.pid)
        if not child.listing:
            raise BenchError(f"no 'leading ... listing' log line; log:\n{child.log_tail()}")
        listed, synced = stream_entries(client), synced_shards(client)
        if listed != pods or child.synced_deltas != pods or synced != SHARDS:
            raise BenchError(
                f"after the list: {listed} stream entries, {child.synced_deltas} deltas "
                f"logged, {synced}/{SHARDS} shards synced; expected {pods} pods"
            )
        sim.wait_watching(alive=child.check_alive)
        before = last_ids(client)
        client.config_resetstat()
        redis_before = redis_cpu_seconds(client)
        cpu_before = process_cpu_seconds(child.pid)
        spy.start({"reflector": child.pid}, "burst")
        sim.burst(burst, seed)
        wait_for(
            lambda: stream_entries(client) >= pods + burst,
            "the reflector's burst",
            timeout_for(burst),
            alive=child.check_alive,
        )
        burst_cpu = process_cpu_seconds(child.pid) - cpu_before
        redis_burst_cpu = redis_cpu_seconds(client) - redis_before
        burst_stats = commandstats(client)
        spy.stop()
        if (entries := stream_entries(client)) != pods + burst:
            raise BenchError(f"{entries - pods} stream entries for a burst of {burst}")
        return ReflectorRun(
            listed_entries=listed,
            synced_shards=synced,
            burst_entries=entries - pods,
            list_seconds=child.synced - child.listing,
            wall_seconds=child.synced - child.spawned,
            burst_seconds=burst_span(client, before),
            list_cpu_seconds=list_cpu,
            burst_cpu_seconds=burst_cpu,
            redis_burst_cpu_seconds=redis_burst_cpu,
            redis_commandstats=burst_stats,
        )
    finally:
        spy.stop()
        child.stop()
        client.close()
