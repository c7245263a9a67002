"""A rate-limiting workqueue that hands out fresh work before bulk work (controller-runtime's).

A processor that takes over a shard of 50k objects, or a handler that resyncs, queues a key for
every object at once. On a FIFO queue a change a user makes a moment later waits behind all of
them: minutes at a few milliseconds a reconcile, for the one change somebody is watching.
controller-runtime (v0.20, on by default since v0.23) answers with a priority queue: the
initial list, takeovers and resyncs are added at :data:`LOW_PRIORITY`, fresh events at
:data:`NORMAL_PRIORITY`, and ``get`` hands out the highest priority first.

Everything else is the workqueue's (:mod:`common.workqueue`): a key waits once (stingy), is never
handed to two workers, is requeued on ``done`` if added meanwhile, and comes back after delays
and rate limits. What priority adds, with controller-runtime's rules:

* A key added again at a *higher* priority is promoted, keeping its place among the keys of
  that priority (it was added earlier than those added since); a lower priority never demotes.
  So a fresh event for a key still waiting from the initial list moves it to the front.
* A key re-added while in flight is requeued on ``done`` at the highest priority it was added
  with meanwhile.
* A delayed key (``add_after``, ``add_rate_limited``) carries its priority into the queue when
  due: the highest of the priorities it was delayed with. A worker retrying a key passes the
  priority ``get_with_priority`` gave it, so a failing low-priority key does not jump ahead.

Within one priority the order is FIFO, so a queue whose keys all come at one priority behaves
exactly like :class:`~common.workqueue.RateLimitingQueue`. Depth is reported in total
(``workqueue_depth``) and, by a provider that can (:class:`PriorityMetricsProvider`), per
priority (``workqueue_depth_by_priority``).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

from common.rate_limiters import Clock, RateLimiter
from common.workqueue import RateLimitingQueue
from common.workqueue_metrics import (
    MetricsProvider,
    PriorityDepthMetric,
    PriorityMetricsProvider,
    reports_metrics,
)

__all__ = ["LOW_PRIORITY", "NORMAL_PRIORITY", "PriorityQueue"]

T = TypeVar("T", bound=Hashable)

NORMAL_PRIORITY: Final = 0
"""Fresh events, and every add that names no priority (controller-runtime's default, 0)."""
LOW_PRIORITY: Final = -100
"""The initial list, takeovers and resyncs (controller-runtime's ``handler.LowPriority``)."""


class _PriorityLine(Generic[T]):
    """The waiting keys, highest priority first, then in the order they were added; and the
    priority of every dirty key (waiting, or re-added while in flight).

    A heap of ``(-priority, sequence, key)``; a promotion pushes a new entry and leaves the old
    one to be skipped when it surfaces, so an add stays O(log n) however the key moved.
    """

    __slots__ = ("_depth", "_entries", "_heap", "_sequence", "popped_priority", "priorities")

    def __init__(self, depth: PriorityDepthMetric | None) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._entries: dict[T, tuple[int, int, T]] = {}
        """The live heap entry of each waiting key."""
        self._sequence = 0
        self._depth = depth
        self.priorities: dict[T, int] = {}
        """The priority of every dirty key: what it is (or will be, on ``done``) queued at."""
        self.popped_priority = NORMAL_PRIORITY
        """The priority of the key :meth:`popleft` returned last."""

    def raise_priority(self, item: T, priority: int) -> None:
        """``item`` is dirty and added again: it keeps the higher of the two priorities; if it
        is waiting, it moves up, keeping its sequence (its place among equals)."""
        current = self.priorities[item]
        if priority <= current:
            return
        self.priorities[item] = priority
        entry = self._entries.get(item)
        if entry is None:  # in flight: ``done`` queues it at the new priority
            return
        promoted = (-priority, entry[1], item)
        self._entries[item] = promoted
        heapq.heappush(self._heap, promoted)
        if self._depth is not None:
            self._depth.dec(current)
            self._depth.inc(priority)

    def append(self, item: T) -> None:
        priority = self.priorities[item]
        self._sequence += 1
        entry = (-priority, self._sequence, item)
        self._entries[item] = entry
        heapq.heappush(self._heap, entry)
        if self._depth is not None:
            self._depth.inc(priority)

    def popleft(self) -> T:
        while True:
            entry = heapq.heappop(self._heap)
            item = entry[2]
            if self._entries.get(item) is entry:
                del self._entries[item]
                priority = self.priorities.pop(item)  # handed out: no longer dirty
                self.popped_priority = priority
                if self._depth is not None:
                    self._depth.dec(priority)
                return item

    def __len__(self) -> int:
        return len(self._entries)


class PriorityQueue(RateLimitingQueue[T]):
    """A :class:`~common.workqueue.RateLimitingQueue` whose keys carry a priority (module
    docstring). ``add``, ``add_after`` and ``add_rate_limited`` take an optional ``priority``
    (default :data:`NORMAL_PRIORITY`); :meth:`get_with_priority` tells a worker the priority
    of the key it got, to retry it at the same one."""

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        metrics: MetricsProvider | None = None,
        clock: Clock | None = None,
    ) -> None:
        depth: PriorityDepthMetric | None = None
        if isinstance(metrics, PriorityMetricsProvider) and reports_metrics(name, metrics):
            depth = metrics.new_depth_by_priority_metric(name)
        # Before the base starts its waiter thread, which may add due keys to the line.
        self._line: _PriorityLine[T] = _PriorityLine(depth)
        self._delayed_priority: dict[T, int] = {}
        """The priority each delayed key is added at when due."""
        super().__init__(rate_limiter, name=name, metrics=metrics, clock=clock)
        self._queue = self._line

    def add(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Mark ``item`` as needing processing at ``priority``; if it already waits (or was
        re-added while in flight), it keeps the higher priority. Ignored after shutdown."""
        with self._lock:
            self._add_at_locked(item, priority)

    def _add_at_locked(self, item: T, priority: int) -> None:
        if self._shutting_down:
            return
        if item in self._dirty:
            self._line.raise_priority(item, priority)
            return
        self._line.priorities[item] = priority
        self._add_locked(item)

    def add_after(self, item: T, delay_seconds: float, priority: int = NORMAL_PRIORITY) -> None:
        """Add ``item`` at ``priority`` once ``delay_seconds`` have passed. Already delayed, it
        is added at the earlier time and the higher priority of the two."""
        with self._lock:
            if self._shutting_down:
                return
            delayed = self._delayed_priority.get(item)
            self._delayed_priority[item] = priority if delayed is None else max(delayed, priority)
            self._add_after_locked(item, delay_seconds)

    def _add_delayed_locked(self, item: T) -> None:
        if item in self._ready_at_entry:  # due now and still delayed too: keep it for then
            priority = self._delayed_priority[item]
        else:
            priority = self._delayed_priority.pop(item, NORMAL_PRIORITY)
        self._add_at_locked(item, priority)

    def add_rate_limited(self, item: T, priority: int = NORMAL_PRIORITY) -> None:
        """Add ``item`` at ``priority`` after the delay the rate limiter picks."""
        self.add_after(item, self._rate_limiter.when(item), priority)

    def get_with_priority(self, timeout: float | None = None) -> tuple[T, int]:
        """:meth:`get`, and the priority the key was handed out at."""
        with self._lock:
            item = self._get_locked(timeout)
            return item, self._line.popped_priority
