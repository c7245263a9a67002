"""Waiting for replicas: ``WAIT N timeout`` after the writes a service acts on.

Redis replicates asynchronously, so a write the primary acknowledged can vanish in a failover
(the promoted replica never received it). :class:`ReplicaWait` is the one place that follows a
write with ``WAIT`` and turns "fewer than N replicas confirmed" into
:class:`ReplicationShortfallError`, a ``redis.RedisError``: every caller already treats a Redis
error as "the write may or may not have happened, do it again", and every write it is used for
is idempotent (publishes by their replay and per-key rules, acknowledgements because ``XACK``
is, leases because the holder renews its own lease).

``WAIT`` counts the replicas that acknowledged *this connection's* last write, so the write and
its ``WAIT`` must share a connection: they go out as one pipeline on one connection (which also
saves the round trip), never as two calls a connection pool may give two connections. On Redis
Cluster the pipeline goes to the primary serving the keys (:func:`common.redis_config.node_client`,
through :mod:`common.redis_layout.script_runner`, which runs every script):
``WAIT`` names no key a cluster client could route by, and only that node's replicas matter.

With ``replicas`` 0 nothing here sends anything: the callers' paths stay exactly as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from common.settings import Durability

__all__ = ["NO_WAIT", "ReplicaWait", "ReplicationShortfallError"]


class ReplicationShortfallError(redis.RedisError):
    """Fewer replicas than required confirmed a write within the timeout: the write is on the
    primary but may be lost in a failover, so it does not count yet (retry it)."""

    def __init__(self, what: str, acknowledged: int, wanted: int) -> None:
        super().__init__(f"{what}: {acknowledged} of {wanted} replicas confirmed the write in time")
        self.what, self.acknowledged, self.wanted = what, acknowledged, wanted


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """``WAIT replicas timeout_ms`` after a write; ``replicas`` 0 waits for nothing."""

    replicas: int = 0
    timeout_ms: int = 1000

    @classmethod
    def of(cls, durability: Durability) -> ReplicaWait:
        return cls(durability.replicas, durability.timeout_ms)

    @property
    def enabled(self) -> bool:
        return self.replicas > 0

    def capped(self, seconds: float | None) -> ReplicaWait:
        """This wait with its timeout kept under half of ``seconds`` (a client's socket timeout):
        a ``WAIT`` must end before the read that carries its reply times out."""
        if seconds is None or not self.enabled:
            return self
        return ReplicaWait(self.replicas, max(1, min(self.timeout_ms, int(seconds * 500))))

    def queue(self, pipe: Any) -> None:
        """Add the ``WAIT`` to ``pipe`` (after the writes it confirms, on the same connection)."""
        pipe.execute_command("WAIT", self.replicas, self.timeout_ms)

    def check(self, reply: Any, what: str) -> None:
        """Raise :class:`ReplicationShortfallError` unless ``reply`` (``WAIT``'s) reaches
        ``replicas``; re-raise it when it is an error."""
        if isinstance(reply, BaseException):
            raise reply
        if int(reply) < self.replicas:
            raise ReplicationShortfallError(what, int(reply), self.replicas)


NO_WAIT = ReplicaWait()
"""Wait for no replica: today's behaviour, no extra command."""
