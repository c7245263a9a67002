"""docs/wire/envelope.schema.json against the Python encoder and decoder.

The schema is what a consumer in another language validates entries with, so it must accept
everything :func:`common.wire.encode_envelope` (and the moves' ``moved_out`` / ``moved_in``)
writes, and refuse what :func:`common.wire.decode_envelope` refuses wherever JSON Schema can
say it (what it cannot -- ``ns`` being the key's namespace, the object agreeing with the
header -- docs/wire.md lists as checks a consumer makes in code).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.deltas import DeltaType
from common.wire import (
    DeltaEnvelope,
    Move,
    WireDecodeError,
    decode_envelope,
    encode_envelope,
    moved_in,
    moved_out,
)
from tests.common.test_wire import FUZZ, TS, envelopes, node, pod, sample_envelopes, v1_document
from tests.common.test_wire_v2 import V2_TOMBSTONE, V2_UPDATED
from tests.support.paths import ROOT

SCHEMA_PATH = ROOT / "docs" / "wire" / "envelope.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

selectable_fields = st.dictionaries(
    st.sampled_from(["spec.nodeName", "status.phase", "metadata.name", "spec.x"]),
    st.text(max_size=10),
    max_size=4,
)
labels = st.dictionaries(
    st.from_regex(r"[a-z]([-a-z0-9./]{0,10}[a-z0-9])?", fullmatch=True),
    st.text(max_size=10),
    max_size=4,
)


def decoded(data: bytes) -> Any:
    """The form the schema describes: ``{"header", "object"}`` split at the first line feed
    for versions 2 and 3, the document itself for version 1."""
    header, newline, rest = data.partition(b"\n")
    if not newline:
        return json.loads(data)
    return {"header": json.loads(header), "object": json.loads(rest)}


def problems(document: Any) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(document)]


def with_labels(env: DeltaEnvelope, new_labels: dict[str, str]) -> DeltaEnvelope:
    """``env`` with its object's labels replaced (a tombstone without object stays as it is)."""
    if env.obj is None:
        return env
    obj = {**env.obj, "metadata": {**env.obj["metadata"], "labels": new_labels}}
    return DeltaEnvelope(
        env.type, env.key, env.resource_version, env.uid, obj, env.observed_at, env.tombstone
    )


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("data", [V2_UPDATED, V2_TOMBSTONE], ids=["updated", "tombstone"])
def test_the_pinned_entries_are_valid(data: bytes) -> None:
    assert problems(decoded(data)) == []


@pytest.mark.parametrize("env", sample_envelopes(), ids=lambda e: f"{e.type}-{e.key}-{e.tombstone}")
def test_every_sample_envelope_is_valid_in_both_versions(env: DeltaEnvelope) -> None:
    assert problems(decoded(encode_envelope(env, fields={"status.phase": "Running"}))) == []
    assert problems(v1_document(env)) == []


@given(envelopes(), labels, selectable_fields)
@FUZZ
def test_everything_the_encoder_writes_is_valid(
    env: DeltaEnvelope, new_labels: dict[str, str], fields: dict[str, str]
) -> None:
    env = with_labels(env, new_labels)
    data = encode_envelope(env, fields=fields)
    assert decode_envelope(data) == env  # what a consumer gets, so it must be valid
    assert problems(decoded(data)) == []
    if env.obj is not None:
        spliced = encode_envelope(env, obj_json=orjson.dumps(env.obj), fields=fields)
        assert decoded(spliced) == decoded(data)


@given(
    envelopes().filter(lambda e: e.obj is not None and e.type is not DeltaType.DELETED),
    st.integers(min_value=0, max_value=1023),
    st.integers(min_value=0, max_value=2**48),
    st.integers(min_value=0, max_value=2**20),
)
@FUZZ
def test_both_halves_of_every_move_are_valid(
    env: DeltaEnvelope, shard: int, ms: int, seq: int
) -> None:
    known = encode_envelope(env)
    outgoing = moved_out(known, shard, observed_at=TS)
    incoming = moved_in(known, shard, f"{ms}-{seq}")
    assert decode_envelope(outgoing).move == Move(to_shard=shard)
    assert decode_envelope(incoming).move == Move(from_shard=shard, from_id=f"{ms}-{seq}")
    for half in (outgoing, incoming):
        document = decoded(half)
        assert document["header"]["v"] == 3
        assert problems(document) == []


# --- what the schema must refuse -------------------------------------------------------------


def v2(**header_changes: Any) -> dict[str, Any]:
    """The pinned v2 update, decoded, with header fields replaced (``...`` removes one)."""
    document = decoded(V2_UPDATED)
    for name, value in header_changes.items():
        if value is ...:
            del document["header"][name]
        else:
            document["header"][name] = value
    return document  # type: ignore[no-any-return]


