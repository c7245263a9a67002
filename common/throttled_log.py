"""One log line per stretch of failures, not one per retry.

While Redis is down every heartbeat, renewal and retry fails; a warning each would bury the
logs (one per retry period per shard). The leader elector and the shard ownership both log
through this.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from common.rate_limiters import Clock

__all__ = ["ThrottledLog"]


class ThrottledLog:
    """Logs a repeating failure at most once per ``interval`` seconds, counting the rest, and
    says once how many calls had failed when one succeeds again."""

    def __init__(self, logger: logging.Logger, clock: Clock, interval: float) -> None:
        self._log = logger
        self._clock = clock
        self._interval = interval
        self._last: float | None = None
        self._suppressed = 0
        self._failures = 0

    def failure(self, message: str, error: BaseException, extra: Mapping[str, object]) -> None:
        self._failures += 1
        now = self._clock.now()
        if self._last is not None and now - self._last < self._interval:
            self._suppressed += 1
            return
        suppressed, self._suppressed, self._last = self._suppressed, 0, now
        more = f" ({suppressed} similar failures not logged)" if suppressed else ""
        self._log.warning("%s: %r%s", message, error, more, extra=extra)

    def success(self, message: str, extra: Mapping[str, object]) -> None:
        if self._failures:
            self._log.info("%s after %d failed calls", message, self._failures, extra=extra)
        self._failures = self._suppressed = 0
        self._last = None
