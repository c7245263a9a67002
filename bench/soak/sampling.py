"""The once-a-second sampler: RSS of every process (``VmRSS``), lag and stream lengths from
Redis, while the soak runs.
"""

from __future__ import annotations

import threading
import time

import redis

from bench.soak.results import Sample
from informer_bus.status.collect import collect_status, status_client


def rss_kb(pid: int) -> int | None:
    """``VmRSS`` of a live process in kB, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class Sampler:
    """Samples once a second in a thread of its own until :meth:`stop`."""

    def __init__(self, redis_url: str, shards: int, started: float) -> None:
        self._client = status_client(redis_url)
        self._resources = {"pods": shards}
        self._started = started
        self._pids: dict[str, int] = {}
        self._lock = threading.Lock()
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler")

    def watch(self, label: str, pid: int) -> None:
        with self._lock:
            self._pids[label] = pid

    def forget(self, label: str) -> None:
        with self._lock:
            self._pids.pop(label, None)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._client.close()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stopping.is_set():
            try:
                self.samples.append(self._sample())
            except redis.RedisError as error:
                self.errors.append(f"{time.monotonic() - self._started:.1f} s: {error!r}")
            next_at += 1.0
            self._stopping.wait(max(0.0, next_at - time.monotonic()))

    def _sample(self) -> Sample:
        with self._lock:
            pids = dict(self._pids)
        rss = {label: kb for label, pid in pids.items() if (kb := rss_kb(pid)) is not None}
        snapshot = collect_status(self._client, resources=self._resources)
        pods = snapshot.resources[0]
        group = pods.group()
        memory = self._client.info("memory")
        return Sample(
            t=round(time.monotonic() - self._started, 2),
            rss_kb=rss,
            used_memory=int(memory["used_memory"]),
            lag=0 if group is None else group.lag or 0,
            lag_s=0.0 if group is None else group.max_lag_s or 0.0,
            stream_length=sum(shard.stream_length for shard in pods.shards),
            published=sum(shard.entries_added or 0 for shard in pods.shards),
        )
