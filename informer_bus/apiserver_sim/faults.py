"""Injected misbehaviour, shared by every request handler and watch stream.

Each fault models something a reflector meets in production: an apiserver that throttles
(429 + Retry-After) or fails (500), answers slowly, stalls a watch without closing it, or
writes a corrupt event line. Watch drops, compaction, silent mutations and restarts act on the
store and the server and live on :class:`~informer_bus.apiserver_sim.simulator.Simulator`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from informer_bus.apiserver_sim.status import ApiError, internal_error, too_many_requests

__all__ = ["MALFORMED_LINE", "FaultSnapshot", "FaultState"]

MALFORMED_LINE = b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":\n'
"""A truncated event: what a proxy that cuts a line in half would deliver."""


@dataclass(frozen=True)
class FaultSnapshot:
    """What is armed right now (for the ``/_sim/faults`` endpoint and tests)."""

    fail_remaining: int
    fail_status: int
    slow_seconds: float
    slowed_requests: int
    """How many requests have been delayed so far (a counter tests can read, not a clock)."""
    stalled_for: float
    malformed_pending: int


class FaultState:
    """Thread-safe counters and deadlines consulted on every request and watch write."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fail_remaining = 0
        self._fail_status = 500
        self._retry_after = 1
        self._slow_seconds = 0.0
        self._slowed = 0
        self._stall_until = 0.0
        self._malformed = 0

    def fail_next(self, count: int, status: int = 500, retry_after: int = 1) -> None:
        """The next ``count`` API requests answer ``status`` (429 or 500)."""
        if status not in (429, 500):
            raise ValueError(f"status must be 429 or 500, got {status}")
        if count < 0:
            raise ValueError("count must be >= 0")
        with self._lock:
            self._fail_remaining = count
            self._fail_status = status
            self._retry_after = retry_after

    def take_failure(self) -> ApiError | None:
        with self._lock:
            if self._fail_remaining <= 0:
                return None
            self._fail_remaining -= 1
            if self._fail_status == 429:
                return too_many_requests(self._retry_after)
            return internal_error("injected failure (apiserver-sim fail_next)")

    def slow_responses(self, seconds: float) -> None:
        """Delay every API response by ``seconds`` (0 turns it off)."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        with self._lock:
            self._slow_seconds = seconds

    @property
    def slow_seconds(self) -> float:
        with self._lock:
            return self._slow_seconds

    def take_slow(self) -> float:
        """The delay for the request being served now (counted when not 0)."""
        with self._lock:
            if self._slow_seconds > 0:
                self._slowed += 1
            return self._slow_seconds

    def stall_watches(self, seconds: float) -> None:
        """Open watches write nothing (no events, no bookmarks) for ``seconds``."""
        with self._lock:
            self._stall_until = max(self._stall_until, time.monotonic() + seconds)

    def stall_remaining(self) -> float:
        with self._lock:
            return max(0.0, self._stall_until - time.monotonic())

    def inject_malformed_lines(self, count: int) -> None:
        """The next ``count`` watch writes each start with one corrupt JSON line."""
        with self._lock:
            self._malformed += count

    def take_malformed(self) -> bool:
        with self._lock:
            if self._malformed <= 0:
                return False
            self._malformed -= 1
            return True

    def reset(self) -> None:
        with self._lock:
            self._fail_remaining = 0
            self._slow_seconds = 0.0
            self._stall_until = 0.0
            self._malformed = 0

    def snapshot(self) -> FaultSnapshot:
        with self._lock:
            return FaultSnapshot(
                self._fail_remaining,
                self._fail_status,
                self._slow_seconds,
                self._slowed,
                max(0.0, self._stall_until - time.monotonic()),
                self._malformed,
            )
