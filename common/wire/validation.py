"""What a decoder checks of an entry others wrote, before anything routes on it or stores it.

Decoding is strict, because a bad entry must stop at the consumer's door, not corrupt a cache:
the size limit before any parse, the framing, every header field's type, the delta type, the
tombstone rules, the key's shape and its namespace, and that the object agrees with its header
(key, resourceVersion, uid, labels), so a consumer may route or dedupe on the header alone
without ever disagreeing with what it stores. Anything wrong becomes :class:`WireDecodeError`
with a message that says what. The header's rules are written once, as one chain
(:func:`checked_header`), so the routing decode pays one comparison per rule and no call.
"""

from __future__ import annotations

import math
from typing import Any, Final

import orjson

from common.deltas import DeltaType
from common.object_keys import Obj
from common.wire.envelope import (
    EntryHeader,
    WireDecodeError,
    identity_disagreement,
    move_of,
    move_violation,
    short,
)

_V2_FIELDS: Final = frozenset({"v", "t", "k", "ns", "rv", "uid", "ts", "tomb", "l", "f"})
_STRINGS_ONLY: Final = frozenset({str})
DELTA_TYPES: Final[dict[str, DeltaType]] = {member.value: member for member in DeltaType}
"""Delta types by their wire spelling."""
_new_tuple: Final = tuple.__new__


# Complex by design (C901): the header's rules are one chain on the routing path, where a call
# per rule would cost what the chain saves; a fast and a slow spelling of them is what it replaced.
def checked_header(  # noqa: C901
    doc: dict[str, Any], *, has_object: bool, version: int = 2
) -> EntryHeader:
    """The :class:`EntryHeader` of ``doc``, a parsed v2 header (or a v3 one without its ``mv``),
    every rule checked; :class:`WireDecodeError` naming the first one broken."""
    try:  # ten distinct keys, all of them found: the key set is exactly _V2_FIELDS
        if len(doc) != len(_V2_FIELDS):
            raise KeyError
        key, namespace, resource_version, uid = doc["k"], doc["ns"], doc["rv"], doc["uid"]
        observed_at, tombstone, labels, selectable = doc["ts"], doc["tomb"], doc["l"], doc["f"]
        type_name = doc["t"]
    except KeyError:
        missing = sorted(_V2_FIELDS - doc.keys())
        unknown = sorted(doc.keys() - _V2_FIELDS)
        raise WireDecodeError(
            f"v{version} header fields wrong: missing {missing}, unknown {unknown}"
        ) from None
    # Every rule of a valid header, once, in the order a problem is reported: on a well-formed
    # header (every entry but a poison one) each test is one comparison and nothing is called,
    # so the routing decode costs little more than its parse.
    delta_type = DELTA_TYPES.get(type_name) if type(type_name) is str else None
    if delta_type is None:
        raise WireDecodeError(
            f"unknown delta type {short(type_name)}; expected one of {sorted(DELTA_TYPES)}"
        )
    if type(key) is not str or not key:
        raise _invalid_header(key, f"key must be a non-empty string, got {short(key)}")
    slash = key.find("/")
    if slash < 0:
        key_namespace = ""
    elif 0 < slash < len(key) - 1 and key.find("/", slash + 1) < 0:
        key_namespace = key[:slash]
    else:
        raise _invalid_header(key, "key must be 'namespace/name' or 'name'")
    if namespace != key_namespace:
        raise _invalid_header(
            key, f"namespace {short(namespace)} is not the key's {short(key_namespace)}"
        )
    if type(resource_version) is not str:
        raise _invalid_header(
            key,
            f"resource_version must be a string ('' if unknown), got {short(resource_version)}",
        )
    if type(uid) is not str:
        raise _invalid_header(key, f"uid must be a string ('' if unknown), got {short(uid)}")
    if not (type(observed_at) is float or type(observed_at) is int) or not math.isfinite(
        observed_at
    ):
        raise _invalid_header(
            key, f"observed_at must be finite unix seconds, got {short(observed_at)}"
        )
    if type(tombstone) is not bool:
        raise _invalid_header(key, f"tombstone must be a bool, got {short(tombstone)}")
    if not (type(labels) is dict and _STRINGS_ONLY.issuperset(map(type, labels.values()))):
        raise _invalid_header(key, f"labels must map strings to strings, got {short(labels)}")
    if not (type(selectable) is dict and _STRINGS_ONLY.issuperset(map(type, selectable.values()))):
        raise _invalid_header(key, f"fields must map strings to strings, got {short(selectable)}")
    if tombstone and delta_type is not DeltaType.DELETED:
        raise _invalid_header(
            key,
            f"a tombstone (inferred deletion) must have type Deleted, not {type_name}",
        )
    if not has_object:
        if not tombstone:
            raise _invalid_header(
                key, f"a {type_name} delta needs an object (only a tombstone may lack one)"
            )
        if resource_version or uid or labels:
            raise _invalid_header(
                key,
                "a tombstone without its last object has no resource_version, uid or labels",
            )
    return _new_tuple(
        EntryHeader,
        (
            delta_type,
            key,
            namespace,
            resource_version,
            uid,
            labels,
            selectable,
            observed_at,
            tombstone,
            has_object,
            None,
        ),
    )


