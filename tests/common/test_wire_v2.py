"""Version 2 of the wire envelope: the routing header, its strictness, and v1 beside it.

test_wire.py covers what both versions share (round trips, the v1 document's malformations,
field mappings, a real stream); this file covers what v2 adds: a header decoded without the
object, the object checked against it, and every entry point still reading v1.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.deltas import Delta, DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.wire import (
    ENVELOPE_CODEC,
    FIELD,
    DeltaEnvelope,
    EntryHeader,
    WireDecodeError,
    decode_envelope,
    decode_header,
    decode_object,
    encode_envelope,
    envelope_from_fields,
    envelope_to_fields,
)
from tests.common.test_wire import (
    FUZZ,
    TS,
    V1_OBJ,
    V1_TOMBSTONE,
    V1_UPDATED,
    envelopes,
    names,
    node,
    pod,
    tombstone,
    v1_document,
)

POD_FIELDS = {"spec.nodeName": "node-17", "status.phase": "Running"}


def updated(obj: Obj | None = None) -> DeltaEnvelope:
    return DeltaEnvelope.from_delta(Delta(DeltaType.UPDATED, obj or pod()), observed_at=TS)


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    header, _, rest = data.partition(b"\n")
    return orjson.loads(header), rest


def join(header: dict[str, Any], rest: bytes) -> bytes:
    return orjson.dumps(header) + b"\n" + rest


def with_header(data: bytes, **changes: Any) -> bytes:
    """``data`` with header fields replaced (``None`` removes one); the object part kept."""
    header, rest = split(data)
    for name, value in changes.items():
        if value is None:
            del header[name]
        else:
            header[name] = value
    return join(header, rest)


def header_rejected(data: bytes) -> str:
    with pytest.raises(WireDecodeError) as info:
        decode_header(data)
    return str(info.value)


# --- the format, pinned ----------------------------------------------------------------------

# Written by version 2 of this module. They must decode forever (while v2 is supported); if the
# encoder's output changes, that is a format change and needs a new WIRE_VERSION.
V2_UPDATED = (
    b'{"v":2,"t":"Updated","k":"shop/web-0","ns":"shop","rv":"4711","uid":"uid-shop-web-0",'
    b'"ts":1714567890.25,"tomb":false,"l":{"app":"web"},"f":{"spec.nodeName":"node-17"}}\n'
    b'{"kind":"Pod","metadata":{"name":"web-0","namespace":"shop","resourceVersion":"4711",'
    b'"uid":"uid-shop-web-0","labels":{"app":"web"}},"spec":{"nodeName":"node-17"}}'
)
V2_TOMBSTONE = (
    b'{"v":2,"t":"Deleted","k":"node-9","ns":"","rv":"","uid":"","ts":1714567891.5,'
    b'"tomb":true,"l":{},"f":{}}\nnull'
)
PINNED_OBJ: Obj = {**V1_OBJ, "metadata": {**V1_OBJ["metadata"], "labels": {"app": "web"}}}


def test_v2_entries_are_pinned() -> None:
    env = DeltaEnvelope(
        DeltaType.UPDATED, "shop/web-0", "4711", "uid-shop-web-0", PINNED_OBJ, 1714567890.25
    )
    gone = DeltaEnvelope(DeltaType.DELETED, "node-9", "", "", None, 1714567891.5, tombstone=True)
    assert encode_envelope(env, fields={"spec.nodeName": "node-17"}) == V2_UPDATED
    assert encode_envelope(gone) == V2_TOMBSTONE
    assert decode_envelope(V2_UPDATED) == env
    assert decode_envelope(V2_TOMBSTONE) == gone
    assert decode_header(V2_UPDATED) == EntryHeader(
        DeltaType.UPDATED,
        "shop/web-0",
        "shop",
        "4711",
        "uid-shop-web-0",
        {"app": "web"},
        {"spec.nodeName": "node-17"},
        1714567890.25,
        False,
        True,
    )
    header = decode_header(V2_TOMBSTONE)
    assert (header.namespace, header.tombstone, header.has_object) == ("", True, False)
    assert decode_object(V2_TOMBSTONE, header) is None


def test_headers_are_frozen() -> None:
    header = decode_header(V2_UPDATED)
    with pytest.raises(AttributeError):
        header.key = "other"  # type: ignore[misc]


# --- the header ------------------------------------------------------------------------------


def test_the_header_carries_labels_fields_and_the_namespace() -> None:
    data = encode_envelope(updated(), fields=POD_FIELDS)
    header = decode_header(data)
    assert header.labels == {"app": "web"}
    assert header.fields == POD_FIELDS
    assert (header.key, header.namespace) == ("shop/web-0", "shop")
    assert decode_header(encode_envelope(updated(node()))).namespace == ""


def test_a_tombstone_with_its_last_object_routes_on_that_objects_labels() -> None:
    data = encode_envelope(tombstone("shop/web-0", pod()))
    header = decode_header(data)
    assert (header.tombstone, header.has_object, header.labels) == (True, True, {"app": "web"})
    assert decode_object(data, header) == pod()


def test_routing_never_looks_into_the_object() -> None:
    data = encode_envelope(updated(), fields=POD_FIELDS)
    header_part, _ = data.split(b"\n")
    garbage = header_part + b"\n{not json at all, \xff}"
    header = decode_header(garbage)  # the header is fine: routing works
    assert header == decode_header(data)
    with pytest.raises(WireDecodeError, match="not valid JSON"):
        decode_object(garbage, header)
    with pytest.raises(WireDecodeError, match="not valid JSON"):
        decode_envelope(garbage)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"extra": 1}, "unknown ['extra']"),
        ({"l": None}, "missing ['l']"),
        ({"ns": None}, "missing ['ns']"),
        ({"t": "Bogus"}, "unknown delta type 'Bogus'"),
        ({"t": 3}, "unknown delta type 3"),
        ({"k": 7}, "key must be a non-empty string, got 7"),
        ({"k": ""}, "key must be a non-empty string"),
        ({"k": "a/b/c"}, "key must be 'namespace/name' or 'name'"),
        ({"k": "/web-0"}, "key must be 'namespace/name' or 'name'"),
        ({"ns": "other"}, "namespace 'other' is not the key's 'shop'"),
        ({"ns": ""}, "namespace '' is not the key's 'shop'"),
        ({"k": "web-0"}, "namespace 'shop' is not the key's ''"),
        ({"rv": 4711}, "resource_version must be a string"),
        ({"uid": 1}, "uid must be a string"),
        ({"ts": "now"}, "observed_at must be finite unix seconds, got 'now'"),
        ({"ts": True}, "observed_at must be finite unix seconds"),
        ({"tomb": 0}, "tombstone must be a bool"),
        ({"l": ["app"]}, "labels must map strings to strings"),
        ({"l": {"app": 1}}, "labels must map strings to strings"),
        ({"f": {"status.phase": None}}, "fields must map strings to strings"),
        ({"f": "spec.nodeName=n"}, "fields must map strings to strings"),
        ({"tomb": True}, "a tombstone (inferred deletion) must have type Deleted, not Updated"),
    ],
)
def test_malformed_headers_are_rejected_by_the_routing_decode(
    changes: dict[str, Any], expected: str
) -> None:
    data = with_header(encode_envelope(updated(), fields=POD_FIELDS), **changes)
    assert expected in header_rejected(data)
    with pytest.raises(WireDecodeError):
        decode_envelope(data)


def test_only_tombstones_may_lack_an_object() -> None:
    header, _ = split(encode_envelope(updated()))
    assert "a Updated delta needs an object" in header_rejected(join(header, b"null"))
    header.update(t="Deleted", tomb=True)
    assert "without its last object has no resource_version" in header_rejected(
        join(header, b"null")
    )
    header.update(rv="", uid="")
    assert "without its last object has no resource_version, uid or labels" in header_rejected(
        join(header, b"null")
    )
    header.update(l={})
    assert decode_header(join(header, b"null")).has_object is False


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"v":2,"t":"Updated"}', "no newline between its header and its object"),
        (b'{"v":2,"t":"Updated"]\n{}', "v2 header must be one JSON object"),
        (b'{"v":2,"t":\n{}', "v2 header must be one JSON object"),
        (b'{"v":2,nope}\n{}', "not valid JSON"),
        (b'{"v":2,"t":"Updated"}\n{}', "v2 header fields wrong: missing"),
        (b"\n{}", "must be one JSON object with nothing around it"),  # a holder
        (bytearray(b'{"v":2,}\n{}'), "envelope must be bytes, got bytearray"),
    ],
    ids=repr,
)
def test_broken_framing_is_rejected(data: bytes, expected: str) -> None:
    assert expected in header_rejected(data)


def test_oversized_entries_are_not_routed() -> None:
    data = encode_envelope(updated())
    with pytest.raises(WireDecodeError, match="over the"):
        decode_header(data, len(data) - 1)
    assert decode_header(data, len(data)).key == "shop/web-0"


# --- the object against its header -----------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"k": "shop/web-1"}, "key does not match the object's key 'shop/web-0'"),
        ({"rv": "1"}, "resource_version '1' is not the object's '4711'"),
        ({"uid": "u"}, "uid 'u' is not the object's 'uid-shop-web-0'"),
        ({"l": {"app": "db"}}, "labels {'app': 'db'} are not the object's {'app': 'web'}"),
        ({"l": {}}, "labels {} are not the object's {'app': 'web'}"),
    ],
)
def test_a_header_that_disagrees_with_its_object_is_caught(
    changes: dict[str, Any], expected: str
) -> None:
    data = with_header(encode_envelope(updated()), **changes)
    header = decode_header(data)  # the header alone is well-formed
    for decode in (lambda: decode_object(data, header), lambda: decode_envelope(data)):
        with pytest.raises(WireDecodeError) as info:
            decode()
        assert "disagrees with its header" in str(info.value)
        assert expected in str(info.value)


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        (b"[1]", "v2 object must be one JSON object with nothing around it"),
        (b'{"a":1} ', "nothing around it"),
        (b"", "nothing around it"),
        (b'{"kind":"Pod"}', "object has no metadata.name"),
    ],
    ids=repr,
)
def test_object_parts_that_are_not_the_object_are_rejected(rest: bytes, expected: str) -> None:
    header, _ = split(encode_envelope(updated()))
    data = join(header, rest)
    with pytest.raises(WireDecodeError) as info:
        decode_object(data, decode_header(data))
    assert expected in str(info.value)


def test_an_object_is_never_taken_for_the_missing_one_of_another_header() -> None:
    data = encode_envelope(updated())
    with pytest.raises(WireDecodeError, match="the header says no object"):
        decode_object(data, decode_header(V2_TOMBSTONE))


def test_labels_and_fields_that_decoders_would_refuse_are_refused_at_encode() -> None:
    bad = pod()
    bad["metadata"]["labels"] = {"app": 1}
    with pytest.raises(ValueError, match=r"metadata\.labels"):
        encode_envelope(updated(bad))
    with pytest.raises(ValueError, match="fields of 'shop/web-0' must map strings to strings"):
        encode_envelope(updated(), fields={"spec.replicas": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="labels and fields of 'shop/web-0' must map strings"):
        encode_envelope(updated(), fields={7: "x"})  # type: ignore[dict-item]


# --- version 1 through every entry point -----------------------------------------------------


def test_v1_entries_route_at_full_cost_but_route() -> None:
    header = decode_header(V1_UPDATED)
    assert (header.key, header.namespace, header.resource_version) == ("shop/web-0", "shop", "4711")
    assert (header.labels, header.fields, header.has_object) == ({}, {}, True)
    obj = decode_object(V1_UPDATED, header)
    assert obj is not None and obj["spec"] == {"nodeName": "node-17"}
    assert envelope_from_fields({FIELD: V1_UPDATED}).obj == obj
    assert ENVELOPE_CODEC.unpack(V1_UPDATED) == obj

    gone = decode_header(V1_TOMBSTONE)
    assert (gone.tombstone, gone.has_object, gone.namespace) == (True, False, "")
    assert decode_object(V1_TOMBSTONE, gone) is None


def test_a_v1_entry_routes_on_its_objects_labels_and_is_checked_against_them() -> None:
    data = orjson.dumps(v1_document(updated()))
    header = decode_header(data)
    assert header.labels == {"app": "web"}
    assert decode_object(data, header) == pod()
    other = decode_header(orjson.dumps(v1_document(updated(pod(rv="9")))))
    with pytest.raises(WireDecodeError, match="resource_version '9' is not the object's '4711'"):
        decode_object(data, other)


def test_v1_malformations_are_rejected_by_the_routing_decode() -> None:
    doc = v1_document(updated())
    doc["rv"] = "1"
    with pytest.raises(WireDecodeError, match="is not the object's '4711'"):
        decode_header(orjson.dumps(doc))


# --- the store's codec -----------------------------------------------------------------------


def test_the_envelope_codec_reads_v1_v2_and_its_own_holders() -> None:
    env = updated()
    v2 = encode_envelope(env, fields=POD_FIELDS)
    assert ENVELOPE_CODEC.unpack(v2) == pod()
    assert ENVELOPE_CODEC.unpack(orjson.dumps(v1_document(env))) == pod()
    assert ENVELOPE_CODEC.unpack(orjson.dumps({"o": pod()})) == pod()  # a v1 holder

    holder = ENVELOPE_CODEC.pack(pod())
    assert holder == b"\n" + orjson.dumps(pod())  # one byte around the object, no more
    assert ENVELOPE_CODEC.unpack(holder) == pod()
    for decode in (decode_envelope, decode_header):
        with pytest.raises(WireDecodeError):
            decode(holder)


# --- properties ------------------------------------------------------------------------------

string_maps = st.dictionaries(
    st.text(max_size=10), st.text(max_size=10) | names, max_size=4
)  # text includes newlines, quotes, non-ASCII: orjson escapes them, so the framing holds


@st.composite
def labelled_envelopes(draw: st.DrawFn) -> DeltaEnvelope:
    env = draw(envelopes())
    if env.obj is None:
        return env
    obj = orjson.loads(orjson.dumps(env.obj))
    if draw(st.booleans()):
        obj["metadata"]["labels"] = draw(string_maps)
    if env.tombstone:
        delta = Delta(DeltaType.DELETED, DeletedFinalStateUnknown(env.key, obj))
    else:
        delta = Delta(env.type, obj)
    return DeltaEnvelope.from_delta(delta, observed_at=env.observed_at)


@given(labelled_envelopes(), string_maps)
@FUZZ
def test_generated_v2_entries_round_trip_through_every_entry_point(
    env: DeltaEnvelope, selectable: dict[str, str]
) -> None:
    data = encode_envelope(env, fields=selectable)
    assert decode_envelope(data) == env
    assert envelope_from_fields(envelope_to_fields(env, fields=selectable)) == env
    header = decode_header(data)
    assert (header.type, header.key, header.resource_version, header.uid) == (
        env.type,
        env.key,
        env.resource_version,
        env.uid,
    )
    assert (header.observed_at, header.tombstone, header.fields) == (
        env.observed_at,
        env.tombstone,
        selectable,
    )
    assert header.has_object is (env.obj is not None)
    assert header.labels == ((env.obj or {}).get("metadata", {}).get("labels") or {})
    assert header.namespace == (env.key.split("/")[0] if "/" in env.key else "")
    assert decode_object(data, header) == env.obj
    if env.obj is not None:
        spliced = encode_envelope(env, obj_json=orjson.dumps(env.obj), fields=selectable)
        assert spliced == data
        assert ENVELOPE_CODEC.unpack(data) == env.obj


@given(labelled_envelopes(), st.data())
@FUZZ
def test_mutated_v2_entries_never_escape_the_contract(
    env: DeltaEnvelope, data: st.DataObject
) -> None:
    encoded = encode_envelope(env, fields=POD_FIELDS)
    index = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    mask = data.draw(st.integers(min_value=1, max_value=255))
    mutated = encoded[:index] + bytes([encoded[index] ^ mask]) + encoded[index + 1 :]
    if data.draw(st.booleans()):
        mutated = mutated[: data.draw(st.integers(min_value=0, max_value=len(mutated)))]
    try:
        header = decode_header(mutated)
    except WireDecodeError:
        return
    try:
        obj = decode_object(mutated, header)
    except WireDecodeError:
        with pytest.raises(WireDecodeError):
            decode_envelope(mutated)
        return
    decoded = decode_envelope(mutated)
    assert decoded.obj == obj
    assert (decoded.key, decoded.resource_version) == (header.key, header.resource_version)
