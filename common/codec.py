"""How an object becomes bytes and back: the pair a byte-keeping store is built with.

Neutral ground between the stores that keep bytes (:mod:`common.compact_store`) and the formats
whose bytes they keep (:mod:`common.wire`'s envelopes): each side imports this, neither imports
the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from common.object_keys import Obj

__all__ = ["Codec", "as_is", "exact_bytes"]


def as_is(packed: bytes) -> bytes:
    return packed


class Codec(NamedTuple):
    """How a :class:`~common.compact_store.CompactIndexer` turns objects into bytes and back.

    ``keep`` is what the store keeps of bytes a caller hands over already packed: the part
    ``unpack`` reads, without what only the caller needed (``unpack(keep(b)) == unpack(b)``).
    """

    pack: Callable[[Obj], bytes]
    unpack: Callable[[bytes], Obj]
    keep: Callable[[bytes], bytes] = as_is


def exact_bytes(encoded: bytes) -> bytes:
    """A copy no larger than its content: ``orjson.dumps`` hands back its whole growth buffer
    (8 KB for a 2.7 KB Pod), which a long-lived cache entry would keep."""
    return bytes(memoryview(encoded))
