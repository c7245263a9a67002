"""A new owner's takeover of a shard: the snapshot, the initial list, the commit.

``docs/architecture.md`` ("Processing") is the specification. The shard worker runs a takeover
first, and again after an unexpected failure:

1. ``XGROUP CREATE <stream> <group> $ MKSTREAM`` (``BUSYGROUP`` means it exists): a group
   that does not exist yet starts at the end, from the snapshot, never from history.
2. One ``MULTI``: the shard lease (the takeover is fenced too: a worker whose lease moved on
   delivers no initial list), ``HGETALL objects``, the group's held set (``HGETALL held``, the
   keys its handlers hold: :mod:`processor_svc.held_keys`), ``XINFO STREAM`` (its
   ``last-generated-id`` is ``L``, ``0-0`` for an empty stream; ``entries-added`` keeps the
   group's lag computable), ``XINFO GROUPS`` and the ``XPENDING`` summary. The reflector writes
   ``objects`` and the stream in one script, so the snapshot is exactly the state after ``L``.
   ``last-generated-id`` rather than the last entry's ID: it is the same unless the newest
   entry was deleted, and then it is the right one.
3. Decode every snapshot envelope (a corrupt one is dead-lettered and skipped), select and
   project it with the group's view, and ``store.replace`` them.
4. Read the unacknowledged entries up to ``L`` (the pending ones, then those after the
   group's last-delivered ID; none for a group created in step 1) for what the previous owner
   may have told the handlers and for each key's last state
   (:class:`~processor_svc.held_keys.TakeoverReckoning`).
5. Deliver ``on_delete`` for every key the handlers hold that the selected snapshot lacks (it
   was deleted, or left the view, while nobody owned the shard), then ``on_add(obj, True)``
   for every snapshot object, then a barrier: ``has_synced`` becomes true when every handler
   has processed the initial list (reference 5.2).
   Each run of the initial list is recorded in the held set before it is handed to the
   handlers (a key is held from the moment it is handed: no crash can leave one unrecorded).
6. Once the barrier completed, the held set forgets the keys whose deletions were told
   (fenced, in chunks: every chunk is true by then), then one fenced script parks the dead
   letters, moves the group to ``L`` (``XGROUP SETID ... ENTRIESREAD``) and acknowledges every
   pending entry up to ``L``. Waiting for the handlers first is what keeps "never acknowledged
   before every handler returned": a crash before this point leaves the range unacknowledged
   for the next owner.

:class:`Takeover` does steps 1 to 5 and hands back the :class:`Commit` of step 6, which the
worker runs (:meth:`~processor_svc.fenced_stream.FencedStream.acknowledge` with ``setid``)
once the barrier completed, and retries after a failed call.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from common.deltas import DeltaType
from common.object_keys import Obj
from common.redis_layout.snapshot import read_snapshot
from common.redis_replies import as_text
from common.store import IndexFuncError
from common.wire import (
    WireDecodeError,
    decode_envelope,
    decode_header,
    envelope_from_fields,
)
from processor_svc.ack_tracker import AckToken
from processor_svc.dispatch import AddNotification, DeleteNotification, Notification
from processor_svc.fenced_stream import DeadLetter, FencedStream, id_tuple, raw_of
from processor_svc.held_keys import HeldState, TakeoverReckoning
from processor_svc.metrics import ShardMetrics
from processor_svc.move_gate import MoveGate
from processor_svc.shard_store import ShardStore, keeps_envelopes
from processor_svc.view import GroupView

__all__ = ["Commit", "InitialListSink", "ShardView", "Takeover"]

log = logging.getLogger(__name__)

_RANGE_CHUNK: Final = 1000
_INITIAL_LIST_CHUNK: Final = 64
"""Initial-list notifications handed to the dispatcher at once during a takeover (each chunk
recorded in the held set first)."""


class InitialListSink(Protocol):
    """Where a takeover sends the initial list: the handlers, behind their buffers.

    Both calls block while a buffer is full and return ``False`` once ``cancel`` is set while
    waiting (the shard stopped: what was not queued never will be)."""

    def deliver_all(
        self,
        notifications: Sequence[tuple[Notification, AckToken | None]],
        *,
        cancel: threading.Event | None = None,
    ) -> bool: ...

    def barrier(self, ack: AckToken, *, cancel: threading.Event | None = None) -> bool: ...


@dataclass(slots=True)
class Commit:
    """A takeover delivered to the handlers but not yet committed to the group."""

    last_id: str
    entries_read: int | None
    dead: list[DeadLetter]
    barrier: AckToken
    held: dict[str, HeldState]
    """The owed deletions the handlers were told: the held set's changes, written (in
    chunks) before the group moves to ``last_id``."""


@dataclass(frozen=True, slots=True)
class ShardView:
    """What a takeover reads in one ``MULTI``: the snapshot and where the group stands."""

    objects: Mapping[bytes, bytes]
    held: Mapping[bytes, bytes]
    """The group's held set (:mod:`processor_svc.held_keys`)."""
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


