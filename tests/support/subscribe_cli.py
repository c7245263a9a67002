"""What the subscribe tests share: a publisher of hand-made entries, the printed rows, the command
line and a running pipeline.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from apiserver_sim import Simulator
from reflector_svc.publish_records import PendingDelta
from reflector_svc.publisher import ShardPublisher
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus, Entry
from tests.support.cli import run_command
from tests.support.paths import ROOT
from tests.support.waiting import wait_until

SHARDS = 4
PROGRAM = "informer-bus subscribe"
SUBSCRIBE = [sys.executable, "-m", "informer_bus.cli", "subscribe"]


class Deadline:
    """A stop signal that fires after ``seconds``: bounds a test's reads without threads."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def is_set(self) -> bool:
        return time.monotonic() >= self.at


@dataclass
class Publisher:
    """Publishes deltas with the reflector's own publisher (leader epoch 1)."""

    client: redis.Redis
    resource: str = "pods"
    shards: ShardPublisher = field(init=False)

    def __post_init__(self) -> None:
        self.shards = ShardPublisher(
            self.client, prefix="ib", resource=self.resource, shard_count=SHARDS
        )

    def publish(self, *deltas: PendingDelta) -> None:
        self.shards.publish(1, deltas, checkpoint_rv=None)


Row = tuple[int, str, str, str, str]


def as_rows(entries: Sequence[Entry]) -> list[Row]:
    """``(shard, id, type, key, rv)`` of stream entries (entry IDs are per stream: two shards
    may hold the same ID), to compare with what a subscriber printed."""
    return [(e.shard, e.stream_id, e.type, e.key, e.rv) for e in entries]


def printed_rows(stdout: str) -> list[Row]:
    return [
        (d["shard"], d["id"], d["type"], d["key"], d["resourceVersion"]) for d in json_lines(stdout)
    ]


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stdout.splitlines()]


def id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def add_raw_entry(client: redis.Redis, stream: str, field: bytes, value: bytes) -> str:
    """XADD one field as it is (e.g. a corrupt envelope); the new entry's ID."""
    entry_id = client.xadd(stream, {field: value})
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


def wait_for_a_later_millisecond(client: redis.Redis, entry_id: str) -> None:
    """Until Redis's clock is past ``entry_id``'s millisecond: entries added from then on get
    later IDs on every shard (each stream numbers its own entries within one millisecond)."""

    def now_ms() -> int:
        seconds, micros = client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    wait_until(lambda: now_ms() > id_order(entry_id)[0], 5, "a later millisecond", interval=0.001)


def run_subscribe(
    redis_url: str, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command(SUBSCRIBE, *args, "--redis-url", redis_url, env=env)


def start_subscribe(redis_url: str, *args: str) -> subprocess.Popen[str]:
    """A subscriber child process with piped stdout and stderr."""
    return subprocess.Popen(
        [*SUBSCRIBE, *args, "--redis-url", redis_url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


@dataclass
class Pipeline:
    """The simulator with pods, and a real reflector publishing them onto ``SHARDS`` shards."""

    sim: Simulator
    reflector: ReflectorService
    bus: Bus

    def churn(self, updates: int, deletions: int) -> list[str]:
        """Update the first ``updates`` pods (by key), delete the ``deletions`` after them, and
        wait for the bus to show it; the pods' keys, sorted, as they were before."""
        keys = sorted(self.sim.ground_truth("pods"))
        for key in keys[:updates]:
            self.sim.update("pods", key, {"metadata": {"labels": {"touched": "yes"}}})
        for key in keys[updates : updates + deletions]:
            self.sim.delete("pods", key)
        wait_until(self.caught_up, 20, what="the updates and deletions on the bus")
        return keys

    def caught_up(self) -> bool:
        """Every live pod's last delta on the bus is at its current resourceVersion, and every
        deleted pod's last delta is a deletion."""
        truth = self.sim.ground_truth("pods")
        last = {key: entries[-1] for key, entries in self.bus.by_key().items()}
        live = {key: e.rv for key, e in last.items() if not e.is_deletion}
        return live == truth
