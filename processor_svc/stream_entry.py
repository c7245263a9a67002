"""One stream entry, as a fenced read returns it: what it means for a processor group, and its
application to the shard's store and the handlers' notifications.

The usual entry is one field (``FIELD``) holding the envelope; anything else is decoded field by
field (and rejected there if it is not an envelope). With a view only the header is decoded
here (:meth:`~processor_svc.view.GroupView.route` decides); without one the entry is always
kept, so it is decoded whole once.
"""

from __future__ import annotations

from typing import Any

from common.deltas import Delta, DeltaType
from common.handlers import process_deltas
from common.wire import FIELD, decode_envelope, decode_header, envelope_from_fields
from processor_svc.dispatch import AddNotification, DeleteNotification, NotificationCollector
from processor_svc.fenced_stream import as_mapping, payload_of
from processor_svc.held_keys import NO_VIEW_STATE, HeldChanges, held_state
from processor_svc.key_events import ADD, DELETE, UPDATE, Change, KeyNotification
from processor_svc.shard_store import ShardStore
from processor_svc.view import GroupView, HeldObjects, Routed

__all__ = ["apply_entry", "route_entry"]


def route_entry(
    fields: Any, view: GroupView | None, store: HeldObjects, max_bytes: int, keyed: bool = False
) -> tuple[Routed, bytes | None]:
    """What a stream entry means for a group with ``view`` (``None``: everything as it is), and
    its payload; raises :class:`~common.wire.WireDecodeError` for a poison entry. ``keyed``
    (no view; handlers that need only keys, :mod:`processor_svc.key_events`): the header alone
    is decoded, and the delta's object is a stand-in holding only the namespace."""
    if type(fields) is list and len(fields) == 2 and fields[0] == FIELD:
        data = fields[1]  # the usual layout
        if keyed:
            header = decode_header(data, max_bytes)
            stand_in = {"metadata": {"namespace": header.namespace}}
            delta = Delta(header.type, stand_in)
            routed = Routed(delta, header.key, header.type, header.observed_at, True, header.move)
            return routed, data
        envelope = None if view is not None else decode_envelope(data, max_bytes)
    else:
        envelope = envelope_from_fields(as_mapping(fields), max_bytes)
        data = payload_of(fields)
    if view is not None:
        return view.route(data, store, max_bytes), data
    assert envelope is not None
    delta = envelope.to_delta()
    return Routed(
        delta, envelope.key, envelope.type, envelope.observed_at, True, envelope.move
    ), data


def apply_entry(
    entry_id: str,
    delta: Delta,
    key: str,
    packed: bytes | None,
    *,
    store: ShardStore,
    collector: NotificationCollector,
    held: HeldChanges,
    view: GroupView | None,
    keyed: bool,
) -> None:
    """Apply one entry's delta to ``store`` and collect its notification, recording in ``held``
    what it changes of the keys the handlers hold (an add or a deletion). ``keyed`` (a delta
    routed with ``keyed``): nothing is decoded, the handlers get the key. Raises what the store
    raises (an index function that failed: the caller parks the entry)."""
    if keyed and packed is not None:
        indexed: Any = store  # a HeaderIndexedStore: shard_store.indexed_from_headers said so
        if delta.type is DeltaType.DELETED:
            store.discard(delta.obj, key)
            change: Change = DELETE
            held.record(entry_id, key, None)
        elif indexed.update_packed(key, packed, delta.obj):
            change = UPDATE
        else:
            change = ADD
            held.record(entry_id, key, NO_VIEW_STATE)
        collector.pending.append((KeyNotification(key, change), collector.token))
        return
    process_deltas(collector, store, (delta,), False, key, packed=packed)
    notification = collector.pending[-1][0]
    if type(notification) is AddNotification:
        held.record(entry_id, key, held_state(notification.obj, view))
    elif type(notification) is DeleteNotification:
        held.record(entry_id, key, None)