class Takeover:
    """Steps 1 to 5 of taking a shard over (module docstring), for one worker.

    Reads through ``fence``'s client and keys, and fences the lease read with the snapshot like
    its scripts; ``name`` prefixes the log lines (the worker's thread name). With a ``view``
    (:mod:`processor_svc.view`) the snapshot is selected and projected like the stream; every
    key the group's handlers hold that the selected snapshot lacks gets a deletion.
    """

    def __init__(
        self,
        fence: FencedStream,
        *,
        max_entry_bytes: int,
        metrics: ShardMetrics,
        name: str,
        view: GroupView | None = None,
        moves: MoveGate | None = None,
        pump: Callable[[], None] | None = None,
    ) -> None:
        self._fence, self._client, self._keys = fence, fence.client, fence.keys
        self._pump = pump  # steps the reading loop's other shards while a move waits on them
        self._max_bytes = max_entry_bytes
        self._view = view
        self._moves = moves
        self._m = metrics
        self.name = name

    def deliver(
        self,
        store: ShardStore,
        sink: InitialListSink,
        cancel: threading.Event,
        on_synced: Callable[[AckToken], None],
    ) -> Commit | None:
        """Load the snapshot into ``store`` and deliver the initial list to ``sink``, then a
        barrier whose token calls ``on_synced`` once every handler processed it. Returns the
        commit to run after that, or ``None`` when ``cancel`` was set on the way."""
        moves, shard = self._moves, self._keys.shard
        if moves is not None:
            moves.reading(shard)
        view = self._read_shard()
        dead: list[DeadLetter] = []
        # A snapshot object another shard of this process still holds moved here and that
        # shard has not applied its outgoing half yet: it is loaded once that shard let go.
        contested: dict[bytes, bytes] = {}
        if moves is not None:
            objects = {}
            for field, value in view.objects.items():
                if moves.held_elsewhere(field.decode(errors="replace"), shard):
                    contested[field] = value
                else:
                    objects[field] = value
            view = dataclasses.replace(view, objects=objects)
        loaded = self._load_snapshot(store, view.objects, dead)
        in_snapshot = set(loaded).union(field.decode(errors="replace") for field in contested)
        reckoning = TakeoverReckoning(view.held, self._view)
        self._read_unacknowledged(view, reckoning, dead)
        owed = reckoning.owed(in_snapshot)
        view = dataclasses.replace(view, objects={}, held={})  # both are in use elsewhere now
        log.info(
            "%s: taking over at %s: %d objects, %d deletions of keys the handlers held",
            self.name,
            view.last_id,
            len(loaded) + len(contested),
            len(owed),
        )
        initial: list[tuple[Notification, AckToken | None]] = [
            (DeleteNotification(gone), None) for gone in owed.values()
        ]
        if not sink.deliver_all(initial, cancel=cancel):
            return None
        del initial
        if moves is not None:
            # Every outgoing half up to L is applied here now (or was before this takeover).
            moves.advance(shard, view.last_id)
            for field in contested:
                key = field.decode(errors="replace")
                if not moves.wait_released(key, shard, cancel, self._pump):
                    return None
            loaded += self._load_snapshot(store, contested, dead, replace=False)
        self._m.store_size.set(len(store))
        delivered = _deliver_initial_list(
            store, loaded, reckoning=reckoning, fence=self._fence, sink=sink, cancel=cancel
        )
        if not delivered:
            return None
        barrier = AckToken(f"takeover@{view.last_id}", on_done=on_synced)
        if not sink.barrier(barrier, cancel=cancel):
            return None
        barrier.release()
        return Commit(view.last_id, view.entries_added, dead, barrier, reckoning.told(owed))

    def _read_shard(self) -> ShardView:
        """Create the group if needed, then read the snapshot and the group's state at once."""
        keys, client = self._keys, self._client
        snapshot = read_snapshot(client, keys.shard_keys, owner=keys)
        # Fenced like the scripts: a worker whose lease is gone delivers no initial list.
        holder, epoch = snapshot.lease or (None, None)
        self._fence.check_lease(holder, epoch)
        info, group = snapshot.stream, snapshot.group or {}
        delivered = as_text(group["last-delivered-id"])
        entries_read = group.get("entries-read")
        if delivered == "0-0":
            entries_read = 0  # nothing delivered yet, whatever Redis reports
        first = info.get("first-entry")  # (ID, fields); [ID, fields] from a Cluster transaction
        return ShardView(
            objects=snapshot.objects,
            held=snapshot.held or {},
            last_id=as_text(info["last-generated-id"]),
            entries_added=_int_or_none(info.get("entries-added")),
            delivered=delivered,
            entries_read=_int_or_none(entries_read),
            pending=snapshot.pending or 0,
            length=int(info["length"]),
            first_id=None if first is None else as_text(first[0]),
            max_deleted=as_text(info.get("max-deleted-entry-id") or b"0-0"),
        )

    def _load_snapshot(
        self,
        store: ShardStore,
        objects: Mapping[bytes, bytes],
        dead: list[DeadLetter],
        *,
        replace: bool = True,
    ) -> list[str]:
        """Load the ``objects`` hash into the store (emptied first unless not ``replace``), one
        object at a time, each with the envelope it came in (a compact store keeps that,
        nothing else); corrupt envelopes and objects the store refuses become dead letters.
        Returns the keys loaded, in order."""
        keep_packed = keeps_envelopes(store)
        if replace:
            store.replace((), "")
        loaded: list[str] = []
        view = self._view
        for field, value in objects.items():
            key = field.decode(errors="replace")
            try:
                obj = self._snapshot_object(key, value)
                if obj is None:
                    continue  # outside the group's view
                kept = obj if view is None else view.project(obj)
                store.update(kept, key, value if keep_packed and kept is obj else None)
            except WireDecodeError as err:
                dead.append(DeadLetter.of(f"objects:{key}", f"snapshot: {err}", value))
                continue
            except IndexFuncError as err:
                dead.append(DeadLetter.of(f"objects:{key}", f"snapshot: {err}", None))
                continue
            loaded.append(key)
        return loaded

    def _snapshot_object(self, key: str, value: bytes) -> Obj | None:
        """The known state of ``key`` if the group's view selects it (``None`` if not); a view
        parses only the header of what it does not select."""
        view = self._view
        if view is None:
            envelope = decode_envelope(value, self._max_bytes)
            header_key, delta_type, obj = envelope.key, envelope.type, envelope.obj
        else:
            header = decode_header(value, self._max_bytes)
            header_key, delta_type = header.key, header.type
            obj = None if delta_type is DeltaType.DELETED else view.selected_object(header, value)
        if header_key != key:
            raise WireDecodeError(f"envelope is for key {header_key!r}")
        if delta_type is DeltaType.DELETED:
            raise WireDecodeError("the known state of a key cannot be a deletion")
        if view is None and obj is None:
            raise WireDecodeError("the known state of a key cannot be a deletion")
        return obj

    def _pending_ids(self, view: ShardView) -> set[str]:
        """The IDs in the group's pending list up to ``L`` (previous owners' in-flight)."""
        ids: set[str] = set()
        cursor = "-"
        while view.pending:
            rows: list[dict[str, Any]] = self._client.xpending_range(
                self._keys.stream,
                self._keys.group,
                min=cursor,
                max=view.last_id,
                count=_RANGE_CHUNK,
            )
            ids.update(as_text(row["message_id"]) for row in rows)
            if len(rows) < _RANGE_CHUNK:
                break
            cursor = "(" + as_text(rows[-1]["message_id"])
        return ids

    def _read_unacknowledged(
        self, view: ShardView, reckoning: TakeoverReckoning, dead: list[DeadLetter]
    ) -> None:
        """Hand ``reckoning`` the entries the group has not acknowledged up to ``L``, the
        pending ones marked; undecodable ones there become dead letters."""
        pending_ids = self._pending_ids(view)
        delivered = id_tuple(view.delivered)
        found_pending = found_undelivered = 0
        if pending_ids:
            cursor = min(pending_ids, key=id_tuple)
        else:
            cursor = "-" if view.delivered == "0-0" else "(" + view.delivered
        while view.last_id != "0-0":
            rows: Any = self._client.xrange(
                self._keys.stream, min=cursor, max=view.last_id, count=_RANGE_CHUNK
            )
            for raw_id, fields in rows:
                entry_id = as_text(raw_id)
                pending = id_tuple(entry_id) <= delivered
                if pending:
                    if entry_id not in pending_ids:
                        continue  # acknowledged already, by an earlier owner
                    found_pending += 1
                else:
                    found_undelivered += 1
                try:
                    envelope = envelope_from_fields(fields, self._max_bytes)
                except WireDecodeError as err:
                    dead.append(DeadLetter.of(entry_id, str(err), raw_of(fields)))
                    continue
                reckoning.saw(envelope, pending=pending)
            if len(rows) < _RANGE_CHUNK:
                break
            cursor = "(" + as_text(rows[-1][0])
        self._report_gap(view, len(pending_ids) - found_pending, found_undelivered)

    def _report_gap(self, view: ShardView, trimmed_pending: int, undelivered: int) -> None:
        """Log and count unacknowledged entries that retention removed before we could read
        them: pending IDs without an entry, and undelivered ones (:func:`_trimmed_undelivered`)."""
        trimmed_undelivered = _trimmed_undelivered(view, undelivered)
        if not (trimmed_pending or trimmed_undelivered):
            return
        self._m.takeover_gaps.inc()
        log.warning(
            "%s: retention trimmed %d pending and %d undelivered entries before this takeover; "
            "the deletions of held keys among them are delivered without their final state",
            self.name,
            trimmed_pending,
            trimmed_undelivered,
        )


