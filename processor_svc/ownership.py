"""Which shards this processor owns: membership, assignment and per-shard leases in one loop.

docs/architecture.md ("Processing") specifies the contract; this module keeps it. Every
processor runs one :class:`ShardOwnership` per resource. Its coordinator thread heartbeats into
the resource's members (:class:`~processor_svc.membership.Membership`), reads the live members
and the holder of every shard lease, lets :func:`~processor_svc.assignment.assign_shards` decide
who *should* own each shard, and then makes it so with one :class:`~common.lease.RedisLease` per
shard (``ib:{R:S}:lease`` with epochs from ``ib:{R:S}:lease_epoch``):

* a shard that is no longer ours: ``on_lost(shard)`` first -- the caller stops applying and
  acknowledges before it returns -- and only then the lease is released, so the next owner,
  who can only acquire a free or expired lease, starts after we stopped;
* a shard that is ours and held: renewed -- that very lease and epoch only: a lease that lapsed
  meanwhile (expired, or lost by Redis) ends the ownership with ``on_lost`` *before* it is
  acquired again, so no handler call of the old ownership runs under the new epoch;
  a shard that is ours and free: acquired, then
  ``on_acquired(shard, epoch)``; the epoch is the fencing token the caller's acknowledgements
  carry, and every ownership period gets a new one (an epoch we already stopped owning with is
  never handed to ``on_acquired`` again, even when our own lease outlived the loss);
* a held shard whose renewals fail (Redis unreachable, the process stalled) for
  ``renew_deadline``: ``on_lost(shard)``, which comes ``lease_duration - renew_deadline`` seconds
  before anyone else can acquire the lease. That margin only holds if one Redis call cannot
  block longer than it: use ``common.redis_config.lease_client`` (a warning is logged otherwise).

Why a single thread: decisions, callbacks and renewals are serialised, so ``on_lost`` for a
shard has always returned before that shard's lease is released, and there are no locks to
order. The price: callbacks run on this thread and delay heartbeats and renewals while they
run, so they must be quick (hand the work to the shard's own worker, wait only for it to stop).

Why leases on top of assignment: members may briefly disagree (one has noticed a join, another
has not), and two of them may then both target a shard; the lease lets only one own it. Views
converge within a heartbeat, and with them the assignment.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from common.lease import warn_if_calls_outlast_the_margin
from common.rate_limiters import Clock, MonotonicClock
from common.redis_layout import PROCESSOR_GROUP
from common.redis_layout.lease_reads import decode_holder, queue_holder
from common.replica_wait import NO_WAIT, ReplicaWait
from common.settings import LeaseTiming, MembershipTiming
from common.sharding import shard_ranges
from common.throttled_log import ThrottledLog
from processor_svc.assignment import assign_shards
from processor_svc.lease_group import LeaseGroup
from processor_svc.membership import Membership, decode_members
from processor_svc.owned_shards import OwnedShards
from processor_svc.ownership_steps import OwnershipSteps
from processor_svc.shard_leases import ShardLease, shard_leases

__all__ = ["ShardLease", "ShardOwnership"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _View:
    """One read of Redis: the live members (after our heartbeat) and each shard's lease holder."""

    members: tuple[str, ...]
    owners: dict[int, str | None]


