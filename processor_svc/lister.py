"""One read-only cache view over every shard this processor owns (issue 5, point 4).

A processor keeps one :class:`~common.store.Indexer` per owned shard, because shards come and go
independently: a takeover builds a fresh store, a handover drops one, and neither may disturb
the others. Handlers and controllers should not care about that layout, so they read through a
:class:`ShardedLister`: ``get_by_key``, ``list``, ``by_index`` … answer over the union of the
stores attached right now, exactly like a client-go lister over one informer's indexer.

What the view promises, and what it does not:

* **Objects: copies or shared, by the cache.** The default stores (``compact``) keep bytes and
  every read returns a private copy (:mod:`common.compact_store`); plain stores return the very
  dict they hold (see ``common.store``), which callers must never mutate. Code meant for
  either treats what it reads as read-only and builds a new dict to change anything.
* **Per-shard consistency only.** Each store answers atomically, but a merged ``list`` reads the
  shards one after another, so it is not a snapshot across shards (neither is any informer
  read relative to the API server). A key lives in exactly one shard, so merging never sees a
  key twice.
* **Ownership moves.** ``attach``/``detach`` change the view at runtime. An object whose shard
  moved to another processor simply disappears from this view: ``get_by_key`` returning
  ``None`` means "not deleted *or* not mine". With ``shard_count`` set, :meth:`owns` tells the
  two apart, and :class:`processor_svc.controller.Controller` uses it.

Why copy-on-write for the shard table: reads vastly outnumber ownership changes, so readers take
no lister lock at all; they read an immutable tuple that ``attach``/``detach`` replace.
"""

from __future__ import annotations

import builtins  # ``builtins.list`` in annotations: ShardedLister.list shadows it in the class
import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from common.compact_store import CompactIndexer
from common.object_keys import Obj, deletion_handling_meta_namespace_key
from common.sharding import shard_for
from common.store import (
    NAMESPACE_INDEX,
    Indexer,
    IndexerConflictError,
    IndexFunc,
    IndexFuncError,
    IndexNotFoundError,
    KeyFunc,
    meta_namespace_index_func,
)
from common.wire import ENVELOPE_CODEC

__all__ = ["ShardedLister"]

_T = TypeVar("_T")

_STOP_POLL_SECONDS = 0.05
"""How often ``wait_for_cache_sync`` looks at its stop event (an Event cannot wake a Condition)."""


