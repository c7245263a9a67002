"""The two decoders that read what others wrote -- stream entries (:mod:`common.wire`) and watch
lines (:mod:`reflector_svc.watch_decoder`) -- against hostile input.

tests/common/test_wire.py already fuzzes envelopes with short arbitrary bytes, mutations of valid
entries and wrong field values; this adds whole field mappings, arbitrary JSON documents, deep
nesting and huge inputs, and the same for watch lines. The contract: only the typed error
escapes (``WireDecodeError``; for a watch stream nothing is raised while lines are parsed: a bad
line's ``MalformedWatchEventError`` or an ERROR event's ``ApiStatusError`` is returned after the
events before it), and input over the size limit is never parsed, so memory stays bounded
whatever arrives.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any, cast

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.wire import (
    DEFAULT_MAX_BYTES,
    FIELD,
    DeltaEnvelope,
    WireDecodeError,
    decode_envelope,
    envelope_from_fields,
)
from reflector_svc.api_errors import ApiStatusError, KubeError, MalformedWatchEventError
from reflector_svc.watch_decoder import LineFramer, WatchDecoder
from reflector_svc.watch_events import WatchEvent

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HUGE = 64 << 20
"""Bytes of a hostile input: sixteen times the envelope limit, 64 times the watch line limit."""
LINE_LIMIT = 1 << 20

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
envelope_keys = st.sampled_from(["v", "t", "k", "rv", "uid", "ts", "tomb", "o"]) | st.text(
    max_size=3
)


def decodes_or_rejects(decode: Callable[[], DeltaEnvelope]) -> None:
    try:
        decoded = decode()
    except WireDecodeError as exc:
        assert str(exc)
        return
    assert isinstance(decoded, DeltaEnvelope)


def nested(depth: int, kind: str) -> bytes:
    """A JSON value ``depth`` levels deep: lists (``[[[]]]``) or objects (``{"a":{"a":1}}``)."""
    if kind == "lists":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def peak_allocation(action: Callable[[], object]) -> int:
    """The peak of memory allocated (and traced) while ``action`` runs, in bytes; what it
    raises is left to the caller."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --- stream entries ---------------------------------------------------------------------------


@given(st.dictionaries(envelope_keys, json_values, max_size=9))
@FUZZ
def test_structured_but_wrong_documents_only_raise_the_typed_error(doc: dict[str, Any]) -> None:
    decodes_or_rejects(lambda: decode_envelope(orjson.dumps(doc)))


@given(json_values)
@FUZZ
def test_any_json_document_only_raises_the_typed_error(value: object) -> None:
    decodes_or_rejects(lambda: decode_envelope(orjson.dumps(value)))


field_values = st.binary(max_size=64) | st.text(max_size=16) | st.integers() | st.none()


@given(
    st.dictionaries(st.just(FIELD) | st.binary(max_size=4) | st.text(max_size=4), field_values,
                    max_size=3)
    | st.none() | st.lists(st.binary(max_size=8), max_size=3) | st.binary(max_size=8)
)  # fmt: skip
@FUZZ
def test_any_field_mapping_only_raises_the_typed_error(fields: object) -> None:
    decodes_or_rejects(lambda: envelope_from_fields(cast(Any, fields)))


@pytest.mark.parametrize("depth", [64, 1023, 1024, 1025, 1_000_000])
@pytest.mark.parametrize("kind", ["lists", "objects"])
def test_deep_nesting_is_a_typed_error_not_a_crash(depth: int, kind: str) -> None:
    for document in (b'{"o":' + nested(depth, kind) + b"}", nested(depth, "objects")):
        with pytest.raises(WireDecodeError):
            decode_envelope(document)


