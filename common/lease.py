"""Redis leases with fencing tokens, and client-go style leader election on top of them.

Two things need "exactly one at a time" in informer-bus: the reflector leader of a resource
(``ib:{R}:leader``, docs/architecture.md "Leadership and fencing") and the owner of a processor
shard (issue 5). Both are a :class:`RedisLease`: a Redis hash ``{holder, epoch}`` that expires
unless its holder renews it, plus a counter key that hands out the *epoch*, a fencing token that
only ever grows. The lease knows nothing of resources or shards; callers choose the keys.

Why a fencing token: a lease alone cannot stop a holder that was paused past its expiry
(SIGSTOP, a long GC, a partition) from acting once it resumes -- client-go's leader election
says so itself ("does not guarantee that only one client is acting as a leader"). Every write
the leader makes must therefore carry its epoch and be refused, inside the same atomic step,
when a newer epoch has been seen. That check lives with the writes (the publish scripts); this
module only issues epochs and, through :meth:`LeaderElector.step_down`, reacts to a refusal.

Why the server's clock: expiry is ``PEXPIRE`` evaluated by Redis, so the lease's lifetime is
measured by one clock (Redis's), and skew between the competing machines cannot make two of
them believe they hold it. Each operation is one Lua script, so read-check-write is atomic.
Both keys must share a Cluster hash tag (checked) so that the script may touch both.

**The redis-py timeout trap.** redis-py 8 defaults to ``socket_timeout=5`` and 10 retries with
backoff: one command against an unresponsive Redis can block for about a minute. A leader blocked
in a renewal cannot notice that its renew deadline has passed, and keeps acting after its lease
expired. :func:`lease_client` builds a client with short timeouts and no retries (the elector's
loop *is* the retry); :class:`RedisLease` refuses clients without timeouts, and
:class:`LeaderElector` logs a warning when one call can outlast ``duration - renew_deadline``.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.rate_limiters import Clock, MonotonicClock
from common.redis_config import redis_client

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_RENEW_DEADLINE",
    "DEFAULT_RETRY_PERIOD",
    "LeaderElector",
    "Lease",
    "LeaseStatus",
    "RedisLease",
    "hash_tag",
    "lease_client",
    "lease_client_for",
    "unique_holder",
]

log = logging.getLogger(__name__)

DEFAULT_LEASE_DURATION: Final = 15.0
"""client-go's LeaseDuration: how long a lease lives without renewal."""
DEFAULT_RENEW_DEADLINE: Final = 10.0
"""client-go's RenewDeadline: a leader that could not renew for this long stops leading."""
DEFAULT_RETRY_PERIOD: Final = 2.0
"""client-go's RetryPeriod: how often candidates try to acquire and leaders renew."""

_JITTER: Final = 1.2  # client-go's JitterFactor for candidates' retries


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


def lease_client_for(
    url: str, *, lease_duration: float, renew_deadline: float, **kwargs: Any
) -> redis.Redis:
    """A :func:`lease_client` whose calls always end between the renew deadline and the lease
    expiry (a call takes up to about ``2 * timeout``), so a holder that gives up at its
    deadline never still writes after someone else could have taken the lease. ``kwargs``
    (credentials, TLS: ``common.redis_config.connection_kwargs``) go to :func:`lease_client`."""
    margin = lease_duration - renew_deadline
    if not margin > 0:
        raise ValueError("renew_deadline must be shorter than lease_duration")
    return lease_client(url, timeout=min(2.0, margin / 2.5), **kwargs)


def lease_client(
    url: str, *, timeout: float = 2.0, cluster: bool = False, **kwargs: Any
) -> redis.Redis:
    """A Redis client fit for leases: every call gives up after about ``2 * timeout`` seconds.

    ``timeout`` bounds the connect and each read (``socket_connect_timeout``/``socket_timeout``)
    and there are no retries: a lease operation is retried by the elector's loop, every retry
    period, where the renew deadline is checked between attempts. With the defaults (2 s timeout,
    15 s lease, 10 s deadline) a call that started just before the deadline still ends before
    the lease can expire. ``cluster``: a Redis Cluster client (no cluster-level retries either;
    ``common.redis_config.redis_client``). Extra ``kwargs`` go to ``redis.Redis.from_url`` (e.g.
    ``password``).
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0, got {timeout!r}")
    return redis_client(
        url,
        cluster=cluster,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **kwargs,
    )


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


# KEYS[1] lease hash {holder, epoch}, KEYS[2] epoch counter; ARGV[1] holder, ARGV[2] duration ms,
# ARGV[3] the epoch the caller held last (0: none); a new epoch is always above it, even when
# Redis lost the counter (restarted without persistence), so a lapsed holder always sees that
# its lease changed hands. Returns {held 0|1, epoch, holder, ttl ms (-1: no expiry)}.
_ACQUIRE_OR_RENEW: Final = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0, holder, tonumber(ARGV[2])}
end
if holder then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0, holder,
          redis.call('PTTL', KEYS[1])}
end
local epoch = redis.call('INCR', KEYS[2])
if epoch <= (tonumber(ARGV[3]) or 0) then
  epoch = tonumber(ARGV[3]) + 1
  redis.call('SET', KEYS[2], epoch)
end
redis.call('PERSIST', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'epoch', epoch)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, epoch, ARGV[1], tonumber(ARGV[2])}
"""

