"""How many threads a process runs while a workload goes through it, sampled from ``/proc``.

Issue 35 bounds the threads of a processor that owns 16 shards (at most 6, whatever the shard
count), where the per-shard design ran one per shard. A thread count is only seen by looking at
it, so a background thread looks every few milliseconds over the span and keeps, per process,
the most it saw at once and every thread id it saw: a thread started and ended between two
looks escapes the first figure and, if another replaced it, shows in the second.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from proc_stats import thread_ids

INTERVAL = 0.005
"""Seconds between looks: a read of /proc/<pid>/task costs tens of µs of the bench's own CPU,
which is no process under measurement."""


@dataclass
class Threads:
    """What the samples of one process showed."""

    peak: int = 0
    """The most threads it had at once."""
    seen: set[int] = field(default_factory=set)
    """Every thread id it had at some look."""


class ThreadSampler:
    """``with ThreadSampler(pids) as sampler: ...``: looks at each process' threads on entry,
    every :data:`INTERVAL` seconds meanwhile, and on exit. A process that exits stops being
    looked at (the bench notices a dead child on its own)."""

    def __init__(self, pids: Sequence[int], interval: float = INTERVAL) -> None:
        self.threads = {pid: Threads() for pid in pids}
        self.samples = 0
        """Looks taken so far (each at every process)."""
        self._interval = interval
        self._gone: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="thread-sampler", daemon=True)

    def sample(self) -> None:
        with self._lock:
            for pid, threads in self.threads.items():
                if pid in self._gone:
                    continue
                try:
                    now = thread_ids(pid)
                except OSError:
                    self._gone.add(pid)
                    continue
                threads.peak = max(threads.peak, len(now))
                threads.seen |= now
            self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def __enter__(self) -> Self:
        self.sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def peak(self) -> int:
        """The most threads any one of the processes had at once."""
        return max((threads.peak for threads in self.threads.values()), default=0)

    def distinct(self) -> int:
        """The most thread ids any one of the processes showed over the span."""
        return max((len(threads.seen) for threads in self.threads.values()), default=0)
