"""Which shards' keys a controller may still reconcile, and which reconciles are running.

A shard handed to another processor must not have a key reconciled in both at once. The hand-
over first marks the shard leaving (no key of it starts from then on), then waits until no
reconcile of it runs, and only then releases its lease. Deciding "may this key start?" and
counting it as running happen under one lock, so a hand-over either sees the reconcile running
or the reconcile sees the shard leaving: there is no moment in between.

Kept apart from :mod:`processor_svc.controller` because it is that one concurrency rule, with
its own lock, and the controller's workers and its ``ShardAware`` side both go through it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable

__all__ = ["HandoverGuard"]


class HandoverGuard:
    """The shards being handed over, and the reconciles running per shard (``None``: of keys
    that do not tell their shard, which might be of any)."""

    __slots__ = ("_changed", "_leaving", "_running")

    def __init__(self) -> None:
        self._changed = threading.Condition()
        """Guards both sets; notified whenever a reconcile ends."""
        self._leaving: set[int] = set()
        self._running: Counter[int | None] = Counter()

    def acquired(self, shards: Iterable[int]) -> None:
        """``shards`` are owned here (again): their keys may start."""
        with self._changed:
            self._leaving -= set(shards)

    def leaving(self, shards: Iterable[int]) -> None:
        """``shards`` are being handed over: no key of theirs starts from now on."""
        with self._changed:
            self._leaving |= set(shards)

    def enter(self, shard: int | None) -> bool:
        """Count a reconcile of a key of ``shard`` as running, unless the shard is leaving
        (``False``: skip the key). Every ``True`` must be matched by :meth:`leave`."""
        with self._changed:
            if shard is not None and shard in self._leaving:
                return False
            self._running[shard] += 1
            return True

    def leave(self, shard: int | None) -> None:
        """The reconcile :meth:`enter` counted has ended."""
        with self._changed:
            self._running[shard] -= 1
            if not self._running[shard]:
                del self._running[shard]
            self._changed.notify_all()

    def wait_idle(self, shards: Iterable[int], timeout: float) -> bool:
        """``True`` once no reconcile of ``shards`` (nor of a key of unknown shard) runs,
        ``False`` after ``timeout`` seconds."""
        wanted = set(shards)
        deadline = time.monotonic() + timeout
        with self._changed:
            while None in self._running or not wanted.isdisjoint(self._running):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True
