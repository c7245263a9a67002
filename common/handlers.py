"""Event handlers and ``process_deltas``: how a delta becomes a store write and a callback.

The handler contract is client-go's ResourceEventHandler, in Python spelling. Handlers receive
the objects the store is written with, shared by every handler (and, in a plain store, with the
store), so they must not mutate them (see ``store``).
Reference: client-go-semantics.md section 3.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from common.deltas import Delta, DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj

__all__ = [
    "DeltaTarget",
    "FilteringResourceEventHandler",
    "ResourceEventHandler",
    "ResourceEventHandlerFuncs",
    "process_deltas",
]


@runtime_checkable
class ResourceEventHandler(Protocol):
    """What a controller implements to hear about changes.

    Runtime-checkable, so that a handler named on the command line is checked for its three
    methods when it is loaded, not when its first event arrives.

    ``on_delete`` receives either the object's final state or a
    :class:`~common.object_keys.DeletedFinalStateUnknown` when the deletion was inferred from a
    relist (its ``obj`` may be stale or ``None``): handle both.
    """

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None: ...

    def on_update(self, old: Obj, new: Obj) -> None: ...

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None: ...


class DeltaTarget(Protocol):
    """The write side of a store that ``process_deltas`` needs; an Indexer satisfies it.

    ``update`` returns the object it replaced, so add-versus-update is decided in the same
    step as the write; ``key`` skips recomputing a key the caller already has; ``packed``, the
    object's serialised form, spares a store that keeps bytes from encoding it again.
    ``discard`` returns nothing: the handler hears of a deletion through the delta's own
    object, so a store that keeps bytes never decodes the one it removes.
    """

    def update(
        self, obj: Obj, key: str | None = None, packed: bytes | None = None
    ) -> Obj | None: ...

    def discard(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class ResourceEventHandlerFuncs:
    """Adapts plain functions to the handler protocol; a missing function ignores that event.

    Lets a user who cares only about deletions write one function instead of a class.
    """

    add: Callable[[Obj, bool], None] | None = None
    update: Callable[[Obj, Obj], None] | None = None
    delete: Callable[[Obj | DeletedFinalStateUnknown], None] | None = None

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        if self.add is not None:
            self.add(obj, is_in_initial_list)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if self.delete is not None:
            self.delete(obj)


@dataclass(frozen=True, slots=True)
class FilteringResourceEventHandler:
    """Shows the inner handler only the objects that pass ``filter`` (reference 3.3).

    An object that stops passing looks like a deletion to the inner handler, and one that starts
    passing looks like an addition, so the handler's view is a consistent subset of the cache.

    For a tombstone, the filter sees the last known object. A tombstone with no last object is
    delivered: we cannot tell whether it passed, and a missed deletion is worse than an extra one
    (client-go hands the tombstone itself to the filter and leaves that choice to every user).
    """

    filter: Callable[[Obj], bool]
    handler: ResourceEventHandler

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        if self.filter(obj):
            self.handler.on_add(obj, is_in_initial_list)

    def on_update(self, old: Obj, new: Obj) -> None:
        new_passes = self.filter(new)
        old_passes = self.filter(old)
        if new_passes and old_passes:
            self.handler.on_update(old, new)
        elif new_passes:
            self.handler.on_add(new, False)
        elif old_passes:
            self.handler.on_delete(old)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        state = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        if state is None or self.filter(state):
            self.handler.on_delete(obj)


def process_deltas(
    handler: ResourceEventHandler,
    store: DeltaTarget,
    deltas: Iterable[Delta],
    is_in_initial_list: bool,
    key: str | None = None,
    *,
    packed: bytes | None = None,
) -> None:
    """Apply one key's deltas, oldest first, to the store and the handler (reference 3.1-3.2).

    Every non-deletion is an upsert: an ``Added`` for a key the store already holds becomes
    ``on_update``, an ``Updated`` for a missing key becomes ``on_add``. That is what makes
    replays and takeovers safe: the store, not the delta type, decides what the handler sees.
    The store is written before the handler runs, so a handler that raises leaves the store
    consistent; the caller decides what a handler error means. Pass ``key`` when it is known
    (every wire envelope carries it) to spare the key function on the hot path, and ``packed``
    (the stream entry the single delta came in) so a compact store keeps it as it is.
    """
    for delta in deltas:
        obj = delta.obj
        if delta.type is DeltaType.DELETED:
            store.discard(obj, key)
            handler.on_delete(obj)
            continue
        if isinstance(obj, DeletedFinalStateUnknown):
            raise TypeError(f"a {delta.type} delta cannot carry a tombstone (key {obj.key!r})")
        old = store.update(obj, key) if packed is None else store.update(obj, key, packed)
        if old is None:
            handler.on_add(obj, is_in_initial_list)
        else:
            handler.on_update(old, obj)
