"""Redis leases with fencing tokens: the one "exactly one at a time" primitive.

Two things need "exactly one at a time" in informer-bus: the reflector leader of a resource
(``ib:{R}:leader``, docs/architecture.md "Leadership and fencing") and the owner of a processor
shard (issue 5). Both are a :class:`RedisLease`: a Redis hash ``{holder, epoch}`` that expires
unless its holder renews it, plus a counter key that hands out the *epoch*, a fencing token that
only ever grows. The lease knows nothing of resources or shards; callers choose the keys.
Leader election on top of it is :mod:`common.leader_election`.

Why a fencing token: a lease alone cannot stop a holder that was paused past its expiry
(SIGSTOP, a long GC, a partition) from acting once it resumes -- client-go's leader election
says so itself ("does not guarantee that only one client is acting as a leader"). Every write
the leader makes must therefore carry its epoch and be refused, inside the same atomic step,
when a newer epoch has been seen. That check lives with the writes (the publish scripts); this
module only issues epochs.

Why the server's clock: expiry is ``PEXPIRE`` evaluated by Redis, so the lease's lifetime is
measured by one clock (Redis's), and skew between the competing machines cannot make two of
them believe they hold it. Each operation is one Lua script, so read-check-write is atomic.
Both keys must share a Cluster hash tag (checked) so that the script may touch both.

Why epochs come from the server's clock too: replication is asynchronous, so a replica promoted
in a failover may lack the last ``INCR`` of the counter and would issue an epoch a second time
(two holders no fence can tell apart). The acquire script therefore never issues an epoch below
Redis's ``TIME`` in ms (:mod:`common.redis_layout.lease_scripts`). With a
:class:`~common.replica_wait.ReplicaWait` of N >= 1 an acquisition is reported as held only
once N replicas have it (:meth:`RedisLease.try_acquire_or_renew`), so a failover cannot roll it
back under a holder that already acts on it; docs/reliability.md, "Fencing across a failover".

**The redis-py timeout trap.** redis-py 8 defaults to ``socket_timeout=5`` and 10 retries with
backoff: one command against an unresponsive Redis can block for about a minute. A holder
blocked in a renewal cannot notice that its renew deadline has passed, and keeps acting after
its lease expired. :func:`common.redis_config.lease_client` builds a client with short timeouts
and no retries (the caller's loop *is* the retry); :class:`RedisLease` refuses clients without
timeouts, and :class:`~common.leader_election.LeaderElector` logs a warning when one call can
outlast ``duration - renew_deadline``.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any, Final, Protocol

import redis
from redis.retry import Retry

from common.redis_layout import lease_scripts, script_runner
from common.redis_replies import as_text
from common.replica_wait import NO_WAIT, ReplicaWait

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "Lease",
    "LeaseStatus",
    "RedisLease",
    "hash_tag",
    "unique_holder",
    "warn_if_calls_outlast_the_margin",
]

log = logging.getLogger(__name__)

DEFAULT_LEASE_DURATION: Final = 15.0
"""client-go's LeaseDuration: how long a lease lives without renewal."""


def warn_if_calls_outlast_the_margin(lease: Lease, renew_deadline: float, holder: str) -> None:
    """Warn when one call on ``lease`` can block longer than ``duration - renew_deadline``.

    That margin is what keeps a holder that gives up at its renew deadline from acting after
    someone else could take the lease; a client whose call can outlast it (redis-py's defaults:
    5 s timeouts, retries) breaks the promise, so every lease user checks it once, here.
    ``holder`` names who would act late ("leader", "shard owner").
    """
    margin = lease.duration - renew_deadline
    if lease.max_call_seconds > margin:
        log.warning(
            "one call to the lease %s can block for %.1f s, longer than the %.1f s between the "
            "renew deadline and the lease expiry: a stalled %s may act after its lease expired "
            "(use lease_client() with a shorter timeout)",
            lease.key, lease.max_call_seconds, margin, holder,
        )  # fmt: skip


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes: the text inside the first ``{...}``, if any.

    Redis Cluster's rule: the first ``{`` and the first ``}`` after it; an empty ``{}`` (or no
    braces) means the whole key is hashed and there is no tag (``None``).
    """
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def unique_holder(name: str | None = None) -> str:
    """A holder identity unique to this process: ``<name or hostname>/<pid>/<random>``.

    Uniqueness is what the lease rests on: two processes with one holder name would both renew
    "their" lease and both lead. The random part also tells a restarted process (same host, a
    recycled pid) from its predecessor, whose lease it must not inherit.
    """
    return f"{name or socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    """The outcome of :meth:`RedisLease.try_acquire_or_renew`.

    ``held``: we hold the lease now. ``epoch``: the lease's fencing token (ours when ``held``,
    the other holder's otherwise). ``holder``: who holds it (``None`` only when nobody does, which
    an acquire attempt never reports). ``ttl``: seconds until it expires unless renewed, as Redis
    counts them (``math.inf`` for a lease key without expiry, which only a manual write makes).
    """

    held: bool
    epoch: int
    holder: str | None
    ttl: float


class Lease(Protocol):
    """What :class:`LeaderElector` needs from a lease (a :class:`RedisLease`, or a test double)."""

    @property
    def key(self) -> str:
        """The lease's name, for logs and thread names."""
        ...

    @property
    def holder(self) -> str:
        """Our identity as a holder; must be unique per process (e.g. host, pid and a random id)."""
        ...

    @property
    def duration(self) -> float:
        """Seconds the lease lives after each acquire or renewal."""
        ...

    @property
    def max_call_seconds(self) -> float:
        """An upper bound on how long one operation can block (``math.inf`` if unbounded)."""
        ...

    def try_acquire_or_renew(self) -> LeaseStatus:
        """Take the lease if free, renew it if ours, else report the holder; raises on errors."""
        ...

    def release(self) -> bool:
        """Give the lease up if we hold it; ``True`` if it was ours."""
        ...


