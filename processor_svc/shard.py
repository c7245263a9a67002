"""One owned shard: take it over, then apply its stream to the shard's store and handlers.

``docs/architecture.md`` ("Processing") is the specification; this module implements the
takeover algorithm and the delivery guarantee for a single shard, in one thread per shard
(:class:`ShardWorker`). Per-object order is the stream's order because one thread applies a
shard and one owner holds it.

**Takeover** (the first thing the thread does, and again after an unexpected failure):

1. ``XGROUP CREATE <stream> processors 0 MKSTREAM`` (``BUSYGROUP`` means it exists).
2. One ``MULTI``: the shard lease (the takeover is fenced too: a worker whose lease moved on
   delivers no initial list), ``HGETALL objects``, ``XINFO STREAM`` (its ``last-generated-id``
   is ``L``, ``0-0`` for an empty stream; ``entries-added`` keeps the group's lag computable),
   ``XINFO GROUPS`` and the ``XPENDING`` summary. The reflector writes ``objects`` and the
   stream in one script, so the snapshot is exactly the state after ``L``.
   ``last-generated-id`` rather than the last entry's ID: it is the same unless the newest
   entry was deleted, and then it is the right one.
3. Decode every snapshot envelope (a corrupt one is dead-lettered and skipped) and
   ``store.replace`` them.
4. Read the unacknowledged entries up to ``L`` (the pending ones, then those after the group's
   last-delivered ID) and collect, per key absent from the snapshot, its last deletion there.
5. Deliver ``on_delete`` for those (a tombstone as ``DeletedFinalStateUnknown``), then
   ``on_add(obj, True)`` for every snapshot object, then a barrier: ``has_synced`` becomes true
   when every handler has processed the initial list (reference 5.2).
6. Once the barrier completed, one fenced script parks the dead letters, moves the group to
   ``L`` (``XGROUP SETID ... ENTRIESREAD``) and acknowledges every pending entry up to ``L``.
   Waiting for the handlers first is what keeps "never acknowledged before every handler
   returned": a crash before this point leaves the range unacknowledged for the next owner.

**Consumption**: entries after ``L`` are applied one at a time with ``process_deltas`` into the
store, their notifications carry an :class:`~processor_svc.ack_tracker.AckToken` and are handed to
the dispatcher once per read batch. The completed prefix (entries every handler returned
for) is acknowledged by the next fenced read script, which runs ``XACK`` before
``XREADGROUP``: one round trip per batch instead of two. A batch with dead letters goes
through the acknowledging script, which also parks them.

**Fencing**: every command that changes the consumer group -- reads included, since
``XREADGROUP`` moves the group's last-delivered ID -- runs in a Lua script that first checks that
the shard lease (``keys.lease``, written by :class:`common.lease.RedisLease`) still names this
member and epoch. So a stale owner (paused past its lease) can neither acknowledge nor pull
entries out from under the new owner. The blocking wait for new entries is therefore a plain
``XREAD BLOCK`` (it changes nothing) on a dedicated connection whose ``socket_timeout`` is well
above the block time (redis-py's default 5 s would otherwise turn every long BLOCK into a
timeout and retries); the entries themselves are then taken with a fenced, non-blocking
``XREADGROUP`` inside the script. A refused script ends the worker without acknowledging more,
and its notifications still queued for the handlers are skipped (the next owner may be calling
handlers for the shard already).

**Poison entries** (undecodable, schema-invalid, no payload because trimmed, or refused by the
store's index functions) are written to the dead-letter stream (``reason``, ``id``, ``payload``
when there was one) by the same fenced script that acknowledges them, in stream order: an entry
is parked if and only if it is acknowledged.

**Errors**: a failed Redis call is logged and counted, the worker backs off
(:class:`common.backoff.Backoff`) and retries. After a failed ``XREADGROUP`` whose outcome is
unknown the next read replays this consumer's pending entries after the last one seen, so nothing
that was moved into the pending list is skipped. An unexpected exception is logged and leads to
a fresh takeover (at-least-once, like a restarted informer). The thread never dies silently:
:attr:`ShardWorker.error` holds the last failure and :attr:`ShardWorker.alive` tells whether it
still runs.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry

from common.backoff import Backoff
from common.deltas import DeltaType
from common.handlers import process_deltas
from common.keys import DeletedFinalStateUnknown, Obj
from common.redis_config import node_client
from common.redis_layout import ShardKeys
from common.runtime import release_free_heap
from common.store import Indexer, IndexFuncError
from common.wire import (
    DEFAULT_MAX_BYTES,
    ENVELOPE_CODEC,
    FIELD,
    DeltaEnvelope,
    WireDecodeError,
    decode_envelope,
    envelope_from_fields,
)
from processor_svc.ack_tracker import AckToken, AckTracker
from processor_svc.dispatch import (
    AddNotification,
    DeleteNotification,
    DispatcherClosedError,
    HandlerDispatcher,
    Notification,
    UpdateNotification,
)
from processor_svc.metrics import ProcessorMetrics

__all__ = [
    "CONSUMER",
    "DEAD_LETTER_MAXLEN",
    "GROUP",
    "ShardWorker",
]

log = logging.getLogger(__name__)

GROUP: Final = "processors"
"""The one consumer group every processor reads shard streams through."""
CONSUMER: Final = "owner"
"""The consumer name of whoever owns a shard: a new owner inherits the pending entries."""
DEAD_LETTER_MAXLEN: Final = 10_000
"""Dead-letter streams are capped (approximately): poison must not grow Redis without bound."""

_RANGE_CHUNK: Final = 1000
_INITIAL_LIST_CHUNK: Final = 64
"""Initial-list notifications handed to the dispatcher at once during a takeover."""
_LAG_REFRESH: Final = 1.0  # seconds between XINFO GROUPS calls for the lag gauge
_ACK_POLL_MS: Final = 100  # block at most this long while handlers still hold entries
_BLOCK_TIMEOUT_MARGIN: Final = 10.0  # blocking socket timeout = block time + this

# The lease check every fenced script starts with. KEYS[1] lease, ARGV[1] holder, ARGV[2] epoch.
_CHECK_LEASE: Final = """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'epoch')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then
  return {0, lease[1] or '', lease[2] or ''}