def _invalid_header(key: object, problem: str) -> WireDecodeError:
    return WireDecodeError(f"invalid v2 header for key {short(key)}: {problem}")


def checked_move_header(doc: dict[str, Any], *, has_object: bool) -> EntryHeader:
    """A version-3 header: a version-2 header plus its ``mv`` (:class:`Move`)."""
    if "mv" not in doc:
        raise WireDecodeError("a v3 header must carry a move ('mv')")
    value = doc.pop("mv")
    move = move_of(value)
    if move is None:
        raise WireDecodeError(f"invalid move {short(value)} in the v3 header")
    header = checked_header(doc, has_object=has_object, version=3)
    problem = move_violation(move, header.type, header.tombstone)
    if problem is not None:
        raise WireDecodeError(f"invalid v3 header for key {short(header.key)}: {problem}")
    return header._replace(move=move)


def check_bytes(data: bytes, max_bytes: int) -> None:
    if type(data) is not bytes:
        raise WireDecodeError(f"envelope must be bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise WireDecodeError(
            f"envelope is {len(data)} bytes, over the {max_bytes}-byte limit (not parsed)"
        )


def as_decode_error(exc: Exception) -> WireDecodeError:
    """The one exception type decoding lets out, whatever went wrong."""
    if isinstance(exc, WireDecodeError):
        return exc
    if isinstance(exc, orjson.JSONDecodeError):
        return WireDecodeError(f"envelope is not valid JSON: {exc}")
    if isinstance(exc, ValueError):  # an envelope invariant, from DeltaEnvelope.__init__
        return WireDecodeError(str(exc))
    return WireDecodeError(f"malformed envelope: {type(exc).__name__}: {exc}")


def check_agreement(obj: object, header: EntryHeader) -> None:
    problem = _object_disagreement(obj, header)
    if problem is not None:
        raise WireDecodeError(f"object of {short(header.key)} disagrees with its header: {problem}")


def _object_disagreement(obj: object, header: EntryHeader) -> str | None:
    """How ``obj`` disagrees with the header it came with, or ``None``."""
    if type(obj) is not dict:
        return f"obj must be a dict (a JSON object) or None, got {type(obj).__name__}"
    metadata = obj.get("metadata")
    if type(metadata) is dict:  # the usual case, in one step; anything odd, the long way
        name, namespace = metadata.get("name"), metadata.get("namespace")
        labels = metadata.get("labels")
        if (
            type(name) is str
            and name
            and (f"{namespace}/{name}" if namespace else name) == header.key
            and metadata.get("resourceVersion", "") == header.resource_version
            and metadata.get("uid", "") == header.uid
            and ({} if labels is None else labels) == header.labels
        ):
            return None
    problem = identity_disagreement(obj, header.key, header.resource_version, header.uid)
    if problem is not None:
        return problem
    labels = obj["metadata"].get("labels")
    return f"labels {short(header.labels)} are not the object's {short(labels)}"


def is_string_map(value: object) -> bool:
    """A dict whose values are strings; its keys are too when it came from JSON (and the
    encoder's orjson.dumps refuses any other key)."""
    return type(value) is dict and _STRINGS_ONLY.issuperset(map(type, value.values()))


def labels_of(obj: Obj | None) -> dict[str, str] | None:
    """``metadata.labels`` (``{}`` when absent), or ``None`` when they are not strings."""
    if obj is None:
        return {}
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if type(metadata) is dict else None
    if labels is None:
        return {}
    return labels if is_string_map(labels) else None


def preview(data: bytes) -> str:
    return repr(data[:40]) + ("..." if len(data) > 40 else "")