# KEYS[1] lease hash; ARGV[1] holder, ARGV[2] duration ms, ARGV[3] the epoch we hold. Renews
# only that very lease, never takes a free one: whoever owned the lapsed lease must stop before
# a new ownership (and a new epoch) begins. Returns {held 0|1, epoch (0: none), holder ('':
# none), ttl ms}.
_RENEW: Final = """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'epoch')
if lease[1] == ARGV[1] and tonumber(lease[2]) == tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(lease[2]), lease[1], tonumber(ARGV[2])}
end
if lease[1] then
  return {0, tonumber(lease[2]) or 0, lease[1], redis.call('PTTL', KEYS[1])}
end
return {0, 0, '', -2}
"""

# KEYS[1] lease hash; ARGV[1] holder. Returns 1 if the lease was ours and is now deleted.
_RELEASE: Final = """
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] lease hash, KEYS[2] epoch counter. Returns {holder or '', epoch}: the lease's epoch
# while held, else the last epoch issued (0 if none yet).
_READ: Final = """
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder then
  return {holder, tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0}
end
return {'', tonumber(redis.call('GET', KEYS[2])) or 0}
"""


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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
    client without ``socket_timeout`` (see the module docstring; use :func:`lease_client`).
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
        self._max_call = (
            math.inf if retries < 0 else (retries + 1) * (connect_timeout + socket_timeout)
        )
        self._client = client
        self._key = key
        self._epoch_key = epoch_key
        self._holder = holder
        self._duration = float(duration)
        self._duration_ms = max(1, round(duration * 1000))
        self._acquire = client.register_script(_ACQUIRE_OR_RENEW)
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        # The epoch of our last successful acquire or renewal until we give the lease up: a
        # renewal that finds the lease gone (lapsed, or Redis lost it) gets a higher one.
        self._held_epoch = 0
        self._read = client.register_script(_READ)

    @property
    def key(self) -> str:
        """The lease hash's key."""
        return self._key

    @property
    def epoch_key(self) -> str:
        """The epoch counter's key."""
        return self._epoch_key

    @property
    def holder(self) -> str:
        """Our holder identity."""
        return self._holder

    @property
    def duration(self) -> float:
        """Seconds the lease lives after each acquire or renewal."""
        return self._duration

    @property
    def max_call_seconds(self) -> float:
        """Estimated worst case of one call from the client's timeouts and retry count."""
        return self._max_call

    def try_acquire_or_renew(self) -> LeaseStatus:
        """Acquire the lease if free or expired, renew it if ours, else report who holds it."""
        held, epoch, holder, ttl_ms = self._acquire(
            keys=[self._key, self._epoch_key],
            args=[self._holder, self._duration_ms, self._held_epoch],
        )
        self._held_epoch = int(epoch) if held else 0
        return LeaseStatus(
            held=bool(held),
            epoch=int(epoch),
            holder=_text(holder),
            ttl=math.inf if int(ttl_ms) < 0 else int(ttl_ms) / 1000,
        )

    def renew(self, epoch: int) -> LeaseStatus:
        """Extend our lease of ``epoch`` if Redis still has exactly it; never acquires.

        Unlike :meth:`try_acquire_or_renew`, a lease that lapsed (expired, or lost by Redis) is
        reported as not held (``holder`` ``None`` when nobody holds it, ``ttl`` 0) instead of
        being taken again with a new epoch: the caller ends the old ownership first and only
        then acquires. An acquisition after a failed renewal still gets an epoch above
        ``epoch``, even if Redis lost the epoch counter.
        """
        held, current, holder, ttl_ms = self._renew(
            keys=[self._key], args=[self._holder, self._duration_ms, epoch]
        )
        if held:
            self._held_epoch = int(current)
        name = _text(holder) or None
        return LeaseStatus(
            held=bool(held),
            epoch=int(current),
            holder=name,
            ttl=math.inf if int(ttl_ms) == -1 else max(0, int(ttl_ms)) / 1000,
        )

    def release(self) -> bool:
        """Delete the lease if we hold it; ``True`` if it was ours (now free for anyone)."""
        self._held_epoch = 0
        return bool(self._release(keys=[self._key], args=[self._holder]))

    def holder_and_epoch(self) -> tuple[str | None, int]:
        """Who holds the lease (``None``: nobody) and its epoch, or the last epoch issued."""
        holder, epoch = self._read(keys=[self._key, self._epoch_key])
        name = _text(holder)
        return (name or None), int(epoch)

    def __repr__(self) -> str:
        return f"RedisLease(key={self._key!r}, holder={self._holder!r})"


