"""Retry rate limiters for the workqueue, and the clock that makes their timing testable.

A controller that fails on a key must not retry it in a hot loop, and a thousand keys failing
together must not stampede the apiserver. client-go answers both with small composable limiters
(reference client-go-semantics.md 6.4): a per-key exponential backoff, an overall token bucket,
and ``MaxOf`` to apply the stricter of the two. A limiter only *computes* a delay;
``RateLimitingQueue.add_rate_limited`` turns it into ``add_after``.

Time is read through a :class:`Clock` so that tests (and the delaying queue's waiter) can run on a
:class:`FakeClock` and check exact delays without sleeping. All times are monotonic seconds as
floats, never wall-clock time: a delay must not jump when NTP adjusts the system clock.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

__all__ = [
    "BucketRateLimiter",
    "Clock",
    "FakeClock",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "MaxOfRateLimiter",
    "MonotonicClock",
    "RateLimiter",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class Clock(Protocol):
    """Monotonic time plus a way to sleep on a condition until a moment *of this clock*.

    Waiting is part of the clock (not ``condition.wait(timeout)`` at the call site) because a
    fake clock's time only moves when a test steps it: a real timeout would either fire too
    early or not at all. The delaying queue's waiter therefore always waits through its clock.
    """

    def now(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""
        ...

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        """Block on ``condition`` (which the caller holds) until notified or ``deadline``.

        ``deadline`` is a :meth:`now` value; ``None`` waits for a notification only. Like
        ``Condition.wait`` it may return early, so callers re-check their predicate in a loop.
        """
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and a plain timed condition wait."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        if deadline is None:
            condition.wait()
            return
        remaining = deadline - time.monotonic()
        if remaining > 0:
            condition.wait(remaining)


class FakeClock:
    """A clock that moves only when told to, so timing tests are exact and instant.

    :meth:`step` notifies every condition that has ever waited on this clock, which is how a
    delaying queue's waiter notices that an item became ready. Conditions are held weakly so a
    discarded queue is not kept alive by the clock.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._now = start
        # Every condition a waiter has slept on; step() wakes them all to re-check the time.
        self._waiting_conditions: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def now(self) -> float:
        with self._lock:
            return self._now

    def step(self, seconds: float) -> None:
        """Advance time by ``seconds`` (≥ 0) and wake every waiter to re-check its deadline."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back (step {seconds})")
        with self._lock:
            self._now += seconds
            conditions = list(self._waiting_conditions)
        # Notify outside our lock: the waiter holds its condition while it takes our lock in
        # wait(), so taking them in the opposite order here could deadlock.
        for condition in conditions:
            with condition:
                condition.notify_all()

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        # Register before reading the time: a step() that snapshots the waiters after this
        # registration will notify us (it needs our condition, released only inside wait()),
        # and a step() that snapshotted before it has already moved the time we read next.
        with self._lock:
            self._waiting_conditions.add(condition)
            already_due = deadline is not None and self._now >= deadline
        if not already_due:
            condition.wait()


class RateLimiter(Protocol[T_contra]):
    """Decides how long an item waits before its next retry (client-go ``TypedRateLimiter``)."""

    def when(self, item: T_contra) -> float:
        """Seconds the item should wait now; calling it records one more failure."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking the item (it succeeded or was given up on): its backoff restarts."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """How many failures are currently recorded for the item."""
        ...


class _FailureCounts(Generic[T]):
    """Failures recorded per item, behind one lock: what the per-item limiters share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[T, int] = {}

    def _record_failure(self, item: T) -> int:
        """Count one more failure of ``item``; returns how many it had before this one."""
        with self._lock:
            before = self._failures.get(item, 0)
            self._failures[item] = before + 1
        return before

    def forget(self, item: T) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        with self._lock:
            return self._failures.get(item, 0)


class ItemExponentialFailureRateLimiter(_FailureCounts[T]):
    """Per-item backoff ``base_delay * 2**failures``, capped at ``max_delay``.

    The failure count grows on every :meth:`when`, so the n-th retry of a key waits twice as long
    as the previous one until :meth:`forget` resets it. Giving up after N attempts is left to the
    caller (compare :meth:`num_requeues`), as in client-go.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        super().__init__()
        self._base_delay = base_delay
        self._max_delay = max_delay

    def when(self, item: T) -> float:
        exponent = self._record_failure(item)
        try:
            # ldexp scales by a power of two exactly; a huge exponent raises instead of
            # silently becoming inf, and we treat that as "past the cap".
            backoff = math.ldexp(self._base_delay, exponent)
        except OverflowError:
            return self._max_delay
        return min(backoff, self._max_delay)


class ItemFastSlowRateLimiter(_FailureCounts[T]):
    """``fast_delay`` for the first ``max_fast_attempts`` failures of an item, then ``slow_delay``.

    For work that usually succeeds on a quick retry (a conflict, a cache not yet warm) but should
    then back off to a steady slow poll rather than grow without bound.
    """

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        if fast_delay < 0 or slow_delay < 0 or max_fast_attempts < 0:
            raise ValueError("delays and attempts must not be negative")
        super().__init__()
        self._fast_delay = fast_delay
        self._slow_delay = slow_delay
        self._max_fast_attempts = max_fast_attempts

    def when(self, item: T) -> float:
        failures = self._record_failure(item) + 1
        return self._fast_delay if failures <= self._max_fast_attempts else self._slow_delay


class BucketRateLimiter(Generic[T]):
    """An overall token bucket: ``burst`` retries at once, then ``qps`` per second, for all items.

    Every :meth:`when` *reserves* a token, as ``rate.Limiter.Reserve().Delay()`` does in Go: once
    the bucket is empty the token count goes negative and each caller is told how long until its
    own token exists, so concurrent retries queue up behind each other instead of all waiting for
    the same next token. Items are not tracked: :meth:`forget` does nothing and
    :meth:`num_requeues` is always 0.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock | None = None) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be positive, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._lock = threading.Lock()
        # Tokens available at `_updated_at`; negative when reservations are queued.
        self._tokens = self._burst
        self._updated_at = self._clock.now()

    def when(self, item: T) -> float:
        if math.isinf(self._qps):
            return 0.0
        with self._lock:
            now = self._clock.now()
            elapsed = max(0.0, now - self._updated_at)
            tokens = min(self._burst, self._tokens + elapsed * self._qps) - 1.0
            self._tokens = tokens
            self._updated_at = max(now, self._updated_at)
        return 0.0 if tokens >= 0 else -tokens / self._qps

    def forget(self, item: T) -> None:
        """Nothing to forget: the bucket is shared by all items."""

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """Applies several limiters and obeys the strictest: the longest delay wins.

    Every limiter's :meth:`when` is called (each must record the failure), not just until one
    returns a long delay. With a token bucket inside, an item held back longer by another limiter
    still spent a token, so the bucket's burst can appear exceeded; client-go accepts that too.
    """

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        self._limiters = limiters

    def when(self, item: T) -> float:
        return max((limiter.when(item) for limiter in self._limiters), default=0.0)

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max((limiter.num_requeues(item) for limiter in self._limiters), default=0)


def default_controller_rate_limiter(clock: Clock | None = None) -> MaxOfRateLimiter[T]:
    """client-go's ``DefaultControllerRateLimiter``: 5 ms..1000 s per item; 10 qps, burst 100.

    The exponential part stops one broken key from hot-looping; the bucket stops a mass failure
    (say, the apiserver going away) from turning into a retry storm.
    """
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter[T](base_delay=0.005, max_delay=1000.0),
        BucketRateLimiter[T](qps=10.0, burst=100, clock=clock),
    )
