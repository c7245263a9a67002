"""Deltas: what changed about one object, and the DeltaFIFO rules that produce them.

client-go's DeltaFIFO is a queue *and* a set of rules: which deltas a relist produces, when two
deletions collapse into one, when a deletion is dropped. In informer-bus the queue is a Redis
stream, so the rules live here as pure functions that the reflector (which writes deltas) and
the tests (which check them) share. Reference: client-go-semantics.md section 2.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from common.keys import DeletedFinalStateUnknown, Obj

__all__ = [
    "Delta",
    "DeltaType",
]


class DeltaType(enum.StrEnum):
    """The kinds of change (reference 2.1); values are the client-go spellings, used on the wire."""

    ADDED = "Added"
    UPDATED = "Updated"
    DELETED = "Deleted"
    REPLACED = "Replaced"
    SYNC = "Sync"


@dataclass(frozen=True, slots=True)
class Delta:
    """One change to one object. ``obj`` is a tombstone only for inferred deletions."""

    type: DeltaType
    obj: Obj | DeletedFinalStateUnknown
