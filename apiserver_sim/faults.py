"""Injected misbehaviour, shared by every request handler and watch stream.

Each fault models something a reflector meets in production: an apiserver that throttles
(429 + Retry-After) or fails (500), answers slowly, stalls a watch without closing it, or
writes a corrupt event line. Watch drops, compaction, silent mutations and restarts act on the
store and the server and live on :class:`~apiserver_sim.simulator.Simulator`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from apiserver_sim.status import ApiError, internal_error, too_many_requests

__all__ = ["BAD_LINES", "MALFORMED_LINE", "FaultSnapshot", "FaultState"]

BAD_LINES: Mapping[str, bytes] = {
    # what a proxy that cuts a line in half would deliver
    "truncated": b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":\n',
    # bytes that are not JSON at all (nor UTF-8): a corrupted or foreign stream
    "garbage": b"\x8f\x00<html>502 Bad Gateway</html>\xff\n",
    # valid JSON, but not an event object
    "not_an_object": b'["MODIFIED",{"kind":"Pod","metadata":{"name":"x"}}]\n',
    # an event without its object
    "no_object": b'{"type":"MODIFIED"}\n',
    # an event whose object is not an object
    "object_not_an_object": b'{"type":"MODIFIED","object":"pod x"}\n',
    # a type no Kubernetes version sends
    "unknown_type": b'{"type":"EXPLODED","object":{"kind":"Pod","metadata":{"name":"x"}}}\n',
}
"""The corrupt watch lines :meth:`FaultState.inject_malformed_lines` can write, by kind."""

MALFORMED_LINE = BAD_LINES["truncated"]
"""The default kind: a truncated event."""


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
        self._malformed: deque[tuple[bytes, bool]] = deque()

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

    def inject_malformed_lines(
        self, count: int, kind: str = "truncated", *, after_first_line: bool = False
    ) -> None:
        """The next ``count`` watch writes each carry one corrupt line of ``kind``
        (:data:`BAD_LINES`).

        By default it opens the write, so a client that re-watches from the event before it
        meets the next armed line at the same position again. ``after_first_line`` puts it
        after the write's first line instead: the client gets past one line before each.
        """
        if kind not in BAD_LINES:
            raise ValueError(f"kind must be one of {', '.join(BAD_LINES)}, got {kind!r}")
        if count < 0:
            raise ValueError("count must be >= 0")
        with self._lock:
            self._malformed.extend([(BAD_LINES[kind], after_first_line)] * count)

    def malformed_armed(self) -> bool:
        with self._lock:
            return bool(self._malformed)

    def corrupt_write(self, parts: list[bytes]) -> None:
        """Put the next armed corrupt line into one watch write (``parts``: the fragments of
        its whole lines, each line's last fragment ending in a newline)."""
        with self._lock:
            if not self._malformed:
                return
            line, after_first_line = self._malformed.popleft()
        at = 0
        if after_first_line:
            at = next((i + 1 for i, part in enumerate(parts) if part.endswith(b"\n")), len(parts))
        parts.insert(at, line)

    def reset(self) -> None:
        with self._lock:
            self._fail_remaining = 0
            self._slow_seconds = 0.0
            self._stall_until = 0.0
            self._malformed.clear()

    def snapshot(self) -> FaultSnapshot:
        with self._lock:
            return FaultSnapshot(
                self._fail_remaining,
                self._fail_status,
                self._slow_seconds,
                self._slowed,
                max(0.0, self._stall_until - time.monotonic()),
                len(self._malformed),
            )
