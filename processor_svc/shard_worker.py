"""One owned shard: take it over, then apply its stream to the shard's store and handlers.

``docs/architecture.md`` ("Processing") is the specification; this module implements the
delivery guarantee for a single shard (:class:`ShardWorker`), stepped by the process's one
reading loop (:mod:`processor_svc.reading_loop`, which also waits for new entries of every
shard at once). Per-object order is the stream's order because one loop applies a shard and one
owner holds it. Its parts live beside it: the takeover (:mod:`processor_svc.takeover`, the first
step, and again after an unexpected failure), the fenced read/acknowledge protocol and dead
letters (:mod:`processor_svc.fenced_stream`).

**Consumption**: entries after ``L`` (where the takeover left the group) are applied one at a
time with ``process_deltas`` into the store, their notifications carry an
:class:`~processor_svc.ack_tracker.AckToken` and are handed to the handlers once per read batch.
The completed prefix (entries every handler returned for) is acknowledged by the next fenced
read script, which runs ``XACK`` before ``XREADGROUP``: one round trip per batch instead of two.
A batch with dead letters goes through the acknowledging script, which also parks them.

**Fencing**: a refused script ends the worker without acknowledging more, and its
notifications still queued for the handlers are skipped (the next owner may be calling
handlers for the shard already).

**Errors**: a failed Redis call is logged and counted, the worker backs off
(:class:`common.backoff.Backoff`) and retries. After a failed ``XREADGROUP`` whose outcome is
unknown the next read replays this consumer's pending entries after the last one seen, so nothing
that was moved into the pending list is skipped. An unexpected exception is logged and leads to
a fresh takeover (at-least-once, like a restarted informer). A worker never ends silently:
:attr:`ShardWorker.error` holds the last failure and :attr:`ShardWorker.alive` tells whether it
still runs.

**What the worker needs** is declared beside it (:class:`HandlerSink`, ``ShardStore``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import redis
from redis.exceptions import ResponseError

from common.backoff import Backoff
from common.deltas import Delta, DeltaType
from common.redis_layout import GroupShardKeys
from common.replica_wait import NO_WAIT, ReplicaWait
from common.runtime import release_free_heap
from common.wire import DEFAULT_MAX_BYTES, WireDecodeError
from processor_svc.ack_tracker import AckToken, AckTracker
from processor_svc.dispatch import DispatcherClosedError, NotificationCollector
from processor_svc.fenced_stream import (
    DeadLetter,
    FencedStream,
    OwnershipLostError,
    as_mapping,
    as_text,
    payload_of,
    raw_of,
)
from processor_svc.metrics import ProcessorMetrics, ShardMetrics
from processor_svc.move_gate import MoveGate
from processor_svc.reading_loop import ReadingLoop
from processor_svc.shard_cursor import ShardCursor
from processor_svc.shard_store import ShardStore, indexed_from_headers, keeps_envelopes
from processor_svc.stream_entry import apply_entry, route_entry
from processor_svc.takeover import Commit, InitialListSink, Takeover
from processor_svc.view import GroupView, Routed

__all__ = ["HandlerSink", "ShardWorker"]

log = logging.getLogger(__name__)

_LAG_REFRESH: Final = 1.0  # seconds between XINFO GROUPS calls for the lag gauge
_ACK_POLL: Final = 0.1  # seconds idle at most while handlers still hold entries
_BARRIER_POLL: Final = 0.01  # seconds between looks at a takeover's barrier


class HandlerSink(InitialListSink, Protocol):
    """Where a shard worker sends its notifications: every handler, behind bounded buffers.

    Besides the initial list's calls: :meth:`wait_quiet` waits (at most ``timeout`` seconds)
    until no handler runs a notification delivered with ``cancel``; :meth:`wake` makes a
    delivery blocked on a full buffer re-check its cancel event now.
    """

    def wait_quiet(self, cancel: threading.Event, timeout: float) -> bool: ...

    def wake(self) -> None: ...


@runtime_checkable
class KeyedSink(Protocol):
    """Optional: a sink that says whether its handlers need only keys (``key_events``)."""

    @property
    def keys_suffice(self) -> bool: ...


class ShardWorker:
    """Takes over one owned shard and applies its stream, one step at a time on a reading loop.

    ``client`` must not decode responses (envelopes are bytes). ``epoch`` is the fencing token
    of our shard lease (``member_id`` is its holder). ``count`` entries are read per batch;
    ``block_ms`` (>= 1) bounds one idle wait, and so how long :meth:`stop` can take when the
    interrupt of that wait fails. :meth:`start` hands the worker to ``loop`` (the process's
    :class:`~processor_svc.reading_loop.ReadingLoop`; without one the worker gets a loop of its
    own, named ``shard-worker[<resource>:<shard>]``); :meth:`stop` ends it gracefully,
    :meth:`lost` without acknowledging anything more. ``backoff`` paces retries after Redis
    errors (client-go's shape by default). ``view`` is the group's selection and projection
    (:mod:`processor_svc.view`), applied to every entry and to the takeover's snapshot before
    the store. ``replica_wait``: acknowledgements count only once that many replicas have them
    (:class:`~processor_svc.fenced_stream.FencedStream`); a shortfall is retried like any Redis
    error (they are idempotent).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: GroupShardKeys,
        *,
        shard: int,
        epoch: int,
        member_id: str,
        store: ShardStore,
        dispatcher: HandlerSink,
        metrics: ProcessorMetrics,
        resource: str,
        count: int = 500,
        block_ms: int = 1000,
        max_entry_bytes: int = DEFAULT_MAX_BYTES,
        backoff: Backoff | None = None,
        view: GroupView | None = None,
        moves: MoveGate | None = None,
        replica_wait: ReplicaWait = NO_WAIT,
        loop: ReadingLoop | None = None,
    ) -> None:
        if keys.shard != shard:
            raise ValueError(f"keys are for shard {keys.shard}, not {shard}")
        if type(count) is not int or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        if type(block_ms) is not int or block_ms < 1:
            raise ValueError(
                f"block_ms must be an integer >= 1 (0 blocks forever), got {block_ms!r}"
            )
        if client.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("the Redis client must not decode responses: envelopes are bytes")
        self.shard, self.resource, self.epoch, self.member_id = shard, resource, epoch, member_id
        self._store, self._dispatcher = store, dispatcher
        # A compact store that reads envelopes keeps each entry as it came: no encode, no copy.
        self._keeps_envelopes = keeps_envelopes(store)
        self._count, self._block_ms, self._max_bytes = count, block_ms, max_entry_bytes
        # A view that keeps everything as it is costs nothing: the worker skips it.
        self._view = None if view is None or view.is_identity else view
        # Handlers that need only keys, no view: entries may be applied from their headers
        # (processor_svc.key_events), as long as the store's indexes allow (checked per batch).
        self._keys_suffice = (
            self._view is None and isinstance(dispatcher, KeyedSink) and dispatcher.keys_suffice
        )
        self._keyed = False
        self._moves = moves
        self._backoff = backoff if backoff is not None else Backoff()

        self._metrics = metrics
        self._m = ShardMetrics(metrics, resource, shard)
        self._stream = FencedStream(
            client,
            keys,
            member_id=member_id,
            epoch=epoch,
            dead_letters=self._m.dead_letters,
            replica_wait=replica_wait,
        )
        self._stop = threading.Event()
        self._grace = 0.0
        self._synced = threading.Event()
        self._error: BaseException | None = None
        self._name = f"shard-worker[{resource}:{shard}]"
        self._stream_key = keys.stream
        self._own_loop = loop is None
        self._loop = (
            loop if loop is not None else ReadingLoop(client, block_ms=block_ms, name=self._name)
        )
        self._started = False
        self._done = threading.Event()
        self._abandoned = False  # ended without acknowledging (fenced off, dispatcher gone)
        self.wake_after: str | None = None  # after an idle step: the last entry ID read
        self._forwarder = NotificationCollector(dispatcher, self._stop)
        self._takeovers = Takeover(
            self._stream,
            max_entry_bytes=max_entry_bytes,
            metrics=self._m,
            name=self.name,
            view=self._view,
            moves=moves,
            pump=_pump_for(self),
        )

        # Loop-thread state.
        self._tracker: AckTracker | None = None  # None: a takeover is due
        self._commit: Commit | None = None
        self._cursor = ShardCursor(self._stream, count=count)
        self._next_lag_refresh = 0.0

    # --- public API ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``shard-worker[<resource>:<shard>]``, in every log line of the worker."""
        return self._name

    @property
    def stream(self) -> str:
        return self._stream_key

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def alive(self) -> bool:
        """The worker runs (started and not finished)."""
        return self._started and not self._done.is_set()

    @property
    def error(self) -> BaseException | None:
        """The last failure, ``None`` once a later attempt succeeded (or if none happened)."""
        return self._error

    @property
    def ownership_lost(self) -> bool:
        """A fenced script found the lease held by someone else; the worker stopped."""
        return isinstance(self._error, OwnershipLostError)

    @property
    def has_synced(self) -> bool:
        """The initial list of this shard reached every handler (reference 5.2)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until :attr:`has_synced` (``True``), or ``timeout`` passes (``False``)."""
        return self._synced.wait(timeout)

    def start(self) -> None:
        """Hand the worker to its loop (takeover, then consumption)."""
        self._started = True
        self._loop.add(self)

    def stop(self, grace: float = 5.0) -> None:
        """Stop reading, give running calls up to ``grace`` seconds, acknowledge what completed
        (fenced) and leave the loop; returns once done (the caller then releases the lease)."""
        self._grace = max(0.0, grace)
        self._shutdown()

    def begin_stop(self, grace: float = 5.0) -> None:
        """Start a :meth:`stop` without waiting for it: no handler call of this shard starts
        from now on. For stopping several shards at once; :meth:`stop` then waits."""
        self._grace = max(0.0, grace)
        self._stop.set()
        self._dispatcher.wake()
        self._loop.wake()

    def lost(self) -> None:
        """Ownership is gone (someone else may own the shard now): stop at once, acknowledge
        nothing more, and end the thread; returns once it ended."""
        self._stream.stop_acknowledging()
        self._grace = 0.0
        self._shutdown()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the worker to end (it ends on its own after losing the lease)."""
        if self._started:
            self._done.wait(timeout)
            if self._own_loop and self._done.is_set():
                self._loop.close()

    def _shutdown(self) -> None:
        self._stop.set()
        self._dispatcher.wake()
        self._loop.wake()
        if not self._started or self._loop.thread is threading.current_thread():
            return
        self._done.wait()
        if self._own_loop:
            self._loop.close()

    # --- the loop's calls -----------------------------------------------------------------------

    def step(self) -> float:
        """One step on the reading loop: a takeover, a look at its barrier, or a read and its
        delivery. Returns the seconds until the next step is due; sets :attr:`wake_after`."""
        self.wake_after = None
        try:
            commit = self._commit
            if commit is not None:
                if not commit.barrier.done:
                    return _BARRIER_POLL
                self._commit_takeover(commit)
                release_free_heap()  # the snapshot reply's buffers, freed between the entries
                delay = 0.0
            elif self._tracker is None:
                self._takeover()
                delay = 0.0
            else:
                delay = self._step()
        except OwnershipLostError as lost:
            self._on_lost(lost)
            return 0.0
        except DispatcherClosedError as err:
            self._error = err
            self._abandoned = True
            self._stop.set()
            log.error("shard %s: the dispatcher was stopped; the worker ends", self.name)
            return 0.0
        except redis.RedisError as err:
            self._failed(err, unexpected=False)
            return self._backoff.next_delay()
        except Exception as err:
            self._failed(err, unexpected=True)
            return self._backoff.next_delay()
        if self._error is not None:
            self._error = None
            self._backoff.reset()
        return delay

    def finish(self) -> None:
        """The loop's last call: :meth:`_finish` unless the worker was fenced off."""
        try:
            if not self._abandoned:
                self._finish()
        except BaseException as err:  # recorded, never silent
            self._error = err
            log.exception("shard worker %s crashed while stopping", self.name)
        finally:
            if self._moves is not None:
                self._moves.stopped(self.shard)
            self._metrics.forget_shard(self.resource, self.shard)
            self._done.set()

    def _failed(self, err: Exception, *, unexpected: bool) -> None:
        self._error = err
        if unexpected:
            log.exception("%s: unexpected failure; the shard will be taken over again", self.name)
            self._tracker = None
            self._commit = None
            return
        self._m.redis_errors.inc()
        log.warning("%s: Redis call failed, retrying: %r", self.name, err)
        if isinstance(err, ResponseError) and "NOGROUP" in str(err):
            self._tracker = None  # the stream or group vanished: start over
            self._commit = None

    def _on_lost(self, lost: OwnershipLostError) -> None:
        # The stop event first: it is what makes the handler threads skip this worker's queued
        # notifications. The next owner may be calling handlers for the shard already, and the
        # ownership thread (which would set it through stop()) may be busy for a while yet.
        self._stop.set()
        self._abandoned = True
        self._dispatcher.wake()
        self._stream.stop_acknowledging()
        self._error = lost
        self._m.ownership_lost.inc()
        log.warning("%s: ownership lost, stopping without acknowledging more: %s", self.name, lost)

    def _finish(self) -> None:
        """After a stop: wait for the handler calls already running, then ack what completed.

        Notifications of this shard that no handler has started are skipped once the stop
        event is set (see ``HandlerDispatcher.wait_quiet``): their entries stay unacknowledged
        and the next owner re-delivers the shard through its takeover. Draining a backlog here
        instead would keep the ownership thread from renewing the other shards' leases, and
        the old owner's handlers would still run while the next owner's start.
        """
        if not self._dispatcher.wait_quiet(self._stop, self._grace):
            log.warning(
                "%s: a handler call outlived the %.1f s grace period", self.name, self._grace
            )
        if not self._stream.acknowledging:
            return
        try:
            commit = self._commit
            if commit is not None:
                if commit.barrier.done:
                    self._commit_takeover(commit)
                return
            tracker = self._tracker
            if tracker is None:
                return
            self._flush_acks(tracker)
            if tracker.outstanding:
                log.info(
                    "%s: %d entries not handled before the stop stay unacknowledged "
                    "(the next owner delivers them)",
                    self.name,
                    tracker.outstanding,
                )
        except OwnershipLostError as lost:
            self._on_lost(lost)
        except redis.RedisError as err:
            self._error = err
            log.warning(
                "%s: final acknowledgement failed (the next owner replays): %r", self.name, err
            )

    # --- takeover --------------------------------------------------------------------------------

    def _takeover(self) -> None:
        self._m.takeovers.inc()
        self._tracker = None
        self._commit = None
        self._cursor.reset()
        # The loop's next steps look at the barrier and commit once every handler passed it;
        # a stop meanwhile leaves that to _finish (within the grace period).
        self._commit = self._takeovers.deliver(
            self._store, self._dispatcher, self._stop, self._on_synced
        )

    def _on_synced(self, _token: AckToken) -> None:
        if not self._synced.is_set():
            log.info("%s: initial list delivered to every handler (synced)", self.name)
        self._synced.set()
        self._m.synced.set(1)

    def _commit_takeover(self, commit: Commit) -> None:
        """Fenced: the held set forgets the keys whose deletions the takeover told, then park
        the takeover's dead letters, move the group to ``L`` and ack up to it."""
        self._stream.change_held(commit.held)
        entries_read = "" if commit.entries_read is None else str(commit.entries_read)
        self._stream.acknowledge(commit.dead, [], setid=commit.last_id, entries_read=entries_read)
        self._commit = None
        self._tracker = AckTracker()
        self._cursor.start_at(commit.last_id)

    # --- consumption -----------------------------------------------------------------------------

    def _step(self) -> float:
        tracker = self._tracker
        assert tracker is not None
        cursor = self._cursor
        entries = cursor.read(tracker.completed_prefix())
        if entries:
            self._apply(tracker, entries)
            self._m.store_size.set(len(self._store))
            self._refresh_lag()
            if len(entries) >= self._count:
                return 0.0
        elif cursor.replay:
            cursor.replay = False  # our pending list is caught up: back to new entries
            return 0.0
        else:
            # Caught up: nothing undelivered, so the lag is what is still in flight. Known
            # here without asking Redis, which an idle shard would otherwise do every second.
            self._m.lag_seconds.set(0)
            self._m.lag_entries.set(tracker.outstanding + len(cursor.unsent))
        # Idle until the stream has entries after ours (a short while when handlers still hold
        # entries, so their acknowledgements go out promptly).
        self.wake_after = cursor.last_id
        return _ACK_POLL if tracker.outstanding else self._block_ms / 1000

    def _apply(self, tracker: AckTracker, entries: Sequence[Any]) -> None:
        """Apply a batch in stream order; returns early when stopping."""
        applied: collections.Counter[DeltaType] = collections.Counter()
        observed_at: list[float] = []
        try:
            self._apply_entries(tracker, entries, applied, observed_at)
        finally:
            for delta_type, number in applied.items():
                self._m.applied[delta_type].inc(number)
            if observed_at:
                self._m.lag_seconds.set(max(0.0, time.time() - observed_at[-1]))

    def _apply_entries(
        self,
        tracker: AckTracker,
        entries: Sequence[Any],
        applied: collections.Counter[DeltaType],
        observed_at: list[float],
    ) -> None:
        forwarder, stop = self._forwarder, self._stop
        forwarder.pending.clear()  # left over only by a batch that failed half-way
        self._keyed = self._keys_suffice and indexed_from_headers(self._store)
        # Each entry's own hold is released once its notifications are queued (after the
        # batch): a token must not complete before every handler holds it.
        queued: list[AckToken] = []
        skipped = 0
        passed: str | None = None  # the last entry before the current one
        for raw_id, fields in entries:
            if stop.is_set():
                return  # stopping: nothing of this batch is delivered, its entries stay pending
            entry_id = as_text(raw_id)
            self._cursor.last_id = entry_id
            routing = self._route(entry_id, fields, tracker)
            if routing is None:
                passed = entry_id
                continue  # parked
            routed, packed = routing
            if routed.delta is None:  # outside the view: acknowledged with the others
                tracker.register(entry_id).release()
                skipped += 1
                passed = entry_id
                continue
            move = routed.move
            if move is not None and move.from_shard is not None and self._moves is not None:
                # The incoming half of a move: the outgoing half first, if it is ours too.
                if not self._hand_over(queued, passed):
                    return
                queued = []
                pump = _pump_for(self)
                if not self._moves.wait_applied(move.from_shard, move.from_id, stop, pump):
                    return
            token = tracker.register(entry_id)
            forwarder.token = token
            queued.append(token)
            if self._applied(entry_id, fields, routed.delta, routed.key, packed):
                applied[routed.type] += 1
                observed_at.append(routed.observed_at)
            passed = entry_id
        if skipped:
            self._m.skipped.inc(skipped)
        if not self._hand_over(queued, passed):
            return  # stopping: the tokens never complete, the entries stay pending

    def _hand_over(self, queued: list[AckToken], passed: str | None) -> bool:
        """Hand what was applied so far to the handlers, release the entries' own holds, and
        advance this shard's move position to ``passed``; ``False`` when the shard stopped
        while waiting for room (the tokens then never complete)."""
        if not self._forwarder.flush():
            return False
        for token in queued:
            token.release()
        if self._moves is not None and passed is not None:
            self._moves.advance(self.shard, passed)
        return True

    def _route(
        self, entry_id: str, fields: Any, tracker: AckTracker
    ) -> tuple[Routed, bytes | None] | None:
        """What the entry means for this group, and the bytes a store that keeps entries
        keeps of it; ``None`` for a poison entry (parked). Without a view the entry is decoded
        whole, as it is always kept."""
        try:
            routed, data = route_entry(
                fields, self._view, self._store, self._max_bytes, self._keyed
            )
        except WireDecodeError as err:
            self._park(tracker, entry_id, str(err), raw_of(as_mapping(fields)))
            return None
        return routed, data if self._keeps_envelopes and routed.packed_as_is else None

    def _applied(
        self, entry_id: str, fields: Any, delta: Delta, key: str, packed: bytes | None
    ) -> bool:
        """Apply one entry's delta to the store and collect its notifications; ``False`` when
        the store refused it (an index function failed): the entry is parked instead."""
        try:
            apply_entry(
                entry_id, delta, key, packed, store=self._store, collector=self._forwarder,
                held=self._cursor.held, view=self._view, keyed=self._keyed,
            )  # fmt: skip
        except Exception as err:
            reason = f"apply: {type(err).__name__}: {err}"
            log.warning(
                "%s: entry %s cannot be applied, parking it: %s", self.name, entry_id, reason
            )
            self._cursor.park(entry_id, DeadLetter.of(entry_id, reason, payload_of(fields)))
            return False
        return True

    def _park(self, tracker: AckTracker, entry_id: str, reason: str, raw: Any) -> None:
        """Dead-letter an entry: it is parked and acknowledged in order, with the others."""
        log.warning("%s: entry %s is poison, parking it: %s", self.name, entry_id, reason)
        self._cursor.park(entry_id, DeadLetter.of(entry_id, reason, raw))
        tracker.register(entry_id).release()

    def _flush_acks(self, tracker: AckTracker) -> None:
        self._cursor.flush(tracker.completed_prefix())

    def _refresh_lag(self) -> None:
        now = time.monotonic()
        if now < self._next_lag_refresh:
            return
        self._next_lag_refresh = now + _LAG_REFRESH
        lag = self._stream.lag()
        if lag is not None:
            self._m.lag_entries.set(lag)


def _pump_for(worker: ShardWorker) -> Callable[[], None]:
    """What a move's wait calls to step the loop's other shards, holding ``worker`` weakly: the
    takeover keeps it, and a cycle would keep a stopped worker's store until a full collection."""
    ref = weakref.ref(worker)

    def pump() -> None:
        current = ref()
        if current is not None:
            current._loop.pump(current)

    return pump
