from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.deltas import Delta, DeltaType
from common.object_keys import DeletedFinalStateUnknown, InvalidKeyError, Obj
from common.wire import (
    DEFAULT_MAX_BYTES,
    FIELD,
    SUPPORTED_VERSIONS,
    WIRE_VERSION,
    DeltaEnvelope,
    WireDecodeError,
    decode_envelope,
    encode_envelope,
    envelope_from_fields,
    envelope_to_fields,
)

TS = 1714567890.25


def pod(name: str = "web-0", namespace: str = "shop", rv: str = "4711") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "uid": f"uid-{namespace}-{name}",
            "labels": {"app": "web"},
            "annotations": {"note": "ünïcode ✓"},
        },
        "spec": {
            "nodeName": "node-17",
            "containers": [{"name": "web", "image": "web:1", "ports": [{"containerPort": 80}]}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.7", "ratio": 0.5, "ready": True},
    }


def node(name: str = "node-17") -> Obj:
    return {"kind": "Node", "metadata": {"name": name, "resourceVersion": "9", "uid": "n-9"}}


def envelope(obj: Obj, delta_type: DeltaType = DeltaType.UPDATED) -> DeltaEnvelope:
    return DeltaEnvelope.from_delta(Delta(delta_type, obj), observed_at=TS)


def tombstone(key: str, last: Obj | None) -> DeltaEnvelope:
    delta = Delta(DeltaType.DELETED, DeletedFinalStateUnknown(key, last))
    return DeltaEnvelope.from_delta(delta, observed_at=TS)


def describe(env: DeltaEnvelope) -> str:
    return f"{env.type}-{env.key}{'-tombstone' if env.tombstone else ''}"


def sample_envelopes() -> list[DeltaEnvelope]:
    return [
        *(envelope(pod(rv=str(i)), t) for i, t in enumerate(DeltaType)),
        envelope(node(), DeltaType.ADDED),
        tombstone("shop/web-0", pod()),
        tombstone("shop/web-1", None),
        tombstone("node-3", None),
    ]


_REMOVE = object()


def v1_document(env: DeltaEnvelope) -> dict[str, Any]:
    """What version 1 of this module wrote for ``env``, as a dict (v1 is still decoded)."""
    return {
        "v": 1,
        "t": env.type.value,
        "k": env.key,
        "rv": env.resource_version,
        "uid": env.uid,
        "ts": env.observed_at,
        "tomb": env.tombstone,
        "o": env.obj,
    }


def valid_doc(**changes: Any) -> dict[str, Any]:
    """The JSON document of a valid v1 envelope, with fields replaced (or _REMOVE-d)."""
    doc = v1_document(envelope(pod()))
    for name, value in changes.items():
        if value is _REMOVE:
            doc.pop(name, None)
        else:
            doc[name] = value
    return doc


def rejected(data: object, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """Decode ``data``, expecting WireDecodeError; returns its message."""
    with pytest.raises(WireDecodeError) as info:
        decode_envelope(data, max_bytes)  # type: ignore[arg-type]
    return str(info.value)


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("delta_type", list(DeltaType))
def test_every_delta_type_round_trips(delta_type: DeltaType) -> None:
    env = envelope(pod(), delta_type)
    decoded = decode_envelope(encode_envelope(env))
    assert decoded == env
    assert decoded.to_delta() == Delta(delta_type, pod())
    assert type(decoded.observed_at) is float


def test_header_comes_from_the_object() -> None:
    env = envelope(pod())
    assert (env.key, env.resource_version, env.uid) == ("shop/web-0", "4711", "uid-shop-web-0")
    assert (env.tombstone, env.observed_at) == (False, TS)
    assert envelope(node()).key == "node-17"


@pytest.mark.parametrize("last", [pod(), None], ids=["with-last-object", "without"])
def test_tombstones_round_trip(last: Obj | None) -> None:
    env = tombstone("shop/web-0", last)
    assert env.tombstone and env.type is DeltaType.DELETED
    decoded = decode_envelope(encode_envelope(env))
    assert decoded == env
    assert decoded.to_delta() == Delta(
        DeltaType.DELETED, DeletedFinalStateUnknown("shop/web-0", last)
    )
    if last is None:
        assert (decoded.resource_version, decoded.uid, decoded.obj) == ("", "", None)


def test_observed_deletion_is_not_a_tombstone() -> None:
    env = envelope(pod(), DeltaType.DELETED)
    decoded = decode_envelope(encode_envelope(env))
    assert not decoded.tombstone
    assert decoded.to_delta() == Delta(DeltaType.DELETED, pod())


@pytest.mark.parametrize("env", [e for e in sample_envelopes() if e.obj is not None], ids=describe)
def test_pre_encoded_object_bytes_give_the_same_entry(env: DeltaEnvelope) -> None:
    assert env.obj is not None
    raw = orjson.dumps(env.obj)
    assert encode_envelope(env, obj_json=raw) == encode_envelope(env)
    # Bytes as another JSON writer (or the API server) might produce them: same decode.
    spaced = json.dumps(env.obj, indent=2, ensure_ascii=True).encode() + b"\n"
    assert decode_envelope(encode_envelope(env, obj_json=spaced)) == env


def test_pre_encoded_bytes_must_look_like_one_object() -> None:
    with pytest.raises(ValueError, match="one object"):
        encode_envelope(envelope(pod()), obj_json=b"[1, 2]")
    with pytest.raises(ValueError, match="without an object"):
        encode_envelope(tombstone("shop/web-0", None), obj_json=b"{}")


def test_encoding_refuses_what_decoders_would_refuse() -> None:
    env = envelope(pod())
    size = len(encode_envelope(env))
    assert decode_envelope(encode_envelope(env, max_bytes=size), size) == env
    with pytest.raises(ValueError, match=f"{size} bytes, over the {size - 1}-byte limit"):
        encode_envelope(env, max_bytes=size - 1)


def test_entries_are_a_compact_json_header_a_newline_and_the_object() -> None:
    header, obj = encode_envelope(envelope(pod())).split(b"\n")
    doc = orjson.loads(header)
    assert list(doc) == ["v", "t", "k", "ns", "rv", "uid", "ts", "tomb", "l", "f"]
    assert doc["v"] == WIRE_VERSION in SUPPORTED_VERSIONS
    assert orjson.loads(obj) == pod()
    assert b" " not in encode_envelope(envelope(node()))


# --- version compatibility -----------------------------------------------------------------

# Written by version 1 of this module. They must decode forever (while v1 is supported); if the
# encoder's output changes, that is a format change and needs a new WIRE_VERSION.
V1_UPDATED = (
    b'{"v":1,"t":"Updated","k":"shop/web-0","rv":"4711","uid":"uid-shop-web-0",'
    b'"ts":1714567890.25,"tomb":false,"o":{"kind":"Pod","metadata":{"name":"web-0",'
    b'"namespace":"shop","resourceVersion":"4711","uid":"uid-shop-web-0"},'
    b'"spec":{"nodeName":"node-17"}}}'
)
V1_TOMBSTONE = (
    b'{"v":1,"t":"Deleted","k":"node-9","rv":"","uid":"","ts":1714567891.5,"tomb":true,"o":null}'
)


V1_OBJ: Obj = {
    "kind": "Pod",
    "metadata": {
        "name": "web-0",
        "namespace": "shop",
        "resourceVersion": "4711",
        "uid": "uid-shop-web-0",
    },
    "spec": {"nodeName": "node-17"},
}
"""The object of V1_UPDATED."""


def test_v1_entries_still_decode() -> None:
    obj = V1_OBJ
    updated = DeltaEnvelope(
        DeltaType.UPDATED, "shop/web-0", "4711", "uid-shop-web-0", obj, 1714567890.25
    )
    gone = DeltaEnvelope(DeltaType.DELETED, "node-9", "", "", None, 1714567891.5, tombstone=True)
    assert decode_envelope(V1_UPDATED) == updated
    assert decode_envelope(V1_TOMBSTONE) == gone
    assert orjson.dumps(v1_document(updated)) == V1_UPDATED  # what this file's v1 tests build
    assert orjson.dumps(v1_document(gone)) == V1_TOMBSTONE


# --- malformed input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    ["{}", bytearray(b"{}"), memoryview(b"{}"), None, 42, [b"{}"]],
    ids=lambda value: type(value).__name__,
)
def test_only_bytes_are_decoded(data: object) -> None:
    assert "envelope must be bytes, got" in rejected(data)


def test_oversized_entries_are_rejected_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode_envelope(envelope(pod()))

    def must_not_parse(_: bytes) -> object:
        raise AssertionError("parsed an oversized envelope")

    monkeypatch.setattr(orjson, "loads", must_not_parse)  # what wire calls
    message = rejected(data, max_bytes=len(data) - 1)
    assert f"{len(data)} bytes, over the {len(data) - 1}-byte limit" in message
    big = b"{" + b"x" * DEFAULT_MAX_BYTES + b"}"
    assert "over the 4194304-byte limit" in rejected(big)


@pytest.mark.parametrize("version", [4, 0, "1", 1.0, True, None, [1]], ids=repr)
def test_unknown_schema_versions_say_what_is_supported(version: object) -> None:
    message = rejected(orjson.dumps(valid_doc(v=version)))
    assert "unsupported envelope schema version" in message
    assert "this build reads versions [1, 2, 3]" in message


def test_a_v1_document_claiming_v2_is_told_what_v2_looks_like() -> None:
    assert "no newline between its header and its object" in rejected(orjson.dumps(valid_doc(v=2)))
    doc = valid_doc(v=_REMOVE)
    assert 'must start with {"v":2,' in rejected(orjson.dumps({**doc, "v": 2}))


def test_missing_version_is_reported_as_such() -> None:
    assert "schema version missing" in rejected(orjson.dumps(valid_doc(v=_REMOVE)))


@pytest.mark.parametrize("type_name", ["Bogus", "added", "", 3, None, ["Added"]], ids=repr)
def test_unknown_delta_types_are_rejected(type_name: object) -> None:
    message = rejected(orjson.dumps(valid_doc(t=type_name)))
    assert "unknown delta type" in message
    assert "'Added'" in message  # the valid choices are listed


@pytest.mark.parametrize("name", ["t", "k", "rv", "uid", "ts", "tomb", "o"])
def test_missing_fields_are_named(name: str) -> None:
    assert f"missing ['{name}']" in rejected(orjson.dumps(valid_doc(**{name: _REMOVE})))


def test_unknown_fields_are_named() -> None:
    assert "unknown ['extra']" in rejected(orjson.dumps(valid_doc(extra=1)))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"k": 7}, "key must be a non-empty string, got 7"),
        ({"k": ""}, "key must be a non-empty string"),
        ({"rv": 4711}, "resource_version must be a string"),
        ({"uid": None}, "uid must be a string"),
        ({"ts": "now"}, "observed_at must be finite unix seconds, got 'now'"),
        ({"ts": True}, "observed_at must be finite unix seconds"),
        ({"ts": None}, "observed_at must be finite unix seconds"),
        ({"tomb": "no"}, "tombstone must be a bool"),
        ({"tomb": 0}, "tombstone must be a bool"),
        ({"o": [1, 2]}, "obj must be a dict (a JSON object) or None, got list"),
        ({"o": "{}"}, "obj must be a dict (a JSON object) or None, got str"),
        ({"o": {"kind": "Pod"}}, "object has no metadata.name"),
        ({"k": "shop/web-1"}, "key does not match the object's key 'shop/web-0'"),
        ({"rv": "1"}, "resource_version '1' is not the object's '4711'"),
        ({"uid": "u"}, "uid 'u' is not the object's 'uid-shop-web-0'"),
    ],
)
def test_ill_typed_or_inconsistent_fields_are_rejected(
    changes: dict[str, Any], expected: str
) -> None:
    message = rejected(orjson.dumps(valid_doc(**changes)))
    assert expected in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"tomb": True, "t": "Updated"}, "a tombstone (inferred deletion) must have type Deleted"),
        ({"tomb": True, "t": "Sync", "o": None}, "must have type Deleted, not Sync"),
        ({"tomb": False, "t": "Deleted", "o": None}, "a Deleted delta needs an object"),
        ({"o": None}, "a Updated delta needs an object"),
        ({"tomb": True, "t": "Deleted", "o": None}, "without its last object has no resource"),
        (
            {"tomb": True, "t": "Deleted", "o": None, "rv": "", "uid": "", "k": "a/b/c"},
            "key must be 'namespace/name' or 'name'",
        ),
        (
            {"tomb": True, "t": "Deleted", "o": None, "rv": "", "uid": "", "k": "/web"},
            "key must be 'namespace/name' or 'name'",
        ),
    ],
)
def test_tombstone_inconsistencies_are_rejected(changes: dict[str, Any], expected: str) -> None:
    assert expected in rejected(orjson.dumps(valid_doc(**changes)))


