"""The versioned delta envelope: what one Redis stream entry carries.

Every delta the reflector publishes travels as one stream entry with a single field ``b"d"``
(:data:`FIELD`) holding one encoded envelope. One field, not one per attribute: the blob is
versioned and validated as a unit, and its header costs nothing beyond the object's own parse.

Format, version 1: one compact JSON object (what ``orjson`` writes, no whitespace)::

    {"v":1,"t":"Updated","k":"ns/name","rv":"123","uid":"...","ts":1714567890.12,"tomb":false,
     "o":{...the object...}}

``v`` schema version, ``t`` delta type (client-go spelling, :class:`~common.deltas.DeltaType`),
``k`` cache key, ``rv``/``uid`` the object's ``metadata.resourceVersion``/``uid`` (``""`` when
unknown), ``ts`` when the reflector observed the change (unix seconds), ``tomb`` true for an
inferred deletion (``DeletedFinalStateUnknown``), ``o`` the object, or its last known state for a
tombstone (``null`` when that is unknown). All eight fields are always present.

Why this format: measured by ``bench/wire_codecs.py`` (Python 3.11, orjson 3.13, msgpack 1.2,
2 shared cores, best of 15) on a realistic 3.5 KB Pod (labels, annotations, ownerReferences,
managedFields, 2 containers, volumes, conditions, containerStatuses), µs per operation::

    option                        bytes  encode  enc(pre)  decode  enc+dec
    bare orjson (Pod only)         3492    2.34       -      8.64    10.98
    bare msgpack (Pod only)        2921    7.22       -     14.81    22.04
    A whole envelope, orjson       3653    2.67     0.46     9.09    11.75
    B msgpack header + JSON bin    3594    3.13     0.63     9.22    12.35
    C whole envelope, msgpack      3020    7.39       -     14.80    22.19

(``enc(pre)``: encoding from the object's JSON bytes; msgpack decoding as hardened as it would
have to be here: ``raw=False, strict_map_key=True``, an ``ext_hook`` that rejects, and
``unpackb``'s input-length bounds.)

* Whole msgpack (C) is 2.8x slower to encode and 1.6x slower to decode than JSON, for 17 %
  fewer bytes: out.
* A msgpack header around the object's JSON bytes (B) is a second parser pass and a copy of
  the object bytes, buying nothing A lacks: A is one ``orjson.loads`` per entry.
* A splices the watch stream's raw object JSON in with ``orjson.Fragment`` instead of
  re-serialising the dict: 0.46 µs instead of 2.67 µs per encode.
* Through this module, validation included: encode 2.93 µs (1.01 µs from ``obj_json``), decode
  11.35 µs; encode+decode = 1.30x the bare ``orjson.dumps`` + ``loads`` of the same Pod
  (1.13x on the reflector's ``obj_json`` path). Target: <= 1.5x.

Decoding is strict, because a bad entry must stop at the consumer's door, not corrupt a cache:
anything malformed raises :class:`WireDecodeError` (a ``ValueError``) and nothing else, with a
message that says what was wrong. The size limit is checked before parsing. Unknown fields and
unknown versions are rejected rather than ignored: a new format gets a new ``v``, and this module
keeps decoding every version in :data:`SUPPORTED_VERSIONS` (a test pins a v1 byte string).
The header must agree with the object (key, resourceVersion, uid), so a consumer may route or
dedupe on the header alone without ever disagreeing with what it stores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final

import orjson

from common.codec import Codec, exact_bytes
from common.deltas import Delta, DeltaType
from common.keys import DeletedFinalStateUnknown, Obj, meta_namespace_key

if TYPE_CHECKING:  # redis-py's own types, so the mapping passes straight to xadd under mypy
    from redis.typing import EncodableT, FieldT

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENVELOPE_CODEC",
    "FIELD",
    "SUPPORTED_VERSIONS",
    "WIRE_VERSION",
    "DeltaEnvelope",
    "WireDecodeError",
    "decode_envelope",
    "encode_envelope",
    "envelope_from_fields",
    "envelope_to_fields",
]

WIRE_VERSION: Final = 1
"""The version :func:`encode_envelope` writes."""

SUPPORTED_VERSIONS: Final = frozenset({1})
"""The versions :func:`decode_envelope` reads; old versions stay here while streams hold them."""

DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024
"""Largest accepted envelope. etcd refuses objects over 1.5 MiB (its default request limit, in
protobuf); their JSON can be about twice that. Anything larger is not a Kubernetes object."""

FIELD: Final = b"d"
"""The one field of a stream entry, holding the encoded envelope."""

_V1_FIELDS: Final = frozenset({"v", "t", "k", "rv", "uid", "ts", "tomb", "o"})
_DELTA_TYPES: Final[dict[str, DeltaType]] = {member.value: member for member in DeltaType}


class WireDecodeError(ValueError):
    """An encoded envelope (or stream entry) that cannot be decoded; the message says why.

    The only exception :func:`decode_envelope` raises, so a consumer can park a poison entry
    with one ``except`` and keep going.
    """


@dataclass(frozen=True, slots=True, init=False)
class DeltaEnvelope:
    """One delta as it travels on a stream: the change plus what a consumer needs around it.

    Invariants, checked on every construction (``ValueError``) so that no envelope, decoded or
    built, can break them: ``tombstone`` only with :attr:`DeltaType.DELETED`; an ``obj`` unless
    ``tombstone``; when ``obj`` is present, ``key``, ``resource_version`` and ``uid`` are its
    ``meta_namespace_key``, ``metadata.resourceVersion`` and ``metadata.uid`` (``""`` if absent);
    a tombstone without its last object has ``resource_version == uid == ""``. The schema version
    is a property of the encoding, not of the envelope: decoding any supported version yields
    this (current) shape.
    """

    type: DeltaType
    key: str
    resource_version: str
    uid: str
    obj: Obj | None
    """The object; for a tombstone its last known state, ``None`` when never known."""
    observed_at: float
    """Unix seconds at which the reflector saw the change (for end-to-end latency)."""
    tombstone: bool = False
    """True for an inferred deletion (client-go ``DeletedFinalStateUnknown``)."""

    def __init__(  # noqa: PLR0917 - the positional signature a dataclass would generate
        self,
        type: DeltaType,
        key: str,
        resource_version: str,
        uid: str,
        obj: Obj | None,
        observed_at: float,
        tombstone: bool = False,
    ) -> None:
        # Hand-written because this runs once per decoded delta: the generated __init__ of a
        # frozen dataclass assigns through object.__setattr__, twice the cost of the slots' own
        # descriptors (0.84 vs 0.38 µs for seven fields, ~4 % of a Pod's decode).
        _set_fields(self, type, key, resource_version, uid, obj, observed_at, tombstone)
        problem = _invariant_violation(self)
        if problem is not None:
            raise ValueError(f"invalid envelope for key {_short(key)}: {problem}")

    @classmethod
    def from_delta(cls, delta: Delta, *, observed_at: float) -> DeltaEnvelope:
        """Wrap a :class:`~common.deltas.Delta`; key, resourceVersion, uid come from its object."""
        if isinstance(delta.obj, DeletedFinalStateUnknown):
            key, obj, tombstone = delta.obj.key, delta.obj.obj, True
        else:
            return cls.of_object(delta.type, delta.obj, observed_at=observed_at)
        resource_version, uid = _version_and_uid(obj)
        return cls(delta.type, key, resource_version, uid, obj, observed_at, tombstone)

    @classmethod
    def of_object(cls, delta_type: DeltaType, obj: Obj, *, observed_at: float) -> DeltaEnvelope:
        """The envelope of a delta that carries ``obj`` itself (not a tombstone).

        The reflector's per-event path: the cache key is computed here, once, and read back
        as :attr:`key`. Key, resourceVersion and uid are taken from ``obj``, so they agree
        with it by construction and only the types are checked; an object without a usable
        name raises :class:`~common.keys.InvalidKeyError` (a ``ValueError``).
        """
        key = meta_namespace_key(obj)
        resource_version, uid = _version_and_uid(obj)
        env = cls.__new__(cls)
        _set_fields(env, delta_type, key, resource_version, uid, obj, observed_at, False)
        problem = _type_violation(env)
        if problem is not None:
            raise ValueError(f"invalid envelope for key {_short(key)}: {problem}")
        return env

    def to_delta(self) -> Delta:
        """The :class:`~common.deltas.Delta` this envelope carries (a tombstone as such)."""
        if self.tombstone or self.obj is None:
            return Delta(self.type, DeletedFinalStateUnknown(self.key, self.obj))
        return Delta(self.type, self.obj)


# The slot descriptors DeltaEnvelope.__init__ assigns through, in field order (an added field
# breaks this unpacking at import rather than leaving a slot unset).
(
    _set_type,
    _set_key,
    _set_resource_version,
    _set_uid,
    _set_obj,
    _set_observed_at,
    _set_tombstone,
) = (vars(DeltaEnvelope)[field.name].__set__ for field in fields(DeltaEnvelope))


def _set_fields(  # noqa: PLR0917 - DeltaEnvelope's positional fields, in order
    env: DeltaEnvelope,
    delta_type: DeltaType,
    key: str,
    resource_version: str,
    uid: str,
    obj: Obj | None,
    observed_at: float,
    tombstone: bool,
) -> None:
    _set_type(env, delta_type)
    _set_key(env, key)
    _set_resource_version(env, resource_version)
    _set_uid(env, uid)
    _set_obj(env, obj)
    _set_observed_at(env, observed_at)
    _set_tombstone(env, tombstone)


def encode_envelope(
    env: DeltaEnvelope, *, obj_json: bytes | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> bytes:
    """Encode ``env`` in the current format (:data:`WIRE_VERSION`).

    ``obj_json``, when given, is ``env.obj`` already serialised as JSON (the raw bytes the watch
    stream delivered); it is spliced in verbatim instead of re-serialising the dict. It is not
    re-parsed (that would cost what it saves), only checked to look like one JSON object: the
    caller vouches that it is ``env.obj``, and consumers re-validate it on decode.

    Raises ``ValueError`` when the result would exceed ``max_bytes``: an envelope consumers would
    refuse must fail here, at the producer, not as a poison entry on the stream.
    """
    obj: object = env.obj
    if obj_json is not None:
        if env.obj is None:
            raise ValueError("obj_json was given for an envelope without an object")
        obj_json = obj_json.strip()
        if not (obj_json.startswith(b"{") and obj_json.endswith(b"}")):
            raise ValueError("obj_json must be the JSON bytes of one object ('{...}')")
        obj = orjson.Fragment(obj_json)
    data = orjson.dumps(
        {
            "v": WIRE_VERSION,
            "t": env.type.value,
            "k": env.key,
            "rv": env.resource_version,
            "uid": env.uid,
            "ts": env.observed_at,
            "tomb": env.tombstone,
            "o": obj,
        }
    )
    if len(data) > max_bytes:
        raise ValueError(
            f"envelope for {env.key!r} is {len(data)} bytes, over the {max_bytes}-byte limit"
        )
    return data


def decode_envelope(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> DeltaEnvelope:
    """Decode and validate one envelope; raises :class:`WireDecodeError` and nothing else.

    ``max_bytes`` is enforced before parsing, so an oversized entry costs no parse. The cost is
    one ``orjson.loads`` of the entry plus ~2.7 µs of checks (8.6 -> 11.4 µs for a 3.5 KB Pod).
    """
    try:
        if type(data) is not bytes:
            raise WireDecodeError(f"envelope must be bytes, got {type(data).__name__}")
        if len(data) > max_bytes:
            raise WireDecodeError(
                f"envelope is {len(data)} bytes, over the {max_bytes}-byte limit (not parsed)"
            )
        # Encoders write compact JSON: one object, nothing before or after it. Checking the
        # framing first rejects other formats (and trailing whitespace, which orjson would
        # accept) before the parser sees them.
        if not (data.startswith(b"{") and data.endswith(b"}")):
            raise WireDecodeError(
                f"envelope must be one JSON object with nothing around it, got {_preview(data)}"
            )
        doc = orjson.loads(data)
        version = doc.get("v")
        if type(version) is not int or version not in SUPPORTED_VERSIONS:
            shown = "missing" if version is None else _short(version)
            raise WireDecodeError(
                f"unsupported envelope schema version {shown}; this build reads versions "
                f"{sorted(SUPPORTED_VERSIONS)}"
            )
        return _decode_v1(doc)
    except WireDecodeError:
        raise
    except orjson.JSONDecodeError as exc:
        raise WireDecodeError(f"envelope is not valid JSON: {exc}") from exc
    except ValueError as exc:  # an envelope invariant, from DeltaEnvelope.__init__
        raise WireDecodeError(str(exc)) from exc
    except Exception as exc:  # the contract: no other exception type escapes, whatever the input
        raise WireDecodeError(f"malformed envelope: {type(exc).__name__}: {exc}") from exc


def envelope_to_fields(
    env: DeltaEnvelope, *, obj_json: bytes | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> dict[FieldT, EncodableT]:
    """The XADD field mapping for ``env``: ``{FIELD: encoded}`` (see :func:`encode_envelope`)."""
    return {FIELD: encode_envelope(env, obj_json=obj_json, max_bytes=max_bytes)}


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


def _decode_v1(doc: dict[str, Any]) -> DeltaEnvelope:
    if doc.keys() != _V1_FIELDS:
        missing = sorted(_V1_FIELDS - doc.keys())
        unknown = sorted(doc.keys() - _V1_FIELDS)
        raise WireDecodeError(f"v1 envelope fields wrong: missing {missing}, unknown {unknown}")
    type_name = doc["t"]
    delta_type = _DELTA_TYPES.get(type_name) if type(type_name) is str else None
    if delta_type is None:
        raise WireDecodeError(
            f"unknown delta type {_short(type_name)}; expected one of {sorted(_DELTA_TYPES)}"
        )
    # Field types and consistency are checked once, by the envelope's own invariants; their
    # ValueError becomes a WireDecodeError in decode_envelope.
    return DeltaEnvelope(
        delta_type, doc["k"], doc["rv"], doc["uid"], doc["o"], doc["ts"], doc["tomb"]
    )


def _invariant_violation(env: DeltaEnvelope) -> str | None:
    """What is wrong with ``env``, or ``None``."""
    return _type_violation(env) or _consistency_violation(env)


def _type_violation(env: DeltaEnvelope) -> str | None:
    # Typed as object: decoded values arrive unchecked, and built ones may defy their hints.
    delta_type: object = env.type
    if not isinstance(delta_type, DeltaType):
        return f"type must be a DeltaType, got {_short(delta_type)}"
    key: object = env.key
    if type(key) is not str or not key:
        return f"key must be a non-empty string, got {_short(key)}"
    resource_version: object = env.resource_version
    if type(resource_version) is not str:
        return f"resource_version must be a string ('' if unknown), got {_short(resource_version)}"
    uid: object = env.uid
    if type(uid) is not str:
        return f"uid must be a string ('' if unknown), got {_short(uid)}"
    observed_at: object = env.observed_at
    if not (type(observed_at) is float or type(observed_at) is int) or not math.isfinite(
        observed_at
    ):
        return f"observed_at must be finite unix seconds, got {_short(observed_at)}"
    tombstone: object = env.tombstone
    if type(tombstone) is not bool:
        return f"tombstone must be a bool, got {_short(tombstone)}"
    obj: object = env.obj
    if obj is not None and type(obj) is not dict:
        return f"obj must be a dict (a JSON object) or None, got {type(obj).__name__}"
    return None


def _consistency_violation(env: DeltaEnvelope) -> str | None:
    if env.tombstone and env.type is not DeltaType.DELETED:
        return f"a tombstone (inferred deletion) must have type Deleted, not {env.type.value}"
    obj = env.obj
    if obj is None:
        if not env.tombstone:
            return f"a {env.type.value} delta needs an object (only a tombstone may lack one)"
        if env.resource_version or env.uid:
            return "a tombstone without its last object has no resource_version or uid"
        parts = env.key.split("/")
        if len(parts) > 2 or not all(parts):
            return "key must be 'namespace/name' or 'name'"
        return None
    try:
        object_key = meta_namespace_key(obj)
    except ValueError as exc:
        return str(exc)
    if object_key != env.key:
        return f"key does not match the object's key {_short(object_key)}"
    resource_version, uid = _version_and_uid(obj)
    if resource_version != env.resource_version:
        return (
            f"resource_version {_short(env.resource_version)} is not the object's "
            f"{_short(resource_version)}"
        )
    if uid != env.uid:
        return f"uid {_short(env.uid)} is not the object's {_short(uid)}"
    return None


def _version_and_uid(obj: Obj | None) -> tuple[str, str]:
    """``metadata.resourceVersion`` and ``metadata.uid``, ``""`` where absent or unknown."""
    if obj is None:
        return "", ""
    metadata = obj.get("metadata")
    if type(metadata) is not dict:
        return "", ""
    return metadata.get("resourceVersion", ""), metadata.get("uid", "")


def _preview(data: bytes) -> str:
    return repr(data[:40]) + ("..." if len(data) > 40 else "")


def _short(value: object) -> str:
    """``repr`` bounded in length: error messages quote untrusted input."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe_fields(fields: Mapping[Any, Any] | None) -> str:
    try:
        return _short(sorted(map(repr, fields)))  # type: ignore[arg-type]
    except Exception:  # not iterable after all
        return f"a {type(fields).__name__}"


def _object_of_envelope(packed: bytes) -> Obj:
    obj: Obj = orjson.loads(packed)["o"]
    return obj


def _object_holder(obj: Obj) -> bytes:
    return exact_bytes(orjson.dumps({"o": obj}))


ENVELOPE_CODEC: Final = Codec(_object_holder, _object_of_envelope)
"""For a :class:`~common.compact_store.CompactIndexer` that keeps stream entries as they came:
``unpack`` reads the object of an envelope already validated on arrival (one parse, no
checks), and ``pack`` writes the smallest document it reads back, ``{"o": ...}``, for the
objects that arrive without their envelope. Never decode those holders as envelopes."""
