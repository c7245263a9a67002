"""Version 3 of the wire envelope: the two halves of a move between shards (``mv``)."""

from __future__ import annotations

import orjson
import pytest

from common.deltas import DeltaType
from common.wire import (
    DeltaEnvelope,
    Move,
    WireDecodeError,
    decode_envelope,
    decode_header,
    decode_object,
    encode_envelope,
    moved_in,
    moved_out,
)
from tests.common.test_wire import TS, pod, v1_document
from tests.common.test_wire_v2 import join, split

FIELDS = {"spec.nodeName": "node-17"}


def known_state() -> bytes:
    """A key's known state on its old shard: an ordinary version-2 update."""
    return encode_envelope(
        DeltaEnvelope.of_object(DeltaType.UPDATED, pod(), observed_at=TS), fields=FIELDS
    )


def test_an_envelope_without_a_move_is_still_version_2_byte_for_byte() -> None:
    data = known_state()
    assert data.startswith(b'{"v":2,')
    assert b'"mv"' not in data
    assert decode_header(data).move is None
    assert decode_envelope(data).move is None


def test_the_outgoing_half_is_a_deletion_of_the_last_state_marked_with_where_it_goes() -> None:
    data = known_state()
    out = moved_out(data, 5, observed_at=TS + 1)
    assert out.startswith(b'{"v":3,')
    assert out.partition(b"\n")[2] == data.partition(b"\n")[2]  # the object, byte for byte
    envelope = decode_envelope(out)
    assert envelope.type is DeltaType.DELETED
    assert not envelope.tombstone
    assert envelope.obj == pod()
    assert envelope.observed_at == TS + 1
    assert envelope.move == Move(to_shard=5)
    assert envelope.move.outgoing
    header = decode_header(out)
    assert header.move == Move(to_shard=5)
    assert header.fields == FIELDS  # the selectable fields travel on
    assert decode_object(out, header) == pod()


def test_the_incoming_half_is_an_addition_naming_the_outgoing_halfs_shard_and_id() -> None:
    out = moved_in(known_state(), 2, "1714-3")
    envelope = decode_envelope(out)
    assert envelope.type is DeltaType.ADDED
    assert envelope.move == Move(from_shard=2, from_id="1714-3")
    assert not envelope.move.outgoing
    assert envelope.observed_at == TS  # observed when the change that moved it was
    assert decode_header(out).labels == pod()["metadata"]["labels"]


def test_a_move_round_trips_through_encode_and_decode() -> None:
    for delta_type, move in (
        (DeltaType.DELETED, Move(to_shard=0)),
        (DeltaType.ADDED, Move(from_shard=15, from_id="0-1")),
    ):
        env = DeltaEnvelope(
            delta_type, "shop/web-0", "4711", "uid-shop-web-0", pod(), TS, False, move
        )
        assert decode_envelope(encode_envelope(env)) == env


def test_a_version_1_known_state_can_move_too() -> None:
    v1 = DeltaEnvelope.of_object(DeltaType.ADDED, pod(), observed_at=TS)
    out = moved_out(orjson.dumps(v1_document(v1)), 1, observed_at=TS)
    assert decode_envelope(out).move == Move(to_shard=1)


def test_only_a_known_state_can_move_out_and_only_an_upsert_can_move_in() -> None:
    deletion = moved_out(known_state(), 5, observed_at=TS)
    with pytest.raises(WireDecodeError, match="cannot be a deletion"):
        moved_out(deletion, 6, observed_at=TS)
    with pytest.raises(WireDecodeError, match="only an addition or an update"):
        moved_in(deletion, 6, "1-0")
    with pytest.raises(ValueError, match="invalid move"):
        moved_in(known_state(), 1, "not-an-id")
    with pytest.raises(ValueError, match="invalid move"):
        moved_out(known_state(), -1, observed_at=TS)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda h: h.pop("mv"), "a v3 header must carry a move"),
        (lambda h: h.update(mv={"to": -1}), "invalid move"),
        (lambda h: h.update(mv={"to": "5"}), "invalid move"),
        (lambda h: h.update(mv={"to": 5, "from": 1}), "invalid move"),
        (lambda h: h.update(mv={"from": 1, "id": "x"}), "invalid move"),
        (lambda h: h.update(mv=[5]), "invalid move"),
        (lambda h: h.update(t="Added"), "outgoing half of a move must be a Deleted delta"),
        (lambda h: h.update(tomb=True), "outgoing half of a move must be a Deleted delta"),
        (lambda h: h.update(extra=1), "v3 header fields wrong"),
    ],
)
def test_a_malformed_move_header_is_refused(change: object, why: str) -> None:
    header, rest = split(moved_out(known_state(), 5, observed_at=TS))
    change(header)  # type: ignore[operator]
    data = join(header, rest)
    for decode in (decode_header, decode_envelope):
        with pytest.raises(WireDecodeError) as caught:
            decode(data)
        assert why in str(caught.value)


def test_an_incoming_half_must_be_an_addition() -> None:
    header, rest = split(moved_in(known_state(), 2, "1-1"))
    header["t"] = "Updated"
    with pytest.raises(WireDecodeError, match="incoming half of a move must be an Added"):
        decode_envelope(join(header, rest))


def test_an_envelope_cannot_be_built_with_an_inconsistent_move() -> None:
    with pytest.raises(ValueError, match="incoming half of a move must be an Added"):
        DeltaEnvelope(DeltaType.UPDATED, "shop/web-0", "4711", "uid-shop-web-0", pod(), TS, False,
                      Move(from_shard=1, from_id="1-0"))  # fmt: skip
    with pytest.raises(ValueError, match="well-formed Move"):
        DeltaEnvelope(DeltaType.ADDED, "shop/web-0", "4711", "uid-shop-web-0", pod(), TS, False,
                      Move(from_shard=1, from_id="junk"))  # fmt: skip
