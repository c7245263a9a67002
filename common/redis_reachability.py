"""Whether Redis answers, as seen by one small thread that pings it: for ``/readyz`` and the log.

A service whose Redis is unreachable publishes nothing and applies nothing, yet its own loops
each see the outage only through their next call, and some had nothing to say after their
first failure (a reflector that already synced keeps waiting on its watch). So each service
runs one :class:`RedisReachability`: it pings Redis every ``interval`` through the lease client
(whose calls end within its short timeout), and while the pings fail it makes ``/readyz``
answer 503 with the reason and logs, throttled by :class:`~common.throttled_log.ThrottledLog`,
``still cannot reach Redis at URL (N s)`` until Redis answers again.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

import redis

from common.rate_limiters import Clock, MonotonicClock
from common.throttled_log import ThrottledLog

__all__ = ["RedisReachability"]

log = logging.getLogger(__name__)

PING_INTERVAL: Final = 1.0
"""Seconds between two pings."""
LOG_INTERVAL: Final = 10.0
"""While Redis is unreachable, one line per this many seconds."""


class RedisReachability:
    """Pings ``client`` every ``interval`` seconds in a daemon thread named
    ``redis-reachability`` (:meth:`start`, :meth:`stop`); :attr:`reachable` and
    :attr:`why_unreachable` say what the last pings found. ``where`` names Redis in messages
    and must hold no secret (``common.redis_config.redis_location``)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        where: str,
        interval: float = PING_INTERVAL,
        log_interval: float = LOG_INTERVAL,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._where = where
        self._interval = interval
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._log = ThrottledLog(log, self._clock, log_interval)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._failing_since: float | None = None
        self._error = ""
        self._thread = threading.Thread(target=self._run, name="redis-reachability", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()

    @property
    def reachable(self) -> bool:
        """``False`` from a failed ping until one succeeds again."""
        with self._lock:
            return self._failing_since is None

    @property
    def why_unreachable(self) -> str:
        """``cannot reach Redis at URL for N s: Type: message`` (``""`` while reachable)."""
        with self._lock:
            since, error = self._failing_since, self._error
        if since is None:
            return ""
        return f"cannot reach Redis at {self._where} for {self._clock.now() - since:.0f} s: {error}"

    def check(self) -> bool:
        """One ping, its outcome recorded (and logged); whether Redis answered."""
        started = self._clock.now()
        try:
            self._client.ping()
        except (redis.RedisError, OSError) as exc:
            with self._lock:
                if self._failing_since is None:
                    self._failing_since = started
                since = self._failing_since
                self._error = " ".join(f"{type(exc).__name__}: {exc}".split())
            waited = self._clock.now() - since
            message = (
                f"still cannot reach Redis at {self._where} ({waited:.0f} s)"
                if waited >= 1
                else f"cannot reach Redis at {self._where}"
            )
            self._log.failure(message, exc, {})
            return False
        with self._lock:
            was_failing, self._failing_since = self._failing_since, None
        if was_failing is not None:
            down = self._clock.now() - was_failing
            self._log.success(f"Redis at {self._where} answers again (down {down:.0f} s)", {})
        return True

    def _run(self) -> None:
        while True:
            self.check()
            if self._stop.wait(self._interval):
                return