class ShardedLister:
    """A merged, read-only view of the per-shard stores this processor currently owns.

    ``shard_count`` (the resource's fixed shard count) lets key lookups go straight to the one
    store that can hold the key and makes :meth:`owns` available; without it, lookups ask every
    attached store (fine for tests and single-store use). ``indexers`` are the indexes every
    store is built with (default: the namespace index); :meth:`new_store` builds such a store
    with the user indexers added, and :meth:`attach` adds missing user indexers to any store.
    ``compact`` (the default, a processor's ``--cache compact``) makes :meth:`new_store` build
    :class:`~common.compact_store.CompactIndexer` stores that keep the stream entries as they
    came: a fifth of the memory, and every read returns a fresh copy; ``compact=False`` builds
    plain :class:`~common.store.Indexer` stores, whose reads are dict lookups.

    Thread-safety: every method may be called from any thread. ``attach``, ``detach`` and
    ``add_indexers`` are serialised with each other; reads never wait for them.
    """

    def __init__(
        self,
        shard_count: int | None = None,
        *,
        indexers: Mapping[str, IndexFunc] | None = None,
        key_func: KeyFunc = deletion_handling_meta_namespace_key,
        compact: bool = True,
    ) -> None:
        if shard_count is not None and shard_count < 1:
            raise ValueError(f"shard_count must be >= 1, got {shard_count}")
        self._shard_count = shard_count
        # key -> its shard, when a key alone tells (the resource is sharded by object key, the
        # default, or by namespace); None when only the object does (owner, label): lookups by
        # key then ask every attached store.
        self._shard_of_key: Callable[[str], int | None] | None = (
            None if shard_count is None else functools.partial(_shard_by_key, count=shard_count)
        )
        self._base_indexers: dict[str, IndexFunc] = (
            {NAMESPACE_INDEX: meta_namespace_index_func} if indexers is None else dict(indexers)
        )
        self._key_func = key_func
        self._compact = compact
        # Serialises changes of the store set and of the user indexers, which can take long
        # (indexing a whole store), without making readers or sync waiters wait.
        self._change_lock = threading.Lock()
        # Guards the fields below; the condition wakes wait_for_cache_sync.
        self._lock = threading.Lock()
        self._synced_changed = threading.Condition(self._lock)
        self._stores: dict[int, Indexer] = {}
        self._synced: set[int] = set()
        self._user_indexers: dict[str, IndexFunc] = {}
        # Immutable snapshots read without a lock: (shard, store) in shard order.
        self._ordered: tuple[tuple[int, Indexer], ...] = ()
        self._by_shard: Mapping[int, Indexer] = {}

    # --- ownership (called by the processor) --------------------------------------------------

    @property
    def shard_count(self) -> int | None:
        return self._shard_count

    def route_keys(self, shard_of_key: Callable[[str], int | None] | None) -> None:
        """How a key names its shard from now on: ``shard_of_key(key)`` (``None`` for a key it
        cannot place), or ``None`` when no key does (a resource sharded by owner or label:
        lookups by key then ask every attached store, and :meth:`owns` cannot answer). The
        processor sets it from the reflector's layout before attaching any store."""
        self._shard_of_key = shard_of_key

    def new_store(self) -> Indexer:
        """An empty store with the base indexers and every user indexer registered so far.

        Building stores here (rather than attaching bare ones) spares indexing the loaded
        objects a second time when the user indexers are added at :meth:`attach`.
        """
        with self._change_lock:
            indexers = {**self._base_indexers, **self._user_indexers}
        if self._compact:
            return CompactIndexer(self._key_func, indexers, codec=ENVELOPE_CODEC)
        return Indexer(self._key_func, indexers)

    def attach(self, shard: int, store: Indexer) -> None:
        """Make ``store`` the view of ``shard``; it counts as not synced until :meth:`mark_synced`.

        Adds the registered user indexers the store lacks first (indexing what it already
        holds). Attach a shard's store before delivering any of its events to handlers, so a
        handler never hears about an object its lister cannot see. Attaching a shard that is
        already attached replaces its store (a fresh takeover). Raises
        :class:`~common.store.IndexerConflictError` if the store has a different function under
        a user index's name, or :class:`~common.store.IndexFuncError` if a user index function
        fails on a stored object; the store is then not attached.
        """
        self._check_shard(shard)
        with self._change_lock:
            present = store.get_indexers()
            conflicting = [
                name
                for name, func in self._user_indexers.items()
                if name in present and present[name] is not func
            ]
            if conflicting:
                raise IndexerConflictError(conflicting)
            missing = {
                name: func for name, func in self._user_indexers.items() if name not in present
            }
            if missing:
                store.add_indexers(missing)
            with self._lock:
                self._stores[shard] = store
                self._synced.discard(shard)
                self._publish_locked()

    def detach(self, shard: int) -> Indexer | None:
        """Remove ``shard`` from the view (its lease was lost or released); returns its store."""
        with self._change_lock, self._lock:
            store = self._stores.pop(shard, None)
            self._synced.discard(shard)
            self._publish_locked()
            return store

    def shards(self) -> builtins.list[int]:
        """The shards currently attached, ascending."""
        return [shard for shard, _ in self._ordered]

    def mark_synced(self, shard: int) -> None:
        """Record that ``shard``'s initial list is loaded and delivered; no-op if not attached.

        A no-op rather than an error because a loader can race with its own shard's detach
        (the lease was lost while it loaded): the detach must win.
        """
        with self._lock:
            if shard in self._stores:
                self._synced.add(shard)
                self._synced_changed.notify_all()

    def has_synced(self, shard: int | None = None) -> bool:
        """Whether ``shard`` is attached and synced; without ``shard``, whether all are.

        Overall sync needs at least one attached shard: a processor that owns nothing yet has
        no cache to trust. (One that legitimately owns nothing, with more processors than
        shards, is idle; whether that counts as ready is the service's call, not the cache's.)
        """
        with self._lock:
            return self._has_synced_locked(shard)

    def wait_for_cache_sync(
        self, timeout: float | None = None, stop: threading.Event | None = None
    ) -> bool:
        """Block until :meth:`has_synced`; ``False`` if ``timeout`` passes or ``stop`` is set first.

        Reference 5.9. Synced wins a tie: if the cache is synced when called, this returns
        ``True`` even with ``stop`` already set, as client-go's immediate poll does.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                if self._has_synced_locked(None):
                    return True
                if stop is not None and stop.is_set():
                    return False
                wait: float | None = None
                if deadline is not None:
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        return False
                if stop is not None:
                    wait = _STOP_POLL_SECONDS if wait is None else min(wait, _STOP_POLL_SECONDS)
                self._synced_changed.wait(wait)

    # --- user indexers ------------------------------------------------------------------------

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Register indexes on every attached store and on every store attached later.

        All or nothing as far as it can be: name conflicts (with the base indexers, earlier user
        indexers or an attached store's indexes) and index functions that fail on an object
        already stored are detected before any store changes. An index function must not fail
        on any object: one that fails later makes that object's store writes fail, exactly as
        for a plain :class:`~common.store.Indexer`.
        """
        if not indexers:
            return
        with self._change_lock:
            known = self._base_indexers.keys() | self._user_indexers.keys()
            for _, store in self._ordered:
                known |= store.get_indexers().keys()
            conflicting = known & indexers.keys()
            if conflicting:
                raise IndexerConflictError(conflicting)
            stores = [store for _, store in self._ordered]
            for store in stores:
                self._dry_run(indexers, store)
            for store in stores:
                store.add_indexers(indexers)
            self._user_indexers.update(indexers)

    def get_indexers(self) -> dict[str, IndexFunc]:
        """The base indexers plus the user indexers every attached store has."""
        with self._change_lock:
            return {**self._base_indexers, **self._user_indexers}

    # --- reads (never take a lister lock) ------------------------------------------------------

    def shard_of(self, key: str) -> int | None:
        """The shard that holds (or would hold) ``key``, when the key alone tells; else
        ``None`` (no shard count, or a resource sharded by owner or label)."""
        route = self._shard_of_key
        return None if route is None else route(key)

    def owns(self, key: str) -> bool:
        """Whether ``key``'s shard is attached here; needs a key that names its shard
        (:meth:`shard_of`), else ``ValueError``.

        This is how a reconcile tells "deleted" from "moved to another processor" when
        ``get_by_key`` returns ``None``.
        """
        if self._shard_count is None:
            raise ValueError("owns() needs a ShardedLister built with shard_count")
        shard = self.shard_of(key)
        if shard is None:
            raise ValueError(
                f"owns({key!r}): this resource is sharded by something its keys do not name "
                "(an owner or a label), so a key alone cannot tell its shard"
            )
        return shard in self._by_shard

    def get_by_key(self, key: str) -> Obj | None:
        """The object stored under ``namespace/name`` (or ``name``), or ``None``."""
        route = self._shard_of_key
        if route is not None:
            shard = route(key)
            if shard is not None:
                store = self._by_shard.get(shard)
                return None if store is None else store.get_by_key(key)
        for _, store in self._ordered:
            obj = store.get_by_key(key)
            if obj is not None:
                return obj
        return None

    def holds_elsewhere(self, key: str, shard: int) -> bool:
        """Whether an attached store other than ``shard``'s holds ``key`` (an object moving
        between two shards of this process: :mod:`processor_svc.move_gate`)."""
        return any(
            other != shard and store.get_by_key(key) is not None for other, store in self._ordered
        )

    def get(self, namespace_or_key: str, name: str | None = None) -> Obj | None:
        """``get("ns/name")``, ``get("ns", "name")``, or ``get("name")`` if cluster-scoped."""
        if name is None:
            return self.get_by_key(namespace_or_key)
        return self.get_by_key(f"{namespace_or_key}/{name}" if namespace_or_key else name)

    def list(self) -> builtins.list[Obj]:
        """Every object of every owned shard, grouped by shard in shard order."""
        result: builtins.list[Obj] = []
        for _, store in self._ordered:
            result.extend(store.list())
        return result

    def list_keys(self) -> builtins.list[str]:
        """Every key of every owned shard, sorted."""
        keys: builtins.list[str] = []
        for _, store in self._ordered:
            keys.extend(store.list_keys())
        keys.sort()
        return keys

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        """Objects under ``value`` in the index, grouped by shard, in key order within a shard.

        Raises :class:`~common.store.IndexNotFoundError` for an index nobody registered.
        """
        return self._from_every_store(index_name, lambda store: store.by_index(index_name, value))

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        """Keys under ``value`` in the index, sorted across shards."""
        keys = self._from_every_store(index_name, lambda store: store.index_keys(index_name, value))
        keys.sort()
        return keys

    def index(self, index_name: str, obj: Obj) -> builtins.list[Obj]:
        """Objects sharing any of ``obj``'s values in the index, grouped by shard."""
        return self._from_every_store(index_name, lambda store: store.index(index_name, obj))

    def list_index_func_values(self, index_name: str) -> builtins.list[str]:
        """Values that have objects in any owned shard, sorted; ``[]`` for an unknown index."""
        values: set[str] = set()
        for _, store in self._ordered:
            values.update(store.list_index_func_values(index_name))
        return sorted(values)

    def __len__(self) -> int:
        return sum(len(store) for _, store in self._ordered)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get_by_key(key) is not None

    # --- internals ----------------------------------------------------------------------------

    def _check_shard(self, shard: int) -> None:
        if shard < 0 or (self._shard_count is not None and shard >= self._shard_count):
            raise ValueError(f"shard {shard} out of range for shard_count {self._shard_count}")

    def _from_every_store(
        self, index_name: str, query: Callable[[Indexer], builtins.list[_T]]
    ) -> builtins.list[_T]:
        """``query``'s answers from every attached store, in shard order; with no store
        attached, an index nobody registered still raises ``IndexNotFoundError``."""
        ordered = self._ordered
        if not ordered:
            self._check_known_index(index_name)
        result: builtins.list[_T] = []
        for _, store in ordered:
            result.extend(query(store))
        return result

    def _check_known_index(self, index_name: str) -> None:
        # With no store attached there is nobody to ask, so answer from what stores will have.
        if index_name not in self._base_indexers and index_name not in self._user_indexers:
            raise IndexNotFoundError(index_name)

    def _has_synced_locked(self, shard: int | None) -> bool:
        if shard is not None:
            return shard in self._synced
        return bool(self._stores) and self._synced.issuperset(self._stores)

    def _publish_locked(self) -> None:
        ordered = tuple(sorted(self._stores.items()))
        self._ordered = ordered
        self._by_shard = dict(ordered)
        self._synced_changed.notify_all()

    def _dry_run(self, indexers: Mapping[str, IndexFunc], store: Indexer) -> None:
        """Run each new index function on the store's objects, raising as the store would."""
        for obj in store.list():
            for name, func in indexers.items():
                try:
                    values = func(obj)
                except Exception as err:
                    raise IndexFuncError(name, self._describe_key(obj), err) from err
                if type(values) is not list:
                    raise IndexFuncError(
                        name,
                        self._describe_key(obj),
                        TypeError(f"expected list[str], got {type(values).__name__}"),
                    )

    def _describe_key(self, obj: Obj) -> str:
        try:
            return self._key_func(obj)
        except Exception:
            return "<object without a valid key>"


def _shard_by_key(key: str, *, count: int) -> int:
    return shard_for(key, count)
