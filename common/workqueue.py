"""The controller workqueue: client-go's ``util/workqueue`` for threads (reference section 6).

Event handlers do not do the work; they put a *key* on this queue and worker threads reconcile
it. The queue's rules are what make that safe and cheap:

* **Stingy** (6.1): a key that is already waiting is not queued twice. Ten updates to one object
  before a worker gets to it cost one reconcile, which reads the latest state anyway.
* **One worker per key** (6.1): a key being processed is never handed to a second worker. If it
  is added again meanwhile, it is remembered ("dirty") and requeued when the first worker calls
  :meth:`Queue.done`, so no change is lost and no two workers race on one object.
* **Delays and rate limits** (6.3, 6.4): failed keys come back later through
  :meth:`DelayingQueue.add_after` and :meth:`RateLimitingQueue.add_rate_limited` instead of
  hot-looping.

``get`` returns the key, or raises :class:`QueueShutDown` once the queue is shut down *and* empty:
the Python 3.13 ``queue.ShutDown`` shape, so a worker loop ends with an ``except`` rather than a
flag that is easy to forget to check. The typical worker::

    while True:
        try:
            key = queue.get()
        except QueueShutDown:
            return
        try:
            reconcile(key)
        finally:
            queue.done(key)

Metrics (6.5, :mod:`common.workqueue_metrics`) use client-go's names so dashboards built for Go
controllers read the same series; each queue's metrics carry its ``name`` as the label. An
unnamed queue, or one without a provider, emits nothing and pays (almost) nothing. The
controller's queue hands out fresh events before bulk work: :mod:`common.priority_queue`.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar

from common.rate_limiters import Clock, MonotonicClock, RateLimiter, default_controller_rate_limiter
from common.workqueue_metrics import (
    METRIC_NAMES,
    UNFINISHED_WORK_UPDATE_PERIOD,
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_DEPTH,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    CounterMetric,
    GaugeMetric,
    HistogramMetric,
    MetricsProvider,
    NoopMetricsProvider,
    QueueMetrics,
    SettableGaugeMetric,
    reports_metrics,
)

__all__ = [
    "METRIC_NAMES",
    "UNFINISHED_WORK_UPDATE_PERIOD",
    "WORKQUEUE_ADDS_TOTAL",
    "WORKQUEUE_DEPTH",
    "WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS",
    "WORKQUEUE_QUEUE_DURATION_SECONDS",
    "WORKQUEUE_RETRIES_TOTAL",
    "WORKQUEUE_UNFINISHED_WORK_SECONDS",
    "WORKQUEUE_WORK_DURATION_SECONDS",
    "CounterMetric",
    "DelayingQueue",
    "GaugeMetric",
    "HistogramMetric",
    "MetricsProvider",
    "NoopMetricsProvider",
    "Queue",
    "QueueShutDown",
    "RateLimitingQueue",
    "SettableGaugeMetric",
    "WaitingLine",
]

T = TypeVar("T", bound=Hashable)


class WaitingLine(Protocol[T]):
    """The order keys wait in to be handed out: a ``deque`` here (FIFO), by priority in
    :class:`common.priority_queue.PriorityQueue`. Holds only keys that are dirty and not in
    flight, each once."""

    def append(self, item: T, /) -> None: ...

    def popleft(self) -> T: ...

    def __len__(self) -> int: ...


# --- Queue ---------------------------------------------------------------------------------------


class QueueShutDown(Exception):
    """Raised by :meth:`Queue.get` once the queue is shut down and has nothing left to hand out.

    Named after Python 3.13's ``queue.ShutDown`` rather than ``...Error``: it is the normal end
    of a worker loop, not a failure.
    """


class Queue(Generic[T]):
    """A FIFO of keys that never holds a key twice and never hands one to two workers (6.1, 6.2).

    ``get`` returns a key and marks it in flight until ``done``. After :meth:`shut_down`, adds
    are ignored but keys already queued are still handed out; ``get`` raises
    :class:`QueueShutDown` only when none are left.

    With metrics, the unfinished-work gauges refresh only when :meth:`update_unfinished_work` is
    called. A plain ``Queue`` starts no thread to do it (client-go starts one per queue);
    :class:`DelayingQueue` and :class:`RateLimitingQueue` call it from their waiter thread.
    """

    def __init__(
        self,
        *,
        name: str = "",
        metrics: MetricsProvider | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._lock = threading.Lock()
        # Wakes getters when a key is queued or on shutdown, and drainers when work finishes.
        self._cond = threading.Condition(self._lock)
        # Order of hand-out. Every key here is in `_dirty` and not in `_processing`.
        self._queue: WaitingLine[T] = deque()
        # Keys that need processing: queued, or re-added while in flight (requeued on done).
        self._dirty: set[T] = set()
        # Keys handed out by get() and not yet done().
        self._processing: set[T] = set()
        self._shutting_down = False
        # True while shut_down_with_drain waits; shut_down() clears it to stop that wait.
        self._draining = False
        self._metrics: QueueMetrics[T] | None = (
            QueueMetrics(metrics, name, self._clock)
            if metrics is not None and reports_metrics(name, metrics)
            else None
        )

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing; a no-op if it is already waiting or shut down."""
        with self._lock:
            self._add_locked(item)

    def _add_locked(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if self._metrics is not None:
            self._metrics.added(item)
        if item in self._processing:
            return  # done() requeues it; handing it out now would run it twice at once
        self._queue.append(item)
        self._cond.notify()

    def get(self, timeout: float | None = None) -> T:
        """Hand out the oldest waiting key; block while there is none.

        ``timeout`` is in real seconds (not the injected clock: it bounds how long this thread
        blocks). Raises :class:`QueueShutDown` when shut down and empty, ``TimeoutError`` when
        ``timeout`` passes first. The caller must call :meth:`done` with the key.
        """
        with self._lock:
            return self._get_locked(timeout)

    def _get_locked(self, timeout: float | None) -> T:
        if not self._queue and not self._shutting_down:
            self._wait_for_item(timeout)
        if not self._queue:
            raise QueueShutDown
        item = self._queue.popleft()
        self._processing.add(item)
        self._dirty.discard(item)
        if self._metrics is not None:
            self._metrics.handed_out(item)
        return item

    def _wait_for_item(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._queue and not self._shutting_down:
            if deadline is None:
                self._cond.wait()
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no item within {timeout} s")
            self._cond.wait(remaining)

    def done(self, item: T) -> None:
        """Finish processing ``item``; requeue it if it was added again meanwhile.

        Raises ``ValueError`` if ``item`` is not in flight: a double ``done`` would otherwise
        queue the key twice and break the one-worker-per-key guarantee.
        """
        with self._lock:
            if item not in self._processing:
                raise ValueError(f"done({item!r}) for an item that is not being processed")
            self._processing.remove(item)
            if self._metrics is not None:
                self._metrics.done(item)
            if item in self._dirty:
                self._queue.append(item)
                self._cond.notify()
            elif not self._processing and self._shutting_down:
                # Once shutting down no getter blocks, so this reaches shut_down_with_drain.
                self._cond.notify_all()

    def len(self) -> int:
        """Keys waiting to be handed out (not those in flight). For reporting, not for control."""
        with self._lock:
            return len(self._queue)

    def shutting_down(self) -> bool:
        """Whether shutdown has begun (keys may still be waiting to be handed out)."""
        with self._lock:
            return self._shutting_down

    def shut_down(self) -> None:
        """Stop accepting keys and wake every blocked caller; workers drain what is queued.

        Returns at once, without waiting for in-flight work. Also ends a pending
        :meth:`shut_down_with_drain` wait. Safe to call more than once.
        """
        with self._lock:
            self._begin_shutdown_locked(drain=False)
        self._stop_background()

    def shut_down_with_drain(self) -> None:
        """Like :meth:`shut_down`, then block until no key is in flight.

        Only in-flight keys are waited for (client-go's rule). Workers must call :meth:`done`,
        or this blocks until another thread calls :meth:`shut_down`.
        """
        with self._lock:
            self._begin_shutdown_locked(drain=True)
        self._stop_background()
        with self._lock:
            while self._processing and self._draining:
                self._cond.wait()

    def _begin_shutdown_locked(self, *, drain: bool) -> None:
        self._shutting_down = True
        self._draining = drain
        self._cond.notify_all()

    def _stop_background(self) -> None:
        """Hook for subclasses that run a thread: stop it and join it (called without the lock)."""

    def update_unfinished_work(self) -> None:
        """Refresh the unfinished-work and longest-running-processor gauges from in-flight keys."""
        with self._lock:
            if self._metrics is not None and not self._shutting_down:
                self._metrics.update_unfinished_work()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.shut_down()


# --- DelayingQueue -------------------------------------------------------------------------------


class DelayingQueue(Queue[T]):
    """A :class:`Queue` that can also add a key after a delay (6.3).

    Delayed keys wait in a heap ordered by ready time; one waiter thread, started here and joined
    by :meth:`shut_down`, moves them into the queue when due and sleeps through the clock until
    the next one. The heap shares the queue's lock, so ``add_after`` needs no hand-off channel,
    but the waiter sleeps on its own condition so an ``add`` never wakes it instead of a getter.
    Keys still delayed at shutdown are dropped.
    """

    def __init__(
        self,
        *,
        name: str = "",
        metrics: MetricsProvider | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name=name, metrics=metrics, clock=clock)
        self._waiter_cond = threading.Condition(self._lock)
        # Min-heap of (ready_at, sequence, item); the unique sequence keeps items from being
        # compared. Entries no longer in `_ready_at_entry` are stale and skipped.
        self._delayed: list[tuple[float, int, T]] = []
        # The one live heap entry per delayed item: the earliest ready time asked for.
        self._ready_at_entry: dict[T, tuple[float, int, T]] = {}
        self._sequence = 0
        self._retries: CounterMetric | None = (
            metrics.new_retries_metric(name)
            if metrics is not None and reports_metrics(name, metrics)
            else None
        )
        # Daemon so a queue someone forgot to shut down cannot hang interpreter exit.
        self._waiter = threading.Thread(
            target=self._run_waiter, name=f"workqueue-waiter[{name or hex(id(self))}]", daemon=True
        )
        self._waiter.start()

    def add_after(self, item: T, delay_seconds: float) -> None:
        """Add ``item`` once ``delay_seconds`` have passed; at once if the delay is ≤ 0.

        If the item is already delayed, the earlier ready time wins. Ignored after shutdown.
        Each call counts as a retry in ``workqueue_retries_total``, as in client-go.
        """
        with self._lock:
            self._add_after_locked(item, delay_seconds)

    def _add_after_locked(self, item: T, delay_seconds: float) -> None:
        if self._shutting_down:
            return
        if self._retries is not None:
            self._retries.inc()
        if delay_seconds <= 0:
            self._add_delayed_locked(item)
            return
        ready_at = self._clock.now() + delay_seconds
        existing = self._ready_at_entry.get(item)
        if existing is not None and existing[0] <= ready_at:
            return
        self._sequence += 1
        entry = (ready_at, self._sequence, item)
        self._ready_at_entry[item] = entry
        heapq.heappush(self._delayed, entry)
        if self._delayed[0] is entry:
            self._waiter_cond.notify()  # the waiter sleeps until a later time

    def _run_waiter(self) -> None:
        period = UNFINISHED_WORK_UPDATE_PERIOD
        next_metrics_update = self._clock.now() + period if self._metrics is not None else None
        with self._lock:
            while not self._shutting_down:
                now = self._clock.now()
                self._add_ready_locked(now)
                due = next_metrics_update is not None and now >= next_metrics_update
                if self._metrics is not None and due:
                    self._metrics.update_unfinished_work()
                    next_metrics_update = now + period
                self._clock.wait(self._waiter_cond, self._next_wake_locked(next_metrics_update))

    def _add_ready_locked(self, now: float) -> None:
        while self._delayed and self._delayed[0][0] <= now:
            entry = heapq.heappop(self._delayed)
            item = entry[2]
            if self._ready_at_entry.get(item) is entry:
                del self._ready_at_entry[item]
                self._add_delayed_locked(item)

    def _add_delayed_locked(self, item: T) -> None:
        """A delayed key is due (or was delayed by ≤ 0): add it. A priority queue adds it at the
        priority it was delayed with."""
        self._add_locked(item)

    def _next_wake_locked(self, next_metrics_update: float | None) -> float | None:
        # Drop stale entries from the head so they do not cause early wake-ups.
        while self._delayed:
            head = self._delayed[0]
            if self._ready_at_entry.get(head[2]) is head:
                break
            heapq.heappop(self._delayed)
        next_ready = self._delayed[0][0] if self._delayed else None
        if next_ready is None:
            return next_metrics_update
        if next_metrics_update is None:
            return next_ready
        return min(next_ready, next_metrics_update)

    def _begin_shutdown_locked(self, *, drain: bool) -> None:
        super()._begin_shutdown_locked(drain=drain)
        self._waiter_cond.notify_all()

    def _stop_background(self) -> None:
        if self._waiter is not threading.current_thread():
            self._waiter.join()


# --- RateLimitingQueue ---------------------------------------------------------------------------


class RateLimitingQueue(DelayingQueue[T]):
    """A :class:`DelayingQueue` whose retries are spaced by a :class:`RateLimiter` (6.4).

    The default limiter is :func:`default_controller_rate_limiter` on this queue's clock, so a
    :class:`FakeClock` drives the token bucket too.
    """

    def __init__(
        self,
        rate_limiter: RateLimiter[T] | None = None,
        *,
        name: str = "",
        metrics: MetricsProvider | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(name=name, metrics=metrics, clock=clock)
        if rate_limiter is None:
            rate_limiter = default_controller_rate_limiter(self._clock)
        self._rate_limiter: RateLimiter[T] = rate_limiter

    def add_rate_limited(self, item: T) -> None:
        """Add ``item`` after the delay the rate limiter picks (which records a failure)."""
        self.add_after(item, self._rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Tell the rate limiter ``item`` is done retrying; its backoff starts over next time.

        Call it after a success (or when giving up); the key itself is not removed from the queue.
        """
        self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """Failures the rate limiter has recorded for ``item``."""
        return self._rate_limiter.num_requeues(item)