def test_trailing_or_leading_bytes_are_rejected() -> None:
    data = encode_envelope(envelope(pod()))
    for bad in (data + b"x", data + b" ", data + b"\n", b" " + data, data + data, data[:-1]):
        rejected(bad)
    assert "nothing around it" in rejected(data + b"\x00")
    assert "not valid JSON" in rejected(data[:-2] + b"}")


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"}", b"{}", b"[]", b"null", b"{nope}", b'{"v":1', b"\x81\xa1v\x01", b"{\xff}"],
    ids=repr,
)
def test_garbage_is_rejected(data: bytes) -> None:
    rejected(data)


def test_non_finite_and_huge_numbers_are_rejected() -> None:
    text = encode_envelope(envelope(pod())).replace(b'"ts":1714567890.25', b'"ts":1e400')
    assert "not valid JSON" in rejected(text)


def test_errors_are_value_errors_and_quote_input_briefly() -> None:
    message = rejected(orjson.dumps(valid_doc(t="x" * 10_000)))
    assert len(message) < 300
    assert issubclass(WireDecodeError, ValueError)


def test_envelopes_keep_their_invariants_when_built_directly() -> None:
    with pytest.raises(ValueError, match="must have type Deleted"):
        DeltaEnvelope(DeltaType.ADDED, "node-9", "", "", None, TS, tombstone=True)
    with pytest.raises(ValueError, match="needs an object"):
        DeltaEnvelope(DeltaType.ADDED, "node-9", "", "", None, TS)
    with pytest.raises(ValueError, match="finite"):
        DeltaEnvelope(DeltaType.ADDED, "node-17", "9", "n-9", node(), float("nan"))
    with pytest.raises(ValueError, match="DeltaType"):
        DeltaEnvelope("Added", "node-17", "9", "n-9", node(), TS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must have type Deleted"):
        DeltaEnvelope.from_delta(
            Delta(DeltaType.SYNC, DeletedFinalStateUnknown("node-17", node())), observed_at=TS
        )


# --- stream entry field mapping ------------------------------------------------------------


def test_field_mapping_is_one_field() -> None:
    env = envelope(pod())
    fields = envelope_to_fields(env)
    assert list(fields) == [FIELD] == [b"d"]
    assert envelope_from_fields(fields) == env


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (None, "no payload (trimmed before it was read?)"),
        ({}, "no payload"),
        ({b"x": b"{}"}, "exactly one field b'd', got [\"b'x'\"]"),
        ({"d": "{}"}, "decode_responses=False"),
        ({b"d": b"{}", b"e": b""}, "exactly one field"),
        ({b"d": None}, "exactly one field"),
        ([(b"d", b"{}")], "exactly one field"),
    ],
    ids=repr,
)
def test_bad_field_mappings_are_rejected(fields: Any, expected: str) -> None:
    with pytest.raises(WireDecodeError) as info:
        envelope_from_fields(fields)
    assert expected in str(info.value)


