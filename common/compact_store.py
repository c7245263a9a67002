"""The informer cache at about the size of its JSON: objects kept as bytes, decoded on read.

A decoded Pod is a tree of small dicts, lists and strings: ~11 KB of Python objects for 2.7 KB
of JSON, and a processor's RSS grows by ~13 KB per cached Pod once allocator slack is counted
(``bench/compare.py``; 3.7 KB with this store). A controller caching 100k Pods pays 1.3 GB for
a view it mostly reads a few objects at a time. :class:`CompactIndexer` keeps each object
serialised instead and decodes it on every read.

What changes for callers, and why it is the right trade for big caches:

* **Every read returns a fresh dict.** ``get_by_key``, ``list``, ``by_index``… decode a private
  copy, so a handler that mutates what it got cannot corrupt the cache or other readers (the
  mutation detector has nothing to guard). ``lister.get(k) is lister.get(k)`` is false.
* **Reads cost a decode** (~6-9 µs for a Pod): ``get_by_key`` per reconcile is cheap;
  ``list()`` over 100k objects takes about a second, so query an index rather than scan.
* **Writes cost the decode of the replaced object** that ``update`` returns for
  ``on_update(old, new)`` (and ``delete`` for its caller; ``discard``, which ``process_deltas``
  uses, decodes nothing), and an encode unless the caller hands over the bytes it decoded the
  object from (``packed``): a processor stores each stream entry as it arrived, so nothing is
  encoded and no second copy is ever made. Index functions run on the dict being written.

**What the bytes are** is the store's :class:`~common.codec.Codec`: plain JSON by default; the
processor uses :data:`common.wire.ENVELOPE_CODEC`, whose bytes are whole wire envelopes (a read
parses a v2 entry's object part alone, its header skipped). Whoever passes ``packed`` promises
``codec.unpack(packed) == obj``.

Indexes are the plain :class:`~common.store.Indexer`'s: keys and index values are small
strings, kept as they are.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from common.codec import Codec, exact_bytes
from common.object_keys import DeletedFinalStateUnknown, Obj, deletion_handling_meta_namespace_key
from common.store import Indexer, IndexFunc, IndexFuncError, KeyFunc, _MaintainedIndex

__all__ = ["JSON_CODEC", "CompactIndexer"]


def _json_pack(obj: Obj) -> bytes:
    return exact_bytes(orjson.dumps(obj))


def _json_unpack(packed: bytes) -> Obj:
    obj: Obj = orjson.loads(packed)
    return obj


JSON_CODEC = Codec(_json_pack, _json_unpack)
"""Objects as compact JSON."""


class CompactIndexer(Indexer):
    """An :class:`~common.store.Indexer` whose objects live as bytes (module docstring).

    Everything the plain store promises holds (atomic methods, index bookkeeping, errors),
    except that objects are copies: see the module docstring for what that costs and buys.
    """

    # The base class's object dict holds bytes here; every method that reads or writes an
    # object is overridden, the rest (keys, lengths, index queries by key) work on either.
    _items: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> CompactIndexer:
        return object.__new__(cls)  # no mutation-detecting variant: reads are copies

    def __init__(
        self,
        key_func: KeyFunc = deletion_handling_meta_namespace_key,
        indexers: Mapping[str, IndexFunc] | None = None,
        *,
        codec: Codec = JSON_CODEC,
    ) -> None:
        self.codec = codec
        self._pack, self._unpack, self._keep = codec
        super().__init__(key_func, indexers, detect_mutations=False)

    def update(self, obj: Obj, key: str | None = None, packed: bytes | None = None) -> Obj | None:
        if key is None:
            key = self._key_func(obj)
        packed = self._pack(obj) if packed is None else self._keep(packed)
        # The plain store's update (indexing ``obj``, which fails before anything is stored),
        # then its entry swapped for the bytes within the same hold of the reentrant lock, so
        # no reader ever sees the dict. The plain store's hot path keeps its single call.
        self._lock.acquire()
        try:
            old: Any = Indexer.update(self, obj, key)  # the bytes the plain store kept here
            self._items[key] = packed
        finally:
            self._lock.release()
        return None if old is None else self._unpack(old)

    add = update

    def update_packed(self, key: str, packed: bytes, index_obj: Obj) -> bool:
        """Keep ``packed`` under ``key`` and say whether the key was held; decodes nothing.

        For a caller whose handlers need only keys (``processor_svc.shard_store``): the index
        functions run on ``index_obj``, a stand-in holding what they read (the namespace, from
        the entry's header), so the caller must know they read nothing else."""
        packed = self._keep(packed)
        self._lock.acquire()
        try:
            old: Any = Indexer.update(self, index_obj, key)
            self._items[key] = packed
        finally:
            self._lock.release()
        return old is not None

    def delete(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> Obj | None:
        old: Any = super().delete(obj, key)  # what the plain store keeps here is the bytes
        return None if old is None else self._unpack(old)

    def discard(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> None:
        Indexer.delete(self, obj, key)  # the bytes it returns are dropped undecoded

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        """As the plain store's, in one pass: each object is indexed, then only its bytes kept,
        so ``items`` may be a generator and never has to exist as decoded dicts all at once."""
        with self._lock:
            rebuilt = {
                name: _MaintainedIndex(name, index.index_func, self._key_func)
                for name, index in self._indexes.items()
            }
            new_items: dict[str, bytes] = {}
            # As in the plain store, only a key's last object counts: an index function that
            # fails on an object a later one replaces is no failure.
            failures: dict[str, IndexFuncError] = {}
            for obj in items:
                key = self._key_func(obj)
                try:
                    values = [(index, index.values_for(key, obj)) for index in rebuilt.values()]
                except IndexFuncError as err:
                    failures[key] = err
                    continue
                failures.pop(key, None)
                for index, index_values in values:
                    index.store(key, index_values)
                new_items[key] = self._pack(obj)
            if failures:
                raise next(iter(failures.values()))
            self._items = new_items
            self._indexes = rebuilt
            self._plan_index_work()

    def get(self, obj: Obj | DeletedFinalStateUnknown) -> Obj | None:
        return self.get_by_key(self._key_func(obj))

    def get_by_key(self, key: str) -> Obj | None:
        self._lock.acquire()
        try:
            packed = self._items.get(key)
        finally:
            self._lock.release()
        return None if packed is None else self._unpack(packed)

    def list(self) -> builtins.list[Obj]:
        with self._lock:
            packed = builtins.list(self._items.values())
        return [self._unpack(one) for one in packed]

    def packed_size(self) -> int:
        """Bytes held for the objects, before per-entry overhead."""
        with self._lock:
            return sum(len(one) for one in self._items.values())

    def _build_index(
        self, name: str, index_func: IndexFunc, items: Mapping[str, Any]
    ) -> _MaintainedIndex:
        index = _MaintainedIndex(name, index_func, self._key_func)
        for key, packed in items.items():
            index.store(key, index.values_for(key, self._unpack(packed)))
        return index

    def _objects(self, keys: Iterable[str]) -> builtins.list[Obj]:
        items, unpack = self._items, self._unpack
        return [unpack(items[key]) for key in keys]
