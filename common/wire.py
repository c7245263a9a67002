"""The versioned delta envelope: what one Redis stream entry carries.

Every delta the reflector publishes travels as one stream entry with a single field ``b"d"``
(:data:`FIELD`) holding one encoded envelope; the shard's ``objects`` hash keeps the same bytes
as the key's known state. One field, not one per attribute: the blob is versioned and validated
as a unit, and the hash and the stream share one layout.

Format, version 2 (written since issue 14): a compact JSON header, one newline, the object::

    {"v":2,"t":"Updated","k":"ns/name","ns":"ns","rv":"123","uid":"...","ts":1714567890.12,
     "tomb":false,"l":{"app":"web"},"f":{"spec.nodeName":"node-7"}}
    {...the object...}

``v`` schema version, ``t`` delta type (client-go spelling, :class:`~common.deltas.DeltaType`),
``k`` cache key, ``ns`` its namespace (``""`` when cluster-scoped), ``rv``/``uid`` the object's
``metadata.resourceVersion``/``uid`` (``""`` when unknown), ``ts`` when the reflector observed the
change (unix seconds), ``tomb`` true for an inferred deletion (``DeletedFinalStateUnknown``),
``l`` the object's labels, ``f`` its selectable field values as the reflector computed them
(this module knows no resource). After the newline: the object, or its last known state for a
tombstone, or ``null`` when that is unknown. orjson never writes a raw newline, so the first one
ends the header whatever the object part holds, and every v2 entry starts ``{"v":2,``.

Version 3 (issue 15) is version 2 plus one header field, ``mv``, and is written only for the two
halves of a *move*: an object whose shard key changed (a new owner, a relabel:
:mod:`common.shard_keys`) leaves its old shard as a ``Deleted`` entry marked ``"mv":{"to":S}``
(the shard it goes to; the object part is its last state on the old shard) and arrives on the
new shard as an ``Added`` entry marked ``"mv":{"from":S,"id":"<entry id>"}``, naming the old
shard and the stream id of that deletion there, so a consumer holding both shards can apply the
deletion before the addition (:class:`Move`). Every other entry stays version 2, byte for byte:
a consumer that predates version 3 parks a move's entries as poison instead of misreading them
(upgrade processors before reflectors that shard by anything but the object's key).

Why: a filtered consumer (label, namespace or field selector) decides "not in my view" on the
header alone (:func:`decode_header`) and parses the object only for what it keeps
(:func:`decode_object`). Measured by ``bench/wire_codecs.py`` (Python 3.11, orjson 3.13, msgpack
1.2, 2 shared cores, best of 15) on a 3.5 KB Pod with 4 labels and 8 selectable fields, µs per
entry, encode from the object's JSON bytes::

    layout                            encode   route    keep  bytes
    v1 one JSON document                0.39    7.95    8.89   3653
    J  JSON header \\n object  (v2)      0.44    1.54   10.38   3998
    M  msgpack map, len-prefixed        1.36    2.74   11.86   3906
    M' msgpack array, len-prefixed      1.26    2.79   12.10   3878
    B  msgpack array + object bin       1.20    1.96   10.94   3879
    F  fields h + o (+ hash blob)       0.41    1.23    9.18   3997

(``route`` the header alone; ``keep`` header, object and their agreement; msgpack decoding as
hardened as a consumer must configure it.) msgpack headers encode 3x slower and route slower
than a JSON header for 3 % fewer bytes, so msgpack is not used. Two stream fields (F) route
0.3 µs faster, but the second field costs Redis and redis-py 0.1-0.9 µs per entry on XADD and
-0.2 to +0.7 µs on XRANGE (1,000 entries, four runs; same stream memory), and the ``objects``
hash holds one value per key: F needs a second, one-blob form of every entry and two layouts
in every reader. (The v1 choice, same bench: one JSON document beat a msgpack header around the
object and whole-envelope msgpack, 2.8x slower to encode, 1.6x to decode.)

Through this module, validation included (same run): ``decode_header`` 3.3 µs against 13.5 µs
for ``decode_envelope``, so routing costs a quarter of a full decode (a v1 entry routes at full
cost, 11.7 µs). Encode from ``obj_json`` 2.0 µs with the 8 fields (1.7 µs without; v1: 0.9
µs), 4.2 µs from the dict: the header's labels and fields are checked and serialised. A v2
entry decodes in 1.3x a v1 one (two parses; labels and fields are parsed in the header and
again in the object) = 1.66x the bare ``orjson.loads`` of the Pod. Encode+decode against the
bare ``orjson.dumps`` + ``loads``: 1.50x on the reflector's ``obj_json`` path with the 8 fields
(1.38x without fields), 1.62x from the dict (v1: 1.13x and 1.30x; target <= 1.5x). The excess
over v1 is the header this format exists for.

Version 1, still decoded by every entry point (streams and hashes written before v2 keep it
until trimmed or rewritten): one compact JSON object
``{"v":1,"t":...,"k":...,"rv":...,"uid":...,"ts":...,"tomb":...,"o":{...}}`` with the same
meanings and no labels or fields. Its header is the whole document, so :func:`decode_header`
parses and validates all of it (labels taken from the object, ``fields`` empty).

Decoding is strict, because a bad entry must stop at the consumer's door, not corrupt a cache:
anything malformed raises :class:`WireDecodeError` (a ``ValueError``) and nothing else, with a
message that says what was wrong. The size limit is checked before parsing. Unknown fields and
unknown versions are rejected rather than ignored: a new format gets a new ``v``, and this module
keeps decoding every version in :data:`SUPPORTED_VERSIONS` (tests pin a v1 and a v2 byte
string). The header must agree with the object (key, resourceVersion, uid, labels), so a
consumer may route or dedupe on the header alone without ever disagreeing with what it stores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from common.codec import Codec
from common.deltas import Delta, DeltaType
from common.keys import DeletedFinalStateUnknown, Obj, meta_namespace_key, namespace_of

if TYPE_CHECKING:  # redis-py's own types, so the mapping passes straight to xadd under mypy
    from redis.typing import EncodableT, FieldT

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENVELOPE_CODEC",
    "FIELD",
    "SUPPORTED_VERSIONS",
    "WIRE_VERSION",
    "DeltaEnvelope",
    "EntryHeader",
    "Move",
    "WireDecodeError",
    "decode_envelope",
    "decode_header",
    "decode_object",
    "encode_envelope",
    "envelope_from_fields",
    "envelope_to_fields",
    "moved_in",
    "moved_out",
]

WIRE_VERSION: Final = 2
"""The version :func:`encode_envelope` writes for every delta but a move's halves."""
_MOVE_VERSION: Final = 3
"""The version of a move's two halves (the only entries with a ``mv`` header field)."""