def test_envelopes_round_trip_through_a_real_redis_stream(redis_client: redis.Redis) -> None:
    envs = sample_envelopes()
    for env in envs:
        redis_client.xadd("ib:{pods:0}:deltas", envelope_to_fields(env))
    big = pod(name="web-big")
    big["metadata"]["annotations"]["blob"] = "x" * 200_000
    big_env = envelope(big)
    redis_client.xadd("ib:{pods:0}:deltas", envelope_to_fields(big_env, obj_json=orjson.dumps(big)))
    entries = redis_client.xrange("ib:{pods:0}:deltas")
    assert entries is not None
    assert [envelope_from_fields(fields) for _id, fields in entries] == [*envs, big_env]


def test_a_trimmed_pending_entry_is_a_decode_error(redis_client: redis.Redis) -> None:
    stream = "ib:{pods:1}:deltas"
    redis_client.xgroup_create(stream, "processors", id="0", mkstream=True)
    redis_client.xadd(stream, envelope_to_fields(envelope(pod())))
    redis_client.xreadgroup("processors", "p-0", {stream: ">"})
    redis_client.xtrim(stream, maxlen=0, approximate=False)
    pending: Any = redis_client.xreadgroup("processors", "p-0", {stream: "0"})
    [[_name, [(_id, fields)]]] = pending
    with pytest.raises(WireDecodeError, match="no payload"):
        envelope_from_fields(fields)


