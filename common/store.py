"""The informer's local cache: a thread-safe store of objects with secondary indexes.

This is client-go's ``Indexer`` / ``ThreadSafeStore`` (reference section 4). Handlers and listers
read it while the processor writes it, so every public method takes one lock and is atomic.

**Objects are shared, never copied.** ``get``, ``list``, ``by_index`` and friends hand out the
very dicts the store holds, and ``add``/``update`` keep the dict they were given. Copying would
cost more than the whole update path is allowed to (see ``bench/core.py``), so, exactly as in
client-go (reference 4.6), callers must treat every object as read-only: build a new dict to
change anything. Mutating a cached object in place silently corrupts the indexes and lies to
every other reader. Tests catch such bugs with the mutation detector: set
``INFORMER_BUS_CACHE_MUTATION_DETECTOR=1`` (or pass ``detect_mutations=True``) and every write
first checks that no stored object changed since it was stored, raising
:class:`CacheMutationError` otherwise. The detector serialises every object on every write, so
it is for tests only; when it is off the store does not even test a flag on the hot path.

Why the index bookkeeping looks the way it does: the informer's hot path is ``update`` of an
object that already exists, almost always with the same index values as before. The store keeps
each key's index values from when it was stored, so an update never recomputes the old object's
values and does no set work when the values did not change. The built-in namespace index is
derived from the key itself (the key *is* ``namespace/name``), so with the default key function
an update of an existing key skips that index altogether.
"""

from __future__ import annotations

import builtins  # ``builtins.list`` in annotations: Indexer.list shadows it in the class
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import orjson

from common.object_keys import (
    DeletedFinalStateUnknown,
    Obj,
    deletion_handling_meta_namespace_key,
    meta_namespace_key,
)

__all__ = [
    "MUTATION_DETECTOR_ENV",
    "NAMESPACE_INDEX",
    "CacheMutationError",
    "IndexFunc",
    "IndexFuncError",
    "IndexNotFoundError",
    "IndexReader",
    "Indexer",
    "IndexerConflictError",
    "KeyFunc",
    "StoreReader",
    "StoreWriter",
    "meta_namespace_index_func",
]

KeyFunc: TypeAlias = Callable[[Obj | DeletedFinalStateUnknown], str]
"""Names an object in the store; must accept tombstones so inferred deletions find their entry."""

IndexFunc: TypeAlias = Callable[[Obj], list[str]]
"""An object's values in one index; several values put the object under each of them."""

NAMESPACE_INDEX = "namespace"
"""The index every informer store has unless told otherwise: listers query it per namespace."""

MUTATION_DETECTOR_ENV = "INFORMER_BUS_CACHE_MUTATION_DETECTOR"
"""Set to ``1`` or ``true`` to make new stores check for in-place mutation (tests only)."""


def meta_namespace_index_func(obj: Obj) -> list[str]:
    """``[namespace]``, or ``[]`` for cluster-scoped objects.

    Cluster-scoped objects get no value rather than client-go's ``[""]``, so
    ``list_index_func_values(NAMESPACE_INDEX)`` lists only real namespaces.
    """
    namespace = obj["metadata"].get("namespace")
    return [namespace] if namespace else []


class IndexNotFoundError(KeyError):
    """A query named an index the store does not have (reference 4.3)."""

    def __init__(self, index_name: str) -> None:
        super().__init__(f"Index with name {index_name} does not exist")
        self.index_name = index_name

    def __str__(self) -> str:
        # KeyError would quote the message as if it were a missing key.
        return str(self.args[0])


class IndexerConflictError(ValueError):
    """``add_indexers`` named an index that already exists (reference 4.5).

    Replacing an index function in place would leave the existing entries computed by the old
    one, so client-go refuses, and so do we.
    """

    def __init__(self, index_names: Iterable[str]) -> None:
        self.index_names = sorted(index_names)
        super().__init__(f"indexer conflict: {self.index_names}")


class IndexFuncError(ValueError):
    """An index function raised; the store was left as it was before the call.

    client-go panics here. We raise instead, after making sure nothing was half-written, so a
    single malformed object cannot take the processor down with a corrupted cache.
    """

    def __init__(self, index_name: str, key: str, cause: BaseException) -> None:
        super().__init__(
            f"index function {index_name!r} failed on object {key!r}: "
            f"{type(cause).__name__}: {cause}"
        )
        self.index_name = index_name
        self.key = key