SUPPORTED_VERSIONS: Final = frozenset({1, 2, 3})
"""The versions :func:`decode_envelope` reads; old versions stay here while streams hold them."""

DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024
"""Largest accepted envelope. etcd refuses objects over 1.5 MiB (its default request limit, in
protobuf); their JSON can be about twice that. Anything larger is not a Kubernetes object."""

FIELD: Final = b"d"
"""The one field of a stream entry, holding the encoded envelope."""

_V1_FIELDS: Final = frozenset({"v", "t", "k", "rv", "uid", "ts", "tomb", "o"})
_V2_FIELDS: Final = frozenset({"v", "t", "k", "ns", "rv", "uid", "ts", "tomb", "l", "f"})
_V2_PREFIX: Final = b'{"v":2,'
"""How every v2 entry starts (the encoder writes ``v`` first): the version is known before any
parse, and a v1 document (``{"v":1,...``, or any other order) never starts like this."""
_V3_PREFIX: Final = b'{"v":3,'
_HEADED: Final = (_V2_PREFIX, _V3_PREFIX)
"""The prefixes of the versions with a header line (``bytes.startswith`` takes the tuple)."""
_ENTRY_ID = re.compile(r"[0-9]+-[0-9]+")
_NO_OBJECT: Final = b"null"
_STRINGS_ONLY: Final = frozenset({str})
_NO_SEPARATOR: Final = "v2 envelope has no newline between its header and its object"
_DELTA_TYPES: Final[dict[str, DeltaType]] = {member.value: member for member in DeltaType}


