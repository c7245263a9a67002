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

Metrics (6.5) use client-go's names so dashboards built for Go controllers read the same series;
each queue's metrics carry its ``name`` as the label. An unnamed queue, or one without a
provider, emits nothing and pays (almost) nothing.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable
from types import TracebackType
from typing import Final, Generic, Protocol, Self, TypeVar

from common.rate_limiters import Clock, MonotonicClock, RateLimiter, default_controller_rate_limiter

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
]

T = TypeVar("T", bound=Hashable)

# --- metrics -------------------------------------------------------------------------------------

WORKQUEUE_DEPTH = "workqueue_depth"
WORKQUEUE_ADDS_TOTAL = "workqueue_adds_total"
WORKQUEUE_QUEUE_DURATION_SECONDS = "workqueue_queue_duration_seconds"
WORKQUEUE_WORK_DURATION_SECONDS = "workqueue_work_duration_seconds"
WORKQUEUE_UNFINISHED_WORK_SECONDS = "workqueue_unfinished_work_seconds"
WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS = "workqueue_longest_running_processor_seconds"
WORKQUEUE_RETRIES_TOTAL = "workqueue_retries_total"

METRIC_NAMES: tuple[str, ...] = (
    WORKQUEUE_DEPTH,
    WORKQUEUE_ADDS_TOTAL,
    WORKQUEUE_QUEUE_DURATION_SECONDS,
    WORKQUEUE_WORK_DURATION_SECONDS,
    WORKQUEUE_UNFINISHED_WORK_SECONDS,
    WORKQUEUE_LONGEST_RUNNING_PROCESSOR_SECONDS,
    WORKQUEUE_RETRIES_TOTAL,
)
"""Every series a queue can report, each labelled ``name`` with the queue's name."""

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between refreshes of the unfinished-work gauges (client-go's 500 ms)."""


class CounterMetric(Protocol):
    """A value that only goes up (a Prometheus counter)."""

    def inc(self) -> None: ...


class GaugeMetric(Protocol):
    """A value that goes up and down by one (the depth gauge)."""

    def inc(self) -> None: ...

    def dec(self) -> None: ...


class SettableGaugeMetric(Protocol):
    """A value that is overwritten on each update (the unfinished-work gauges)."""

    def set(self, value: float) -> None: ...


class HistogramMetric(Protocol):
    """A distribution of observations, in seconds here."""

    def observe(self, value: float) -> None: ...


class MetricsProvider(Protocol):
    """Creates one queue's metric objects; the argument is the queue name (the ``name`` label).

    One method per series, as in client-go, so an adapter (Prometheus, OpenTelemetry) maps each
    to the metric named in the matching ``WORKQUEUE_*`` constant.
    """

    def new_depth_metric(self, name: str) -> GaugeMetric:
        """``workqueue_depth``: keys waiting to be handed out."""
        ...

    def new_adds_metric(self, name: str) -> CounterMetric:
        """``workqueue_adds_total``: adds that queued a key (stingy no-ops not counted)."""
        ...

    def new_latency_metric(self, name: str) -> HistogramMetric:
        """``workqueue_queue_duration_seconds``: from add to get."""
        ...

    def new_work_duration_metric(self, name: str) -> HistogramMetric:
        """``workqueue_work_duration_seconds``: from get to done."""
        ...

    def new_unfinished_work_seconds_metric(self, name: str) -> SettableGaugeMetric:
        """``workqueue_unfinished_work_seconds``: summed age of all in-flight work."""
        ...

    def new_longest_running_processor_seconds_metric(self, name: str) -> SettableGaugeMetric:
        """``workqueue_longest_running_processor_seconds``: age of the oldest in-flight work."""
        ...

    def new_retries_metric(self, name: str) -> CounterMetric:
        """``workqueue_retries_total``: calls to ``add_after`` (and so ``add_rate_limited``)."""
        ...


class _NoopMetric:
    def inc(self) -> None:
        pass

    def dec(self) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_NOOP_METRIC: Final = _NoopMetric()


def _noop_metric(provider: object, name: str) -> _NoopMetric:
    return _NOOP_METRIC


class NoopMetricsProvider:
    """Reports nothing. Queues given this provider skip metric bookkeeping entirely."""

    # One metric that does nothing serves as every kind (it has inc, dec, set and observe).
    new_depth_metric = new_adds_metric = new_latency_metric = _noop_metric
    new_work_duration_metric = new_unfinished_work_seconds_metric = _noop_metric
    new_longest_running_processor_seconds_metric = new_retries_metric = _noop_metric


def _reports_metrics(name: str, provider: MetricsProvider | None) -> bool:
    # client-go's rule: an unnamed queue has no label value to report under, so it reports nothing.
    return bool(name) and provider is not None and not isinstance(provider, NoopMetricsProvider)


class _QueueMetrics(Generic[T]):
    """Per-queue metric bookkeeping; every method is called with the queue's lock held."""

    def __init__(self, provider: MetricsProvider, name: str, clock: Clock) -> None:
        self._clock = clock
        self._depth = provider.new_depth_metric(name)
        self._adds = provider.new_adds_metric(name)
        self._latency = provider.new_latency_metric(name)
        self._work_duration = provider.new_work_duration_metric(name)
        self._unfinished_work = provider.new_unfinished_work_seconds_metric(name)
        self._longest_running = provider.new_longest_running_processor_seconds_metric(name)
        # When each waiting key was first added, and when each in-flight key was handed out.
        self._added_at: dict[T, float] = {}
        self._started_at: dict[T, float] = {}

    def added(self, item: T) -> None:
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(item, self._clock.now())

    def handed_out(self, item: T) -> None:
        now = self._clock.now()
        self._depth.dec()
        self._started_at[item] = now
        added_at = self._added_at.pop(item, None)
        if added_at is not None:
            self._latency.observe(now - added_at)

    def done(self, item: T) -> None:
        started_at = self._started_at.pop(item, None)
        if started_at is not None:
            self._work_duration.observe(self._clock.now() - started_at)

    def update_unfinished_work(self) -> None:
        now = self._clock.now()
        ages = [now - started_at for started_at in self._started_at.values()]
        self._unfinished_work.set(sum(ages))
        self._longest_running.set(max(ages, default=0.0))


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
        self._queue: deque[T] = deque()
        # Keys that need processing: queued, or re-added while in flight (requeued on done).
        self._dirty: set[T] = set()
        # Keys handed out by get() and not yet done().
        self._processing: set[T] = set()
        self._shutting_down = False
        # True while shut_down_with_drain waits; shut_down() clears it to stop that wait.
        self._draining = False
        self._metrics: _QueueMetrics[T] | None = (
            _QueueMetrics(metrics, name, self._clock)
            if metrics is not None and _reports_metrics(name, metrics)
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
            if metrics is not None and _reports_metrics(name, metrics)
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
            if self._shutting_down:
                return
            if self._retries is not None:
                self._retries.inc()
            if delay_seconds <= 0:
                self._add_locked(item)
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
