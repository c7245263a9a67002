"""What a group's handlers hold on a shard, and what a new owner of the shard owes them.

A group's handlers *hold* a key from the add that told them about it until the deletion that
told them it is gone (a deletion of the object, or, with a view, the update that took it out
of the view). An application that keeps state outside the process -- a database, a cost
exporter, an audit index -- holds exactly those keys, across every member of the group and
every restart. When a shard changes owner, its new owner must tell that application of the
keys it holds that were deleted, or left the view, while nobody owned the shard.

**The held set** (``GroupShardKeys.held``) records them in Redis, per group and shard: key ->
the state it entered with, as the group keeps it (``b""`` for a group without a view, whose
deletions carry their own state). Nothing is written per update. A process can only record
what it hands its handlers before or after the call, never with it, and a crash in between
must never leave a key the handlers hold unrecorded (a ghost, the worst outcome for an
application keeping state), so a key counts as held from the moment it is *handed* to the
handlers:

* a stream entry is handed when its owner reads it (it enters the group's pending list); the
  change it makes is written with its acknowledgement, by the fenced script that acknowledges
  it (:mod:`common.redis_layout.shard_scripts`), so the held set describes the acknowledged
  prefix and the pending entries say what the owner may have told beyond it;
* a takeover's initial list is handed when the takeover writes its keys to the held set,
  before the first of them reaches a handler.

The price of "never a ghost" is the other direction, in a narrow window: an owner that dies
after handing a key and before its handler ran leaves the key held, and if the object is
deleted before the next owner, that owner tells a deletion of an object the handlers never
heard of (a deletion of something not there: harmless to an idempotent application).

**At a takeover** (:class:`TakeoverReckoning`) a key is held when the held set has it or when
a pending entry handed a state of it the view selects. Entries after the group's
last-delivered ID were never handed to anyone: they say nothing of what is held, but like the
pending ones they give each key its *last state*. Every held key absent from the new owner's
selected snapshot is owed a deletion carrying:

* its last selected state in the unacknowledged entries (the final state of a deletion there,
  kept a tombstone if the reflector inferred it; or the state before it left the view, as a
  selector-filtered informer reports a leave), else
* the state the held set recorded, as a :class:`~common.object_keys.DeletedFinalStateUnknown`: the
  state the key entered the view with, or the one the last takeover's initial list gave it,
  whichever came later. Updates since then are not recorded (that would be a write per
  update), and the stream no longer holds them, so the final state is not known: a tombstone
  says so, as client-go's does when it cannot know (``None`` for a group without a view, whose
  deletions otherwise always carry their final state).

A key nobody handed the handlers is never owed anything: a group started for the first time
holds nothing, so it gets its initial list and then the stream after it, never a deletion of
history.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

import orjson

from common.deltas import DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.wire import DeltaEnvelope
from processor_svc.view import GroupView

__all__ = [
    "HeldChanges",
    "HeldState",
    "TakeoverReckoning",
    "held_arguments",
    "held_state",
]

HeldState: TypeAlias = bytes | None
"""One key's change of the held set: the state it entered with (set), or ``None`` (removed)."""

NO_VIEW_STATE: Final = b""
"""What the held set records for a group without a view: its deletions carry their state."""


def held_state(obj: Obj, view: GroupView | None) -> bytes:
    """What the held set records for a key handed with ``obj`` (as the group keeps it)."""
    return NO_VIEW_STATE if view is None else orjson.dumps(obj)


