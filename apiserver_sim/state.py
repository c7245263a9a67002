"""The simulated etcd + watch cache: one global resourceVersion counter, the objects of every
type (:class:`~apiserver_sim.collection.Collection`), a bounded event log, the
mutations that write it, and watcher cursors on it.

Every revision (:class:`~apiserver_sim.revision.StoredObject`) keeps its
serialised JSON, so LIST pages and watch events are built by concatenating bytes.
One lock guards everything; a condition on it wakes watchers when the log grows or a fault fires.

History works like etcd compaction: events are dropped from the head of the log by count and
by age; ``compacted_rv`` is the newest revision no longer available. A snapshot at ``S`` or a
watch from ``S`` is answerable iff ``S >= compacted_rv``. For each key the store keeps every
revision newer than ``compacted_rv`` plus the one in force at it, so old snapshots stay exact.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from apiserver_sim.collection import Collection
from apiserver_sim.objects import key_of
from apiserver_sim.resources import RESOURCES, ResourceType
from apiserver_sim.revision import (
    KEEP,
    Event,
    StoredObject,
    encode_revision,
    rv_of,
    splice_revision,
)
from apiserver_sim.selectors import FieldSelector, LabelSelector
from apiserver_sim.status import already_exists, expired, not_found

__all__ = ["ClusterState", "ListPage", "Subscription"]


@dataclass(slots=True)
class ListPage:
    rv: int
    items: list[StoredObject]
    more: bool
    remaining: int | None


class ClusterState:
    """All simulated objects and their history, shared by the HTTP layer and the Python API."""

    def __init__(
        self,
        *,
        history_max_events: int = 100_000,
        history_max_age: float = 300.0,
        resources: Iterable[ResourceType] = RESOURCES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.RLock()  # re-entrant for exclusive() batches
        self.changed = threading.Condition(self._lock)
        self._clock = clock
        self.wall_clock = wall_clock
        """Seconds since the Unix epoch: what creationTimestamps and other ``metav1.Time``
        fields are read from (a fixed one makes seeded objects byte-identical)."""
        self.history_max_events = history_max_events
        self.history_max_age = history_max_age
        self._rv = 1
        self._compacted_rv = 1
        self._log: list[StoredObject] = []
        self._log_offset = 0  # seq of _log[0]
        self._head_seq = 0  # first live (uncompacted) seq
        self._next_seq = 0
        self._collections = {r: Collection(r) for r in resources}
        self._watch_generation = 0
        self._closed = False
        self._subscriptions: set[Subscription] = set()
        self._watches_served = 0

    def exclusive(self) -> AbstractContextManager[bool]:
        """Hold the store across several operations: they happen back to back and watchers
        pick them up together (the churn generator batches its writes this way, so the
        streaming threads do not contend for the lock once per event)."""
        return self._lock

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    @property
    def compacted_rv(self) -> int:
        with self._lock:
            self._compact_expired()
            return self._compacted_rv

    @property
    def history_size(self) -> int:
        with self._lock:
            return self._next_seq - self._head_seq

    @property
    def active_watches(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    @property
    def watches_served(self) -> int:
        """Watches ever opened (any resource): how many watches the API server paid for."""
        with self._lock:
            return self._watches_served

    def resources(self) -> list[ResourceType]:
        return list(self._collections)

    def get(self, resource: ResourceType, key: str) -> StoredObject:
        with self._lock:
            obj = self._collections[resource].current.get(key)
        if obj is None:
            raise _not_found(resource, key)
        return obj

    def current(self, resource: ResourceType) -> dict[str, StoredObject]:
        """A copy of the live objects of one type, by key."""
        with self._lock:
            return dict(self._collections[resource].current)

    def ground_truth(self, resource: ResourceType) -> dict[str, str]:
        """``{key: resourceVersion}`` of every live object: what a synced informer must hold."""
        with self._lock:
            return {k: str(o.rv) for k, o in self._collections[resource].current.items()}

    def sorted_keys(self, resource: ResourceType) -> list[str]:
        with self._lock:
            coll = self._collections[resource]
            return [k for k in coll.keys if k in coll.current]

    def wait_for_rv(self, rv: int, timeout: float) -> bool:
        """Block until the store reaches ``rv`` (for "too large" requests) or ``timeout``."""
        with self._lock:
            return self.changed.wait_for(lambda: self._rv >= rv or self._closed, timeout)

    def list_page(
        self,
        resource: ResourceType,
        namespace: str | None,
        *,
        snapshot_rv: int | None,
        after_key: str | None,
        limit: int,
        labels: LabelSelector,
        fields: FieldSelector,
        returned_before: int = 0,
    ) -> ListPage:
        """One page of a consistent LIST at ``snapshot_rv`` (``None``: the newest state).

        Raises 410 Expired when the snapshot is compacted; ``remaining`` is only computed
        without selectors, as the apiserver does.
        """
        with self._lock:
            self._compact_expired()
            rv = self._rv if snapshot_rv is None else snapshot_rv
            if rv < self._compacted_rv:
                raise expired(f"too old resource version: {rv} ({self._compacted_rv})")
            coll = self._collections[resource]
            prefix = f"{namespace}/" if namespace else ""
            keys = coll.keys
            if after_key is not None:
                i = bisect.bisect_right(keys, after_key)
            else:
                i = bisect.bisect_left(keys, prefix) if prefix else 0
            items: list[StoredObject] = []
            more = False
            n = len(keys)
            filtered = not (labels.empty and fields.empty)
            at = coll.at
            while i < n:
                key = keys[i]
                if prefix and not key.startswith(prefix):
                    break
                i += 1
                obj = at(key, rv)
                if obj is None or (filtered and not obj.matches(labels, fields)):
                    continue
                if limit and len(items) == limit:
                    more = True
                    break
                items.append(obj)
            remaining = None
            if more and not filtered:
                total = self._count_at(coll, namespace or None, rv)
                remaining = max(0, total - returned_before - len(items))
            return ListPage(rv, items, more, remaining)

    def _count_at(self, coll: Collection, namespace: str | None, rv: int) -> int:
        total = coll.count(namespace)
        for event in self._events_after(rv):
            if event.resource is not coll.resource:
                continue
            if namespace is not None and event.namespace != namespace:
                continue
            if event.type == "ADDED":
                total -= 1
            elif event.type == "DELETED":
                total += 1
        return total

    def _seq_after(self, rv: int) -> int:
        """The seq of the first live event with ``event.rv > rv``."""
        lo = self._head_seq - self._log_offset
        i = bisect.bisect_right(self._log, rv, lo=lo, key=rv_of)
        return i + self._log_offset

    def _events_after(self, rv: int) -> Iterator[StoredObject]:
        start = self._seq_after(rv) - self._log_offset
        return itertools.islice(self._log, start, None)

    # ------------------------------------------------------------------ writes

    def _store(
        self,
        resource: ResourceType,
        key: str,
        obj: dict[str, Any],
        type_: str,
        *,
        prev: StoredObject | None = None,
        silent: bool = False,
    ) -> StoredObject:
        """Encode ``obj`` as the next revision (the caller has not bumped ``_rv`` yet)."""
        rv = self._rv + 1
        stored = encode_revision(
            resource, key, obj, type_, rv=rv, ts=self._clock(), prev=prev, silent=silent
        )
        self._rv = rv
        return stored

    def _restore(
        self,
        old: StoredObject,
        metadata: dict[str, Any],
        status: Any,
        type_: str,
        silent: bool,
    ) -> StoredObject:
        """The next revision: ``old`` with new ``metadata`` (and ``status`` unless it is
        ``KEEP``) spliced into its bytes; identity and the other members are shared."""
        rv = self._rv + 1
        stored = splice_revision(
            old, metadata, status, type_, rv=rv, ts=self._clock(), silent=silent
        )
        self._rv = rv
        return stored

    def _append(self, coll: Collection, stored: StoredObject) -> None:
        """Make ``stored`` history: its key's newest revision and the log's newest event, and
        wake the watches."""
        coll.record(stored)
        self._log.append(stored)
        self._next_seq += 1
        if self._next_seq - self._head_seq > self.history_max_events:
            self._compact_bounded()
        self.changed.notify_all()

    def _replace(self, coll: Collection, key: str, stored: StoredObject) -> StoredObject:
        """Make ``stored`` the current object at ``key``, and history; called under the lock."""
        coll.current[key] = stored
        self._append(coll, stored)
        return stored

    def _existing(self, resource: ResourceType, key: str) -> tuple[Collection, StoredObject]:
        """The collection of ``resource`` and its object at ``key`` (404 when there is none);
        called under the lock."""
        coll = self._collections[resource]
        old = coll.current.get(key)
        if old is None:
            raise _not_found(resource, key)
        return coll, old

    def create(
        self, resource: ResourceType, obj: dict[str, Any], *, silent: bool = False
    ) -> StoredObject:
        """Store a new object (already prepared by ``objects.prepare_create``)."""
        key = key_of(resource, obj)
        with self._lock:
            coll = self._collections[resource]
            if key in coll.current:
                raise already_exists(resource.plural, obj["metadata"]["name"], resource.group)
            stored = self._store(resource, key, obj, "ADDED", silent=silent)
            coll.current[key] = stored
            coll.adjust(stored.namespace, 1)
            self._append(coll, stored)
        return stored

    def create_many(
        self, resource: ResourceType, objs: Iterable[dict[str, Any]], *, chunk: int = 2000
    ) -> int:
        """Bulk create for load generation: one RV each, keys sorted once per chunk."""
        created = 0
        batch: list[dict[str, Any]] = []
        for obj in objs:
            batch.append(obj)
            if len(batch) >= chunk:
                created += self._create_chunk(resource, batch)
                batch = []
        if batch:
            created += self._create_chunk(resource, batch)
        return created

    def _create_chunk(self, resource: ResourceType, batch: list[dict[str, Any]]) -> int:
        with self._lock:
            coll = self._collections[resource]
            new_keys: list[str] = []
            for obj in batch:
                key = key_of(resource, obj)
                if key in coll.current:
                    continue
                stored = self._store(resource, key, obj, "ADDED")
                coll.current[key] = stored
                coll.adjust(stored.namespace, 1)
                revs = coll.revisions.get(key)
                if revs is None:
                    coll.revisions[key] = revs = []
                    new_keys.append(key)
                revs.append(stored)
                self._log.append(stored)
                self._next_seq += 1
            if new_keys:
                coll.keys.extend(new_keys)
                coll.keys.sort()
            self._compact_bounded()
            self.changed.notify_all()
            return len(batch)

    def update(
        self,
        resource: ResourceType,
        key: str,
        mutate: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        silent: bool = False,
    ) -> StoredObject:
        """Read-modify-write one object atomically; ``mutate`` may raise an ``ApiError``, or
        return ``None`` for a write that changes nothing: then no revision is made (no new
        resourceVersion, no event) and the stored one is returned, as etcd's guaranteed
        update skips a write of identical bytes."""
        with self._lock:
            coll, old = self._existing(resource, key)
            new = mutate(old.decode())
            if new is None:
                return old
            stored = self._store(resource, key, new, "MODIFIED", prev=old, silent=silent)
            return self._replace(coll, key, stored)

    def update_parts(
        self,
        resource: ResourceType,
        key: str,
        metadata: Callable[[dict[str, Any]], None],
        status: Callable[[dict[str, Any]], None] | None = None,
        *,
        silent: bool = False,
    ) -> StoredObject:
        """Like :meth:`update` for a change confined to ``metadata`` and ``status`` (what
        controllers and kubelets write): ``metadata`` edits the decoded metadata in place and
        ``status``, if given, the decoded status (only when the object has a status object).
        Only those bytes are decoded and re-encoded; renaming is refused (``ValueError``)."""
        with self._lock:
            coll, old = self._existing(resource, key)
            meta = old.decode_metadata()
            metadata(meta)
            new_status: Any = KEEP
            if status is not None:
                decoded = old.decode_status()
                if isinstance(decoded, dict):
                    status(decoded)
                    new_status = decoded
            stored = self._restore(old, meta, new_status, "MODIFIED", silent)
            return self._replace(coll, key, stored)

    def delete(
        self,
        resource: ResourceType,
        key: str,
        check: Callable[[dict[str, Any]], None] | None = None,
        *,
        silent: bool = False,
    ) -> StoredObject:
        """Remove one object; the DELETED event carries its last state at the delete revision.

        ``check`` sees the object's metadata (for preconditions) and may raise an ``ApiError``.
        """
        with self._lock:
            coll, old = self._existing(resource, key)
            metadata = old.decode_metadata()
            if check is not None:
                check(metadata)
            stored = self._restore(old, metadata, KEEP, "DELETED", silent)
            del coll.current[key]
            coll.adjust(old.namespace, -1)
            self._append(coll, stored)
        return stored

    # ------------------------------------------------------------------ compaction

    def _drop_head(self) -> None:
        event = self._log[self._head_seq - self._log_offset]
        self._head_seq += 1
        self._compacted_rv = max(self._compacted_rv, event.rv)
        if event.prev is not None:  # nothing needs it now; don't chain history to the head
            event.prev = None
        self._collections[event.resource].trim(event.key, event.rv)

    def _shrink_log(self) -> None:
        dead = self._head_seq - self._log_offset
        if dead > 1024 and dead * 2 > len(self._log):
            del self._log[:dead]
            self._log_offset = self._head_seq

    def _compact_bounded(self) -> None:
        while self._next_seq - self._head_seq > self.history_max_events:
            self._drop_head()
        self._shrink_log()

    def _compact_expired(self) -> None:
        horizon = self._clock() - self.history_max_age
        dropped = False
        while self._head_seq < self._next_seq:
            if self._log[self._head_seq - self._log_offset].ts >= horizon:
                break
            self._drop_head()
            dropped = True
        if dropped:
            self._shrink_log()

    def compact(self, rv: int | None = None) -> int:
        """Compact history up to ``rv`` (default: now), like ``etcdctl compact``."""
        with self._lock:
            target = self._rv if rv is None else min(rv, self._rv)
            while self._head_seq < self._next_seq:
                if self._log[self._head_seq - self._log_offset].rv > target:
                    break
                self._drop_head()
            self._compacted_rv = max(self._compacted_rv, target)
            self._shrink_log()
            self.changed.notify_all()
            return self._compacted_rv

    def set_history_limits(self, max_events: int | None, max_age: float | None) -> None:
        with self._lock:
            if max_events is not None:
                self.history_max_events = max_events
            if max_age is not None:
                self.history_max_age = max_age
            self._compact_bounded()
            self._compact_expired()

    # ------------------------------------------------------------------ watches

    def subscribe(
        self,
        resource: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        since_rv: int | None,
    ) -> tuple[Subscription, list[StoredObject]]:
        """Open a cursor on the log.

        ``since_rv=None`` means "current state, then changes": the returned list holds the
        objects to send as synthetic ADDED events (key order) and the cursor starts after them.
        Otherwise the cursor starts after ``since_rv`` (410 Expired when compacted).
        """
        with self._lock:
            self._compact_expired()
            if self._closed:
                raise expired("the simulator is shutting down")
            initial: list[StoredObject] = []
            if since_rv is None:
                coll = self._collections[resource]
                prefix = f"{namespace}/" if namespace else ""
                filtered = not (labels.empty and fields.empty)
                for key in coll.keys:
                    obj = coll.current.get(key)
                    if obj is None or (prefix and not key.startswith(prefix)):
                        continue
                    if filtered and not obj.matches(labels, fields):
                        continue
                    initial.append(obj)
                start_seq = self._next_seq
                start_rv = self._rv
            else:
                if since_rv < self._compacted_rv:
                    raise expired(f"too old resource version: {since_rv} ({self._compacted_rv})")
                start_seq = self._seq_after(since_rv)
                start_rv = since_rv
            sub = Subscription(self, start_seq, start_rv, self._watch_generation)
            self._subscriptions.add(sub)
            self._watches_served += 1
            return sub, initial

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subscriptions.discard(sub)

    def drop_watches(self) -> int:
        """End every open watch (they finish their current write, then close)."""
        with self._lock:
            self._watch_generation += 1
            count = len(self._subscriptions)
            self.changed.notify_all()
            return count

    def close(self) -> None:
        """Wake and end every watch and waiter for good."""
        with self._lock:
            self._closed = True
            self._watch_generation += 1
            self.changed.notify_all()

    def wake(self) -> None:
        with self._lock:
            self.changed.notify_all()


class Subscription:
    """A watcher's cursor on the event log (sequence numbers survive log trimming)."""

    __slots__ = ("_state", "generation", "progress_rv", "seq")

    def __init__(self, state: ClusterState, seq: int, rv: int, generation: int) -> None:
        self._state = state
        self.seq = seq
        self.progress_rv = rv
        self.generation = generation

    def poll(self, timeout: float, max_events: int = 4096) -> tuple[str, list[Event]]:
        """Wait up to ``timeout`` for events after the cursor.

        Returns ``("ok", events)`` (possibly empty) and advances ``progress_rv`` to the newest
        revision whose events have all been handed over; ``"dropped"`` when a fault or shutdown
        ended the watch; ``"behind"`` when history was compacted past the cursor (the apiserver
        closes such slow watchers).
        """
        state = self._state
        with state._lock:
            if (
                self.seq >= state._next_seq
                and self.generation == state._watch_generation
                and timeout > 0
            ):
                state.changed.wait(timeout)
            if self.generation != state._watch_generation:
                return "dropped", []
            if self.seq < state._head_seq:
                return "behind", []
            start = self.seq - state._log_offset
            events = state._log[start : start + max_events]
            self.seq += len(events)
            if self.seq >= state._next_seq:
                self.progress_rv = state._rv
            elif events:
                self.progress_rv = events[-1].rv
            return "ok", events

    def close(self) -> None:
        self._state._unsubscribe(self)


def _not_found(resource: ResourceType, key: str) -> Exception:
    name = key.rsplit("/", 1)[-1]
    return not_found(resource.plural, name, resource.group)
