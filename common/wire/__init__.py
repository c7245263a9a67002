"""The versioned delta envelope: what one Redis stream entry carries.

Every delta the reflector publishes travels as one stream entry with a single field ``b"d"``
(:data:`FIELD`) holding one encoded envelope; the shard's ``objects`` hash keeps the same bytes
as the key's known state. One field, not one per attribute: the blob is versioned and validated
as a unit, and the hash and the stream share one layout. docs/wire.md specifies it for
consumers in other languages.

Format, version 2 (written since issue 14): a compact JSON header, one newline, the object::

    {"v":2,"t":"Updated","k":"ns/name","ns":"ns","rv":"123","uid":"...","ts":1714567890.12,
     "tomb":false,"l":{"app":"web"},"f":{"spec.nodeName":"node-7"}}
    {...the object...}

``v`` schema version, ``t`` delta type (client-go spelling, :class:`~common.deltas.DeltaType`),
``k`` cache key, ``ns`` its namespace (``""`` when cluster-scoped), ``rv``/``uid`` the object's
``metadata.resourceVersion``/``uid`` (``""`` when unknown), ``ts`` when the reflector observed the
change (unix seconds), ``tomb`` true for an inferred deletion (``DeletedFinalStateUnknown``),
``l`` the object's labels, ``f`` its selectable field values as the reflector computed them
(the wire format knows no resource). After the newline: the object, or its last known state for
a tombstone, or ``null`` when that is unknown. orjson never writes a raw newline, so the first
one ends the header whatever the object part holds, and every v2 entry starts ``{"v":2,``.

Version 3 (issue 15) is version 2 plus one header field, ``mv``, and is written only for the two
halves of a *move*: an object whose shard key changed (a new owner, a relabel:
:mod:`common.shard_routing`) leaves its old shard as a ``Deleted`` entry marked ``"mv":{"to":S}``
(the shard it goes to; the object part is its last state on the old shard) and arrives on the
new shard as an ``Added`` entry marked ``"mv":{"from":S,"id":"<entry id>"}``, naming the old
shard and the stream id of that deletion there, so a consumer holding both shards can apply the
deletion before the addition (:class:`Move`). Every other entry stays version 2, byte for byte:
a consumer that predates version 3 parks a move's entries as poison instead of misreading them
(upgrade processors before reflectors that shard by anything but the object's key).

Why a header: a filtered consumer (label, namespace or field selector) decides "not in my view"
on the header alone (:func:`decode_header`) and parses the object only for what it keeps
(:func:`decode_object`); routing costs about a quarter of a full decode. A JSON header beat
msgpack headers and two stream fields (docs/performance.md, "The wire envelope", has the
measurements and the reasons).

Version 1, still decoded by every entry point (streams and hashes written before v2 keep it
until trimmed or rewritten): one compact JSON object
``{"v":1,"t":...,"k":...,"rv":...,"uid":...,"ts":...,"tomb":...,"o":{...}}`` with the same
meanings and no labels or fields. Its header is the whole document, so :func:`decode_header`
parses and validates all of it (labels taken from the object, ``fields`` empty).

Unknown fields and unknown versions are rejected rather than ignored: a new format gets a new
``v``, and the decoder keeps reading every version in :data:`SUPPORTED_VERSIONS` (tests pin a
v1 and a v2 byte string). The package, by idea: the records and their invariants
(:mod:`~common.wire.envelope`), :mod:`~common.wire.encode`, :mod:`~common.wire.decode`, what a
decoder checks (:mod:`~common.wire.validation`), the halves of a move
(:mod:`~common.wire.moves`), and what a cache keeps of an entry
(:mod:`~common.wire.cache_codec`). Import from ``common.wire``: its ``__all__`` is the whole
public surface, and the submodules' other names serve each other only.
"""

from common.wire.cache_codec import ENVELOPE_CODEC
from common.wire.decode import decode_envelope, decode_header, decode_object, envelope_from_fields
from common.wire.encode import encode_envelope, envelope_to_fields
from common.wire.envelope import (
    DEFAULT_MAX_BYTES,
    FIELD,
    SUPPORTED_VERSIONS,
    WIRE_VERSION,
    DeltaEnvelope,
    EntryHeader,
    Move,
    WireDecodeError,
)
from common.wire.moves import moved_in, moved_out

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
