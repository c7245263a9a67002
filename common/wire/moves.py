"""The two halves of a move between shards (version 3), rewritten from envelopes already
written: only the header changes, the object part is kept byte for byte (:class:`Move`)."""

from __future__ import annotations

import orjson

from common.deltas import DeltaType
from common.wire.decode import decode_document, decode_header
from common.wire.envelope import HEADED, MOVE_VERSION, EntryHeader, Move, WireDecodeError, move_of


def moved_out(data: bytes, to_shard: int, *, observed_at: float) -> bytes:
    """The outgoing half of a move (:class:`Move`), from ``data``, the envelope the old shard
    holds as the object's known state: the same object, now a ``Deleted`` delta observed at
    ``observed_at`` and marked as moving to ``to_shard``. Only the header is rewritten (the
    object part is kept byte for byte); raises :class:`WireDecodeError` for an envelope that
    cannot be the known state of a key."""
    header = decode_header(data)
    if header.type is DeltaType.DELETED or not header.has_object:
        raise WireDecodeError("the known state of a key cannot be a deletion")
    return _with_header(data, header, DeltaType.DELETED, Move(to_shard=to_shard), observed_at)


def moved_in(data: bytes, from_shard: int, from_id: str) -> bytes:
    """The incoming half of a move (:class:`Move`), from ``data``, the envelope of the change
    that moved the object: an ``Added`` delta marked as coming from ``from_shard``, where its
    outgoing half has the stream id ``from_id``. Only the header is rewritten."""
    header = decode_header(data)
    if header.type is DeltaType.DELETED or not header.has_object:
        raise WireDecodeError("only an addition or an update can move an object in")
    move = Move(from_shard=from_shard, from_id=from_id)
    return _with_header(data, header, DeltaType.ADDED, move, header.observed_at)


def _with_header(
    data: bytes, header: EntryHeader, delta_type: DeltaType, move: Move, observed_at: float
) -> bytes:
    if move_of(move.as_json()) != move:
        raise ValueError(f"invalid move {move!r}")
    if data.startswith(HEADED):
        cut = data.find(b"\n")
        doc = orjson.loads(data[:cut])
        body = data[cut:]
    else:  # a version-1 known state: its object is re-serialised once
        doc = {"ns": header.namespace, "uid": header.uid, "l": header.labels, "f": header.fields}
        doc.update(k=header.key, rv=header.resource_version, tomb=False)
        body = b"\n" + orjson.dumps(decode_document(data).obj)
    doc.pop("mv", None)
    doc.update(v=MOVE_VERSION, t=delta_type.value, ts=observed_at, tomb=False)
    head = orjson.dumps({"v": MOVE_VERSION, **doc, "mv": move.as_json()})
    return head + body
