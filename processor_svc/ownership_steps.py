"""The steps that change what a processor owns: acquire, renew, lose, release.

:class:`~processor_svc.ownership.ShardOwnership`'s coordinator decides *which* shards to own
(the assignment) and *when* to act (its loop); each step here makes one change with its lease
call and its callback, in the order the ownership contract needs: ``on_lost`` has always
returned before a lease is released, a renewal never takes a lapsed lease again, an epoch we
already stopped owning with is never announced again, and the renew deadlines are enforced
before every Redis call (``docs/architecture.md``, "Processing"). Coordinator thread only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

from common.rate_limiters import Clock
from common.throttled_log import ThrottledLog
from processor_svc.owned_shards import OwnedShards
from processor_svc.shard_leases import LeaseAttempt, ShardLease

__all__ = ["OwnershipSteps"]

# The coordinator's logger: its lines keep the name operators filter on.
log = logging.getLogger("processor_svc.ownership")


class OwnershipSteps:
    """Acquire, renew, lose and release ``leases`` for member ``member_id``, recording each
    change in ``shards`` and telling the caller (``on_acquired``, ``on_lost``, ``on_losing``:
    see :class:`~processor_svc.ownership.ShardOwnership`). ``stopping`` says when no new call
    may start; Redis failures are logged through ``errors`` with ``extra``."""

    def __init__(
        self,
        *,
        leases: Sequence[ShardLease],
        shards: OwnedShards,
        member_id: str,
        on_acquired: Callable[[int, int], None],
        on_lost: Callable[[int], None],
        on_losing: Callable[[Sequence[int]], None] | None,
        renew_deadline: float,
        clock: Clock,
        errors: ThrottledLog,
        extra: dict[str, object],
        stopping: Callable[[], bool],
    ) -> None:
        self._leases = leases
        self._shards = shards
        self._member_id = member_id
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._on_losing = on_losing
        self._renew_deadline = renew_deadline
        self._clock = clock
        self._errors = errors
        self._extra = extra
        self._stopping = stopping
        self.lost_epoch: dict[int, int] = {}
        """Shard -> the epoch of our last ended ownership of it."""

    def enforce_renew_deadlines(self) -> None:
        """``on_lost`` for every owned shard that went ``renew_deadline`` without a renewal.

        Called before every Redis call, so a loss is noticed at most one (bounded) call late.
        The lease is not released: Redis is presumably what failed, and a lease that is still
        ours is released (or renewed with a new epoch) by a later tick.
        """
        late = self._shards.late(self._clock.now(), self._renew_deadline)
        self.losing([shard for shard, _ in late])
        for shard, silent in late:
            self.lose(shard, f"could not renew for {silent:.2f} s (renew deadline)", False)

    def renew(self, shards: list[int]) -> bool:
        """Renew the leases of owned ``shards``; ``False`` if Redis failed."""
        for shard in shards:
            self.enforce_renew_deadlines()
            owned = self._shards.get(shard)
            if owned is None:
                continue  # lost at its deadline just now; a later tick takes it back
            attempt = self._call(shard, renew_epoch=owned.epoch)
            if attempt is None:
                return False
            self._renewed(shard, attempt)
        return True

    def acquire(self, shards: list[int]) -> float | None:
        """Try to acquire ``shards``; returns the earliest expiry of a lease held by another."""
        retry_at: float | None = None
        for shard in shards:
            attempt = self._call(shard)
            if attempt is not None and self._is_stale(shard, attempt):
                # Our lease from an ownership that already ended: a new one needs a new epoch.
                attempt = self._call(shard) if self.release(shard) else None
            if attempt is None:
                return retry_at
            status = attempt.status
            if status.held:
                self._acquired(shard, attempt)
            elif math.isfinite(status.ttl):  # a departed owner's lease: try again at its expiry
                expiry = self._clock.now() + status.ttl + 0.002
                retry_at = expiry if retry_at is None else min(retry_at, expiry)
        return retry_at

    def _is_stale(self, shard: int, attempt: LeaseAttempt) -> bool:
        return attempt.status.held and attempt.status.epoch == self.lost_epoch.get(shard)

    def _call(self, shard: int, *, renew_epoch: int | None = None) -> LeaseAttempt | None:
        """One acquire-or-renew of ``shard``'s lease, or with ``renew_epoch`` a renewal of that
        ownership only (a lapsed lease is reported, not re-acquired); ``None`` (logged) if
        Redis failed.

        Checks the renew deadlines first, and reports when the call *started*.
        """
        self.enforce_renew_deadlines()
        if self._stopping():
            return None
        started = self._clock.now()
        lease = self._leases[shard]
        try:
            if renew_epoch is None:
                status = lease.try_acquire_or_renew()
            else:
                status = lease.renew(renew_epoch)
        except Exception as error:
            self._errors.failure(f"shard {shard}: lease acquire/renew failed", error, self._extra)
            return None
        self._errors.success("Redis answers again", self._extra)
        return LeaseAttempt(status, started)

    def _renewed(self, shard: int, attempt: LeaseAttempt) -> None:
        status = attempt.status
        held_epoch = status.epoch if status.held else None
        recorded, epoch = self._shards.renewed(shard, held_epoch, attempt.started)
        if recorded:
            return
        if status.holder is None:
            # Our lease lapsed (expired, or Redis lost it) within our renew deadline. Someone
            # may have owned the shard in between, so this ownership is over, and it must have
            # stopped before a new one (with a new epoch) begins: the renewal does not take the
            # lease again, the acquisition that follows in this tick does. Re-acquiring first
            # made the old worker's handler calls run under the new epoch.
            self.lose(shard, f"lease lapsed (epoch {epoch})", False)
        elif status.holder == self._member_id:
            # Ours with another epoch: only Redis losing data and our own later acquisition
            # does that. Give it up; the next acquisition gets a fresh epoch.
            self.lose(shard, f"lease holds another epoch ({status.epoch}, ours {epoch})", True)
        else:
            self.lose(shard, f"lease taken by {status.holder} with epoch {status.epoch}", False)

    def _acquired(self, shard: int, attempt: LeaseAttempt) -> None:
        epoch = attempt.status.epoch
        self._shards.acquired(shard, epoch, attempt.started)
        log.info("acquired shard %d with epoch %d", shard, epoch, extra=self._extra)
        try:
            self._on_acquired(shard, epoch)
        except Exception:
            log.exception(
                "on_acquired(%d, %d) failed; releasing the shard", shard, epoch, extra=self._extra
            )
            self.lose(shard, "on_acquired failed", True)

    def lose(self, shard: int, reason: str, release: bool, level: int = logging.INFO) -> bool:
        """End our ownership of ``shard``: ``on_lost`` first, then (``release``) the lease.

        Returns ``False`` only when the release was tried and Redis failed.
        """
        owned = self._shards.end(shard)
        if owned is None:
            return True
        self.lost_epoch[shard] = owned.epoch
        log.log(level, "lost shard %d (epoch %d): %s", shard, owned.epoch, reason,
                extra=self._extra)  # fmt: skip
        try:
            self._on_lost(shard)
        except Exception:
            log.exception("on_lost(%d) failed", shard, extra=self._extra)
        return self.release(shard) if release else True

    def losing(self, shards: Sequence[int]) -> None:
        """Tell the caller at once about every shard about to be lost in this step.

        ``on_lost`` runs one shard at a time and may wait (a hand-over lets running handler
        calls finish); without this, the shards later in the row kept calling handlers all
        that while, unrenewed, and a slow row outlived their leases: the next owner's calls
        then overlapped theirs.
        """
        if not shards or self._on_losing is None:
            return
        try:
            self._on_losing(list(shards))
        except Exception:
            log.exception("on_losing(%s) failed", list(shards), extra=self._extra)

    def release(self, shard: int) -> bool:
        """Release ``shard``'s lease if it is ours; ``False`` when Redis failed (it will expire)."""
        try:
            self._leases[shard].release()
        except Exception as error:
            self._errors.failure(f"shard {shard}: lease release failed", error, self._extra)
            return False
        return True
