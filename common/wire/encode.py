"""Encoding: an envelope in the current format, header, newline, object.

The producer's side: what consumers would refuse must fail here (``ValueError``), not become a
poison entry on a stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from common.object_keys import namespace_of
from common.wire.envelope import (
    DEFAULT_MAX_BYTES,
    FIELD,
    MOVE_VERSION,
    NO_OBJECT,
    WIRE_VERSION,
    DeltaEnvelope,
)
from common.wire.validation import is_string_map, labels_of

if TYPE_CHECKING:  # redis-py's own types, so the mapping passes straight to xadd under mypy
    from redis.typing import EncodableT, FieldT


def encode_envelope(
    env: DeltaEnvelope,
    *,
    obj_json: bytes | None = None,
    fields: Mapping[str, str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> bytes:
    """Encode ``env`` in the current format (:data:`WIRE_VERSION`): header, newline, object.

    ``obj_json``, when given, is ``env.obj`` already serialised as JSON (the raw bytes the watch
    stream delivered); it is spliced in verbatim instead of re-serialising the dict. It is not
    re-parsed (that would cost what it saves), only checked to look like one JSON object: the
    caller vouches that it is ``env.obj``, and consumers re-validate it on decode.

    ``fields``: the object's selectable field values (``{"spec.nodeName": "node-7"}``), which
    the caller computes (this module knows no resource); they travel in the header so that a
    field selector needs no object parse. The header's labels come from ``env.obj``.

    Raises ``ValueError`` when the result would exceed ``max_bytes`` (an envelope consumers
    would refuse must fail here, at the producer, not as a poison entry on the stream), or when
    the labels or ``fields`` are not strings to strings.
    """
    obj = env.obj
    if obj_json is not None:
        if obj is None:
            raise ValueError("obj_json was given for an envelope without an object")
        part = obj_json.strip()
        if not (part.startswith(b"{") and part.endswith(b"}")):
            raise ValueError("obj_json must be the JSON bytes of one object ('{...}')")
    else:
        part = NO_OBJECT if obj is None else orjson.dumps(obj)
    labels = labels_of(obj)
    if labels is None:
        raise ValueError(f"metadata.labels of {env.key!r} must map strings to strings")
    selectable = {} if fields is None else fields if type(fields) is dict else dict(fields)
    if not is_string_map(selectable):
        raise ValueError(f"fields of {env.key!r} must map strings to strings")
    key = env.key
    move = env.move
    doc = {
        "v": WIRE_VERSION if move is None else MOVE_VERSION,
        "t": env.type.value,
        "k": key,
        "ns": namespace_of(key),
        "rv": env.resource_version,
        "uid": env.uid,
        "ts": env.observed_at,
        "tomb": env.tombstone,
        "l": labels,
        "f": selectable,
    }
    if move is not None:
        doc["mv"] = move.as_json()
    try:
        header = orjson.dumps(doc)
    except TypeError as exc:  # a key that is not a string: orjson checks those, not is_string_map
        raise ValueError(f"labels and fields of {env.key!r} must map strings to strings") from exc
    data = b"\n".join((header, part))
    if len(data) > max_bytes:
        raise ValueError(
            f"envelope for {env.key!r} is {len(data)} bytes, over the {max_bytes}-byte limit"
        )
    return data


def envelope_to_fields(
    env: DeltaEnvelope,
    *,
    obj_json: bytes | None = None,
    fields: Mapping[str, str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[FieldT, EncodableT]:
    """The XADD field mapping for ``env``: ``{FIELD: encoded}`` (see :func:`encode_envelope`)."""
    return {FIELD: encode_envelope(env, obj_json=obj_json, fields=fields, max_bytes=max_bytes)}
