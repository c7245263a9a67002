"""One shard of a *replicated* resource, read whole by every member of the group.

A controller often needs a small lookup set beside what it owns -- the Namespaces, the Nodes, a
ConfigMap of settings -- whole, on every processor, whatever shards that processor owns. Such a
resource is *replicated* (``--replicate``, or ``replicate=True`` in a controller's
declarations): every member reads every one of its shards, so no member owns them, and there
is no lease, no consumer group and nothing to acknowledge. The reader of one shard:

1. takes the shard's snapshot and stream position in one ``MULTI`` (``HGETALL objects`` and
   ``XINFO STREAM``: the reflector writes both in one script, so the snapshot is the state
   after that position, as in a takeover), loads it into the shard's store and delivers it as
   an initial list (``on_add(obj, True)``), then a barrier: the shard is synced when every
   handler has it;
2. reads the stream after that position with ``XREAD BLOCK`` and applies each entry with
   ``process_deltas``, exactly as an owner's worker does (the group's view included);
3. notices, after every read that returned entries, when retention trimmed entries it had not
   read yet (the count of entries Redis removed exceeds the count it had read or covered by
   its snapshot): it takes a fresh snapshot and delivers the difference --
   ``on_delete`` for what vanished, ``on_add`` for what is new, ``on_update`` for what
   changed -- so a reader that fell far behind converges like a relisting informer instead of
   missing deletions.

An entry that cannot be decoded is logged, counted (``replica_bad_entries_total``) and skipped:
there is no dead-letter stream for a reader that owns nothing. Moves between shards of the
resource go through the resource's :class:`~processor_svc.move_gate.MoveGate`, as with owned
shards: every shard is read here, so both halves always are.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Final, Protocol

import redis

from common.backoff import Backoff
from common.handlers import process_deltas
from common.object_keys import Obj
from common.redis_layout import ShardKeys
from common.redis_layout.snapshot import read_snapshot, stream_info
from common.redis_replies import as_text
from common.store import IndexFuncError
from common.wire import (
    DEFAULT_MAX_BYTES,
    FIELD,
    WireDecodeError,
    decode_envelope,
)
from processor_svc.ack_tracker import AckToken
from processor_svc.blocking_read import BlockingRead
from processor_svc.dispatch import (
    AddNotification,
    DeleteNotification,
    Notification,
    NotificationCollector,
    UpdateNotification,
)
from processor_svc.metrics import ProcessorMetrics, ShardMetrics
from processor_svc.move_gate import MoveGate
from processor_svc.shard_store import ShardStore
from processor_svc.takeover import InitialListSink
from processor_svc.view import GroupView, Routed

__all__ = ["ReplicaReader", "ReplicaStore"]

log = logging.getLogger(__name__)

_CHUNK: Final = 64


class ReplicaStore(ShardStore, Protocol):
    """What a replica reader writes: a shard store that can also list its keys (a fresh
    snapshot after a trimmed gap is compared with what the store holds)."""

    def list_keys(self) -> list[str]: ...


class ReplicaReader:
    """Reads shard ``keys.shard`` of a replicated resource into ``store`` (module docstring),
    in a thread of its own (``replica[<resource>:<shard>]``).

    ``client`` must not decode responses. ``sink`` gets the notifications (the resource's
    handler dispatcher); ``view`` selects and projects as for owned shards. :meth:`start`,
    :meth:`stop` (interrupts the blocking read, lets running handler calls be, joins).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: ShardKeys,
        *,
        store: ReplicaStore,
        sink: InitialListSink,
        metrics: ProcessorMetrics,
        count: int = 500,
        block_ms: int = 5000,
        max_entry_bytes: int = DEFAULT_MAX_BYTES,
        view: GroupView | None = None,
        moves: MoveGate | None = None,
    ) -> None:
        self._client, self._keys = client, keys
        self.shard, self.resource = keys.shard, keys.resource
        self._store, self._sink = store, sink
        self._count, self._block_ms, self._max_bytes = count, block_ms, max_entry_bytes
        self._view = None if view is None or view.is_identity else view
        self._moves = moves
        self._m = ShardMetrics(metrics, keys.resource, keys.shard)
        self._bad_entries = metrics.replica_bad_entries.labels(
            keys.resource, metrics.group, str(keys.shard)
        )
        self._metrics = metrics
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._collector = NotificationCollector(sink, self._stop)
        self._thread = threading.Thread(
            target=self._run, name=f"replica[{keys.resource}:{keys.shard}]", daemon=False
        )
        self._blocking = BlockingRead(client, keys.stream, block_ms=block_ms, stop=self._stop)
        self.error: BaseException | None = None
        # Reader-thread state: where it stands, and how many entries of the stream's history
        # it has accounted for (read, or covered by its snapshot), to tell a trimmed gap.
        self._last_id: str | None = None  # None: a snapshot is due
        self._accounted = 0

    @property
    def has_synced(self) -> bool:
        """The first snapshot reached every handler."""
        return self._synced.is_set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop reading (interrupting a blocked read) and wait for the thread to end."""
        self._stop.set()
        if self._thread.ident is None:
            return
        self._blocking.interrupt(self._thread)
        self._thread.join()

    # --- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff()
        try:
            while not self._stop.is_set():
                try:
                    if self._last_id is None:
                        self._snapshot()
                    else:
                        self._step()
                except redis.RedisError as err:
                    self.error = err
                    self._m.redis_errors.inc()
                    log.warning("%s: Redis call failed, retrying: %r", self._thread.name, err)
                    self._stop.wait(backoff.next_delay())
                except Exception as err:  # a bug: take a fresh snapshot rather than stop
                    self.error = err
                    log.exception("%s: unexpected failure; reading the shard again", self.name)
                    self._last_id = None
                    self._stop.wait(backoff.next_delay())
                else:
                    if self.error is not None:
                        self.error = None
                        backoff.reset()
        finally:
            if self._moves is not None:
                self._moves.stopped(self.shard)
            self._blocking.close()
            self._metrics.forget_shard(self.resource, self.shard)

    @property
    def name(self) -> str:
        return self._thread.name

    def _snapshot(self) -> None:
        """Step 1 (and step 3's fresh snapshot): load the shard, deliver it or its changes."""
        if self._moves is not None:
            self._moves.reading(self.shard)
        snapshot = read_snapshot(self._client, self._keys)
        objects, info = snapshot.objects, snapshot.stream
        last_id = as_text(info["last-generated-id"])
        first = self._last_id is None and not self._synced.is_set()
        fresh: dict[str, Obj] = {}
        for field, value in objects.items():
            key = field.decode(errors="replace")
            try:
                envelope = decode_envelope(value, self._max_bytes)
            except WireDecodeError as err:
                self._bad(f"objects:{key}", str(err))
                continue
            obj = envelope.obj
            if obj is None or (self._view is not None and not self._view.selects(obj)):
                continue
            fresh[key] = obj if self._view is None else self._view.project(obj)
        notifications = self._load(fresh, first)
        log.info(
            "%s: %s at %s: %d objects, %d changes delivered",
            self.name,
            "read" if first else "read again after a trimmed gap",
            last_id,
            len(fresh),
            len(notifications),
        )
        for start in range(0, len(notifications), _CHUNK):
            if not self._sink.deliver_all(notifications[start : start + _CHUNK], cancel=self._stop):
                return
        if first:
            barrier = AckToken(f"replica@{last_id}", on_done=self._on_synced)
            if not self._sink.barrier(barrier, cancel=self._stop):
                return
            barrier.release()
        self._m.store_size.set(len(self._store))
        self._last_id = last_id
        self._accounted = int(info.get("entries-added") or 0)
        if self._moves is not None:
            self._moves.advance(self.shard, last_id)

    def _load(self, fresh: Mapping[str, Obj], first: bool) -> list[tuple[Notification, None]]:
        """Make the store hold ``fresh``; the notifications that tell the handlers so."""
        store = self._store
        changes: list[tuple[Notification, None]] = []
        if first:
            store.replace((), "")
            for key, obj in fresh.items():
                try:
                    store.update(obj, key)
                except IndexFuncError as err:
                    self._bad(f"objects:{key}", f"snapshot: {err}")
                    continue
                changes.append((AddNotification(obj, True), None))
            return changes
        for key in [key for key in store.list_keys() if key not in fresh]:
            gone = store.get_by_key(key)
            if gone is not None:
                store.discard(gone, key)
                changes.append((DeleteNotification(gone), None))
        for key, obj in fresh.items():
            old = store.get_by_key(key)
            if old is not None and _version(old) == _version(obj):
                continue
            try:
                store.update(obj, key)
            except IndexFuncError as err:
                self._bad(f"objects:{key}", f"snapshot: {err}")
                continue
            changes.append(
                (AddNotification(obj, False) if old is None else UpdateNotification(old, obj), None)
            )
        return changes

    def _on_synced(self, _token: AckToken) -> None:
        self._synced.set()
        self._m.synced.set(1)
        log.info("%s: initial list delivered to every handler (synced)", self.name)

    def _step(self) -> None:
        """Step 2: read and apply what follows, unless step 3 finds entries were lost."""
        last_id = self._last_id
        assert last_id is not None
        entries = self._blocking.read(last_id, self._count, self._block_ms)
        if self._stop.is_set() or not entries:
            return  # nothing new: nothing after our position can have been trimmed either
        if self._trimmed_past_us():
            return
        self._apply(entries)

    def _apply(self, entries: list[Any]) -> None:
        collector, moves = self._collector, self._moves
        collector.pending.clear()
        passed: str | None = None
        applied = 0
        for raw_id, fields in entries:
            entry_id = as_text(raw_id)
            self._accounted += 1
            routed = self._route(entry_id, fields)
            if routed is not None and routed.delta is not None:
                move = routed.move
                if move is not None and move.from_shard is not None and moves is not None:
                    if not self._hand_over(passed):
                        return
                    if not moves.wait_applied(move.from_shard, move.from_id, self._stop):
                        return
                try:
                    process_deltas(collector, self._store, (routed.delta,), False, routed.key)
                    applied += 1
                except Exception as err:
                    self._bad(entry_id, f"apply: {type(err).__name__}: {err}")
            passed = entry_id
            self._last_id = entry_id
        if self._hand_over(passed):
            self._m.store_size.set(len(self._store))

    def _hand_over(self, passed: str | None) -> bool:
        if not self._collector.flush():
            return False
        if self._moves is not None and passed is not None:
            self._moves.advance(self.shard, passed)
        return True

    def _route(self, entry_id: str, fields: Any) -> Routed | None:
        data = fields.get(FIELD) if isinstance(fields, dict) and len(fields) == 1 else None
        if not isinstance(data, bytes):
            self._bad(entry_id, "stream entry must have exactly one field 'd' with a payload")
            return None
        try:
            if self._view is not None:
                return self._view.route(data, self._store, self._max_bytes)
            envelope = decode_envelope(data, self._max_bytes)
        except WireDecodeError as err:
            self._bad(entry_id, str(err))
            return None
        delta = envelope.to_delta()
        return Routed(delta, envelope.key, envelope.type, envelope.observed_at, True, envelope.move)

    def _trimmed_past_us(self) -> bool:
        """After a read: whether retention (which trims the oldest entries) has removed more
        entries than this reader had accounted for before it, so that some right after its
        position may be gone unread; then a fresh snapshot is due (``True``). A trim that
        raced past the entries just read also counts: it costs one needless snapshot, a
        missed deletion would cost a stale cache. One ``XINFO STREAM`` per read that returned
        entries (a replicated resource is a small, slow one)."""
        try:
            info = _stream_info(self._client.xinfo_stream(self._keys.stream))
        except redis.ResponseError as err:
            info = _stream_info(err)
        added, length = info.get("entries-added"), info.get("length")
        if not isinstance(added, int) or not isinstance(length, int):
            return False
        removed = added - length
        if removed <= self._accounted:
            return False
        self._m.takeover_gaps.inc()
        log.warning(
            "%s: retention trimmed up to %d entries this reader had not read; reading the "
            "shard again",
            self.name,
            removed - self._accounted,
        )
        self._last_id = None
        return True

    def _bad(self, where: str, reason: str) -> None:
        self._bad_entries.inc()
        log.warning("%s: skipping %s: %s", self.name, where, reason)


def _version(obj: Obj) -> object:
    metadata = obj.get("metadata")
    return metadata.get("resourceVersion") if isinstance(metadata, dict) else None


def _stream_info(reply: Any) -> dict[str, Any]:
    """``XINFO STREAM``'s reply as the snapshot reads it (:func:`stream_info`)."""
    return stream_info(reply)
