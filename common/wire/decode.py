"""Decoding: an entry's header alone (routing), its object against that header, or both.

A filtered consumer decides "not in my view" on the header (:func:`decode_header`) and parses
the object only for the entries it keeps (:func:`decode_object`); :func:`decode_envelope` does
both in one pass. Every entry point reads every version in :data:`SUPPORTED_VERSIONS` (a v1
entry has no separate header: it is parsed whole, at full cost for routing) and raises
:class:`WireDecodeError` and nothing else, so a consumer parks a poison entry with one
``except`` and goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from common.object_keys import Obj, namespace_of
from common.wire.envelope import (
    DEFAULT_MAX_BYTES,
    FIELD,
    HEADED,
    NO_OBJECT,
    SUPPORTED_VERSIONS,
    DeltaEnvelope,
    EntryHeader,
    WireDecodeError,
    new_envelope,
    set_fields,
    short,
)
from common.wire.validation import (
    DELTA_TYPES,
    as_decode_error,
    check_agreement,
    check_bytes,
    checked_header,
    checked_move_header,
    labels_of,
    preview,
)

_V1_FIELDS: Final = frozenset({"v", "t", "k", "rv", "uid", "ts", "tomb", "o"})
_NO_SEPARATOR: Final = "v2 envelope has no newline between its header and its object"


def decode_header(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> EntryHeader:
    """The routing decode: the entry's header, validated, without parsing its object.

    Checked here: the size limit (before any parse), the framing, every header field's type,
    the delta type, the tombstone rules, the key's shape and that ``ns`` is the key's namespace.
    The object part is not looked at beyond whether it is ``null``, so a garbage object passes
    here and fails :func:`decode_object`. Raises :class:`WireDecodeError` and nothing else.

    A v1 entry has no separate header: it is parsed and validated whole (labels derived from
    its object, ``fields`` empty), so v1 entries route at the full decode's cost.
    """
    try:
        check_bytes(data, max_bytes)
        if not data.startswith(HEADED):
            return _header_of_envelope(decode_document(data))
        return _v2_header(data, data.find(b"\n"))
    except WireDecodeError:
        raise
    except Exception as exc:
        raise as_decode_error(exc) from exc


def decode_object(data: bytes, header: EntryHeader) -> Obj | None:
    """The object of the entry ``data`` whose header :func:`decode_header` returned.

    Validated against ``header``: the object's key, resourceVersion, uid and labels must be the
    header's, so whatever was routed on is what gets stored. ``None`` for a tombstone without
    its last object. Raises :class:`WireDecodeError` and nothing else. A v1 entry is parsed
    again (it has no separate object part).
    """
    try:
        if type(data) is not bytes:
            raise WireDecodeError(f"envelope must be bytes, got {type(data).__name__}")
        if data.startswith(HEADED):
            return _v2_object(data, data.find(b"\n"), header)
        obj = decode_document(data).obj
        if obj is None and not header.has_object:
            return None
        check_agreement(obj, header)
        return obj
    except WireDecodeError:
        raise
    except Exception as exc:
        raise as_decode_error(exc) from exc


def decode_envelope(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> DeltaEnvelope:
    """Decode and validate one envelope (either version); raises :class:`WireDecodeError` and
    nothing else.

    ``max_bytes`` is enforced before parsing, so an oversized entry costs no parse. A v2 entry
    is what :func:`decode_header` and :func:`decode_object` check, in one pass: two parses, of
    the header and of the object.
    """
    try:
        check_bytes(data, max_bytes)
        if not data.startswith(HEADED):
            return decode_document(data)
        cut = data.find(b"\n")
        header = _v2_header(data, cut)
        obj = _v2_object(data, cut, header)
        # Everything DeltaEnvelope's constructor checks, the header and the object passed.
        env = new_envelope(DeltaEnvelope)
        set_fields(
            env,
            header.type,
            header.key,
            header.resource_version,
            header.uid,
            obj,
            header.observed_at,
            header.tombstone,
            header.move,
        )
        return env
    except WireDecodeError:
        raise
    except Exception as exc:
        raise as_decode_error(exc) from exc


def envelope_from_fields(
    fields: Mapping[Any, Any] | None, max_bytes: int = DEFAULT_MAX_BYTES
) -> DeltaEnvelope:
    """Decode the field mapping of one stream entry as redis-py returns it (XRANGE, XREADGROUP).

    A pending entry whose payload was trimmed away comes back without fields (redis-py gives
    ``{}``, or ``None`` on some paths); it is reported as :class:`WireDecodeError` like any other
    unusable entry. Requires a client with ``decode_responses=False``: envelopes are bytes.
    """
    try:
        count = 0 if fields is None else len(fields)
        data = fields[FIELD] if fields is not None and count == 1 else None
    except Exception:  # not a mapping, or no FIELD in it
        count, data = -1, None
    if count == 0:
        raise WireDecodeError("stream entry has no payload (trimmed before it was read?)")
    if data is None:
        raise WireDecodeError(
            f"stream entry must have exactly one field {FIELD!r}, got {_describe_fields(fields)}"
            " (envelopes need a Redis client with decode_responses=False)"
        )
    return decode_envelope(data, max_bytes)


def _v2_header(data: bytes, cut: int) -> EntryHeader:
    """The header of the v2 entry ``data`` whose first newline is at ``cut``."""
    if cut < 0:
        raise WireDecodeError(_NO_SEPARATOR)
    if data[cut - 1] != 0x7D:  # "}"
        raise WireDecodeError(f"v2 header must be one JSON object, got {preview(data[:cut])}")
    doc = orjson.loads(data[:cut])  # a copy of ~300 bytes is cheaper than a memoryview
    has_object = len(data) - cut != 5 or not data.endswith(NO_OBJECT)
    if data[5] == 0x33:  # '3' of '{"v":3,': a move's half
        return checked_move_header(doc, has_object=has_object)
    return checked_header(doc, has_object=has_object)


def _v2_object(data: bytes, cut: int, header: EntryHeader) -> Obj | None:
    """The object part of the v2 entry ``data`` (first newline at ``cut``), checked."""
    if cut < 0:
        raise WireDecodeError(_NO_SEPARATOR)
    if not header.has_object:
        if len(data) - cut != 5 or not data.endswith(NO_OBJECT):
            raise WireDecodeError("the header says no object, but the entry has one")
        return None
    if data[cut + 1 : cut + 2] != b"{" or not data.endswith(b"}"):
        raise WireDecodeError(
            "v2 object must be one JSON object with nothing around it, got "
            + preview(data[cut + 1 :])
        )
    obj = orjson.loads(memoryview(data)[cut + 1 :])  # parsed in place, not copied
    check_agreement(obj, header)
    return obj  # type: ignore[no-any-return]


def decode_document(data: bytes) -> DeltaEnvelope:
    """A version-1 entry: one JSON document (size already checked)."""
    # Encoders write compact JSON: one object, nothing before or after it. Checking the
    # framing first rejects other formats (and trailing whitespace, which orjson would
    # accept) before the parser sees them.
    if not (data.startswith(b"{") and data.endswith(b"}")):
        raise WireDecodeError(
            f"envelope must be one JSON object with nothing around it, got {preview(data)}"
        )
    doc = orjson.loads(data)
    version = doc.get("v")
    if version in (2, 3) and type(version) is int:
        raise WireDecodeError(
            f'a v{version} envelope must start with {{"v":{version}, and have its object after '
            "a newline"
        )
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        shown = "missing" if version is None else short(version)
        raise WireDecodeError(
            f"unsupported envelope schema version {shown}; this build reads versions "
            f"{sorted(SUPPORTED_VERSIONS)}"
        )
    return _decode_v1(doc)


def _decode_v1(doc: dict[str, Any]) -> DeltaEnvelope:
    if doc.keys() != _V1_FIELDS:
        missing = sorted(_V1_FIELDS - doc.keys())
        unknown = sorted(doc.keys() - _V1_FIELDS)
        raise WireDecodeError(f"v1 envelope fields wrong: missing {missing}, unknown {unknown}")
    type_name = doc["t"]
    delta_type = DELTA_TYPES.get(type_name) if type(type_name) is str else None
    if delta_type is None:
        raise WireDecodeError(
            f"unknown delta type {short(type_name)}; expected one of {sorted(DELTA_TYPES)}"
        )
    # Field types and consistency are checked once, by the envelope's own invariants; their
    # ValueError becomes a WireDecodeError in decode_envelope.
    return DeltaEnvelope(
        delta_type, doc["k"], doc["rv"], doc["uid"], doc["o"], doc["ts"], doc["tomb"]
    )


def _header_of_envelope(env: DeltaEnvelope) -> EntryHeader:
    """The header a v1 entry would have had (it carries no labels of its own, nor fields)."""
    labels = labels_of(env.obj)
    if labels is None:
        raise WireDecodeError(f"metadata.labels of {short(env.key)} must map strings to strings")
    return EntryHeader(
        env.type,
        env.key,
        namespace_of(env.key),
        env.resource_version,
        env.uid,
        labels,
        {},
        env.observed_at,
        env.tombstone,
        env.obj is not None,
    )


def _describe_fields(fields: Mapping[Any, Any] | None) -> str:
    try:
        return short(sorted(map(repr, fields)))  # type: ignore[arg-type]
    except Exception:  # not iterable after all
        return f"a {type(fields).__name__}"
