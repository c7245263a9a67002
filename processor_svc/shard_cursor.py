"""Where a shard's consumer stands in its stream, and what it still owes Redis.

A shard worker reads after :attr:`ShardCursor.last_id` and acknowledges entries once every
handler returned for them; both go through fenced scripts
(:class:`~processor_svc.fenced_stream.FencedStream`). What the cursor keeps between those calls
is what a failed call must not lose:

- acknowledgements sent but not confirmed (:attr:`ShardCursor.unsent`): ``XACK`` is idempotent,
  so the next call resends them;
- after a failed read whose outcome is unknown, :attr:`ShardCursor.replay`: the read may have
  moved entries into our pending list, so the next read takes our pending entries after
  :attr:`last_id` before new ones;
- dead letters (:meth:`park`), parked by the acknowledging script together with their ack, in
  stream order;
- the held set's changes of the entries not acknowledged yet (:mod:`processor_svc.held_keys`),
  applied by the same script that acknowledges them.
"""

from __future__ import annotations

from typing import Any

import redis

from processor_svc.fenced_stream import DeadLetter, FencedStream
from processor_svc.held_keys import HeldChanges

__all__ = ["ShardCursor"]


class ShardCursor:
    """A shard's read position and unconfirmed acknowledgements (module docstring)."""

    def __init__(self, stream: FencedStream, *, count: int) -> None:
        self._stream = stream
        self._count = count
        self.last_id = "0-0"
        """The last entry ID this consumer received."""
        self.replay = False
        """Re-read our pending entries after :attr:`last_id` before ``>``."""
        self.unsent: list[str] = []
        self.held = HeldChanges()
        self._dead: dict[str, DeadLetter] = {}

    def reset(self) -> None:
        """A takeover starts: it owes nothing (the next owner's snapshot covers it)."""
        self._dead = {}
        self.unsent = []
        self.held.clear()
        self.replay = False

    def start_at(self, last_id: str) -> None:
        """The takeover moved the group to ``last_id``: new entries come after it."""
        self.last_id = last_id
        self.replay = False

    def park(self, entry_id: str, letter: DeadLetter) -> None:
        """Park ``letter`` with the acknowledgement of ``entry_id``."""
        self._dead[entry_id] = letter

    def read(self, completed: list[str]) -> list[Any]:
        """Acknowledge ``completed`` (and what is unsent) and read the next entries, in one
        fenced script when no dead letter is among them (they need the acknowledging script)."""
        acks = self.unsent + completed
        if self._dead and any(entry_id in self._dead for entry_id in acks):
            self.unsent = acks
            self.flush([])
            acks = []
        start = self.last_id if self.replay else ">"
        self.unsent = acks
        try:
            entries = self._stream.read(self._count, start, acks, self.held.of(acks))
        except redis.RedisError:
            self.replay = True  # the read may have happened: replay our pending entries
            raise
        self.unsent = []
        self.held.forget(acks)
        return entries

    def flush(self, completed: list[str]) -> None:
        """Acknowledge ``completed`` and what is unsent, parking their dead letters."""
        ids = self.unsent + completed
        if not ids:
            return
        dead = [self._dead[i] for i in ids if i in self._dead] if self._dead else []
        self.unsent = ids
        self._stream.acknowledge(dead, ids, held=self.held.of(ids))
        self.unsent = []
        self.held.forget(ids)
        for entry_id in ids:
            self._dead.pop(entry_id, None)
