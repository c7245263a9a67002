"""What one stream entry, as a fenced read returns it, means for a processor group.

The usual entry is one field (``FIELD``) holding the envelope; anything else is decoded field by
field (and rejected there if it is not an envelope). With a view only the header is decoded
here (:meth:`~processor_svc.view.GroupView.route` decides); without one the entry is always
kept, so it is decoded whole once.
"""

from __future__ import annotations

from typing import Any

from common.wire import FIELD, decode_envelope, envelope_from_fields
from processor_svc.fenced_stream import as_mapping, payload_of
from processor_svc.view import GroupView, HeldObjects, Routed

__all__ = ["route_entry"]


def route_entry(
    fields: Any, view: GroupView | None, store: HeldObjects, max_bytes: int
) -> tuple[Routed, bytes | None]:
    """What a stream entry means for a group with ``view`` (``None``: everything as it is), and
    its payload; raises :class:`~common.wire.WireDecodeError` for a poison entry."""
    if type(fields) is list and len(fields) == 2 and fields[0] == FIELD:
        data = fields[1]  # the usual layout
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