def test_a_client_that_decodes_responses_is_told_why(redis_client: redis.Redis) -> None:
    redis_client.xadd("s", envelope_to_fields(envelope(pod())))
    pool_kwargs = redis_client.connection_pool.connection_kwargs
    text_client = redis.Redis(
        host=pool_kwargs["host"], port=pool_kwargs["port"], decode_responses=True
    )
    try:
        entries = text_client.xrange("s")
    finally:
        text_client.close()
    assert entries is not None
    with pytest.raises(WireDecodeError, match="decode_responses=False"):
        envelope_from_fields(entries[0][1])


# --- property tests ------------------------------------------------------------------------

names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?", fullmatch=True)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def envelopes(draw: st.DrawFn) -> DeltaEnvelope:
    namespace = draw(st.one_of(st.just(""), names))
    name = draw(names)
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if draw(st.booleans()):
        metadata["resourceVersion"] = str(draw(st.integers(min_value=1, max_value=10**12)))
    if draw(st.booleans()):
        metadata["uid"] = draw(st.uuids()).hex
    obj: Obj = {
        "metadata": metadata,
        "spec": draw(st.dictionaries(st.text(max_size=8), json_values, max_size=5)),
    }
    observed_at = draw(st.floats(min_value=0, max_value=4e9))
    if draw(st.booleans()):
        key = f"{namespace}/{name}" if namespace else name
        last = obj if draw(st.booleans()) else None
        delta = Delta(DeltaType.DELETED, DeletedFinalStateUnknown(key, last))
    else:
        delta = Delta(draw(st.sampled_from(DeltaType)), obj)
    return DeltaEnvelope.from_delta(delta, observed_at=observed_at)