def held_arguments(changes: Mapping[str, HeldState]) -> list[str | bytes | int]:
    """The scripts' arguments for ``changes`` (``n``, pairs to set, ``m``, keys to remove)."""
    sets: list[str | bytes | int] = []
    removals: list[str | bytes | int] = []
    for key, state in changes.items():
        if state is None:
            removals.append(key)
        else:
            sets += (key, state)
    return [len(sets) // 2, *sets, len(removals), *removals]


class HeldChanges:
    """The held set's changes of entries read but not acknowledged yet, by entry ID.

    Only entries whose notification was an add (the key entered) or a deletion (it left) have
    one. :meth:`of` folds the changes of a run of entries per key, last one winning, for the
    script that acknowledges them; :meth:`forget` drops them once Redis confirmed.
    Acknowledgements are idempotent, and so are these: a call whose outcome is unknown sends
    them again with its IDs. Used by one thread (the shard's reader).
    """

    __slots__ = ("_by_entry",)

    def __init__(self) -> None:
        self._by_entry: dict[str, tuple[str, HeldState]] = {}

    def record(self, entry_id: str, key: str, state: HeldState) -> None:
        self._by_entry[entry_id] = (key, state)

    def of(self, ids: Sequence[str]) -> dict[str, HeldState]:
        """The changes of ``ids`` (in stream order), folded per key."""
        by_entry = self._by_entry
        if not by_entry:
            return {}
        folded: dict[str, HeldState] = {}
        for entry_id in ids:
            change = by_entry.get(entry_id)
            if change is not None:
                folded[change[0]] = change[1]
        return folded

    def forget(self, ids: Sequence[str]) -> None:
        by_entry = self._by_entry
        if by_entry:
            for entry_id in ids:
                by_entry.pop(entry_id, None)

    def clear(self) -> None:
        self._by_entry.clear()

    def __len__(self) -> int:
        return len(self._by_entry)


@dataclass(slots=True)
class _Trail:
    """One key's story in the unacknowledged entries."""

    handed: bool = False
    """A pending entry handed the handlers a selected state of it (not acknowledged)."""
    last: Obj | None = None
    """Its last selected state there, as the group keeps it."""
    inferred: bool = False
    """``last`` is the final state of a deletion the reflector inferred (a tombstone)."""


class TakeoverReckoning:
    """What a takeover owes the handlers of keys they hold (module docstring).

    ``held`` is the held set as the takeover read it (with the snapshot, in one ``MULTI``);
    :meth:`saw` takes the unacknowledged entries up to the snapshot, in stream order;
    :meth:`owed` the deletions to deliver before the initial list; :meth:`handing` what to
    record before listing keys; :meth:`told` what to record once the owed deletions were told.
    """

    def __init__(self, held: Mapping[bytes, bytes], view: GroupView | None) -> None:
        self._held = {field.decode(errors="replace"): state for field, state in held.items()}
        self._view = view
        self._trails: dict[str, _Trail] = {}

    def saw(self, envelope: DeltaEnvelope, *, pending: bool) -> None:
        """One unacknowledged entry; ``pending``: it was handed to the previous owner."""
        obj, view = envelope.obj, self._view
        selected = obj is not None and (view is None or view.selects(obj))
        if not selected:
            return  # a leave (or a deletion of an unselected state): the last state stands
        assert obj is not None
        trail = self._trails.get(envelope.key)
        if trail is None:
            trail = self._trails[envelope.key] = _Trail()
        trail.last = obj if view is None else view.project(obj)
        if envelope.type is DeltaType.DELETED:
            trail.inferred = envelope.tombstone
        else:
            trail.inferred = False
            trail.handed = trail.handed or pending

    def owed(self, snapshot_keys: Container[str]) -> dict[str, Obj | DeletedFinalStateUnknown]:
        """Key -> the deletion owed to the handlers, for every held key the snapshot (as the
        view selects it) lacks."""
        owed: dict[str, Obj | DeletedFinalStateUnknown] = {}
        for key in self._held_keys():
            if key in snapshot_keys:
                continue
            trail = self._trails.get(key)
            if trail is not None and trail.last is not None:
                last = trail.last
                owed[key] = DeletedFinalStateUnknown(key, last) if trail.inferred else last
            else:
                owed[key] = DeletedFinalStateUnknown(key, self._recorded(key))
        return owed

    def handing(self, listed: Iterable[tuple[str, Obj]]) -> dict[str, HeldState]:
        """What to record before the initial list hands ``listed`` (key, object as kept):
        every key with the state the list gives it (for a group without a view, which records
        no state, only the keys the held set lacks)."""
        held, view = self._held, self._view
        return {
            key: held_state(obj, view) for key, obj in listed if view is not None or key not in held
        }

    def told(self, owed: Iterable[str]) -> dict[str, HeldState]:
        """What to record once the handlers processed the deletions of ``owed``."""
        return dict.fromkeys(owed)

    def _held_keys(self) -> list[str]:
        keys = list(self._held)
        keys += (
            key for key, trail in self._trails.items() if trail.handed and key not in self._held
        )
        return keys

    def _recorded(self, key: str) -> Obj | None:
        state = self._held.get(key)
        if not state:
            return None
        try:
            recorded = orjson.loads(state)
        except orjson.JSONDecodeError:
            return None
        return recorded if isinstance(recorded, dict) else None
