"""Which stream entries of a shard may be acknowledged: after every handler returned for them.

A stream entry may be acknowledged only after *every* handler returned for it
(docs/architecture.md, "What handlers can rely on"). The shard worker registers each entry in an
:class:`AckTracker` and gets an :class:`AckToken`; the dispatcher adds one hold per handler and
each handler thread releases its hold after the call returns (or raises). The worker then
acknowledges :meth:`AckTracker.completed_prefix`: only a contiguous prefix, so an entry is never
acknowledged before an earlier one, which keeps the consumer group's pending list a single run
that a new owner can reason about.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

__all__ = ["AckToken", "AckTracker"]


class _Guard:
    """The lock a tracker shares with its tokens, and who waits on it.

    Tokens change state three or four times per entry, so they take the bare lock (its C-level
    ``with``, not a Condition's Python-level one) and wake waiters only when there are some:
    per entry that was a third of the tracker's cost, and waiting is rare (shutdown, tests).
    """

    __slots__ = ("changed", "lock", "waiting")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.waiting = 0

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """``Condition.wait_for`` under the lock, counted so that completions notify."""
        with self.lock:
            self.waiting += 1
            try:
                return self.changed.wait_for(predicate, timeout)
            finally:
                self.waiting -= 1


class AckToken:
    """Completes when every hold on it is released.

    A token starts with one hold, its creator's, so that it cannot complete while the creator is
    still handing it out (deliveries add one hold per handler). The creator releases its own hold
    last; a creator that gives up half-way (a cancelled delivery) simply never releases it, and
    the token never completes: the entry stays unacknowledged for the next owner.
    ``on_done`` runs once, in the thread that released the last hold, outside any lock.
    """

    __slots__ = ("_guard", "_on_done", "_remaining", "done", "entry_id")

    def __init__(
        self,
        entry_id: str = "",
        *,
        on_done: Callable[[AckToken], None] | None = None,
        guard: _Guard | None = None,
    ) -> None:
        self.entry_id = entry_id
        self.done = False
        self._remaining = 1
        self._on_done = on_done
        self._guard = guard if guard is not None else _Guard()

    def hold(self, count: int = 1) -> None:
        """Add ``count`` holds (one per handler the token is handed to)."""
        with self._guard.lock:
            if self.done:
                raise RuntimeError(f"token {self.entry_id!r} already completed")
            self._remaining += count

    def release(self) -> None:
        """Release one hold; the last release completes the token."""
        guard = self._guard
        with guard.lock:
            self._remaining -= 1
            if self._remaining > 0:
                return
            if self._remaining < 0:
                raise RuntimeError(f"token {self.entry_id!r} released more often than held")
            self.done = True
            if guard.waiting:
                guard.changed.notify_all()
            on_done = self._on_done
        if on_done is not None:
            on_done(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the token completes (``True``) or ``timeout`` passes (``False``)."""
        return self._guard.wait_for(lambda: self.done, timeout)


class AckTracker:
    """The entries of one shard in stream order, and which of them may be acknowledged.

    The worker :meth:`register`\\ s every entry it reads, in stream order; handler threads
    complete the tokens in any order; :meth:`completed_prefix` hands out the IDs of the longest
    run of completed entries at the front, and forgets them. Thread-safe.
    """

    def __init__(self) -> None:
        self._guard = _Guard()
        self._tokens: collections.deque[AckToken] = collections.deque()

    def register(self, entry_id: str) -> AckToken:
        """A token for the next entry in stream order (IDs must be registered in order)."""
        token = AckToken(entry_id, guard=self._guard)
        with self._guard.lock:
            self._tokens.append(token)
        return token

    def completed_prefix(self) -> list[str]:
        """The IDs that can be acknowledged now: completed, with every earlier entry completed."""
        ids: list[str] = []
        with self._guard.lock:
            tokens = self._tokens
            while tokens and tokens[0].done:
                ids.append(tokens.popleft().entry_id)
        return ids

    @property
    def outstanding(self) -> int:
        """Registered entries not yet handed out by :meth:`completed_prefix`."""
        with self._guard.lock:
            return len(self._tokens)

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until every registered token completed (``True``) or ``timeout`` passes."""

        def idle() -> bool:
            # Tokens complete roughly in order: checking from the newest fails fast.
            return all(token.done for token in reversed(self._tokens))

        return self._guard.wait_for(idle, timeout)
