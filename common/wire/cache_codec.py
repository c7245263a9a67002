"""What a processor's cache keeps of a stream entry: its object part, not re-encoded.

The header (key, labels, selectable fields) was read when the entry arrived; the cache keeps
only the object behind an empty header, and reads it back with one parse and no checks.
"""

from __future__ import annotations

from typing import Final

import orjson

from common.codec import Codec
from common.object_keys import Obj
from common.wire.envelope import HEADED


def _object_of_envelope(packed: bytes) -> Obj:
    if packed.startswith(HEADED) or packed.startswith(b"\n"):  # a v2/v3 entry, or a holder
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
