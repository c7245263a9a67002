"""Publishing on its own thread, so reading the API and writing Redis overlap.

The watch delivers events a network read at a time (~18 Pods per 64 KiB); publishing each read
synchronously meant one Redis round trip per read while the parser waited, and the parser idle
while Redis worked (bench/reflector.py: 45 % of the reflector's time was spent waiting for
replies). Here the reading thread submits batches and goes on parsing; one publisher thread
takes everything queued — up to ``batch_max`` deltas — and publishes it in one round trip.
Redis I/O releases the GIL, so parsing and publishing really run side by side.

In a burst the reader says so: a batch submitted with ``more_waiting`` (its network read
filled the whole buffer, so the next one is already there to parse) lets the publisher wait
for the queue to reach ``batch_max`` deltas, at most :data:`LINGER` seconds, instead of
publishing a few reads' worth. Every script call costs redis-server and redis-py a fixed
price beside each delta's, and without the wait a watch burst reached Redis as ~3 deltas per
shard per call (bench/reflector.py, 20k Pods, bursts of 10k: see the commit). The reader
keeps parsing meanwhile, so the two threads still overlap; a batch that caught up with the
stream (a short read), a flush and a close publish at once, so outside bursts nothing waits.

Ordering and checkpoints are unchanged: batches are published in submission order, a merged
batch checkpoints at its last event, and the reading thread learns of progress only through
``on_published`` after Redis confirmed it — a resourceVersion is never treated as durable
before it is. A failure (Redis down, fenced by a newer leader) is kept and re-raised in the
reading thread at its next :meth:`submit` or :meth:`flush`, and nothing after the failed batch
is published: the reflector restarts from its last confirmed position.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from reflector_svc.publish_records import PendingDelta

__all__ = ["PublishPipeline"]

Publish = Callable[[Sequence[PendingDelta], str | None], None]

LINGER: Final = 0.01
"""Longest wait, in seconds, for more of a burst (a ``more_waiting`` batch) before publishing:
the reader parses a 64 KiB read in about a millisecond, so in a burst the next batch comes
long before; the bound is for a read that happened to fill its buffer exactly."""


@dataclass(slots=True)
class _Batch:
    deltas: list[PendingDelta]
    checkpoint_rv: str | None
    """Every event up to this RV is in the batch (None: relist chunks, or after bad input)."""
    progress_rv: str | None
    """The RV the reader may resume from once this batch is published."""


def _merged_checkpoint(merged: _Batch, following: _Batch) -> str | None:
    """The checkpoint of ``merged`` + ``following``: it may checkpoint only if every part with
    events may (a relist chunk vetoes it). A batch without events -- a bookmark's progress --
    is neutral: were it a veto, the watch batches merged with it would publish without the
    checkpoint rule, and a new leader replaying from a lower shard's checkpoint would publish
    an upsert again after its deletion (seen in the reflector-pause chaos scenario)."""
    if not following.deltas:
        return merged.checkpoint_rv
    if not merged.deltas:
        return following.checkpoint_rv
    return following.checkpoint_rv if merged.checkpoint_rv is not None else None


class PublishPipeline:
    """A bounded queue of batches and the thread that publishes them."""

    def __init__(
        self,
        publish: Publish,
        *,
        batch_max: int,
        on_published: Callable[[str], None],
        name: str,
        max_queued_deltas: int | None = None,
    ) -> None:
        self._publish = publish
        self._batch_max = batch_max
        self._on_published = on_published
        self._max_queued = max_queued_deltas or 4 * batch_max
        self._queue: deque[_Batch] = deque()
        self._queued_deltas = 0
        self._in_flight = False
        self._more_waiting = False
        self._error: BaseException | None = None
        self._closing = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name)
        self._thread.start()

    @property
    def failed(self) -> bool:
        """A batch was refused; this pipeline publishes nothing more."""
        with self._cond:
            return self._error is not None

    def submit(
        self,
        deltas: list[PendingDelta],
        *,
        checkpoint_rv: str | None,
        progress_rv: str | None,
        more_waiting: bool = False,
    ) -> None:
        """Queue a batch; blocks while the queue is full (backpressure on the reader).
        ``more_waiting``: the next batch is already there to parse (module docstring)."""
        with self._cond:
            while self._queued_deltas >= self._max_queued and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            self._queue.append(_Batch(deltas, checkpoint_rv, progress_rv))
            self._queued_deltas += len(deltas)
            self._more_waiting = more_waiting
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until everything submitted is published; re-raise a publishing failure."""
        with self._cond:
            self._more_waiting = False  # nothing more comes until this returns
            self._cond.notify_all()
            while (self._queue or self._in_flight) and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error

    def close(self) -> None:
        """Publish what is queued (unless publishing failed), then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def _linger_locked(self) -> None:
        """While the reader says more of a burst is waiting, let the queue fill up to
        ``batch_max`` deltas, for at most :data:`LINGER` seconds."""
        deadline = None
        while (
            self._more_waiting
            and self._queued_deltas < self._batch_max
            and not self._closing
            and self._error is None
        ):
            now = time.monotonic()
            if deadline is None:
                deadline = now + LINGER
            elif now >= deadline:
                return
            self._cond.wait(deadline - now)

    def _take_locked(self) -> _Batch:
        """Merge queued batches, in order, up to ``batch_max`` deltas."""
        first = self._queue.popleft()
        merged = _Batch(list(first.deltas), first.checkpoint_rv, first.progress_rv)
        while self._queue and len(merged.deltas) + len(self._queue[0].deltas) <= self._batch_max:
            following = self._queue.popleft()
            merged.checkpoint_rv = _merged_checkpoint(merged, following)
            merged.deltas.extend(following.deltas)
            merged.progress_rv = following.progress_rv or merged.progress_rv
        self._queued_deltas -= len(merged.deltas)
        return merged

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue or self._error is not None:
                    return
                self._linger_locked()
                batch = self._take_locked()
                self._in_flight = True
                self._cond.notify_all()
            try:
                if batch.deltas:
                    self._publish(batch.deltas, batch.checkpoint_rv)
                if batch.progress_rv is not None:
                    self._on_published(batch.progress_rv)
            except BaseException as exc:  # handed to the reading thread, which decides
                with self._cond:
                    self._error = exc
                    self._queue.clear()
                    self._queued_deltas = 0
            finally:
                with self._cond:
                    self._in_flight = False
                    self._cond.notify_all()