@pytest.mark.parametrize(
    "make",
    [
        lambda: b"{" + b" " * HUGE + b"}",
        lambda: b'{"v":1,"o":"' + b"x" * HUGE + b'"}',
        lambda: nested(HUGE // 2, "lists"),
    ],
    ids=["whitespace", "one-long-string", "deep-nesting"],
)
def test_inputs_over_the_limit_are_refused_unparsed_in_bounded_memory(
    make: Callable[[], bytes],
) -> None:
    data = make()  # allocated before measuring: only what decoding costs counts

    def decode() -> None:
        for attempt in (lambda: decode_envelope(data), lambda: envelope_from_fields({FIELD: data})):
            with pytest.raises(WireDecodeError, match="not parsed"):
                attempt()

    assert peak_allocation(decode) < 64 << 10


@pytest.mark.parametrize(
    "shape",
    [(b"[" * 2_000_000 + b"]" * 2_000_000), b"[" + b"{}," * 1_398_000 + b"{}]"],
    ids=["deep-nesting", "many-empty-objects"],
)
def test_a_hostile_entry_under_the_limit_costs_a_bounded_multiple_of_its_size(
    shape: bytes,
) -> None:
    """Parsing JSON into Python objects costs more than the bytes (orjson sizes its document
    buffer from the input, and each empty ``{}`` becomes a 64-byte dict): measured 12x for
    nesting, 36x for empty objects. The size limit is what keeps that bounded."""
    data = b'{"o":' + shape + b"}"
    assert len(data) <= DEFAULT_MAX_BYTES

    def decode() -> None:
        with pytest.raises(WireDecodeError):
            decode_envelope(data)

    assert peak_allocation(decode) < 40 * len(data)


# --- watch lines ------------------------------------------------------------------------------


def watch_decoder() -> WatchDecoder:
    """The line parser of a watch (what a stream feeds each network read's lines to)."""
    return WatchDecoder(LINE_LIMIT, watch_list=False)


def parse_all(chunks: list[bytes]) -> tuple[list[WatchEvent], list[KubeError]]:
    """Feed ``chunks`` the way a watch does (framer, then the lines' parser); nothing may
    raise. Returns the events and the typed errors (bad lines', ERROR events')."""
    decoder = watch_decoder()
    framer = LineFramer(LINE_LIMIT)
    events: list[WatchEvent] = []
    errors: list[KubeError] = []
    for chunk in chunks:
        found, error = decoder.parse_lines(framer.feed(chunk))
        events += found
        if error is not None:
            errors.append(error)
    assert all(type(event.obj) is dict and type(event.obj["metadata"]) is dict for event in events)
    quoted = [error.excerpt for error in errors if isinstance(error, MalformedWatchEventError)]
    assert all(len(excerpt) <= 4096 for excerpt in quoted), "errors quote lines briefly"
    return events, errors


event_types = st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]) | st.text(
    max_size=8
)
watch_documents = st.fixed_dictionaries(
    {"type": event_types, "object": json_values | st.fixed_dictionaries({"metadata": json_values})}
) | st.dictionaries(st.sampled_from(["type", "object", "x"]), json_values, max_size=3)


@given(st.lists(st.binary(max_size=200), max_size=8))
@FUZZ
def test_arbitrary_watch_bytes_never_raise(chunks: list[bytes]) -> None:
    parse_all(chunks)


@given(st.lists(watch_documents | json_values, min_size=1, max_size=6), st.data())
@FUZZ
def test_structured_but_wrong_watch_lines_are_skipped_or_typed(
    documents: list[object], data: st.DataObject
) -> None:
    stream = b"".join(orjson.dumps(doc) + b"\n" for doc in documents)
    cut = data.draw(st.integers(0, len(stream)))
    _, errors = parse_all([stream[:cut], stream[cut:]])
    wanted = [d for d in documents if isinstance(d, dict) and d.get("type") == "ERROR"]
    assert len([error for error in errors if isinstance(error, ApiStatusError)]) <= len(wanted)
    assert all(isinstance(error, ApiStatusError | MalformedWatchEventError) for error in errors)


@pytest.mark.parametrize("depth", [1025, 1_000_000])
@pytest.mark.parametrize("kind", ["lists", "objects"])
def test_deeply_nested_watch_lines_are_reported_not_raised(depth: int, kind: str) -> None:
    line = b'{"type":"ADDED","object":{"metadata":' + nested(depth, kind) + b"}}\n"
    good = b'{"type":"ADDED","object":{"metadata":{"name":"ok"}}}\n'
    events, errors = parse_all([line[: len(line) // 2], line[len(line) // 2 :], good])
    assert [event.obj["metadata"]["name"] for event in events] == ["ok"]
    assert [type(error) for error in errors] == [MalformedWatchEventError]


def test_a_huge_watch_line_is_skipped_in_bounded_memory() -> None:
    chunk = b"x" * (1 << 20)  # what one network read may return, allocated before measuring
    good = b'\n{"type":"ADDED","object":{"metadata":{"name":"after"}}}\n'
    decoder = watch_decoder()
    framer = LineFramer(LINE_LIMIT)
    pending: list[int] = []
    found: list[WatchEvent] = []
    errors: list[KubeError] = []

    def parse(data: bytes) -> None:
        events, error = decoder.parse_lines(framer.feed(data))
        found.extend(events)
        if error is not None:
            errors.append(error)

    def feed() -> None:
        for _ in range(HUGE // len(chunk)):
            parse(chunk)
            pending.append(framer.pending)
        parse(good)

    peak = peak_allocation(feed)
    assert [event.obj["metadata"]["name"] for event in found] == ["after"]
    assert [str(error) for error in errors] == [
        f"line longer than {LINE_LIMIT} bytes: {b'x' * 200!r}... (over the limit)"
    ]
    assert max(pending) <= LINE_LIMIT
    assert peak < 4 * LINE_LIMIT, f"{HUGE} bytes of one line cost {peak} bytes"