class WireDecodeError(ValueError):
    """An encoded envelope (or stream entry) that cannot be decoded; the message says why.

    The only exception :func:`decode_envelope` raises, so a consumer can park a poison entry
    with one ``except`` and keep going.
    """


class Move(NamedTuple):
    """Half of a move of one object between two shards of its resource (version 3).

    The outgoing half (``to_shard`` set) is the ``Deleted`` entry on the old shard, carrying the
    object's last state there; the incoming half (``from_shard`` and ``from_id`` set) is the
    ``Added`` entry on the new shard, and ``from_id`` is the stream id of the outgoing half on
    ``from_shard``. The reflector writes the outgoing half first and learns its id from Redis, so
    a consumer that holds both shards can wait until it has applied ``from_id`` on
    ``from_shard`` before applying the incoming half: the object is never in both at once.
    """

    to_shard: int | None = None
    from_shard: int | None = None
    from_id: str = ""

    @property
    def outgoing(self) -> bool:
        """The old shard's half (a deletion)."""
        return self.to_shard is not None

    def as_json(self) -> dict[str, Any]:
        """The header's ``mv`` value."""
        if self.to_shard is not None:
            return {"to": self.to_shard}
        return {"from": self.from_shard, "id": self.from_id}


def _move_of(value: object) -> Move | None:
    """The :class:`Move` of a header's ``mv`` value; ``None`` when it is malformed."""
    if type(value) is not dict:
        return None
    if value.keys() == {"to"}:
        shard = value["to"]
        return Move(to_shard=shard) if type(shard) is int and shard >= 0 else None
    if value.keys() == {"from", "id"}:
        shard, entry_id = value["from"], value["id"]
        if (
            type(shard) is int
            and shard >= 0
            and type(entry_id) is str
            and _ENTRY_ID.fullmatch(entry_id)
        ):
            return Move(from_shard=shard, from_id=entry_id)
    return None


def _move_violation(move: Move | None, delta_type: DeltaType, tombstone: bool) -> str | None:
    """What is wrong with ``move`` on a delta of ``delta_type``, or ``None``."""
    if move is None:
        return None
    if move.outgoing:
        if delta_type is not DeltaType.DELETED or tombstone:
            return "the outgoing half of a move must be a Deleted delta that is no tombstone"
        return None
    if delta_type is not DeltaType.ADDED:
        return "the incoming half of a move must be an Added delta"
    return None


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
    move: Move | None = None
    """Set when this delta is half of a move between shards (version 3, :class:`Move`)."""

    def __init__(  # noqa: PLR0917 - the positional signature a dataclass would generate
        self,
        type: DeltaType,
        key: str,
        resource_version: str,
        uid: str,
        obj: Obj | None,
        observed_at: float,
        tombstone: bool = False,
        move: Move | None = None,
    ) -> None:
        # Hand-written because this runs once per decoded delta: the generated __init__ of a
        # frozen dataclass assigns through object.__setattr__, twice the cost of the slots' own
        # descriptors (0.84 vs 0.38 µs for seven fields, ~4 % of a Pod's decode).
        _set_fields(self, type, key, resource_version, uid, obj, observed_at, tombstone, move)
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
        _set_fields(env, delta_type, key, resource_version, uid, obj, observed_at, False, None)
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
    _set_move,
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
    move: Move | None,
) -> None:
    _set_type(env, delta_type)
    _set_key(env, key)
    _set_resource_version(env, resource_version)
    _set_uid(env, uid)
    _set_obj(env, obj)
    _set_observed_at(env, observed_at)
    _set_tombstone(env, tombstone)
    _set_move(env, move)