def _deliver_initial_list(
    store: ShardStore,
    keys: Sequence[str],
    *,
    reckoning: TakeoverReckoning,
    fence: FencedStream,
    sink: InitialListSink,
    cancel: threading.Event,
) -> bool:
    """``on_add(obj, True)`` for the objects of ``keys``, each chunk of them recorded in the
    held set before it is handed to the handlers (:mod:`processor_svc.held_keys`); ``False``
    when ``cancel`` was set on the way.

    Read back from the store a chunk at a time, so a compact store never has every object
    decoded at once: the handler buffers bound what is (runs of 1,000 decoded at once left a
    metadata-projected compact cache's process 1.2 KB per pod bigger after its takeover:
    ``bench/group_views.py``)."""
    for start in range(0, len(keys), _INITIAL_LIST_CHUNK):
        listed = [
            (key, obj)
            for key in keys[start : start + _INITIAL_LIST_CHUNK]
            if (obj := store.get_by_key(key)) is not None
        ]
        fence.change_held(reckoning.handing(listed))
        chunk: list[tuple[Notification, AckToken | None]] = [
            (AddNotification(obj, True), None) for _, obj in listed
        ]
        if not sink.deliver_all(chunk, cancel=cancel):
            return False
    return True


def _trimmed_undelivered(view: ShardView, undelivered: int) -> int:
    """How many entries after the group's position are gone, ``undelivered`` being those left.

    Redis's own evidence first, as it survives an AOF reload that leaves ``entries-read``
    stale: trimming only ever removes the oldest entries, so none after the position went when
    nothing ever went, when there is nothing after it, or when an entry at or before it is still
    there and ``XDEL`` removed none after it. Otherwise trimming reached the position, maybe
    past it, and only the counters can tell (``entries-added - entries-read``, when Redis knows
    both), at most as many as the stream ever lost: a stale ``entries-read`` then overstates
    the number, or reports entries up to the position as undelivered, but never hides a gap.
    """
    delivered = id_tuple(view.delivered)
    if view.delivered == view.last_id or view.entries_added == view.length:
        return 0
    head_kept = view.first_id is not None and id_tuple(view.first_id) <= delivered
    if head_kept and id_tuple(view.max_deleted) <= delivered:
        return 0
    if view.entries_added is None or view.entries_read is None:
        return 0
    lost = view.entries_added - view.length
    return max(0, min(lost, view.entries_added - view.entries_read - undelivered))


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None