class _ThrottledLog:
    """Logs a repeating failure at most once per ``interval`` seconds, counting the rest.

    Redis being down makes every retry fail; one line per retry period would bury the logs.
    """

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._last: float | None = None
        self._suppressed = 0
        self._failures = 0

    def failure(self, message: str, error: BaseException, **extra: object) -> None:
        self._failures += 1
        now = self._clock.now()
        if self._last is not None and now - self._last < self._interval:
            self._suppressed += 1
            return
        suppressed, self._suppressed, self._last = self._suppressed, 0, now
        more = f" ({suppressed} similar failures not logged)" if suppressed else ""
        log.warning("%s: %r%s", message, error, more, extra=extra)

    def success(self, message: str, **extra: object) -> None:
        if self._failures:
            log.info("%s after %d failed attempts", message, self._failures, extra=extra)
        self._failures = self._suppressed = 0
        self._last = None


class LeaderElector:
    """client-go leader election on a :class:`Lease`, in its own thread.

    Threading model:

    * :meth:`start` runs the election loop in a non-daemon thread named
      ``leader-elector[<lease key>]``. As a *candidate* it tries to acquire every
      ``retry_period`` (jittered up to x2.2, like client-go, so candidates do not collide).
    * On acquiring it starts a *worker* thread ``leader-work[<lease key>]#<epoch>`` that runs
      ``on_started_leading(epoch, stop_leading)``. The callback does the leader's work and must
      return soon after ``stop_leading`` (a ``threading.Event``) is set.
    * The election thread renews every ``retry_period``. Leadership ends when renewals fail (a
      Redis error is a failure, never a crash) for longer than ``renew_deadline``, when another
      holder or a different epoch shows up (the lease lapsed meanwhile), on :meth:`step_down`,
      on :meth:`stop`, or when the callback returns or raises (a leader that does no work must
      not keep the lease from replicas that would). Then: ``stop_leading`` is set, the election
      thread waits for the callback to return, releases the lease if it may still be ours (so a
      successor starts at once, and only after our work stopped), calls ``on_stopped_leading``
      (in the election thread) and becomes a candidate again after one retry period.

    ``renew_deadline < duration`` leaves the old leader ``duration - renew_deadline`` seconds to
    stop before anyone else can acquire; that only holds if one Redis call cannot outlast that
    margin (see :func:`lease_client`; a warning is logged otherwise) and if the callback honours
    ``stop_leading`` promptly. Fencing covers what remains.

    Raises ``ValueError`` unless ``0 < retry_period * 1.2 < renew_deadline < lease.duration``
    (client-go's rule). ``clock`` (a :class:`common.rate_limiters.Clock`) measures the renew
    deadline and the waits; Redis measures the lease itself. Repeated failures are logged at
    most once per ``log_interval`` seconds.
    """

    def __init__(
        self,
        lease: Lease,
        *,
        renew_deadline: float = DEFAULT_RENEW_DEADLINE,
        retry_period: float = DEFAULT_RETRY_PERIOD,
        on_started_leading: Callable[[int, threading.Event], None],
        on_stopped_leading: Callable[[], None],
        clock: Clock | None = None,
        log_interval: float = 30.0,
    ) -> None:
        if not 0 < retry_period * _JITTER < renew_deadline < lease.duration:
            raise ValueError(
                "need 0 < retry_period * 1.2 < renew_deadline < lease duration, got "
                f"retry_period={retry_period!r}, renew_deadline={renew_deadline!r}, "
                f"duration={lease.duration!r}"
            )
        if lease.max_call_seconds > lease.duration - renew_deadline:
            log.warning(
                "one call to the lease %s can block for %.1f s, longer than the %.1f s between "
                "the renew deadline and the lease expiry: a stalled leader may act after its "
                "lease expired (use lease_client() with a shorter timeout)",
                lease.key,
                lease.max_call_seconds,
                lease.duration - renew_deadline,
            )
        self._lease = lease
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._errors = _ThrottledLog(self._clock, log_interval)
        self._cond = threading.Condition()
        # Guarded by _cond:
        self._thread: threading.Thread | None = None
        self._worker: threading.Thread | None = None
        self._stopping = False
        self._release_on_stop = True
        self._leading_epoch: int | None = None
        self._stop_leading: threading.Event | None = None
        self._step_down_requested = False
        self._retired_epoch = 0  # leases with an epoch <= this are never led again (fenced)

    # --- public API ------------------------------------------------------------------------------

    @property
    def lease(self) -> Lease:
        """The lease this elector competes for."""
        return self._lease

    @property
    def is_leader(self) -> bool:
        """True from acquiring the lease until this leadership's ``stop_leading`` is set."""
        with self._cond:
            return self._leading_epoch is not None

    @property
    def epoch(self) -> int | None:
        """The epoch we lead with (the fencing token for our writes), ``None`` when not leading."""
        with self._cond:
            return self._leading_epoch

    def start(self) -> None:
        """Start the election thread. Raises ``RuntimeError`` if started or stopped before."""
        with self._cond:
            if self._thread is not None or self._stopping:
                raise RuntimeError("a LeaderElector can be started only once")
            self._thread = threading.Thread(
                target=self._run, name=f"leader-elector[{self._lease.key}]", daemon=False
            )
            self._thread.start()

    def stop(self, *, release: bool = True, timeout: float | None = None) -> None:
        """Stop leading (waiting for the leading callback to return) and stop electing.

        ``release=True`` gives the lease back so a successor takes over at once.
        ``release=False`` leaves it to expire, as a crash would (successors wait up to the lease
        duration). Idempotent. Must not be called from the leading callback (it would wait for
        itself): the callback uses :meth:`step_down` or simply returns. Raises ``TimeoutError``
        if the threads have not ended within ``timeout`` seconds.
        """
        with self._cond:
            if self._worker is threading.current_thread():
                raise RuntimeError("stop() called from the leading callback; use step_down()")
            if not self._stopping:
                self._stopping = True
                self._release_on_stop = release
            if self._stop_leading is not None:
                self._stop_leading.set()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"{thread.name} did not stop within {timeout} s")

    def step_down(self, epoch: int | None = None) -> bool:
        """Stop leading now, without renewing again: the leading work found itself fenced.

        Non-blocking, so the leading callback itself may call it. ``epoch``, when given, must be
        the epoch we lead with (a late call from an older leadership is ignored). The lease is
        released and an epoch we stepped down from is never led again: a future leadership,
        ours or another replica's, gets a new, higher epoch. Returns ``True`` if it applied.
        """
        with self._cond:
            current = self._leading_epoch
            if current is None or (epoch is not None and epoch != current):
                return False
            self._step_down_requested = True
            self._retired_epoch = max(self._retired_epoch, current)
            self._leading_epoch = None
            if self._stop_leading is not None:
                self._stop_leading.set()
            self._cond.notify_all()
            return True

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        """Block until we lead (``True``) or ``timeout`` passes or we stop (``False``)."""
        deadline = None if timeout is None else self._clock.now() + timeout
        with self._cond:
            while self._leading_epoch is None and not self._stopping:
                if deadline is not None and self._clock.now() >= deadline:
                    return False
                self._clock.wait(self._cond, deadline)
            return self._leading_epoch is not None

    def __enter__(self) -> LeaderElector:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- election thread -------------------------------------------------------------------------

    def _extra(self, epoch: int | None = None) -> dict[str, object]:
        extra: dict[str, object] = {"lease": self._lease.key, "holder": self._lease.holder}
        if epoch is not None:
            extra["epoch"] = epoch
        return extra

    def _attempt(self) -> LeaseStatus | None:
        """One acquire-or-renew; ``None`` (logged, throttled) when Redis fails."""
        try:
            status = self._lease.try_acquire_or_renew()
        except Exception as error:  # any failure is a failed attempt, never a dead elector
            self._errors.failure(
                f"lease {self._lease.key}: acquire/renew failed", error, **self._extra()
            )
            return None
        self._errors.success(f"lease {self._lease.key}: Redis answers again", **self._extra())
        return status

    def _release(self, epoch: int) -> None:
        try:
            if self._lease.release():
                log.info("released lease %s", self._lease.key, extra=self._extra(epoch))
        except Exception as error:  # it will expire on its own
            log.warning(
                "could not release lease %s (it will expire): %r",
                self._lease.key,
                error,
                extra=self._extra(epoch),
            )

    def _sleep_until(self, deadline: float) -> None:
        """Wait until ``deadline`` (clock time), or less if :meth:`stop` is called."""
        with self._cond:
            while not self._stopping and self._clock.now() < deadline:
                self._clock.wait(self._cond, deadline)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
            started = self._clock.now()
            status = self._attempt()
            if status is not None and status.held:
                if status.epoch <= self._retired_epoch:
                    # Our own fenced leftover (its release failed earlier): free it, don't lead.
                    self._release(status.epoch)
                else:
                    self._lead(status.epoch, started)
            jittered = self._retry_period * (1 + random.random() * _JITTER)
            self._sleep_until(self._clock.now() + jittered)

    def _lead(self, epoch: int, renewed_at: float) -> None:
        """Lead with ``epoch`` until leadership ends; returns as a candidate."""
        stop_leading = threading.Event()
        work_done = threading.Event()
        worker = threading.Thread(
            target=self._run_leading,
            args=(epoch, stop_leading, work_done),
            name=f"leader-work[{self._lease.key}]#{epoch}",
            daemon=False,
        )
        with self._cond:
            stopping = self._stopping
            if not stopping:
                self._leading_epoch = epoch
                self._stop_leading = stop_leading
                self._step_down_requested = False
                self._worker = worker
                self._cond.notify_all()
        if stopping:  # stop() raced with the acquire: give the lease straight back
            if self._release_on_stop:
                self._release(epoch)
            return
        log.info("started leading %s", self._lease.key, extra=self._extra(epoch))
        worker.start()
        reason, may_hold, renewed_at = self._renew_loop(epoch, renewed_at, work_done)
        with self._cond:
            self._leading_epoch = None
            self._step_down_requested = False
            stop_leading.set()
            release = may_hold and (self._release_on_stop or not self._stopping)
        log.info("stopping leading %s: %s", self._lease.key, reason, extra=self._extra(epoch))
        self._join_worker(worker, renewed_at)
        if release:
            self._release(epoch)
        with self._cond:
            self._worker = None
            self._stop_leading = None
        try:
            self._on_stopped()
        except Exception:
            log.exception("on_stopped_leading failed", extra=self._extra(epoch))

    def _renew_loop(
        self, epoch: int, renewed_at: float, work_done: threading.Event
    ) -> tuple[str, bool, float]:
        """Renew until leadership ends.

        Returns why it ended, whether the lease may still be ours (so we should release it), and
        when the last successful renewal started (the lease lives ``duration`` from then at
        least: Redis starts counting only when the script runs).
        """
        next_attempt = renewed_at + self._retry_period
        while True:
            with self._cond:
                deadline = renewed_at + self._renew_deadline
                if not (self._stopping or self._step_down_requested or work_done.is_set()):
                    self._clock.wait(self._cond, min(next_attempt, deadline))
                if self._stopping:
                    return "stopping", True, renewed_at
                if self._step_down_requested:
                    return "stepped down (fenced)", True, renewed_at
            if work_done.is_set():
                return "the leading callback returned", True, renewed_at
            now = self._clock.now()
            if now - renewed_at > self._renew_deadline:
                return (
                    f"could not renew for {now - renewed_at:.1f} s (renew deadline)",
                    True,
                    renewed_at,
                )
            if now < next_attempt:
                continue
            next_attempt = now + self._retry_period
            status = self._attempt()
            if status is None:
                continue
            if not status.held:
                return (
                    f"lease taken by {status.holder} with epoch {status.epoch}",
                    False,
                    renewed_at,
                )
            if status.epoch != epoch:
                # The lease lapsed and our renewal re-acquired it: someone may have led in
                # between, so this leadership is over; lead again with the new epoch.
                return (
                    f"lease lapsed and was re-acquired with epoch {status.epoch}",
                    True,
                    renewed_at,
                )
            renewed_at = now

    def _join_worker(self, worker: threading.Thread, renewed_at: float) -> None:
        """Wait for the leading callback; warn once if it outlives the lease (fencing remains)."""
        expires = renewed_at + self._lease.duration
        worker.join(max(0.0, expires - self._clock.now()))
        if worker.is_alive():
            log.warning(
                "the leading callback of %s is still running after the lease may have expired; "
                "another replica may lead now, only fencing protects its writes",
                self._lease.key,
                extra=self._extra(),
            )
            worker.join()

    def _run_leading(
        self, epoch: int, stop_leading: threading.Event, work_done: threading.Event
    ) -> None:
        try:
            self._on_started(epoch, stop_leading)
        except Exception:
            log.exception("the leading callback failed", extra=self._extra(epoch))
        finally:
            with self._cond:
                work_done.set()
                self._cond.notify_all()