class EntryHeader(NamedTuple):
    """What a consumer routes on without parsing the object: the header of a v2 entry.

    A named tuple because one is built per entry routed: immutable, no per-instance dict, and
    the cheapest record to construct (0.12 µs from the decoder against 0.8 µs for a frozen
    slots dataclass). Built and validated by :func:`decode_header`; the constructor checks
    nothing. ``labels`` are the object's ``metadata.labels`` (``{}`` without them, or for a
    tombstone without its last object); ``fields`` the selectable field values the reflector
    computed (``spec.nodeName`` -> ``node-7``), ``{}`` when it gave none. ``namespace`` is
    ``""`` for a cluster-scoped key. ``has_object``: whether the entry carries an object (false
    only for a tombstone whose last state is unknown). ``move``: the :class:`Move` an entry of
    version 3 carries. The dicts are the decoder's own: treat them as read-only.
    """

    type: DeltaType
    key: str
    namespace: str
    resource_version: str
    uid: str
    labels: dict[str, str]
    fields: dict[str, str]
    observed_at: float
    tombstone: bool
    has_object: bool
    move: Move | None = None
    """Set on the two halves of a move between shards (version 3)."""


_new_tuple: Final = tuple.__new__
_new_envelope: Final = object.__new__


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
        part = _NO_OBJECT if obj is None else orjson.dumps(obj)
    labels = _labels_of(obj)
    if labels is None:
        raise ValueError(f"metadata.labels of {env.key!r} must map strings to strings")
    selectable = {} if fields is None else fields if type(fields) is dict else dict(fields)
    if not _is_string_map(selectable):
        raise ValueError(f"fields of {env.key!r} must map strings to strings")
    key = env.key
    move = env.move
    doc = {
        "v": WIRE_VERSION if move is None else _MOVE_VERSION,
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
    except TypeError as exc:  # a key that is not a string: orjson checks those, not _is_string_map
        raise ValueError(f"labels and fields of {env.key!r} must map strings to strings") from exc
    data = b"\n".join((header, part))
    if len(data) > max_bytes:
        raise ValueError(
            f"envelope for {env.key!r} is {len(data)} bytes, over the {max_bytes}-byte limit"
        )
    return data


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
    if _move_of(move.as_json()) != move:
        raise ValueError(f"invalid move {move!r}")
    if data.startswith(_HEADED):
        cut = data.find(b"\n")
        doc = orjson.loads(data[:cut])
        body = data[cut:]
    else:  # a version-1 known state: its object is re-serialised once
        doc = {"ns": header.namespace, "uid": header.uid, "l": header.labels, "f": header.fields}
        doc.update(k=header.key, rv=header.resource_version, tomb=False)
        body = b"\n" + orjson.dumps(_decode_document(data).obj)
    doc.pop("mv", None)
    doc.update(v=_MOVE_VERSION, t=delta_type.value, ts=observed_at, tomb=False)
    head = orjson.dumps({"v": _MOVE_VERSION, **doc, "mv": move.as_json()})
    return head + body


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
        _check_bytes(data, max_bytes)
        if not data.startswith(_HEADED):
            return _header_of_envelope(_decode_document(data))
        return _v2_header(data, data.find(b"\n"))
    except WireDecodeError:
        raise
    except Exception as exc:
        raise _as_decode_error(exc) from exc


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
        if data.startswith(_HEADED):
            return _v2_object(data, data.find(b"\n"), header)
        obj = _decode_document(data).obj
        if obj is None and not header.has_object:
            return None
        _check_agreement(obj, header)
        return obj
    except WireDecodeError:
        raise
    except Exception as exc:
        raise _as_decode_error(exc) from exc


def decode_envelope(data: bytes, max_bytes: int = DEFAULT_MAX_BYTES) -> DeltaEnvelope:
    """Decode and validate one envelope (either version); raises :class:`WireDecodeError` and
    nothing else.

    ``max_bytes`` is enforced before parsing, so an oversized entry costs no parse. A v2 entry
    is what :func:`decode_header` and :func:`decode_object` check, in one pass: two parses, of
    the header and of the object.
    """
    try:
        _check_bytes(data, max_bytes)
        if not data.startswith(_HEADED):
            return _decode_document(data)
        cut = data.find(b"\n")
        header = _v2_header(data, cut)
        obj = _v2_object(data, cut, header)
        # Everything DeltaEnvelope's constructor checks, the header and the object passed.
        env = _new_envelope(DeltaEnvelope)
        _set_fields(
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
        raise _as_decode_error(exc) from exc


def _v2_header(data: bytes, cut: int) -> EntryHeader:
    """The header of the v2 entry ``data`` whose first newline is at ``cut``."""
    if cut < 0:
        raise WireDecodeError(_NO_SEPARATOR)
    if data[cut - 1] != 0x7D:  # "}"
        raise WireDecodeError(f"v2 header must be one JSON object, got {_preview(data[:cut])}")
    doc = orjson.loads(data[:cut])  # a copy of ~300 bytes is cheaper than a memoryview
    has_object = len(data) - cut != 5 or not data.endswith(_NO_OBJECT)
    if data[5] == 0x33:  # '3' of '{"v":3,': a move's half
        return _header_v3(doc, has_object=has_object)
    return _header_v2(doc, has_object=has_object)


def _header_v3(doc: dict[str, Any], *, has_object: bool) -> EntryHeader:
    """A version-3 header: a version-2 header plus its ``mv`` (:class:`Move`)."""
    if "mv" not in doc:
        raise WireDecodeError("a v3 header must carry a move ('mv')")
    value = doc.pop("mv")
    move = _move_of(value)
    if move is None:
        raise WireDecodeError(f"invalid move {_short(value)} in the v3 header")
    header = _header_v2(doc, has_object=has_object, version=3)
    problem = _move_violation(move, header.type, header.tombstone)
    if problem is not None:
        raise WireDecodeError(f"invalid v3 header for key {_short(header.key)}: {problem}")
    return header._replace(move=move)


def _v2_object(data: bytes, cut: int, header: EntryHeader) -> Obj | None:
    """The object part of the v2 entry ``data`` (first newline at ``cut``), checked."""
    if cut < 0:
        raise WireDecodeError(_NO_SEPARATOR)
    if not header.has_object:
        if len(data) - cut != 5 or not data.endswith(_NO_OBJECT):
            raise WireDecodeError("the header says no object, but the entry has one")
        return None
    if data[cut + 1 : cut + 2] != b"{" or not data.endswith(b"}"):
        raise WireDecodeError(
            "v2 object must be one JSON object with nothing around it, got "
            + _preview(data[cut + 1 :])
        )
    obj = orjson.loads(memoryview(data)[cut + 1 :])  # parsed in place, not copied
    _check_agreement(obj, header)
    return obj  # type: ignore[no-any-return]


def _check_agreement(obj: object, header: EntryHeader) -> None:
    problem = _object_disagreement(obj, header)
    if problem is not None:
        raise WireDecodeError(
            f"object of {_short(header.key)} disagrees with its header: {problem}"
        )


def _check_bytes(data: bytes, max_bytes: int) -> None:
    if type(data) is not bytes:
        raise WireDecodeError(f"envelope must be bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise WireDecodeError(
            f"envelope is {len(data)} bytes, over the {max_bytes}-byte limit (not parsed)"
        )


def _as_decode_error(exc: Exception) -> WireDecodeError:
    """The one exception type decoding lets out, whatever went wrong."""
    if isinstance(exc, WireDecodeError):
        return exc
    if isinstance(exc, orjson.JSONDecodeError):
        return WireDecodeError(f"envelope is not valid JSON: {exc}")
    if isinstance(exc, ValueError):  # an envelope invariant, from DeltaEnvelope.__init__
        return WireDecodeError(str(exc))
    return WireDecodeError(f"malformed envelope: {type(exc).__name__}: {exc}")


def _decode_document(data: bytes) -> DeltaEnvelope:
    """A version-1 entry: one JSON document (size already checked)."""
    # Encoders write compact JSON: one object, nothing before or after it. Checking the
    # framing first rejects other formats (and trailing whitespace, which orjson would
    # accept) before the parser sees them.
    if not (data.startswith(b"{") and data.endswith(b"}")):
        raise WireDecodeError(
            f"envelope must be one JSON object with nothing around it, got {_preview(data)}"
        )
    doc = orjson.loads(data)
    version = doc.get("v")
    if version in (2, 3) and type(version) is int:
        raise WireDecodeError(
            f'a v{version} envelope must start with {{"v":{version}, and have its object after '
            "a newline"
        )
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        shown = "missing" if version is None else _short(version)
        raise WireDecodeError(
            f"unsupported envelope schema version {shown}; this build reads versions "
            f"{sorted(SUPPORTED_VERSIONS)}"
        )
    return _decode_v1(doc)


def envelope_to_fields(
    env: DeltaEnvelope,
    *,
    obj_json: bytes | None = None,
    fields: Mapping[str, str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> dict[FieldT, EncodableT]:
    """The XADD field mapping for ``env``: ``{FIELD: encoded}`` (see :func:`encode_envelope`)."""
    return {FIELD: encode_envelope(env, obj_json=obj_json, fields=fields, max_bytes=max_bytes)}


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


def _header_of_envelope(env: DeltaEnvelope) -> EntryHeader:
    """The header a v1 entry would have had (it carries no labels of its own, nor fields)."""
    labels = _labels_of(env.obj)
    if labels is None:
        raise WireDecodeError(f"metadata.labels of {_short(env.key)} must map strings to strings")
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


# Complex by design (C901): the header's rules are one chain on the routing path, where a call
# per rule would cost what the chain saves; a fast and a slow spelling of them is what it replaced.
def _header_v2(  # noqa: C901
    doc: dict[str, Any], *, has_object: bool, version: int = 2
) -> EntryHeader:
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
    delta_type = _DELTA_TYPES.get(type_name) if type(type_name) is str else None
    if delta_type is None:
        raise WireDecodeError(
            f"unknown delta type {_short(type_name)}; expected one of {sorted(_DELTA_TYPES)}"
        )
    if type(key) is not str or not key:
        raise _invalid_header(key, f"key must be a non-empty string, got {_short(key)}")
    slash = key.find("/")
    if slash < 0:
        key_namespace = ""
    elif 0 < slash < len(key) - 1 and key.find("/", slash + 1) < 0:
        key_namespace = key[:slash]
    else:
        raise _invalid_header(key, "key must be 'namespace/name' or 'name'")
    if namespace != key_namespace:
        raise _invalid_header(
            key, f"namespace {_short(namespace)} is not the key's {_short(key_namespace)}"
        )
    if type(resource_version) is not str:
        raise _invalid_header(
            key,
            f"resource_version must be a string ('' if unknown), got {_short(resource_version)}",
        )
    if type(uid) is not str:
        raise _invalid_header(key, f"uid must be a string ('' if unknown), got {_short(uid)}")
    if not (type(observed_at) is float or type(observed_at) is int) or not math.isfinite(
        observed_at
    ):
        raise _invalid_header(
            key, f"observed_at must be finite unix seconds, got {_short(observed_at)}"
        )
    if type(tombstone) is not bool:
        raise _invalid_header(key, f"tombstone must be a bool, got {_short(tombstone)}")
    if not (type(labels) is dict and _STRINGS_ONLY.issuperset(map(type, labels.values()))):
        raise _invalid_header(key, f"labels must map strings to strings, got {_short(labels)}")
    if not (type(selectable) is dict and _STRINGS_ONLY.issuperset(map(type, selectable.values()))):
        raise _invalid_header(key, f"fields must map strings to strings, got {_short(selectable)}")
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
    return WireDecodeError(f"invalid v2 header for key {_short(key)}: {problem}")


def _is_string_map(value: object) -> bool:
    """A dict whose values are strings; its keys are too when it came from JSON (and the
    encoder's orjson.dumps refuses any other key)."""
    return type(value) is dict and _STRINGS_ONLY.issuperset(map(type, value.values()))


def _labels_of(obj: Obj | None) -> dict[str, str] | None:
    """``metadata.labels`` (``{}`` when absent), or ``None`` when they are not strings."""
    if obj is None:
        return {}
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if type(metadata) is dict else None
    if labels is None:
        return {}
    return labels if _is_string_map(labels) else None


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
    problem = _identity_disagreement(obj, header.key, header.resource_version, header.uid)
    if problem is not None:
        return problem
    labels = obj["metadata"].get("labels")
    return f"labels {_short(header.labels)} are not the object's {_short(labels)}"


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
    move: object = env.move
    if move is not None:
        if not isinstance(move, Move) or move != _move_of(move.as_json()):
            return f"move must be a well-formed Move or None, got {_short(move)}"
        problem = _move_violation(move, env.type, env.tombstone)
        if problem is not None:
            return problem
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
    return _identity_disagreement(obj, env.key, env.resource_version, env.uid)


def _identity_disagreement(obj: Obj, key: str, resource_version: str, uid: str) -> str | None:
    """How ``obj``'s key, resourceVersion or uid differ from the ones given, or ``None``."""
    try:
        object_key = meta_namespace_key(obj)
    except ValueError as exc:
        return str(exc)
    if object_key != key:
        return f"key does not match the object's key {_short(object_key)}"
    object_version, object_uid = _version_and_uid(obj)
    if object_version != resource_version:
        return (
            f"resource_version {_short(resource_version)} is not the object's "
            f"{_short(object_version)}"
        )
    if object_uid != uid:
        return f"uid {_short(uid)} is not the object's {_short(object_uid)}"
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
    if packed.startswith(_HEADED) or packed.startswith(b"\n"):  # a v2/v3 entry, or a holder
        obj: Obj = orjson.loads(memoryview(packed)[packed.find(b"\n") + 1 :])
        return obj
    obj = orjson.loads(packed)["o"]  # a v1 entry
    return obj


def _object_holder(obj: Obj) -> bytes:
    return b"\n" + orjson.dumps(obj)  # a new bytes of exactly its size: nothing to trim


def _object_part(entry: bytes) -> bytes:
    """What a cache keeps of a v2 entry: its object behind an empty header (``b"\\n{...}"``),
    a holder. The header (key, labels, selectable fields, ~0.4-0.5 KB for a Pod) was read when
    the entry arrived; kept, it cost ~0.15x the Pod's JSON per cached object, enough to put
    the compact cache at the edge of its 1.5x target (issue 16). The slice is a copy of the
    object part (~1 µs for a 3 KB Pod), and the entry itself is freed once handled. v1 entries
    (one JSON object, no newline) and holders are kept whole."""
    newline = entry.find(b"\n")
    return entry[newline:] if newline > 0 else entry


ENVELOPE_CODEC: Final = Codec(_object_holder, _object_of_envelope, _object_part)
"""For a :class:`~common.compact_store.CompactIndexer` that keeps stream entries' objects:
``unpack`` reads the object of an entry already validated on arrival, v1 or v2 (one parse, of
the object alone for v2, no checks); ``keep`` cuts an entry handed over to its object part,
and ``pack`` writes the same holder, an empty header and the object (``b"\\n{...}"``), for
the objects that arrive without their entry. Never decode those holders as envelopes (they
fail to, having no header)."""