class CacheMutationError(RuntimeError):
    """A stored object was changed in place by someone holding a shared reference."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = sorted(keys)
        super().__init__(
            f"cached objects were mutated in place (callers must copy before changing): {self.keys}"
        )


class StoreReader(Protocol):
    """What listers and handlers need: read-only lookups of shared objects."""

    def get(self, obj: Obj | DeletedFinalStateUnknown) -> Obj | None: ...

    def get_by_key(self, key: str) -> Obj | None: ...

    def list(self) -> builtins.list[Obj]: ...

    def list_keys(self) -> builtins.list[str]: ...


class StoreWriter(Protocol):
    """What the delta processor and the reflector's relist need: the write side only."""

    def add(self, obj: Obj, key: str | None = None) -> Obj | None: ...

    def update(
        self, obj: Obj, key: str | None = None, packed: bytes | None = None
    ) -> Obj | None: ...

    def delete(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> Obj | None: ...

    def discard(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> None: ...

    def replace(self, items: Iterable[Obj], resource_version: str) -> None: ...


class IndexReader(Protocol):
    """What indexed listers need (e.g. "all pods in namespace X")."""

    def index(self, index_name: str, obj: Obj) -> list[Obj]: ...

    def index_keys(self, index_name: str, value: str) -> list[str]: ...

    def by_index(self, index_name: str, value: str) -> list[Obj]: ...

    def list_index_func_values(self, index_name: str) -> list[str]: ...


_KEY_FUNCS_THAT_EMBED_NAMESPACE = (deletion_handling_meta_namespace_key, meta_namespace_key)


class _MaintainedIndex:
    """One index plus the bookkeeping that lets updates skip work.

    Invariants: ``keys_by_value`` holds no empty set; ``values_by_key[key]`` is what
    ``index_func`` returned when ``key`` was last stored, and ``key`` is in
    ``keys_by_value[v]`` exactly for the ``v`` in that list.
    """

    __slots__ = ("determined_by_key", "index_func", "keys_by_value", "name", "values_by_key")

    def __init__(self, name: str, index_func: IndexFunc, key_func: KeyFunc) -> None:
        self.name = name
        self.index_func = index_func
        self.keys_by_value: dict[str, set[str]] = {}
        self.values_by_key: dict[str, list[str]] = {}
        # The same key always yields the same values, so updates of a stored key can skip it.
        self.determined_by_key = (
            index_func is meta_namespace_index_func and key_func in _KEY_FUNCS_THAT_EMBED_NAMESPACE
        )

    def values_for(self, key: str, obj: Obj) -> list[str]:
        try:
            values = self.index_func(obj)
        except Exception as err:
            raise IndexFuncError(self.name, key, err) from err
        if type(values) is not list:
            # A bare string would otherwise be indexed one character at a time.
            raise IndexFuncError(
                self.name, key, TypeError(f"expected list[str], got {type(values).__name__}")
            )
        return values

    def store(self, key: str, values: list[str]) -> None:
        old_values = self.values_by_key.get(key)
        if old_values == values:
            return
        keys_by_value = self.keys_by_value
        if old_values:
            for value in old_values:
                if value not in values:
                    self._discard(value, key)
        for value in values:
            keys = keys_by_value.get(value)
            if keys is None:
                keys_by_value[value] = {key}
            else:
                keys.add(key)
        self.values_by_key[key] = values

    def forget(self, key: str) -> None:
        for value in self.values_by_key.pop(key, ()):
            self._discard(value, key)

    def _discard(self, value: str, key: str) -> None:
        keys = self.keys_by_value.get(value)
        if keys is None:  # a value listed twice by the index function was already removed
            return
        keys.discard(key)
        if not keys:
            del self.keys_by_value[value]

    def keys_matching_any(self, values: list[str]) -> set[str]:
        matching: set[str] = set()
        for value in values:
            keys = self.keys_by_value.get(value)
            if keys:
                matching.update(keys)
        return matching


def _mutation_detection_requested(detect_mutations: bool | None) -> bool:
    if detect_mutations is not None:
        return detect_mutations
    return os.environ.get(MUTATION_DETECTOR_ENV, "").strip().lower() in ("1", "true")


class Indexer:
    """A thread-safe, indexed store of shared objects (client-go ``Indexer``).

    Construction with mutation detection on (see the module docstring) returns a checking
    subclass, so the ordinary store carries no detector branch on its hot path. The methods the
    delta processor calls per event (``get_by_key``, ``update``, ``delete``) take the lock with
    ``acquire``/``release`` instead of ``with``, which costs half as much on CPython 3.11.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Indexer:
        # ``__init__``'s arguments (its signature is the typed one): only the keyword-only
        # ``detect_mutations`` matters here.
        if cls is Indexer and _mutation_detection_requested(kwargs.get("detect_mutations")):
            return super().__new__(_MutationDetectingIndexer)
        return super().__new__(cls)

    def __init__(
        self,
        key_func: KeyFunc = deletion_handling_meta_namespace_key,
        indexers: Mapping[str, IndexFunc] | None = None,
        *,
        detect_mutations: bool | None = None,
    ) -> None:
        if indexers is None:
            indexers = {NAMESPACE_INDEX: meta_namespace_index_func}
        self._key_func = key_func
        # Reentrant so the mutation-detecting subclass can wrap each write in the same lock.
        self._lock = threading.RLock()
        self._items: dict[str, Obj] = {}
        self._indexes: dict[str, _MaintainedIndex] = {}
        # Derived from _indexes by _plan_index_work: all of them, and those an update must redo.
        self._all_indexes: tuple[_MaintainedIndex, ...] = ()
        self._indexes_to_redo_on_update: tuple[_MaintainedIndex, ...] = ()
        self.add_indexers(indexers)

    @property
    def mutation_detection_enabled(self) -> bool:
        return False

    def check_mutations(self) -> None:
        """Raise :class:`CacheMutationError` if a stored object changed; no-op without detection."""

    # --- writes -------------------------------------------------------------------------------

    def update(self, obj: Obj, key: str | None = None, packed: bytes | None = None) -> Obj | None:
        """Store ``obj`` under its key and return the object it replaced (``None`` if new).

        client-go's Add and Update are the same operation. Returning the replaced object lets
        ``process_deltas`` choose between ``on_add`` and ``on_update`` in the same locked step
        instead of a separate lookup; ``key`` lets a caller who already knows it (the wire
        envelope carries it) skip the key function, the largest cost of this method.
        ``packed`` (the object serialised) is for stores that keep bytes; this one keeps
        ``obj`` itself and ignores it.
        """
        if key is None:
            key = self._key_func(obj)
        self._lock.acquire()
        try:
            items = self._items
            old = items.get(key)
            indexes = self._all_indexes if old is None else self._indexes_to_redo_on_update
            if indexes:
                self._index_locked(key, obj, indexes)
            items[key] = obj
            return old
        finally:
            self._lock.release()

    add = update  # as in client-go: adding a stored key replaces it

    def delete(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> Obj | None:
        """Remove ``obj``'s key and return what was stored; a missing key is a no-op (4.4)."""
        if key is None:
            key = self._key_func(obj)
        self._lock.acquire()
        try:
            old = self._items.pop(key, None)
            if old is not None:
                for index in self._all_indexes:
                    index.forget(key)
            return old
        finally:
            self._lock.release()

    def discard(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> None:
        """:meth:`delete` for a caller that does not use the removed object (``process_deltas``
        hands the delta's own to ``on_delete``): a store that keeps bytes then never decodes
        it. Here it is ``delete``, so a subclass's ``delete`` holds for both."""
        self.delete(obj, key)

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        """Swap in a relist's result, rebuilding every index (4.4).

        ``resource_version`` is accepted for client-go parity; this store does not track it.
        Everything is computed before anything is swapped, so a failing key or index function
        leaves the old contents in place.
        """
        with self._lock:
            new_items = {self._key_func(obj): obj for obj in items}
            rebuilt = {
                name: self._build_index(name, index.index_func, new_items)
                for name, index in self._indexes.items()
            }
            self._items = new_items
            self._indexes = rebuilt
            self._plan_index_work()

    def resync(self) -> None:
        """Nothing to do: resync is a DeltaFIFO concern; kept so the surface matches client-go."""

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes, indexing the objects already stored (4.5)."""
        with self._lock:
            conflicting = self._indexes.keys() & indexers.keys()
            if conflicting:
                raise IndexerConflictError(conflicting)
            added = {
                name: self._build_index(name, func, self._items) for name, func in indexers.items()
            }
            self._indexes.update(added)
            self._plan_index_work()

    # --- reads --------------------------------------------------------------------------------

    def get(self, obj: Obj | DeletedFinalStateUnknown) -> Obj | None:
        key = self._key_func(obj)
        with self._lock:
            return self._items.get(key)

    def get_by_key(self, key: str) -> Obj | None:
        self._lock.acquire()
        try:
            return self._items.get(key)
        finally:
            self._lock.release()

    def list(self) -> builtins.list[Obj]:
        with self._lock:
            return list(self._items.values())

    def list_keys(self) -> builtins.list[str]:
        with self._lock:
            return list(self._items)

    def index(self, index_name: str, obj: Obj) -> builtins.list[Obj]:
        """Objects sharing any of ``obj``'s values in the index, each once, in key order."""
        with self._lock:
            index = self._index_named(index_name)
            values = index.values_for(self._describe_key(obj), obj)
            return self._objects(sorted(index.keys_matching_any(values)))

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        with self._lock:
            return sorted(self._index_named(index_name).keys_by_value.get(value, ()))

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        """Objects under ``value``, in key order so results do not depend on hash seeds."""
        with self._lock:
            return self._objects(sorted(self._index_named(index_name).keys_by_value.get(value, ())))

    def list_index_func_values(self, index_name: str) -> builtins.list[str]:
        """Values that currently have objects, sorted; ``[]`` for an unknown index (4.3)."""
        with self._lock:
            index = self._indexes.get(index_name)
            return sorted(index.keys_by_value) if index is not None else []

    def get_indexers(self) -> dict[str, IndexFunc]:
        with self._lock:
            return {name: index.index_func for name, index in self._indexes.items()}

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    # --- internals (call with the lock held) -------------------------------------------------

    def _index_locked(self, key: str, obj: Obj, indexes: tuple[_MaintainedIndex, ...]) -> None:
        if len(indexes) == 1:
            index = indexes[0]
            index.store(key, index.values_for(key, obj))
            return
        # Every index function runs before any index changes, so a failure changes nothing.
        values = [index.values_for(key, obj) for index in indexes]
        for index, index_values in zip(indexes, values, strict=True):
            index.store(key, index_values)

    def _build_index(
        self, name: str, index_func: IndexFunc, items: Mapping[str, Obj]
    ) -> _MaintainedIndex:
        index = _MaintainedIndex(name, index_func, self._key_func)
        for key, obj in items.items():
            index.store(key, index.values_for(key, obj))
        return index

    def _plan_index_work(self) -> None:
        self._all_indexes = tuple(self._indexes.values())
        self._indexes_to_redo_on_update = tuple(
            index for index in self._all_indexes if not index.determined_by_key
        )

    def _index_named(self, index_name: str) -> _MaintainedIndex:
        index = self._indexes.get(index_name)
        if index is None:
            raise IndexNotFoundError(index_name)
        return index

    def _objects(self, keys: Iterable[str]) -> builtins.list[Obj]:
        items = self._items
        return [items[key] for key in keys]

    def _describe_key(self, obj: Obj) -> str:
        try:
            return self._key_func(obj)
        except Exception:
            return "<object without a valid key>"


class _MutationDetectingIndexer(Indexer):
    """The store with client-go's cache mutation detector bolted on (reference 4.6).

    Each stored object is kept alongside its serialised form; before every write all objects
    are re-serialised and compared, so an in-place mutation surfaces at the next write, close
    to the code that caused it, instead of as a wrong answer much later. Objects must therefore
    be JSON-serialisable, which decoded API objects always are.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # built by Indexer(...) only
        self._snapshots: dict[str, bytes] = {}
        super().__init__(*args, **kwargs)

    @property
    def mutation_detection_enabled(self) -> bool:
        return True

    def check_mutations(self) -> None:
        with self._lock:
            mutated = [
                key
                for key, obj in self._items.items()
                if orjson.dumps(obj) != self._snapshots.get(key)
            ]
            if mutated:
                raise CacheMutationError(mutated)

    def update(self, obj: Obj, key: str | None = None, packed: bytes | None = None) -> Obj | None:
        if key is None:
            key = self._key_func(obj)
        with self._lock:
            self.check_mutations()
            old = super().update(obj, key)
            self._snapshots[key] = orjson.dumps(obj)
            return old

    add = update

    def delete(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> Obj | None:
        if key is None:
            key = self._key_func(obj)
        with self._lock:
            self.check_mutations()
            self._snapshots.pop(key, None)
            return super().delete(obj, key)

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        with self._lock:
            self.check_mutations()
            super().replace(items, resource_version)
            self._snapshots = {key: orjson.dumps(obj) for key, obj in self._items.items()}


if TYPE_CHECKING:

    def _indexer_plays_every_role(
        indexer: Indexer,
    ) -> tuple[StoreReader, StoreWriter, IndexReader]:
        return indexer, indexer, indexer
