"""What a failed ListAndWatch costs: a re-watch, a relist, or a resume from Redis.

client-go relists after most watch errors; we re-watch from the last resourceVersion whenever
the server can still serve it, because a relist of a big resource is the most expensive call
there is. A relist is for when state may have been missed: the version is gone (410), a watch
closed at once with nothing, a watch-list ended before its initial events were complete, or
an error we cannot classify. A failed Redis call says nothing about the API: the next attempt
continues from the checkpoints Redis holds. This module is that policy, one place for the
whole ladder, so each error is counted and logged once, the same way wherever it was raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import redis

from common.replica_wait import ReplicationShortfallError
from reflector_svc.api_errors import (
    ApiUnavailableError,
    KubeError,
    ResourceExpiredError,
    TooManyRequestsError,
    WatchInactiveError,
)
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.pager import ListInterruptedError

__all__ = ["SHORTFALL_LOG_INTERVAL", "Recovery", "RelistNeeded", "WatchErrorPolicy"]

# The reflector's lines keep the reflector's logger wherever they are written: operators
# filter its log by that name.
log = logging.getLogger("reflector_svc.reflector")

SHORTFALL_LOG_INTERVAL = 30.0
"""Seconds between two warnings about publishes the replicas did not confirm."""


class RelistNeeded(Exception):
    """The watch ended in a way that means state may have been missed."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """What the next ListAndWatch attempt does after a failed one, and when it starts."""

    relist: bool = False
    """The next attempt lists (and diffs) before it watches."""
    resume_from_redis: bool = False
    """The next attempt first reads the resume point from Redis's checkpoints."""
    at_once: bool = False
    """No wait before the next attempt."""
    wait_at_least: float | None = None
    """Wait this long, or the backoff's delay if that is longer (the server's Retry-After)."""


class WatchErrorPolicy:
    """Counts, logs and classifies the errors of one resource's ListAndWatch attempts.

    Not thread-safe: the reflector's thread calls :meth:`recovery`.
    """

    def __init__(
        self, resource: str, metrics: ReflectorMetrics, monotonic: Callable[[], float]
    ) -> None:
        self.resource = resource
        self._metrics = metrics
        self._label = {"resource": resource}
        self._monotonic = monotonic
        self._shortfalls = 0
        self._shortfall_logged_at: float | None = None

    def recovery(self, exc: Exception, last_rv: str | None) -> Recovery:
        """What follows ``exc``, raised by an attempt that had published up to ``last_rv``."""
        if isinstance(exc, ListInterruptedError):
            # The LIST is abandoned: the shards stay marked ``relisting``, so whoever leads
            # next lists again.
            return Recovery(at_once=True)
        if isinstance(exc, TooManyRequestsError):
            self._count_error("throttled")
            log.warning("%s: throttled by the API server (429)", self.resource)
            return Recovery(wait_at_least=exc.retry_after or 0.0)
        if isinstance(exc, ResourceExpiredError):
            self._metrics.expired.labels(**self._label).inc()
            log.info("%s: resourceVersion expired (%s); relisting", self.resource, exc)
            return Recovery(relist=True)
        if isinstance(exc, RelistNeeded):
            log.info("%s: relisting: %s", self.resource, exc)
            return Recovery(relist=True)
        if isinstance(exc, (WatchInactiveError, ApiUnavailableError)):
            self._count_error(type(exc).__name__)
            log.warning("%s: %s; re-watching from rv %s", self.resource, exc, last_rv)
            return Recovery()
        if isinstance(exc, KubeError):
            self._count_error(type(exc).__name__)
            log.warning("%s: %s; relisting after a backoff", self.resource, exc)
            return Recovery(relist=True)
        if isinstance(exc, redis.RedisError):
            self._redis_failed(exc)
            return Recovery(resume_from_redis=True)
        # A bug: never crash-loop, never hang.
        self._count_error(type(exc).__name__)
        log.error("%s: list/watch failed: %s", self.resource, exc, exc_info=exc)
        return Recovery()

    def _redis_failed(self, exc: redis.RedisError) -> None:
        """A publish (or a read of Redis) failed: continue from the checkpoints Redis holds.

        Expected while Redis restarts or fails over: no traceback, just keep retrying. A write
        the primary took but too few replicas confirmed is no more published than one that
        failed, as far as the resume point goes (the publisher's replay rules skip whatever
        the primary kept); it is counted and logged on its own."""
        if isinstance(exc, ReplicationShortfallError):
            self._metrics.publish_wait_shortfalls.labels(**self._label).inc()
            self._shortfall_log(exc)
            return
        self._count_error("redis")
        log.warning("%s: Redis unavailable (%s); retrying", self.resource, exc)

    def _shortfall_log(self, exc: ReplicationShortfallError) -> None:
        """One warning per :data:`SHORTFALL_LOG_INTERVAL` while replicas lag or are gone,
        saying how many more there were (the metric counts every one)."""
        self._shortfalls += 1
        now = self._monotonic()
        if self._shortfall_logged_at is not None and (
            now - self._shortfall_logged_at < SHORTFALL_LOG_INTERVAL
        ):
            return
        more = self._shortfalls - 1
        self._shortfalls, self._shortfall_logged_at = 0, now
        log.warning(
            "%s: %s; not counted as published, retrying from Redis's checkpoints%s",
            self.resource, exc, f" ({more} more since the last such line)" if more else "",
        )  # fmt: skip

    def _count_error(self, kind: str) -> None:
        self._metrics.errors.labels(resource=self.resource, kind=kind).inc()
