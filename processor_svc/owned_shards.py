"""What a processor owns of a resource, as every thread sees it: shards, epochs, targets.

The coordinator thread of :class:`~processor_svc.ownership.ShardOwnership` is the only writer;
any thread reads (``owned()``, the counters, ``wait_for_assignment``) and ``give_up`` comes
from shard workers. Everything here is guarded by the coordinator's one condition, and every
change notifies it, so a waiter wakes at each step that may have settled what it waits for.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

__all__ = ["Owned", "OwnedShards"]


@dataclass(slots=True)
class Owned:
    """A shard we own: its lease epoch and when its last successful renewal *started*.

    The start, not the end, because Redis counts the lease from when the script ran, which is
    after the call started: the lease lives at least ``lease_duration`` from ``renewed_at``.
    """

    epoch: int
    renewed_at: float


class OwnedShards:
    """The shards whose lease we hold and have announced, the last assignment's target, the
    ownerships given up, and the counters; every method takes ``cond`` (reentrant)."""

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self._owned: dict[int, Owned] = {}
        self._target: frozenset[int] | None = None  # our shards in the last assignment
        self._given_up: dict[int, tuple[int, str]] = {}  # shard -> (epoch, why): give_up()
        self.acquisitions = 0
        """Leases newly acquired (each then announced)."""
        self.losses = 0
        """Ownerships ended."""
        self.rebalances = 0
        """Times the target set of shards changed, the first one included."""

    def epochs(self) -> dict[int, int]:
        """Shard -> the epoch of its ownership, by shard."""
        with self._cond:
            return {shard: owned.epoch for shard, owned in sorted(self._owned.items())}

    def shards(self) -> frozenset[int]:
        with self._cond:
            return frozenset(self._owned)

    def get(self, shard: int) -> Owned | None:
        with self._cond:
            return self._owned.get(shard)

    def settled(self) -> bool:
        """We own exactly the shards the last assignment gave us."""
        with self._cond:
            return self._target is not None and self._target == frozenset(self._owned)

    def retarget(self, mine: frozenset[int]) -> bool:
        """Record the last assignment's shards for us; whether they changed (a rebalance)."""
        with self._cond:
            changed = mine != self._target
            if changed:
                self.rebalances += 1
            self._target = mine
            self._cond.notify_all()
            return changed

    def give_up(self, shard: int, epoch: int, reason: str) -> None:
        """Mark the ownership of ``shard`` at ``epoch`` to end at the next tick (nothing when
        that ownership already ended)."""
        with self._cond:
            owned = self._owned.get(shard)
            if owned is not None and owned.epoch == epoch:
                self._given_up[shard] = (epoch, reason)
                self._cond.notify_all()

    def take_given_up(self) -> dict[int, tuple[int, str]]:
        """The ownerships given up since the last call, and forget them."""
        with self._cond:
            given_up, self._given_up = self._given_up, {}
            return given_up

    def next_renew_deadline(self, renew_deadline: float) -> float:
        """When the first owned shard reaches its renew deadline (``inf``: none owned)."""
        with self._cond:
            starts = [owned.renewed_at for owned in self._owned.values()]
        return min(starts) + renew_deadline if starts else math.inf

    def late(self, now: float, renew_deadline: float) -> list[tuple[int, float]]:
        """``(shard, seconds without a renewal)`` of every owned shard past its deadline."""
        with self._cond:
            return sorted(
                (shard, now - owned.renewed_at)
                for shard, owned in self._owned.items()
                if now - owned.renewed_at >= renew_deadline
            )

    def acquired(self, shard: int, epoch: int, at: float) -> None:
        with self._cond:
            self._owned[shard] = Owned(epoch=epoch, renewed_at=at)
            self.acquisitions += 1
            self._cond.notify_all()

    def renewed(self, shard: int, held_epoch: int | None, at: float) -> tuple[bool, int]:
        """Record a renewal of ``shard``, started ``at``, if it holds our ownership's epoch
        (``held_epoch``: the epoch it holds, ``None`` when it did not hold the lease);
        ``(recorded, our epoch)``."""
        with self._cond:
            owned = self._owned[shard]
            if held_epoch is not None and owned.epoch == held_epoch:
                owned.renewed_at = at
                return True, owned.epoch
            return False, owned.epoch

    def end(self, shard: int) -> Owned | None:
        """Forget the ownership of ``shard`` (counted as a loss); ``None`` if there was none."""
        with self._cond:
            owned = self._owned.pop(shard, None)
            if owned is not None:
                self.losses += 1
                self._cond.notify_all()
            return owned
