"""An object that moves between two shards this process holds is never in both at once.

When an object's shard key changes (a ConfigMap sharded by ``owner`` gets a new controlling
owner, an object sharded by a label is relabelled), the reflector writes a *move*: a deletion on
the old shard, then an addition on the new one that names the old shard and the stream id of
that deletion there (:class:`common.wire.Move`). Each shard is read in its own steps of the
reading loop, so without coordination a process that holds both shards could apply the addition
first: its lister would show the object twice, and a handler would hear ``on_add`` before the
``on_delete`` of the same key.

:class:`MoveGate` (one per resource and process) keeps, for each shard this process reads, its
*position*: the stream id up to which everything it read has been applied to its store and
handed to the handlers. Before applying an incoming half, a shard's reader waits until the old
shard is not read here, or its position has reached the outgoing half's id; the reader *pumps*
the reading loop meanwhile (steps its other shards, the old one among them), as both are read
by the same thread (:mod:`processor_svc.reading_loop`). Handlers take their
notifications in order, so the deletion reaches every handler before the addition.

Why the wait cannot deadlock: a reader waits only at an incoming half, and only for an entry
written before it (the reflector writes the outgoing half first); and before waiting it hands
over everything it read so far and advances its own position. If two readers waited on each
other, each would wait for an entry the other has not passed, each written before the other's
waiting entry, and each waiting entry after the entry the other waits for in its own stream:
the written order would go round in a circle. A takeover's snapshot is the one place the id is
not at hand (a moved-in object updated since carries no move): there the new shard's reader
waits, bounded, until no other shard of this process holds the object (:meth:`wait_released`).

Every wait is bounded by :data:`MOVE_WAIT_TIMEOUT`: a reader stuck elsewhere (a handler that
never returns) must not stop a healthy shard for ever; an expired wait is logged and counted,
and the object may then briefly be in both shards.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["MOVE_WAIT_TIMEOUT", "MoveGate"]

log = logging.getLogger(__name__)

MOVE_WAIT_TIMEOUT: Final = 10.0
"""Seconds a reader waits for another shard of its process to apply a move's outgoing half."""

_POLL: Final = 0.05
"""How often a wait re-checks its cancel event and the other shard's store."""


def _position(entry_id: str) -> tuple[int, int]:
    """A stream id as a comparable pair (``"1714-3"`` -> ``(1714, 3)``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class MoveGate:
    """The positions of the shards of one resource this process reads (module docstring).

    ``held_elsewhere(key, shard)``: whether a store of this process other than ``shard``'s holds
    ``key`` (the resource's lister can tell); ``clock`` is monotonic seconds; ``on_expired`` is
    called (after a warning) for every wait that gave up. Thread-safe: every reader of the
    resource calls it.
    """

    def __init__(
        self,
        held_elsewhere: Callable[[str, int], bool],
        *,
        timeout: float = MOVE_WAIT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        on_expired: Callable[[], None] | None = None,
    ) -> None:
        self._held_elsewhere = held_elsewhere
        self._timeout = timeout
        self._clock = clock
        self._on_expired = on_expired
        self._cond = threading.Condition()
        # shard -> its position; None while its reader has not positioned it yet (a takeover
        # before its snapshot's deletions were handed over). Absent: not read here.
        self._positions: dict[int, tuple[int, int] | None] = {}
        self.expired = 0
        """Waits that gave up after the timeout (for a metric)."""

    def reading(self, shard: int) -> None:
        """``shard``'s reader starts (a takeover): waits on it last until it is positioned."""
        with self._cond:
            self._positions[shard] = None
            self._cond.notify_all()

    def advance(self, shard: int, entry_id: str) -> None:
        """Everything of ``shard`` up to ``entry_id`` is applied and handed to the handlers."""
        position = _position(entry_id)
        with self._cond:
            if shard in self._positions:
                current = self._positions[shard]
                if current is None or position > current:
                    self._positions[shard] = position
                    self._cond.notify_all()

    def stopped(self, shard: int) -> None:
        """``shard`` is no longer read here (handed over, lost, or the process stops)."""
        with self._cond:
            self._positions.pop(shard, None)
            self._cond.notify_all()

    def wait_applied(
        self,
        shard: int,
        entry_id: str,
        cancel: threading.Event,
        pump: Callable[[], None] | None = None,
    ) -> bool:
        """Block until ``shard`` is not read here or has applied ``entry_id``; ``False`` when
        ``cancel`` was set first. Gives up (and counts it) after the timeout. ``pump`` steps
        the other shards of the caller's reading loop: the one that applies ``shard`` may be
        the caller's own thread, so it is pumped instead of waited for."""
        wanted = _position(entry_id)
        deadline = self._clock() + self._timeout
        while True:
            with self._cond:
                if shard not in self._positions:
                    return True
                position = self._positions[shard]
                if position is not None and position >= wanted:
                    return True
                if cancel.is_set():
                    return False
                if self._clock() >= deadline:
                    self.expired += 1
                    break
                if pump is None:
                    self._cond.wait(_POLL)
                    continue
            pump()
        self._expired(f"shard {shard} did not apply {entry_id} within {self._timeout:g} s")
        return True

    def wait_released(
        self,
        key: str,
        shard: int,
        cancel: threading.Event,
        pump: Callable[[], None] | None = None,
    ) -> bool:
        """Block until no store of this process but ``shard``'s holds ``key``; ``False`` when
        ``cancel`` was set first. Gives up (and counts it) after the timeout. ``pump``: as
        for :meth:`wait_applied`."""
        deadline = self._clock() + self._timeout
        while self._held_elsewhere(key, shard):
            if cancel.is_set():
                return False
            if self._clock() >= deadline:
                with self._cond:
                    self.expired += 1
                self._expired(f"{key} still held by another shard after {self._timeout:g} s")
                return True
            if pump is not None:
                pump()
                continue
            with self._cond:
                self._cond.wait(_POLL)
        return True

    def _expired(self, what: str) -> None:
        log.warning("a move's wait gave up (%s): the object may briefly be in both", what)
        if self._on_expired is not None:
            self._on_expired()

    def held_elsewhere(self, key: str, shard: int) -> bool:
        """Whether a store of this process other than ``shard``'s holds ``key``."""
        return self._held_elsewhere(key, shard)

    def is_read_here(self, shard: int) -> bool:
        """Whether ``shard`` is read by this process now."""
        with self._cond:
            return shard in self._positions
