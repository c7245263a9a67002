"""One reading loop per processor: every owned shard read by one thread, woken by one wait.

A shard used to have a thread and a blocking connection of its own: sixteen threads contending
for the GIL in a burst, two round trips per wake (a plain ``XREAD`` to wait, then the fenced
read), and order between shards kept by timed waits (a move's two halves). Here one thread steps
every :class:`ShardStep` it was given in turn and, when none has work due, waits once for all of
them: a single ``XREAD BLOCK`` naming every stream after its last read entry
(:meth:`~processor_svc.blocking_read.BlockingRead.wait_any`), then steps the shards whose streams
answered. A move's outgoing half is applied before its incoming half because the same loop
applies both: a shard that meets an incoming half first :meth:`ReadingLoop.pump`\\ s the others.

**Invariants**: a step runs only on the loop's thread, so a shard's state needs no lock; a shard
asked to stop is finished (:meth:`ShardStep.finish`: wait for running handler calls, acknowledge)
before it leaves the loop, and nothing of it runs afterwards; :meth:`ReadingLoop.wake` ends a
wait at once (``CLIENT UNBLOCK``), so a stop or a new shard never waits out a block.

**Cost**: the fenced reads stay one script per shard with entries (a script touches one slot:
on a Cluster it cannot span shards). The loop is a plain thread over the synchronous client, not
asyncio: docs/architecture.md gives the measured per-entry cost of ``redis.asyncio``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final, Protocol

import redis

from processor_svc.blocking_read import BlockingRead

__all__ = ["ReadingLoop", "ShardStep"]

log = logging.getLogger(__name__)

_PUMP_PAUSE: Final = 0.005  # seconds between pumps while a move waits on a shard with nothing new


class ShardStep(Protocol):
    """A shard as the loop drives it (a :class:`~processor_svc.shard_worker.ShardWorker`)."""

    @property
    def name(self) -> str: ...

    @property
    def stream(self) -> str:
        """The Redis stream :attr:`wake_after` refers to."""

    @property
    def wake_after(self) -> str | None:
        """After an idle step: the last entry ID read, so the loop's wait wakes this shard when
        its stream has a later one; ``None`` when only time is awaited."""

    @property
    def stopping(self) -> bool: ...

    def step(self) -> float:
        """One unit of work (a takeover, or a read and its delivery); returns how many seconds
        may pass before the next step is due (0: at once)."""

    def finish(self) -> None:
        """The last call: wait for running handler calls, acknowledge, release (never raises)."""


class ReadingLoop:
    """The thread that reads every shard this process owns (module docstring).

    ``client`` is the processor's Redis client (not decoding responses); ``block_ms`` bounds
    one idle wait; ``linger_ms``: after an idle wait ended on new entries, wait that much more
    before reading them, so a steady trickle is read in batches rather than one wake (a fenced
    read, a hand-off, an acknowledgement) per event. Shards come and go while it runs:
    :meth:`add`, and a shard leaves on its own once :attr:`ShardStep.stopping` (after
    :meth:`ShardStep.finish`). :meth:`close` ends the thread once every shard left.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        block_ms: int,
        linger_ms: int = 0,
        name: str = "reading-loop",
    ) -> None:
        self._client = client
        self._block_ms = block_ms
        self._linger = linger_ms / 1000
        self._woken = threading.Event()
        self._wait = BlockingRead(client, "", block_ms=block_ms, stop=self._woken)
        self._lock = threading.Lock()
        self._arriving: list[ShardStep] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=False)
        # Loop-thread state: every shard, when its next step is due, and the pump's stack.
        self._shards: dict[ShardStep, float] = {}
        self._pumping: set[ShardStep] = set()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def add(self, shard: ShardStep) -> None:
        """Start stepping ``shard`` (from any thread); starts the loop at its first shard."""
        with self._lock:
            if self._closing:
                raise RuntimeError("the reading loop is closed")
            self._arriving.append(shard)
            if self._thread.ident is None:
                self._thread.start()
        self.wake()

    def wake(self) -> None:
        """Make the loop look at its shards now (a stop was asked, a shard arrived)."""
        self._woken.set()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._wait.interrupt(self._thread)

    def close(self) -> None:
        """Let the thread end once no shard is left, and wait for it."""
        with self._lock:
            self._closing = True
        self.wake()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def pump(self, waiting: ShardStep) -> None:
        """Step the other shards once (on the loop's thread, from inside ``waiting``'s step):
        a move's incoming half waits for its outgoing half, which another shard of this loop
        reads. Shards already waiting further up the stack are left alone."""
        self._pumping.add(waiting)
        try:
            stepped = False
            for shard in list(self._shards):
                if shard in self._pumping or shard.stopping:
                    continue
                self._step(shard)
                stepped = True
            if not stepped:
                time.sleep(_PUMP_PAUSE)
        finally:
            self._pumping.discard(waiting)

    # --- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        shards = self._shards
        while True:
            self._woken.clear()
            with self._lock:
                shards.update((shard, 0.0) for shard in self._arriving)
                self._arriving.clear()
                if self._closing and not shards:
                    break
            try:
                now = time.monotonic()
                for shard in list(shards):
                    if shard.stopping:
                        self._finish(shard)
                    elif shards[shard] <= now:
                        self._step(shard)
                self._idle()
            except Exception:  # a bug; the loop must go on, or every stop would wait forever
                log.exception("the reading loop failed; it goes on")
                self._woken.wait(1.0)
        self._wait.close()

    def _step(self, shard: ShardStep) -> None:
        try:
            delay = shard.step()
        except Exception:  # a step handles its own failures; this is a bug, never silent
            log.exception("%s: a step failed unexpectedly", shard.name)
            delay = 1.0
        self._shards[shard] = time.monotonic() + delay

    def _finish(self, shard: ShardStep) -> None:
        del self._shards[shard]
        shard.finish()

    def _idle(self) -> None:
        """Wait until a shard's step is due: its time came, its stream has entries, or a wake."""
        shards = self._shards
        if not shards:
            if not self._closing:
                self._woken.wait(self._block_ms / 1000)
            return
        now = time.monotonic()
        due = min(shards.values()) - now
        if due <= 0 or any(shard.stopping for shard in shards):
            return
        positions: dict[str, str] = {}
        by_stream: dict[str, ShardStep] = {}
        for shard in shards:
            after = shard.wake_after
            if after is not None:
                positions[shard.stream] = after
                by_stream[shard.stream] = shard
        block_ms = max(1, min(self._block_ms, int(due * 1000)))
        try:
            woken = self._wait.wait_any(positions, block_ms)
        except redis.RedisError as err:
            # The steps' own reads meet the failure too and back off; just do not spin here.
            log.debug("the reading loop's wait failed: %r", err)
            self._woken.wait(min(due, 0.1))
            return
        if woken and self._linger:
            self._woken.wait(self._linger)  # a stop or a new shard still ends it at once
        now = time.monotonic()
        for stream in woken:
            shards[by_stream[stream]] = now