end
"""

_READ_LUA: Final = (
    "#!lua\n"
    + _CHECK_LEASE
    + """
-- KEYS: 1 lease, 2 stream. ARGV: 1 holder, 2 epoch, 3 group, 4 consumer, 5 count,
-- 6 '>' for new entries, or an ID to replay this consumer's pending entries after it;
-- then IDs to acknowledge first (the previous batches', carried here to save a round trip).
-- Returns {0, holder, epoch} when the lease is not ours, else {1, entries}.
local i = 7
while i <= #ARGV do
  local last = math.min(i + 999, #ARGV)
  redis.call('XACK', KEYS[2], ARGV[3], unpack(ARGV, i, last))
  i = last + 1
end
local r = redis.call('XREADGROUP', 'GROUP', ARGV[3], ARGV[4], 'COUNT', ARGV[5],
                     'STREAMS', KEYS[2], ARGV[6])
if not r then return {1, {}} end
return {1, r[1][2]}
"""
)

_ACK_LUA: Final = (
    "#!lua\n"
    + _CHECK_LEASE
    + """
-- KEYS: 1 lease, 2 stream, 3 dead letters. ARGV: 1 holder, 2 epoch, 3 group, 4 dead-letter
-- maxlen, 5 setid ('' for none), 6 entries-read for setid ('' if unknown), 7 number of dead
-- letters, then per dead letter: n, then n field/value pairs; then the IDs to acknowledge.
-- With a setid, also acknowledges every pending entry up to it. Returns {1, acknowledged}.
local stream, group = KEYS[2], ARGV[3]
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  local n = tonumber(ARGV[i])
  local args = {'XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*'}
  for j = i + 1, i + 2 * n do args[#args + 1] = ARGV[j] end
  redis.call(unpack(args))
  i = i + 1 + 2 * n
end
local acked = 0
if ARGV[5] ~= '' then
  if ARGV[6] ~= '' then
    redis.call('XGROUP', 'SETID', stream, group, ARGV[5], 'ENTRIESREAD', ARGV[6])
  else
    redis.call('XGROUP', 'SETID', stream, group, ARGV[5])
  end
  while true do
    local pending = redis.call('XPENDING', stream, group, '-', ARGV[5], 1000)
    if #pending == 0 then break end
    local ids = {}
    for _, p in ipairs(pending) do ids[#ids + 1] = p[1] end
    acked = acked + redis.call('XACK', stream, group, unpack(ids))
  end
end
while i <= #ARGV do
  local last = math.min(i + 999, #ARGV)
  acked = acked + redis.call('XACK', stream, group, unpack(ARGV, i, last))
  i = last + 1
end
return {1, acked}
"""
)


class _OwnershipLostError(Exception):
    """A fenced script found the lease held by someone else (or another epoch)."""

    def __init__(self, holder: str, epoch: str) -> None:
        super().__init__(f"the shard lease is held by {holder or 'nobody'!r} (epoch {epoch!r})")


@dataclass(frozen=True, slots=True)
class _DeadLetter:
    """One entry to park: the dead-letter stream's field/value pairs."""

    fields: tuple[tuple[str, bytes | str], ...]

    @classmethod
    def of(cls, source_id: str, reason: str, raw: Any) -> _DeadLetter:
        pairs: list[tuple[str, bytes | str]] = [("reason", reason[:2000]), ("id", source_id)]
        if isinstance(raw, bytes):
            pairs.append(("payload", raw))
        elif isinstance(raw, Mapping):
            # Not our one-field layout: keep what was there, field by field.
            for name, value in raw.items():
                if isinstance(name, bytes | str) and isinstance(value, bytes | str):
                    text = name.decode(errors="replace") if isinstance(name, bytes) else name
                    pairs.append((f"field:{text}", value))
        return cls(tuple(pairs))


@dataclass(slots=True)
class _Commit:
    """A takeover delivered to the handlers but not yet committed to the group."""

    last_id: str
    entries_read: int | None
    dead: list[_DeadLetter]
    barrier: AckToken


class _ShardMetrics:
    """The label children of one shard, bound once (``labels()`` costs a dict lookup and a
    lock per call; the hot path increments these directly)."""

    def __init__(self, metrics: ProcessorMetrics, resource: str, shard: int) -> None:
        labels = (resource, str(shard))
        self.applied = {
            delta_type: metrics.deltas_applied.labels(*labels, delta_type.value)
            for delta_type in DeltaType
        }
        self.lag_entries = metrics.lag_entries.labels(*labels)
        self.lag_seconds = metrics.lag_seconds.labels(*labels)
        self.store_size = metrics.store_size.labels(*labels)
        self.synced = metrics.synced.labels(*labels)
        self.dead_letters = metrics.dead_letters.labels(*labels)
        self.takeovers = metrics.takeovers.labels(*labels)
        self.takeover_gaps = metrics.takeover_gaps.labels(*labels)
        self.redis_errors = metrics.redis_errors.labels(*labels)
        self.ownership_lost = metrics.ownership_lost.labels(*labels)


@dataclass(frozen=True, slots=True)
class _ShardView:
    """What a takeover reads in one ``MULTI``: the snapshot and where the group stands."""

    objects: Mapping[bytes, bytes]
    last_id: str
    """``L``: the stream's last generated ID; the snapshot is the state after it."""
    entries_added: int | None
    delivered: str
    """The group's last-delivered ID."""
    entries_read: int | None
    """The group's count of entries up to ``delivered`` (``None`` when Redis lost track).
    Can be stale after Redis reloads its AOF: before 7.4 (redis/redis#12898) ``XREADGROUP``
    is written there as ``XCLAIM ... LASTID``, which moves ``delivered`` but keeps the count
    the last ``XGROUP SETID ... ENTRIESREAD`` set (our takeover's commit)."""
    pending: int
    length: int
    first_id: str | None
    """The first entry still in the stream (``None`` when it is empty)."""
    max_deleted: str
    """The highest ID ``XDEL`` removed (``"0-0"``: none, or Redis does not say)."""


class _Forwarder:
    """The ``process_deltas`` handler: collects each callback as a notification carrying the
    current entry's token; :meth:`flush` hands a whole read batch to the dispatcher at once."""

    __slots__ = ("_cancel", "_dispatcher", "pending", "token")

    def __init__(self, dispatcher: HandlerDispatcher, cancel: threading.Event) -> None:
        self._dispatcher = dispatcher
        self._cancel = cancel
        self.token: AckToken | None = None
        self.pending: list[tuple[Notification, AckToken | None]] = []

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self.pending.append((AddNotification(obj, is_in_initial_list), self.token))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.pending.append((UpdateNotification(old, new), self.token))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self.pending.append((DeleteNotification(obj), self.token))

    def flush(self) -> bool:
        """Deliver what was collected; ``False`` when the shard stopped while waiting for room
        (the collected entries' tokens then never complete)."""
        pending, self.pending = self.pending, []
        return self._dispatcher.deliver_all(pending, cancel=self._cancel)


class ShardWorker:
    """Takes over one owned shard and applies its stream, in a thread of its own.

    ``client`` must not decode responses (envelopes are bytes). ``epoch`` is the fencing token
    of our shard lease (``member_id`` is its holder). ``count`` entries are read per batch;
    ``block_ms`` (>= 1) bounds one idle wait, and so how long :meth:`stop` can take when the
    interrupt of that wait fails. :meth:`start` runs the thread
    ``shard-worker[<resource>:<shard>]``; :meth:`stop` ends it gracefully, :meth:`lost` without
    acknowledging anything more. ``backoff`` paces retries after Redis errors (client-go's
    shape by default).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: ShardKeys,
        *,
        shard: int,
        epoch: int,
        member_id: str,
        store: Indexer,
        dispatcher: HandlerDispatcher,
        metrics: ProcessorMetrics,
        resource: str,
        count: int = 500,
        block_ms: int = 1000,
        max_entry_bytes: int = DEFAULT_MAX_BYTES,
        backoff: Backoff | None = None,
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
        self._client = client
        self._keys = keys
        self.shard = shard
        self.epoch = epoch
        self.member_id = member_id
        self.resource = resource
        self._store = store
        # A compact store that reads envelopes keeps each entry as it came: no encode, no copy.
        self._keeps_envelopes = getattr(store, "codec", None) is ENVELOPE_CODEC
        self._dispatcher = dispatcher
        self._count = count
        self._block_ms = block_ms
        self._max_bytes = max_entry_bytes
        self._backoff = backoff if backoff is not None else Backoff()
        self._read_script = client.register_script(_READ_LUA)
        self._ack_script = client.register_script(_ACK_LUA)
        self._lease_args = (member_id, str(epoch))

        self._metrics = metrics
        self._m = _ShardMetrics(metrics, resource, shard)
        self._stop = threading.Event()
        self._grace = 0.0
        self._no_more_acks = False
        self._synced = threading.Event()
        self._error: BaseException | None = None
        self._ownership_lost = False
        self._thread = threading.Thread(
            target=self._run, name=f"shard-worker[{resource}:{shard}]", daemon=False
        )
        self._forwarder = _Forwarder(dispatcher, self._stop)

        # Worker-thread state.
        self._tracker: AckTracker | None = None  # None: a takeover is due
        self._commit: _Commit | None = None
        self._last_id = "0-0"  # the last entry ID this consumer received
        self._replay = False  # re-read our pending entries after _last_id before '>'
        self._dead: dict[str, _DeadLetter] = {}
        self._unsent_acks: list[str] = []
        self._next_lag_refresh = 0.0

        # The blocking connection, and what stop() needs to interrupt its wait.
        self._block_lock = threading.Lock()
        self._blocking = False
        self._blocking_id: int | None = None
        self._blocking_client: redis.Redis | None = None

    # --- public API ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The thread's name, ``shard-worker[<resource>:<shard>]``."""
        return self._thread.name

    @property
    def alive(self) -> bool:
        """The thread runs (started and not finished)."""
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """The last failure, ``None`` once a later attempt succeeded (or if none happened)."""
        return self._error

    @property
    def ownership_lost(self) -> bool:
        """A fenced script found the lease held by someone else; the worker stopped."""
        return self._ownership_lost

    @property
    def has_synced(self) -> bool:
        """The initial list of this shard reached every handler (reference 5.2)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until :attr:`has_synced` (``True``), or ``timeout`` passes (``False``)."""
        return self._synced.wait(timeout)

    def start(self) -> None:
        """Start the thread (takeover, then consumption)."""
        self._thread.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop reading, give in-flight notifications up to ``grace`` seconds, acknowledge what
        completed (fenced) and end the thread; returns once it ended. The caller releases the
        lease afterwards, so the next owner starts at once."""
        self._grace = max(0.0, grace)
        self._shutdown()

    def begin_stop(self, grace: float = 5.0) -> None:
        """Start a :meth:`stop` without waiting for it: no handler call of this shard starts
        from now on. For stopping several shards at once; :meth:`stop` then waits."""
        self._grace = max(0.0, grace)
        self._stop.set()
        self._dispatcher.wake()

    def lost(self) -> None:
        """Ownership is gone (someone else may own the shard now): stop at once, acknowledge
        nothing more, and end the thread; returns once it ended."""
        self._no_more_acks = True
        self._grace = 0.0
        self._shutdown()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (it ends on its own after losing the lease)."""
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _shutdown(self) -> None:
        self._stop.set()
        self._dispatcher.wake()
        if self._thread.ident is None or self._thread is threading.current_thread():
            return
        self._interrupt_wait()
        self._thread.join()

    def _interrupt_wait(self) -> None:
        """End a blocking ``XREAD`` now with ``CLIENT UNBLOCK`` instead of waiting ``block_ms``.

        The worker may be between deciding to block and Redis registering the command, when
        there is nothing to unblock yet; so retry until it unblocked or the wait is over.
        """
        deadline = time.monotonic() + self._block_ms / 1000 + 1.0
        while self._thread.is_alive() and time.monotonic() < deadline:
            with self._block_lock:
                if not self._blocking:
                    return
                client_id = self._blocking_id
            if client_id is not None:
                try:
                    # The blocked connection sits on the node serving the stream (Cluster).
                    node = node_client(self._client, self._keys.stream)
                    if node.client_unblock(client_id):
                        return
                except redis.RedisError:
                    return  # the read ends by its own timeout
            time.sleep(0.005)

    # --- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._backoff
        try:
            while not self._stop.is_set():
                try:
                    commit = self._commit
                    if commit is not None and commit.barrier.done:
                        self._commit_takeover(commit)  # a retry: the handlers are done already
                    elif self._tracker is None:
                        self._takeover()
                    else:
                        self._step()
                except _OwnershipLostError as lost:
                    self._on_lost(lost)
                    return
                except DispatcherClosedError as err:
                    self._error = err
                    log.error("shard %s: the dispatcher was stopped; the worker ends", self.name)
                    return
                except redis.RedisError as err:
                    self._failed(err, unexpected=False)
                    self._stop.wait(backoff.next_delay())
                except Exception as err:
                    self._failed(err, unexpected=True)
                    self._stop.wait(backoff.next_delay())
                else:
                    if self._error is not None:
                        self._error = None
                        backoff.reset()
            self._finish()
        except BaseException as err:  # recorded, never silent
            self._error = err
            log.exception("shard worker %s crashed", self.name)
            raise
        finally:
            self._close_blocking_client()
            self._metrics.forget_shard(self.resource, self.shard)

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

    def _on_lost(self, lost: _OwnershipLostError) -> None:
        # The stop event first: it is what makes the handler threads skip this worker's queued
        # notifications. The next owner may be calling handlers for the shard already, and the
        # ownership thread (which would set it through stop()) may be busy for a while yet.
        self._stop.set()
        self._dispatcher.wake()
        self._ownership_lost = True
        self._no_more_acks = True
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
        if self._no_more_acks:
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
        except _OwnershipLostError as lost:
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
        self._dead = {}
        self._unsent_acks = []
        self._replay = False
        view = self._read_shard()
        dead: list[_DeadLetter] = []
        loaded = self._load_snapshot(view.objects, dead)
        deletions = self._unacked_deletions(view, set(loaded), dead)
        view = dataclasses.replace(view, objects={})  # the raw snapshot is in the store now
        log.info(
            "%s: taking over at %s: %d objects, %d deletions from unacknowledged entries",
            self.name,
            view.last_id,
            len(loaded),
            len(deletions),
        )
        self._m.store_size.set(len(self._store))
        cancel, dispatcher = self._stop, self._dispatcher
        initial: list[tuple[Notification, AckToken | None]] = [
            (DeleteNotification(envelope.to_delta().obj), None) for envelope in deletions
        ]
        if not dispatcher.deliver_all(initial, cancel=cancel):
            return
        del initial
        # The initial list is read back from the store a chunk at a time, so a compact store
        # never has every object decoded at once: the handler buffers bound what is.
        store = self._store
        for start in range(0, len(loaded), _INITIAL_LIST_CHUNK):
            chunk = [
                (AddNotification(obj, True), None)
                for key in loaded[start : start + _INITIAL_LIST_CHUNK]
                if (obj := store.get_by_key(key)) is not None
            ]
            if not dispatcher.deliver_all(chunk, cancel=cancel):
                return
        barrier = AckToken(f"takeover@{view.last_id}", on_done=self._on_synced)
        if not dispatcher.barrier(barrier, cancel=cancel):
            return
        barrier.release()
        commit = _Commit(view.last_id, view.entries_added, dead, barrier)
        self._commit = commit
        while not barrier.wait(0.1):
            if self._stop.is_set():
                return  # _finish commits if the barrier completes within the grace period
        self._commit_takeover(commit)
        release_free_heap()  # the snapshot reply's buffers, freed between the cached entries

    def _read_shard(self) -> _ShardView:
        """Create the group if needed, then read the snapshot and the group's state at once."""
        keys, client = self._keys, self._client
        try:
            client.xgroup_create(keys.stream, GROUP, id="0", mkstream=True)
        except ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise
        pipe = client.pipeline(transaction=True)
        pipe.hmget(keys.lease, "holder", "epoch")
        pipe.hgetall(keys.objects)
        pipe.xinfo_stream(keys.stream)
        pipe.xinfo_groups(keys.stream)
        pipe.xpending(keys.stream, GROUP)
        (holder, epoch), objects, info, groups, pending = pipe.execute()
        # Fenced like the scripts: a worker whose lease is gone delivers no initial list.
        if (holder, epoch) != tuple(value.encode() for value in self._lease_args):
            raise _OwnershipLostError(_text(holder or b""), _text(epoch or b""))
        # redis-py's Cluster transactions parse less (bytes keys, XPENDING's summary as a
        # list): normalised so that both kinds of client read alike.
        info = {_text(name): value for name, value in info.items()}
        groups = [{_text(name): value for name, value in g.items()} for g in groups]
        pending_count = pending[0] if isinstance(pending, list) else pending["pending"]
        group = next(g for g in groups if _text(g["name"]) == GROUP)
        delivered = _text(group["last-delivered-id"])
        entries_read = group.get("entries-read")
        if delivered == "0-0":
            entries_read = 0  # nothing delivered yet, whatever Redis reports
        first = info.get("first-entry")  # (ID, fields); [ID, fields] from a Cluster transaction
        return _ShardView(
            objects=objects,
            last_id=_text(info["last-generated-id"]),
            entries_added=_int_or_none(info.get("entries-added")),
            delivered=delivered,
            entries_read=_int_or_none(entries_read),
            pending=int(pending_count),
            length=int(info["length"]),
            first_id=None if first is None else _text(first[0]),
            max_deleted=_text(info.get("max-deleted-entry-id") or b"0-0"),
        )

    def _load_snapshot(self, objects: Mapping[bytes, bytes], dead: list[_DeadLetter]) -> list[str]:
        """Load the ``objects`` hash into the emptied store, one object at a time, each with the
        envelope it came in (a compact store keeps that, nothing else); corrupt envelopes and
        objects the store refuses become dead letters. Returns the keys loaded, in order."""
        store = self._store
        store.replace((), "")
        loaded: list[str] = []
        for field, value in objects.items():
            key = field.decode(errors="replace")
            try:
                envelope = decode_envelope(value, self._max_bytes)
                if envelope.key != key:
                    raise WireDecodeError(f"envelope is for key {envelope.key!r}")
                if envelope.type is DeltaType.DELETED or envelope.obj is None:
                    raise WireDecodeError("the known state of a key cannot be a deletion")
                store.update(envelope.obj, key, value if self._keeps_envelopes else None)
            except WireDecodeError as err:
                dead.append(_DeadLetter.of(f"objects:{key}", f"snapshot: {err}", value))
                continue
            except IndexFuncError as err:
                dead.append(_DeadLetter.of(f"objects:{key}", f"snapshot: {err}", None))
                continue
            loaded.append(key)
        return loaded

    def _pending_ids(self, view: _ShardView) -> set[str]:
        """The IDs in the group's pending list up to ``L`` (previous owners' in-flight)."""
        ids: set[str] = set()
        cursor = "-"
        while view.pending:
            rows: list[dict[str, Any]] = self._client.xpending_range(
                self._keys.stream, GROUP, min=cursor, max=view.last_id, count=_RANGE_CHUNK
            )
            ids.update(_text(row["message_id"]) for row in rows)
            if len(rows) < _RANGE_CHUNK:
                break
            cursor = "(" + _text(rows[-1]["message_id"])
        return ids

    def _unacked_deletions(
        self, view: _ShardView, snapshot_keys: set[str], dead: list[_DeadLetter]
    ) -> list[DeltaEnvelope]:
        """The last deletion of every key absent from the snapshot among the entries the group
        has not acknowledged up to ``L``; undecodable ones there become dead letters."""
        pending_ids = self._pending_ids(view)
        delivered = _id_tuple(view.delivered)
        deletions: dict[str, DeltaEnvelope] = {}
        found_pending = found_undelivered = 0
        if pending_ids:
            cursor = min(pending_ids, key=_id_tuple)
        else:
            cursor = "-" if view.delivered == "0-0" else "(" + view.delivered
        while view.last_id != "0-0":
            rows: Any = self._client.xrange(
                self._keys.stream, min=cursor, max=view.last_id, count=_RANGE_CHUNK
            )
            for raw_id, fields in rows:
                entry_id = _text(raw_id)
                if _id_tuple(entry_id) <= delivered:
                    if entry_id not in pending_ids:
                        continue  # acknowledged already, by an earlier owner
                    found_pending += 1
                else:
                    found_undelivered += 1
                try:
                    envelope = envelope_from_fields(fields, self._max_bytes)
                except WireDecodeError as err:
                    dead.append(_DeadLetter.of(entry_id, str(err), _raw(fields)))
                    continue
                if envelope.type is DeltaType.DELETED and envelope.key not in snapshot_keys:
                    deletions.pop(envelope.key, None)  # re-inserted: ordered by last deletion
                    deletions[envelope.key] = envelope
            if len(rows) < _RANGE_CHUNK:
                break
            cursor = "(" + _text(rows[-1][0])
        self._report_gap(view, len(pending_ids) - found_pending, found_undelivered)
        return list(deletions.values())

    def _report_gap(self, view: _ShardView, trimmed_pending: int, undelivered: int) -> None:
        """Log and count unacknowledged entries that retention removed before we could read
        them: pending IDs without an entry, and undelivered ones (:func:`_trimmed_undelivered`)."""
        trimmed_undelivered = _trimmed_undelivered(view, undelivered)
        if not (trimmed_pending or trimmed_undelivered):
            return
        self._m.takeover_gaps.inc()
        log.warning(
            "%s: retention trimmed %d pending and %d undelivered entries before this takeover; "
            "deletions among them cannot be delivered",
            self.name,
            trimmed_pending,
            trimmed_undelivered,
        )

    def _on_synced(self, _token: AckToken) -> None:
        if not self._synced.is_set():
            log.info("%s: initial list delivered to every handler (synced)", self.name)
        self._synced.set()
        self._m.synced.set(1)

    def _commit_takeover(self, commit: _Commit) -> None:
        """Fenced: park the takeover's dead letters, move the group to ``L``, ack up to it."""
        entries_read = "" if commit.entries_read is None else str(commit.entries_read)
        self._call_ack_script(commit.dead, [], setid=commit.last_id, entries_read=entries_read)
        self._commit = None
        self._tracker = AckTracker()
        self._last_id = commit.last_id
        self._replay = False

    # --- consumption -----------------------------------------------------------------------------

    def _step(self) -> None:
        tracker = self._tracker
        assert tracker is not None
        acks = self._unsent_acks + tracker.completed_prefix()
        if self._dead and any(entry_id in self._dead for entry_id in acks):
            self._unsent_acks = acks  # dead letters are parked by the acknowledging script
            self._flush_acks(tracker)
            acks = []
        entries = self._read(acks)  # the read acknowledges ``acks`` first
        if entries:
            self._apply(tracker, entries)
            self._m.store_size.set(len(self._store))
            self._refresh_lag()
            if len(entries) >= self._count:
                return
        elif self._replay:
            self._replay = False  # our pending list is caught up: back to new entries
            return
        else:
            self._m.lag_seconds.set(0)
            self._refresh_lag()
        self._wait_for_entries(tracker)

    def _read(self, acks: list[str]) -> list[Any]:
        """The next entries, after acknowledging ``acks`` in the same fenced script (kept in
        ``_unsent_acks`` until Redis confirmed: XACK is idempotent, a retry resends them)."""
        start = self._last_id if self._replay else ">"
        self._unsent_acks = acks
        try:
            reply = self._read_script(
                keys=[self._keys.lease, self._keys.stream],
                args=[*self._lease_args, GROUP, CONSUMER, self._count, start, *acks],
                client=self._client,
            )
        except redis.RedisError:
            self._replay = True  # the read may have happened: replay our pending entries
            raise
        if reply[0] == 0:
            raise _OwnershipLostError(_text(reply[1]), _text(reply[2]))
        self._unsent_acks = []
        entries: list[Any] = reply[1]
        return entries

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
        store, forwarder, max_bytes, stop, keeps_envelopes = (
            self._store,
            self._forwarder,
            self._max_bytes,
            self._stop,
            self._keeps_envelopes,
        )
        forwarder.pending.clear()  # left over only by a batch that failed half-way
        # Each entry's own hold is released once its notifications are queued (after the
        # batch): a token must not complete before every handler holds it.
        queued: list[AckToken] = []
        for raw_id, fields in entries:
            if stop.is_set():
                return  # stopping: nothing of this batch is delivered, its entries stay pending
            entry_id = _text(raw_id)
            self._last_id = entry_id
            try:
                if type(fields) is list and len(fields) == 2 and fields[0] == FIELD:
                    packed = fields[1]  # the usual layout
                    envelope = decode_envelope(packed, max_bytes)
                else:
                    envelope = envelope_from_fields(_as_mapping(fields), max_bytes)
                    packed = _payload(fields)
            except WireDecodeError as err:
                self._park(tracker, entry_id, str(err), _raw(_as_mapping(fields)))
                continue
            token = tracker.register(entry_id)
            forwarder.token = token
            queued.append(token)
            try:
                process_deltas(
                    forwarder,
                    store,
                    (envelope.to_delta(),),
                    False,
                    envelope.key,
                    packed=packed if keeps_envelopes else None,
                )
            except Exception as err:  # the store refused it (an index function failed)
                reason = f"apply: {type(err).__name__}: {err}"
                log.warning(
                    "%s: entry %s cannot be applied, parking it: %s", self.name, entry_id, reason
                )
                self._dead[entry_id] = _DeadLetter.of(entry_id, reason, _payload(fields))
                continue
            applied[envelope.type] += 1
            observed_at.append(envelope.observed_at)
        if not forwarder.flush():
            return  # stopping: the tokens never complete, the entries stay pending
        for token in queued:
            token.release()

    def _park(self, tracker: AckTracker, entry_id: str, reason: str, raw: Any) -> None:
        """Dead-letter an entry: it is parked and acknowledged in order, with the others."""
        log.warning("%s: entry %s is poison, parking it: %s", self.name, entry_id, reason)
        self._dead[entry_id] = _DeadLetter.of(entry_id, reason, raw)
        tracker.register(entry_id).release()

    def _flush_acks(self, tracker: AckTracker) -> None:
        ids = self._unsent_acks + tracker.completed_prefix()
        if not ids:
            return
        dead = [self._dead[i] for i in ids if i in self._dead] if self._dead else []
        self._unsent_acks = ids
        self._call_ack_script(dead, ids)
        self._unsent_acks = []
        for entry_id in ids:
            self._dead.pop(entry_id, None)

    def _call_ack_script(
        self,
        dead: Sequence[_DeadLetter],
        ids: Sequence[str],
        *,
        setid: str = "",
        entries_read: str = "",
    ) -> None:
        if self._no_more_acks:
            return
        args: list[Any] = [
            *self._lease_args,
            GROUP,
            DEAD_LETTER_MAXLEN,
            setid,
            entries_read,
            len(dead),
        ]
        for letter in dead:
            args.append(len(letter.fields))
            for name, value in letter.fields:
                args += (name, value)
        args += ids
        reply = self._ack_script(
            keys=[self._keys.lease, self._keys.stream, self._keys.dead_letters],
            args=args,
            client=self._client,
        )
        if reply[0] == 0:
            raise _OwnershipLostError(_text(reply[1]), _text(reply[2]))
        if dead:
            self._m.dead_letters.inc(len(dead))

    def _refresh_lag(self) -> None:
        now = time.monotonic()
        if now < self._next_lag_refresh:
            return
        self._next_lag_refresh = now + _LAG_REFRESH
        for group in self._client.xinfo_groups(self._keys.stream):
            if _text(group["name"]) == GROUP:
                lag = group.get("lag")
                if lag is not None:
                    self._m.lag_entries.set(int(lag) + int(group["pending"]))
                return

    def _wait_for_entries(self, tracker: AckTracker) -> None:
        """Block until the stream has entries after ours (or a short while when handlers
        still hold entries, so their acknowledgements go out promptly)."""
        block_ms = self._block_ms
        if tracker.outstanding:
            block_ms = min(block_ms, _ACK_POLL_MS)
        with self._block_lock:
            if self._stop.is_set():
                return
            self._blocking = True
        try:
            client = self._blocking_connection()
            client.xread({self._keys.stream: self._last_id}, count=1, block=block_ms)
        except redis.RedisError:
            self._close_blocking_client()
            raise
        finally:
            with self._block_lock:
                self._blocking = False

    def _blocking_connection(self) -> redis.Redis:
        """A client on one dedicated connection whose socket timeout outlasts ``block_ms``.

        Built from the given client's connection settings (the pool's own bookkeeping left
        out). Its connect hook records the connection's ``CLIENT ID`` on every (re)connect, so
        :meth:`stop` can ``CLIENT UNBLOCK`` it. No retries: the blocked command is an ``XREAD``
        that changes nothing, and the worker's loop retries with backoff.
        """
        if self._blocking_client is not None:
            return self._blocking_client
        # On a Redis Cluster: the pool of the node serving the stream's slot now, looked up
        # again whenever a failed read (MOVED, a lost node) closed the previous connection.
        pool = node_client(self._client, self._keys.stream).connection_pool
        kwargs = {
            name: value
            for name, value in pool.connection_kwargs.items()
            if name not in _POOL_BOUND_KWARGS
        }

        # The hook lives as long as the pool, and redis-py's pools sit in reference cycles
        # that only a full collection frees: a strong reference here kept every stopped
        # worker, with its shard store, alive for minutes (found by the soak test).
        worker = weakref.ref(self)

        def on_connect(connection: Any) -> None:
            connection.on_connect()
            connection.send_command("CLIENT", "ID")
            client_id = int(connection.read_response())
            owner = worker()
            if owner is not None:
                with owner._block_lock:
                    owner._blocking_id = client_id

        kwargs.update(
            socket_timeout=self._block_ms / 1000 + _BLOCK_TIMEOUT_MARGIN,
            retry=Retry(NoBackoff(), 0),
            redis_connect_func=on_connect,
        )
        blocking_pool = redis.ConnectionPool(
            connection_class=pool.connection_class, max_connections=2, **kwargs
        )
        self._blocking_client = redis.Redis(
            connection_pool=blocking_pool, single_connection_client=True
        )
        return self._blocking_client

    def _close_blocking_client(self) -> None:
        client, self._blocking_client = self._blocking_client, None
        with self._block_lock:
            self._blocking_id = None
        if client is not None:
            try:
                client.close()
                client.connection_pool.disconnect()
            except Exception:  # closing is best effort
                log.debug("closing the blocking connection failed", exc_info=True)


_POOL_BOUND_KWARGS: Final = frozenset(
    {
        "retry",
        "redis_connect_func",
        "maint_notifications_pool_handler",
        "himport_registry",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
    }
)
"""Connection settings that belong to the original pool (or are replaced), not copied."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _trimmed_undelivered(view: _ShardView, undelivered: int) -> int:
    """How many entries after the group's position are gone, ``undelivered`` being those left.

    Redis's own evidence first, as it survives an AOF reload that leaves ``entries-read``
    stale: trimming only ever removes the oldest entries, so none after the position went when
    nothing ever went, when there is nothing after it, or when an entry at or before it is still
    there and ``XDEL`` removed none after it. Otherwise trimming reached the position, maybe
    past it, and only the counters can tell (``entries-added - entries-read``, when Redis knows
    both), at most as many as the stream ever lost: a stale ``entries-read`` then overstates
    the number, or reports entries up to the position as undelivered, but never hides a gap.
    """
    delivered = _id_tuple(view.delivered)
    if view.delivered == view.last_id or view.entries_added == view.length:
        return 0
    head_kept = view.first_id is not None and _id_tuple(view.first_id) <= delivered
    if head_kept and _id_tuple(view.max_deleted) <= delivered:
        return 0
    if view.entries_added is None or view.entries_read is None:
        return 0
    lost = view.entries_added - view.length
    return max(0, min(lost, view.entries_added - view.entries_read - undelivered))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _id_tuple(entry_id: str) -> tuple[int, int]:
    """A stream ID as a comparable pair (``"1-2"`` -> ``(1, 2)``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _as_mapping(fields: Any) -> Any:
    """A script reply's flat field list as a mapping (what ``envelope_from_fields`` takes);
    anything else (a trimmed entry's ``None``) is passed through for it to reject."""
    if type(fields) is list and len(fields) % 2 == 0:
        return dict(zip(fields[::2], fields[1::2], strict=True))
    return fields


def _raw(fields: Any) -> Any:
    """What to keep of an entry's fields in its dead letter: the envelope bytes if present."""
    if isinstance(fields, Mapping) and len(fields) == 1 and FIELD in fields:
        return fields[FIELD]
    return fields


def _payload(fields: Any) -> bytes | None:
    raw = _raw(_as_mapping(fields))
    return raw if isinstance(raw, bytes) else None
