"""What a bad watch line costs: a re-watch from the last event published, and a relist only
when one position keeps failing.

A line that is not a usable event ends the watch right after the events before it
(:class:`~reflector_svc.api_errors.MalformedWatchEventError`); re-watching from the last event
published makes the server send the rest again, so nothing is lost or repeated. This module
is the policy: how long to wait before that re-watch, and when to give up on re-watching.
"""

from __future__ import annotations

import random
from typing import Final

__all__ = ["BAD_LINE_RELIST_AFTER", "BAD_LINE_REWATCH_DELAY", "BadLinePolicy"]

BAD_LINE_RELIST_AFTER: Final = 3
"""Bad-line failures in a row at one resourceVersion (no event or bookmark got past it) after
which the reflector relists instead of re-watching.

client-go re-watches after a decoding error only when ``MaxInternalErrorRetryDuration`` is set
(the apiserver's own watch cache sets 30 s), and otherwise relists at once. We always re-watch,
and bound it by position rather than by time: a re-watch is cheap (the server replays from its
watch cache only what came after the RV) while a relist of a big resource is the most
expensive call there is. Once is bad luck (a line cut or corrupted on the way); twice at the
same RV can still be bad luck, since the replay crosses the same path; a third time the
server's copy of that next event is what cannot be read, re-watching will never get past it,
and only a LIST (the current state, not the history) can. Three costs two short waits.
"""
BAD_LINE_REWATCH_DELAY: Final = 0.1
"""Seconds before re-watching after a bad line, jittered in ``[d, 2d)`` and doubled for each
failure in a row at the same position: enough not to hammer a server that is sending garbage,
far below the relist backoff (0.8 s doubling to 30 s), which these never advance."""


class BadLinePolicy:
    """Counts bad lines in a row at one resourceVersion and turns them into a decision.

    Invariant: ``failures`` counts the bad lines since the position last changed (or since
    :meth:`reset`, after a completed list), all after the same resourceVersion.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._rv: str | None = None
        self.failures = 0

    def failed_at(self, rv: str | None) -> float | None:
        """Record a bad line after ``rv``: the seconds to wait before re-watching from it, or
        ``None`` when this position failed :data:`BAD_LINE_RELIST_AFTER` times: relist."""
        if rv == self._rv:
            self.failures += 1
        else:
            self._rv = rv
            self.failures = 1
        if self.failures >= BAD_LINE_RELIST_AFTER:
            return None
        doubling: float = 2.0 ** (self.failures - 1)
        return BAD_LINE_REWATCH_DELAY * doubling * (1 + self._rng.random())

    def reset(self) -> None:
        """A list completed: whatever failed before is behind us."""
        self._rv = None
        self.failures = 0