def v3_out(**header_changes: Any) -> dict[str, Any]:
    document = decoded(moved_out(V2_UPDATED, 5, observed_at=TS))
    document["header"].update(header_changes)
    return document  # type: ignore[no-any-return]


def v3_in(**header_changes: Any) -> dict[str, Any]:
    document = decoded(moved_in(V2_UPDATED, 2, "1714567890123-0"))
    document["header"].update(header_changes)
    return document  # type: ignore[no-any-return]


def tombstone_without_object(**header_changes: Any) -> dict[str, Any]:
    document = decoded(V2_TOMBSTONE)
    document["header"].update(header_changes)
    return document  # type: ignore[no-any-return]


def encoded(document: dict[str, Any]) -> bytes:
    """``document`` back on the wire, as a producer that wrote it would have."""
    if "header" not in document:
        return orjson.dumps(document)
    return orjson.dumps(document["header"]) + b"\n" + orjson.dumps(document["object"])


INVALID: dict[str, dict[str, Any]] = {
    "unknown header field": v2(extra="x"),
    "unknown version": v2(v=4),
    "version as a string": v2(v="2"),
    "missing type": v2(t=...),
    "missing labels": v2(l=...),
    "missing selectable fields": v2(f=...),
    "unknown delta type": v2(t="Bogus"),
    "lower-case delta type": v2(t="updated"),
    "empty key": v2(k=""),
    "key with two slashes": v2(k="a/b/c"),
    "key with an empty name": v2(k="shop/"),
    "namespace on a cluster-scoped key": v2(k="web-0", ns="shop"),
    "no namespace on a namespaced key": v2(ns=""),
    "resourceVersion as a number": v2(rv=4711),
    "uid as null": v2(uid=None),
    "timestamp as a string": v2(ts="1714567890.25"),
    "tombstone as 0": v2(tomb=0),
    "tombstone that is no deletion": v2(tomb=True),
    "label value that is no string": v2(l={"app": 1}),
    "selectable field that is no string": v2(f={"spec.nodeName": None}),
    "labels as a list": v2(l=[]),
    "a move in a version 2 header": v2(mv={"to": 1}),
    "version 3 without its move": {**v3_out(), "header": {**v3_out()["header"], "mv": ...}},
    "outgoing half that is no deletion": v3_out(t="Updated"),
    "outgoing half that is a tombstone": v3_out(tomb=True),
    "incoming half that is no addition": v3_in(t="Updated"),
    "move with both halves": v3_in(mv={"to": 1, "from": 2, "id": "1-0"}),
    "move to a negative shard": v3_out(mv={"to": -1}),
    "move from a shard given as text": v3_in(mv={"from": "2", "id": "1-0"}),
    "move naming a malformed entry id": v3_in(mv={"from": 2, "id": "1714567890123"}),
    "object missing without a tombstone": {**decoded(V2_UPDATED), "object": None},
    "tombstone without object but with an rv": tombstone_without_object(rv="9"),
    "tombstone without object but with labels": tombstone_without_object(l={"app": "web"}),
    "object that is a list": {**decoded(V2_UPDATED), "object": []},
    "object without metadata": {**decoded(V2_UPDATED), "object": {"kind": "Pod"}},
    "object without a name": {**decoded(V2_UPDATED), "object": {"metadata": {"name": ""}}},
    "v1 with an unknown field": {**v1_document(DeltaEnvelope.of_object(
        DeltaType.ADDED, node(), observed_at=TS)), "x": 1},
    "v1 without its object and not a tombstone": {**v1_document(DeltaEnvelope.of_object(
        DeltaType.ADDED, node(), observed_at=TS)), "o": None},
}  # fmt: skip


def _cleaned(document: dict[str, Any]) -> dict[str, Any]:
    header = document.get("header")
    if isinstance(header, dict):
        return {**document, "header": {k: v for k, v in header.items() if v is not ...}}
    return document


@pytest.mark.parametrize("name", sorted(INVALID))
def test_the_schema_refuses_what_the_decoder_refuses(name: str) -> None:
    document = _cleaned(INVALID[name])
    assert problems(document), f"the schema accepted: {name}"
    # the Python decoder refuses each of them too: the schema is no stricter than the wire
    with pytest.raises(WireDecodeError):
        decode_envelope(encoded(document))


def test_namespaced_and_cluster_scoped_keys_are_both_valid() -> None:
    cluster = encode_envelope(DeltaEnvelope.of_object(DeltaType.ADDED, node(), observed_at=TS))
    namespaced = encode_envelope(DeltaEnvelope.of_object(DeltaType.ADDED, pod(), observed_at=TS))
    assert problems(decoded(cluster)) == []
    assert problems(decoded(namespaced)) == []
    assert decoded(cluster)["header"]["ns"] == ""