def _call_limits(client: redis.Redis) -> tuple[float | None, float | None, int]:
    """The socket timeout, connect timeout and retry count the client's connections will use.

    Read from a connection object built (never connected) from the pool's settings: the pool's
    kwargs alone omit whatever the connection class defaults (``from_url`` leaves
    ``socket_timeout`` to ``Connection``'s 5 s default, ``Redis()`` passes 10 retries).
    """
    pool = client.connection_pool
    conn: Any = pool.connection_class(**pool.connection_kwargs)
    retry = getattr(conn, "retry", None)
    retries = retry.get_retries() if isinstance(retry, Retry) else 0
    return conn.socket_timeout, conn.socket_connect_timeout, retries


def _lookup_seconds(client: redis.Redis) -> float:
    """The worst case of asking every sentinel for the primary, which a sentinel-managed
    client does before each new connection (``common.redis_config``); 0 for other clients."""
    manager: Any = getattr(client.connection_pool, "sentinel_manager", None)
    if manager is None:
        return 0.0
    options = manager.sentinel_kwargs
    each = (options.get("socket_connect_timeout") or 0.0) + (options.get("socket_timeout") or 0.0)
    return float(each * len(manager.sentinels))


class RedisLease:
    """A lease on ``key`` with fencing epochs from ``epoch_key``; see the module docstring.

    * :meth:`try_acquire_or_renew`: free or expired -> ours, with a new epoch (``INCR
      epoch_key``; that key never expires, so epochs only grow); ours -> expiry pushed back by
      ``duration``, same epoch; someone else's -> reported, untouched.
    * :meth:`renew`: ours with that epoch -> expiry pushed back; anything else (lapsed, lost
      by Redis, someone else's) -> reported, untouched, never re-acquired.
    * :meth:`release`: delete the lease only if it is ours, so a successor can take over at once
      on a graceful stop instead of waiting for the expiry.
    * :meth:`holder_and_epoch`: read-only.

    Raises ``ValueError`` when the keys do not share a non-empty hash tag (a script may only
    touch keys of one Cluster slot), for an empty ``holder``, a ``duration`` under 1 ms, or a
    client without ``socket_timeout`` (see the module docstring; use
    :func:`common.redis_config.lease_client`).
    Methods are thread-safe and raise ``redis.RedisError`` when Redis cannot be reached.
    Epochs survive only as long as Redis keeps ``epoch_key``: run Redis with persistence (or
    replicas) where a reset epoch could let an old leader's writes through.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        key: str,
        epoch_key: str,
        holder: str,
        duration: float = DEFAULT_LEASE_DURATION,
        replica_wait: ReplicaWait = NO_WAIT,
    ) -> None:
        tag = hash_tag(key)
        if tag is None or tag != hash_tag(epoch_key):
            raise ValueError(
                f"lease key {key!r} and epoch key {epoch_key!r} must share a non-empty hash tag "
                "({...}) so one script can update both on Redis Cluster"
            )
        if key == epoch_key:
            raise ValueError(f"lease key and epoch key must differ, both are {key!r}")
        if not isinstance(holder, str) or not holder:
            raise ValueError(f"holder must be a non-empty string, got {holder!r}")
        if not duration >= 0.001:
            raise ValueError(f"duration must be >= 0.001 s, got {duration!r}")
        socket_timeout, connect_timeout, retries = _call_limits(client)
        if socket_timeout is None or connect_timeout is None:
            raise ValueError(
                "the lease's Redis client has no socket_timeout or socket_connect_timeout: a "
                "renewal could block forever and the leader would outlive its lease; build it "
                "with lease_client()"
            )
        # A stall costs one connect or one read timeout per attempt, then the attempt fails.
        # An estimate: backoff sleeps are left out, and so are reads that each almost time out.
        # An acquisition waits for the replicas (one more call, its WAIT within the socket
        # timeout). Left out of max_call_seconds, which guards renewals: a renewal of a
        # confirmed epoch never waits, and a new holder acts only after its wait.
        self._wait = replica_wait.capped(socket_timeout)
        self.max_call_seconds: Final = (
            math.inf
            if retries < 0
            else (retries + 1) * (connect_timeout + socket_timeout + _lookup_seconds(client))
        )
        """Estimated worst case of one call from the client's timeouts and retry count."""
        self._client = client
        self.key: Final = key
        """The lease hash's key."""
        self.epoch_key: Final = epoch_key
        """The epoch counter's key."""
        self.holder: Final = holder
        """Our holder identity."""
        self.duration: Final = float(duration)
        """Seconds the lease lives after each acquire or renewal."""
        self._duration_ms = max(1, round(duration * 1000))
        # The epoch of our last successful acquire or renewal until we give the lease up: a
        # renewal that finds the lease gone (lapsed, or Redis lost it) gets a higher one.
        self._held_epoch = 0
        # The epoch enough replicas confirmed (with a ReplicaWait): renewals of it need no WAIT.
        self._confirmed_epoch = 0

    def try_acquire_or_renew(self) -> LeaseStatus:
        """Acquire the lease if free or expired, renew it if ours, else report who holds it.

        With a :class:`~common.replica_wait.ReplicaWait`, a lease held with an epoch the
        replicas have not confirmed yet (a new acquisition, or one whose confirmation fell
        short before) is confirmed first: a renewal of it followed by ``WAIT``, on one
        connection. Too few replicas raise
        :class:`~common.replica_wait.ReplicationShortfallError` (a ``redis.RedisError``) and
        the caller does not act as the holder; its next attempt renews and confirms again.
        """
        held, epoch, holder, ttl_ms = script_runner.run(
            self._client,
            lease_scripts.ACQUIRE_OR_RENEW,
            [self.key, self.epoch_key],
            [self.holder, self._duration_ms, self._held_epoch],
        )
        self._held_epoch = int(epoch) if held else 0
        if held and self._wait.enabled and int(epoch) != self._confirmed_epoch:
            self._confirm(int(epoch))
        return LeaseStatus(
            held=bool(held),
            epoch=int(epoch),
            holder=as_text(holder),
            ttl=math.inf if int(ttl_ms) < 0 else int(ttl_ms) / 1000,
        )

    def _confirm(self, epoch: int) -> None:
        """Renew our lease of ``epoch`` and ``WAIT`` for the replicas, in one pipeline (a write
        on the WAIT's own connection: the acquisition is before it in the replication stream,
        so replicas that confirm the renewal have the acquisition)."""
        reply, waited = script_runner.run_then_wait(
            self._client,
            lease_scripts.RENEW,
            [self.key],
            [self.holder, self._duration_ms, epoch],
            self._wait,
        )
        if not reply[0]:
            return  # lost again already: the next call reports it
        self._wait.check(waited, f"lease {self.key} (epoch {epoch})")
        self._confirmed_epoch = epoch

    def renew(self, epoch: int) -> LeaseStatus:
        """Extend our lease of ``epoch`` if Redis still has exactly it; never acquires.

        Unlike :meth:`try_acquire_or_renew`, a lease that lapsed (expired, or lost by Redis) is
        reported as not held (``holder`` ``None`` when nobody holds it, ``ttl`` 0) instead of
        being taken again with a new epoch: the caller ends the old ownership first and only
        then acquires. An acquisition after a failed renewal still gets an epoch above
        ``epoch``, even if Redis lost the epoch counter.
        """
        held, current, holder, ttl_ms = script_runner.run(
            self._client, lease_scripts.RENEW, [self.key], [self.holder, self._duration_ms, epoch]
        )
        if held:
            self._held_epoch = int(current)
        name = as_text(holder) or None
        return LeaseStatus(
            held=bool(held),
            epoch=int(current),
            holder=name,
            ttl=math.inf if int(ttl_ms) == -1 else max(0, int(ttl_ms)) / 1000,
        )

    def release(self) -> bool:
        """Delete the lease if we hold it; ``True`` if it was ours (now free for anyone).

        With a :class:`~common.replica_wait.ReplicaWait` the deletion is followed by ``WAIT``
        (a successor should not find the lease back after a failover); a shortfall is not an
        error here, the lease then expires on its own."""
        self._held_epoch = 0
        self._confirmed_epoch = 0
        if not self._wait.enabled:
            return bool(
                script_runner.run(self._client, lease_scripts.RELEASE, [self.key], [self.holder])
            )
        released, _ = script_runner.run_then_wait(
            self._client, lease_scripts.RELEASE, [self.key], [self.holder], self._wait
        )
        return bool(released)

    def holder_and_epoch(self) -> tuple[str | None, int]:
        """Who holds the lease (``None``: nobody) and its epoch, or the last epoch issued."""
        holder, epoch = script_runner.run(
            self._client, lease_scripts.READ, [self.key, self.epoch_key]
        )
        name = as_text(holder)
        return (name or None), int(epoch)

    def __repr__(self) -> str:
        return f"RedisLease(key={self.key!r}, holder={self.holder!r})"
