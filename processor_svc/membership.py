"""Which processors of a resource are alive: heartbeats in a Redis sorted set.

Shard assignment (``processor_svc.assignment``) needs every processor to agree on the set of
live members without a coordinator. Each processor therefore writes its own *deadline* into
``ib:{R}:members`` (:attr:`common.redis_layout.GroupKeys.members`, one per consumer group), a
sorted set of member id -> heartbeat deadline in milliseconds, and renews it more often than its
``ttl``. A member whose deadline has passed is gone: it crashed, hung or lost its network, and
its shards are reassigned (they can only be *taken* once their leases expire, see
``processor_svc.ownership``).

Why deadlines on the Redis clock: the deadline is computed inside a Lua script from Redis's
``TIME``, and liveness is judged by the same clock, so clock skew between processor machines can
neither expire a healthy member early nor keep a dead one alive. Why one script: adding our
deadline and pruning expired members happen atomically, and the set never grows with the ids of
members that crashed long ago (each ``unique_holder`` id is new per process).
"""

from __future__ import annotations

from typing import Final

import redis
from redis.client import Pipeline

from common.redis_layout import PROCESSOR_GROUP, ResourceKeys, membership_scripts, script_runner

__all__ = ["Membership", "decode_members"]


def decode_members(reply: object) -> list[str]:
    """The member ids of a heartbeat or live-members script reply, sorted (deterministic)."""
    if not isinstance(reply, list):
        raise TypeError(f"expected a list of member ids, got {reply!r}")
    return sorted(item.decode() if isinstance(item, bytes) else str(item) for item in reply)


class Membership:
    """One processor's registration in the live members of ``resource``'s consumer ``group``.

    ``member_id`` must be unique per process (``common.lease.unique_holder``): two processes
    with one id would look like one member, and would both believe they hold its shards.
    ``ttl`` is how long a heartbeat keeps us alive; heartbeat several times per ``ttl`` so that
    one slow or failed call does not drop us (every drop triggers two rebalances). Methods raise
    ``redis.RedisError`` when Redis cannot be reached; they are thread-safe (redis-py's pool).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        resource: str,
        member_id: str,
        ttl: float,
        group: str = PROCESSOR_GROUP,
    ) -> None:
        if not isinstance(member_id, str) or not member_id:
            raise ValueError(f"member_id must be a non-empty string, got {member_id!r}")
        if not ttl >= 0.001:
            raise ValueError(f"ttl must be >= 0.001 s, got {ttl!r}")
        self._client = client
        self.key: Final = ResourceKeys(prefix, resource).group(group).members
        """The members sorted set."""
        self.member_id: Final = member_id
        """Our id in the set."""
        self.ttl: Final = float(ttl)
        """Seconds a heartbeat keeps us alive."""
        self._ttl_ms = max(1, round(ttl * 1000))

    def heartbeat(self) -> list[str]:
        """Be alive for ``ttl`` more seconds (Redis clock); prune the dead.

        Returns the live members, ourselves included, sorted: the same round trip answers what
        :meth:`live_members` would.
        """
        return decode_members(
            script_runner.run(self._client, membership_scripts.HEARTBEAT, [self.key], self._args())
        )

    def queue_heartbeat(self, pipeline: Pipeline) -> None:
        """Add a :meth:`heartbeat` to ``pipeline``; decode its reply with :func:`decode_members`.

        Lets a caller heartbeat and read other keys (the shard leases) in one round trip.
        """
        # The short script's text (EVAL): the pipeline holds other commands, so a NOSCRIPT
        # could not be recovered from by sending it again.
        script_runner.queue_source(pipeline, membership_scripts.HEARTBEAT, [self.key], self._args())

    def live_members(self) -> list[str]:
        """The members whose deadline has not passed on Redis's clock, sorted."""
        return decode_members(script_runner.run(self._client, membership_scripts.LIVE, [self.key]))

    def leave(self) -> None:
        """Leave at once (graceful stop), so the others need not wait ``ttl`` to notice."""
        self._client.zrem(self.key, self.member_id)

    def _args(self) -> list[str | int]:
        return [self.member_id, self._ttl_ms]

    def __repr__(self) -> str:
        return f"Membership(key={self.key!r}, member_id={self.member_id!r})"