class ShardOwnership:
    """Owns this member's share of a resource's shards; see the module docstring.

    Threading model: :meth:`start` runs the coordinator in a non-daemon thread named
    ``shard-ownership[<resource>]``. It wakes every ``heartbeat_interval`` to heartbeat and read
    the members and lease holders (one pipeline); every ``retry_period``, and at once when the
    live members changed, it reassigns, renews and acquires (the *tick*); and at each owned
    shard's renew deadline. ``on_acquired(shard, epoch)`` and ``on_lost(shard)`` run on that
    thread; an exception from either is logged and never stops it. A failed ``on_acquired`` is
    followed by ``on_lost`` (so anything half-started is stopped) and the lease is released for
    another member to take. ``on_lost`` must stop applying the shard and acknowledge before it
    returns, because the lease may be released (or expire) right after. ``on_losing(shards)``
    (optional, must not block) comes first with every shard one step is about to lose -- a
    hand-over, the renew deadlines that passed, the stop -- so the caller can stop them all at
    once before the ``on_lost`` calls wait for each in turn.

    ``member_id`` is both the membership id and the lease holder; it must be unique per process
    (``common.lease.unique_holder``). ``client`` should come from
    ``common.redis_config.lease_client``:
    bounded call times are what make the renew deadline come before the lease expiry, and
    :class:`~common.lease.RedisLease` refuses a client without socket timeouts.

    ``group`` is the consumer group (one application on the watch): its members, leases and
    epochs are its own, so groups assign and take over shards without ever meeting.
    ``co_sharded`` names further resources whose shards are owned with ``resource``'s: shard
    *N* is then the :class:`~processor_svc.lease_group.LeaseGroup` of every one's shard *N*
    lease (acquired, renewed and lost together; :meth:`epochs`), and the members are
    ``resource``'s.

    ``timing`` and ``membership`` (:mod:`common.settings`, which check their own rules) give the
    lease and heartbeat periods; raises ``ValueError`` unless ``shard_count >= 1``.
    ``clock`` measures deadlines and waits; Redis measures the leases and
    member deadlines. Repeated Redis failures are logged at most once per ``log_interval`` s.

    ``replica_wait``: a shard lease newly acquired counts only once that many replicas have it,
    and releases wait for them too (:class:`~common.lease.RedisLease`).

    Counters: ``acquisitions`` (leases newly taken), ``losses`` (``on_lost`` calls) and
    ``rebalances`` (times this member's target set of shards changed, the first one included).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        resource: str,
        shard_count: int,
        member_id: str,
        on_acquired: Callable[[int, int], None],
        on_lost: Callable[[int], None],
        on_losing: Callable[[Sequence[int]], None] | None = None,
        timing: LeaseTiming | None = None,
        membership: MembershipTiming | None = None,
        clock: Clock | None = None,
        log_interval: float = 30.0,
        group: str = PROCESSOR_GROUP,
        co_sharded: Sequence[str] = (),
        replica_wait: ReplicaWait = NO_WAIT,
    ) -> None:
        if type(shard_count) is not int or shard_count < 1:
            raise ValueError(f"shard_count must be an integer >= 1, got {shard_count!r}")
        timing = timing if timing is not None else LeaseTiming()
        membership = membership if membership is not None else MembershipTiming()
        self._resource = resource
        self._member_id = member_id
        self._shard_count = shard_count
        self._membership = Membership(
            client,
            prefix=prefix,
            resource=resource,
            member_id=member_id,
            ttl=membership.member_ttl,
            group=group,
        )
        resources = (resource, *(r for r in co_sharded if r != resource))
        self._resources = resources
        self._leases: list[ShardLease] = shard_leases(
            client,
            prefix=prefix,
            resources=resources,
            group=group,
            shard_count=shard_count,
            member_id=member_id,
            duration=timing.lease_duration,
            replica_wait=replica_wait,
        )
        warn_if_calls_outlast_the_margin(self._leases[0], timing.renew_deadline, "shard owner")
        self._client = client
        self._heartbeat_interval = membership.heartbeat_interval
        self._settle_limit = membership.member_ttl
        self._renew_deadline = timing.renew_deadline
        self._retry_period = timing.retry_period
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._errors = ThrottledLog(log, self._clock, log_interval)
        self._extra: dict[str, object] = {"resource": resource, "member": member_id}
        self._cond = threading.Condition()
        # Guarded by _cond (written only by the coordinator thread, read by any):
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._release_on_stop = True
        self._shards = OwnedShards(self._cond)
        self._steps = OwnershipSteps(
            leases=self._leases,
            shards=self._shards,
            member_id=member_id,
            on_acquired=on_acquired,
            on_lost=on_lost,
            on_losing=on_losing,
            renew_deadline=self._renew_deadline,
            clock=self._clock,
            errors=self._errors,
            extra=self._extra,
            stopping=self._is_stopping,
        )
        # Coordinator thread only:
        self._members_seen: tuple[str, ...] | None = None

    # --- public API ------------------------------------------------------------------------------

    @property
    def member_id(self) -> str:
        """Our membership id and lease holder."""
        return self._member_id

    @property
    def resource(self) -> str:
        """The resource whose shards this coordinator owns."""
        return self._resource

    @property
    def membership(self) -> Membership:
        """Our registration in the members, which :meth:`start`'s loop heartbeats."""
        return self._membership

    @property
    def acquisitions(self) -> int:
        """How many times a shard lease was newly acquired (each then got ``on_acquired``)."""
        with self._cond:
            return self._shards.acquisitions

    @property
    def losses(self) -> int:
        """How many times ``on_lost`` was called (reassigned, lease lost, failed, or stopping)."""
        with self._cond:
            return self._shards.losses

    @property
    def rebalances(self) -> int:
        """How many times the set of shards assigned to this member changed."""
        with self._cond:
            return self._shards.rebalances

    def owned(self) -> dict[int, int]:
        """The shards we own now, with the epoch (fencing token) of each ownership."""
        return self._shards.epochs()

    def give_up(self, shard: int, epoch: int, reason: str) -> None:
        """End the ownership of ``shard`` at ``epoch`` on the next tick: release the lease and
        take the shard again with a new epoch (a fresh takeover) if it is still ours to take.

        For a worker fenced off while our renewals still succeed: after a split brain its
        fenced read may have reached the old, stale primary (which names nobody, or an earlier
        holder) while the renewals reach the new one. Left alone, the shard would stay "owned"
        with no worker reading it. Nothing happens if that ownership already ended."""
        self._shards.give_up(shard, epoch, reason)

    def epochs(self, shard: int, epoch: int) -> dict[str, int]:
        """Each co-sharded resource's fencing epoch for the ownership of ``shard`` that
        ``on_acquired(shard, epoch)`` announced: ``{resource: epoch}`` with one resource, the
        group's per-resource epochs with several (:class:`~processor_svc.lease_group.LeaseGroup`).
        Call it from ``on_acquired``, on the coordinator thread."""
        lease = self._leases[shard]
        if isinstance(lease, LeaseGroup):
            return lease.epochs()
        return {self._resource: epoch}

    def start(self) -> None:
        """Start the coordinator thread. Raises ``RuntimeError`` if started or stopped before."""
        with self._cond:
            if self._thread is not None or self._stopping:
                raise RuntimeError("a ShardOwnership can be started only once")
            self._thread = threading.Thread(
                target=self._run, name=f"shard-ownership[{self._resource}]", daemon=False
            )
            self._thread.start()

    def stop(self, release: bool = True, *, timeout: float | None = None) -> None:
        """Stop: ``on_lost`` for every owned shard, then (``release``) hand everything over.

        ``release=True`` (graceful): release every lease after its ``on_lost`` and leave the
        members, so the others take over at their next heartbeat instead of after the lease
        expiry. ``release=False`` leaves leases and membership to expire, as a crash would (the
        local ``on_lost`` calls still happen: this process stops applying either way).
        Idempotent; waits for the thread. Must not be called from a callback (it would wait for
        itself). Raises ``TimeoutError`` if the thread has not ended within ``timeout`` seconds.
        """
        with self._cond:
            if self._thread is threading.current_thread():
                raise RuntimeError("stop() called from an ownership callback")
            if not self._stopping:
                self._stopping = True
                self._release_on_stop = release
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"{thread.name} did not stop within {timeout} s")

    def wait_for_assignment(self, timeout: float | None = None) -> bool:
        """Block until we own exactly the shards the last assignment gave us (``True``).

        ``False`` when ``timeout`` passes first or the coordinator stops.
        """
        deadline = None if timeout is None else self._clock.now() + timeout
        with self._cond:
            while not self._shards.settled():
                if self._stopping or (deadline is not None and self._clock.now() >= deadline):
                    return False
                self._clock.wait(self._cond, deadline)
            return True

    def __enter__(self) -> ShardOwnership:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ShardOwnership(resource={self._resource!r}, member_id={self._member_id!r})"

    # --- coordinator thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._shutdown()

    def _loop(self) -> None:
        started = next_view = next_tick = self._clock.now()
        stable_since = started
        while self._wait_until(min(next_view, next_tick, self._next_renew_deadline())):
            try:
                self._steps.enforce_renew_deadlines()
                now = self._clock.now()
                if now < next_view and now < next_tick:
                    continue  # woken for a renew deadline only
                next_view = now + self._heartbeat_interval
                view = self._read_view()
                if view is None:
                    next_tick = max(next_tick, next_view)
                    continue
                changed = view.members != self._members_seen
                self._members_seen = view.members
                if changed:
                    stable_since = now
                if self._settling(now, started, stable_since):
                    next_tick = next_view  # look again at the next heartbeat
                    continue
                if changed or now >= next_tick:
                    next_tick = now + self._retry_period
                    retry_at = self._tick(view)
                    if retry_at is not None:
                        next_tick = min(next_tick, retry_at)
            except Exception:  # a bug must not end ownership silently: log, go on
                log.exception("shard ownership tick failed", extra=self._extra)

    def _settling(self, now: float, started: float, stable_since: float) -> bool:
        """Whether the first assignment must wait: processors started together would otherwise
        each see only the members that heartbeated before them, take every free shard, and
        hand most of them over a heartbeat later, each hand-over costing a takeover (and, with
        a busy machine, the time to stop it). So until this member first acquires a shard, it
        assigns only once its view of the members has not changed for one heartbeat interval
        (every member started with it has heartbeated by then), for at most ``member_ttl``
        seconds after it started. A lone processor's first shard comes one heartbeat later."""
        if self._shards.acquisitions or now - started >= self._settle_limit:
            return False
        return now - stable_since < self._heartbeat_interval

    def _is_stopping(self) -> bool:
        with self._cond:
            return self._stopping

    def _wait_until(self, deadline: float) -> bool:
        """Sleep until ``deadline`` (clock time); ``False`` once :meth:`stop` was called."""
        with self._cond:
            while not self._stopping and self._clock.now() < deadline:
                self._clock.wait(self._cond, deadline)
            return not self._stopping

    def _next_renew_deadline(self) -> float:
        return self._shards.next_renew_deadline(self._renew_deadline)

    def _read_view(self) -> _View | None:
        """Heartbeat, then read the live members and every lease holder: one round trip."""
        try:
            with self._client.pipeline(transaction=False) as pipe:
                self._membership.queue_heartbeat(pipe)
                for lease in self._leases:
                    queue_holder(pipe, lease.key)
                replies = pipe.execute()
        except Exception as error:  # Redis unreachable or failing: the deadlines decide
            self._errors.failure("heartbeat and lease read failed", error, self._extra)
            return None
        self._errors.success("Redis answers again", self._extra)
        owners: dict[int, str | None] = {}
        for shard, holder in enumerate(replies[1:]):
            owners[shard] = decode_holder(holder)
        return _View(members=tuple(decode_members(replies[0])), owners=owners)

    def _tick(self, view: _View) -> float | None:
        """Reassign, hand over, renew, acquire. Returns when a blocked acquisition may succeed.

        Hand-overs come first (a successor is waiting for them), then renewals (cheap, and they
        keep the deadlines away), then acquisitions, whose ``on_acquired`` may take a while.
        Any Redis failure ends the tick: the next call would most likely fail too, and each
        failure can block for a whole timeout.
        """
        me = self._member_id
        target = assign_shards(self._shard_count, view.members, view.owners)
        mine = frozenset(shard for shard, owner in target.items() if owner == me)
        if self._shards.retarget(mine):
            log.info("assigned shards %s", sorted(mine), extra=self._extra)
        owned = self._shards.shards()
        redis_ok = True  # after one failed call, the others would only block and fail too
        given_up = self._shards.take_given_up()
        for shard, (epoch, reason) in sorted(given_up.items()):
            current = self._shards.get(shard)
            if redis_ok and current is not None and current.epoch == epoch:
                redis_ok = self._steps.lose(shard, reason, True)
        if given_up:
            owned = self._shards.shards()
        leaving = sorted(owned - mine)
        self._steps.losing(leaving)
        for shard in leaving:
            # A slow hand-over must not outlast the others' leases.
            self._steps.enforce_renew_deadlines()
            redis_ok = (
                self._steps.lose(shard, f"reassigned to {target.get(shard)}", redis_ok) and redis_ok
            )
        for shard, holder in view.owners.items():
            if redis_ok and holder == me and shard not in owned and shard not in mine:
                redis_ok = self._steps.release(shard)  # ours from an ended ownership: let them in
        if not redis_ok or not self._steps.renew(sorted(owned & mine)):
            return None
        owned = self._shards.shards()  # a lapsed lease was lost just now: take it again
        return self._steps.acquire(sorted(mine - owned))

    def _shutdown(self) -> None:
        with self._cond:
            wanted = release = self._release_on_stop
        owned = sorted(self._shards.shards())
        self._steps.losing(owned)
        for shard in owned:  # every on_lost, but no release after Redis failed (they expire)
            release = self._steps.lose(shard, "stopping", release, logging.DEBUG) and release
        if owned:  # one line for them all, not one per shard
            left = "" if release else "; Redis failed, " if wanted else "; "
            log.info("stopping: %s shards %s%s", "handed back" if release else "stopped applying",
                     shard_ranges(owned), left and f"{left}their leases expire",
                     extra=self._extra)  # fmt: skip
        if release:
            try:
                self._membership.leave()
            except Exception as error:  # our deadline will pass on its own
                log.warning("could not leave the members: %r", error, extra=self._extra)
        with self._cond:
            self._cond.notify_all()
