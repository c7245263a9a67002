"""The recording handler of the Redis fault scenarios: it records through an outage.

:class:`tests.support.recording_handler.FileRecorder` reads the shard's lease from Redis at the
start of every call, to record whether the caller held it. While Redis is down that read fails.
Raising would lose the line of a delta the processor did deliver; waiting for Redis (as this
recorder once did) made the instrument itself the slowest handler in the world: a call started
under the old ownership then ran until Redis came back, long after the lease had expired and a
new owner had started, and its late lease read named that new owner. Neither is what a handler
sees.

:class:`OutageRecorder` tries the read with a short timeout and, when Redis does not answer
in time (or a cluster fails over: ``CLUSTERDOWN``, a slot not covered yet), records the call
with what it last observed for that shard as this process's own lease (``lease_read``
false), and with ``unread_since``: when the reads started failing.
What it cannot observe it does not claim; what follows from it is still checked
(``tests.support.processor_ha.ownership_problems``): a processor stops calling handlers for a
shard at its renew deadline, which comes at the latest ``renew_deadline`` seconds after Redis
stopped answering, so a call recorded later than that is a problem.

``--handler bench.chaos.recorder:OutageRecorder`` with ``IB_RECORD_FILE`` set, as for
``FileRecorder``.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from redis.exceptions import RedisClusterException
from redis.sentinel import MasterNotFoundError

from common.redis_config import connect
from tests.support.recording_handler import FileRecorder

__all__ = ["OutageRecorder"]

_READ_TIMEOUT = 0.5
"""Seconds one lease read may take (a hung Redis accepts connections but never answers). A
read answered later counts as not read: redis-py's cluster client retries a failed read, once
for 2.6 s through a primary's kill -9 and promotion, and the lease it then read named nobody
(p1's had expired on the promoted replica) or the next owner, both stamped at the call's
start: the checks saw a call outside every ownership period (``make test``, loaded, twice)."""


class OutageRecorder(FileRecorder):
    """:class:`FileRecorder` that records calls while Redis is away (module docstring)."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._redis.close()
        self._redis = connect(  # standalone, cluster or through sentinels, as the processor
            context.settings.redis,
            socket_timeout=_READ_TIMEOUT,
            socket_connect_timeout=_READ_TIMEOUT,
        )
        self._last_own: dict[int, tuple[str, int | None]] = {}
        self._failing_since: float | None = None

    def _lease(self, shard: int, now: float) -> tuple[str | None, int | None, float | None]:
        try:
            holder, epoch, _ = super()._lease(shard, now)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError,
                RedisClusterException, MasterNotFoundError):  # fmt: skip
            return self._unread(shard, now)
        if time.time() - now > _READ_TIMEOUT:
            # The client retried until Redis answered (a cluster client through a failover):
            # the lease it read is a later moment's, not the call's.
            return self._unread(shard, now)
        self._failing_since = None
        if holder is not None and self._is_mine(holder):
            self._last_own[shard] = (holder, epoch)
        return holder, epoch, None

    def _unread(self, shard: int, now: float) -> tuple[str | None, int | None, float]:
        """The lease as last seen ours, and since when reads fail (module docstring)."""
        if self._failing_since is None:
            self._failing_since = now
        holder, epoch = self._last_own.get(shard, (None, None))
        return holder, epoch, self._failing_since