def decodes_or_rejects(data: object) -> None:
    """The decode contract: a WireDecodeError, or an envelope that is valid and round-trips."""
    try:
        env = decode_envelope(data)  # type: ignore[arg-type]
    except WireDecodeError:
        return
    assert isinstance(env, DeltaEnvelope)
    assert decode_envelope(encode_envelope(env)) == env


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(envelopes())
@FUZZ
def test_generated_envelopes_round_trip(env: DeltaEnvelope) -> None:
    assert decode_envelope(encode_envelope(env)) == env
    if env.obj is not None:
        assert decode_envelope(encode_envelope(env, obj_json=orjson.dumps(env.obj))) == env


@given(st.binary(max_size=300))
@FUZZ
def test_arbitrary_bytes_never_escape_the_contract(data: bytes) -> None:
    decodes_or_rejects(data)
    decodes_or_rejects(b"{" + data + b"}")


@given(envelopes(), st.data())
@FUZZ
def test_mutated_entries_never_escape_the_contract(env: DeltaEnvelope, data: st.DataObject) -> None:
    encoded = encode_envelope(env)
    index = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    mutation = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
    if mutation == "flip":
        mask = data.draw(st.integers(min_value=1, max_value=255))
        mutated = encoded[:index] + bytes([encoded[index] ^ mask]) + encoded[index + 1 :]
    elif mutation == "truncate":
        mutated = encoded[:index]
    elif mutation == "insert":
        mutated = encoded[:index] + data.draw(st.binary(min_size=1, max_size=4)) + encoded[index:]
    else:
        mutated = encoded[:index] + encoded[index + data.draw(st.integers(1, 8)) :]
    decodes_or_rejects(mutated)


@given(
    st.sampled_from(["v", "t", "k", "rv", "uid", "ts", "tomb", "o", "extra"]),
    json_values | st.just(_REMOVE),
)
@FUZZ
def test_arbitrary_field_values_never_escape_the_contract(name: str, value: object) -> None:
    decodes_or_rejects(orjson.dumps(valid_doc(**{name: value})))


@pytest.mark.parametrize("delta_type", [DeltaType.ADDED, DeltaType.UPDATED, DeltaType.DELETED])
def test_of_object_is_from_delta_with_the_key_computed_once(delta_type: DeltaType) -> None:
    obj = pod()
    built = DeltaEnvelope.of_object(delta_type, obj, observed_at=TS)
    assert built == DeltaEnvelope.from_delta(Delta(delta_type, obj), observed_at=TS)
    assert (built.key, built.resource_version, built.tombstone) == ("shop/web-0", "4711", False)


def test_of_object_refuses_what_the_constructor_refuses() -> None:
    with pytest.raises(InvalidKeyError):
        DeltaEnvelope.of_object(DeltaType.ADDED, {"metadata": {}}, observed_at=TS)
    with pytest.raises(ValueError, match="observed_at"):
        DeltaEnvelope.of_object(DeltaType.ADDED, pod(), observed_at=float("nan"))
