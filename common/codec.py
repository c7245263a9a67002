"""How an object becomes bytes and back: the pair a byte-keeping store is built with.

Neutral ground between the stores that keep bytes (:mod:`common.compact_store`) and the formats
whose bytes they keep (:mod:`common.wire`'s envelopes): each side imports this, neither imports
the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from common.keys import Obj

__all__ = ["Codec", "exact_bytes"]


class Codec(NamedTuple):
    """How a :class:`~common.compact_store.CompactIndexer` turns objects into bytes and back."""

    pack: Callable[[Obj], bytes]
    unpack: Callable[[bytes], Obj]


def exact_bytes(encoded: bytes) -> bytes:
    """A copy no larger than its content: ``orjson.dumps`` hands back its whole growth buffer
    (8 KB for a 2.7 KB Pod), which a long-lived cache entry would keep."""
    return bytes(memoryview(encoded))
