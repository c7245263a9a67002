"""Deltas: what changed about one object, and the DeltaFIFO rules that produce them.

client-go's DeltaFIFO is a queue *and* a set of rules: which deltas a relist produces, when two
deletions collapse into one, when a deletion is dropped. In informer-bus the queue is a Redis
stream, so the rules live here as pure functions that the reflector (which writes deltas) and
the tests (which check them) share. Nothing here locks or blocks. Reference:
client-go-semantics.md section 2.

Two relist rules exist, on purpose:

* :func:`replace_deltas` is client-go's ``DeltaFIFO.Replace``: every listed object is queued as
  ``Replaced``. Correct, but it re-announces every unchanged object on every relist, which is
  the relist storm our users suffer from.
* :func:`relist_diff` is what the reflector publishes: it compares the fresh list with the known
  resourceVersions and emits only real changes, with the same tombstones for vanished keys.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from common.keys import DeletedFinalStateUnknown, Obj, meta_namespace_key

__all__ = [
    "Delta",
    "DeltaType",
    "KeyedDelta",
    "append_delta",
    "compare_resource_versions",
    "dedup_deltas",
    "delete_is_dropped",
    "relist_diff",
    "replace_deltas",
    "resource_version",
    "resync_deltas",
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


KeyedDelta = tuple[str, Delta]
"""A delta with the key it belongs to, in the order it must be queued."""

KeyFunc = Callable[[Obj | DeletedFinalStateUnknown], str]


def resource_version(obj: Obj) -> str:
    """``metadata.resourceVersion``, or ``""`` when the object carries none."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        version = metadata.get("resourceVersion")
        if isinstance(version, str):
            return version
    return ""


def compare_resource_versions(a: str, b: str) -> int | None:
    """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``; ``None`` when unknown.

    Kubernetes calls resourceVersions opaque, but every etcd-backed apiserver issues increasing
    integers (etcd revisions). We compare them only to recognise what is already known, never
    to order events, and treat anything that is not a plain integer as incomparable.
    """
    if a == b:
        return 0
    if not (a.isdigit() and b.isdigit()):
        return None
    return -1 if int(a) < int(b) else 1


def dedup_deltas(deltas: Sequence[Delta]) -> list[Delta]:
    """Collapse the two newest deltas when both are deletions (reference 2.3).

    A real deletion carries the object's final state, which is better than a tombstone's guess:
    keep the older one unless it is a tombstone, then keep the newer. Nothing else is ever
    merged, because every other delta carries state a handler may need.
    """
    if len(deltas) < 2:
        return list(deltas)
    older, newer = deltas[-2], deltas[-1]
    if older.type is not DeltaType.DELETED or newer.type is not DeltaType.DELETED:
        return list(deltas)
    kept = newer if isinstance(older.obj, DeletedFinalStateUnknown) else older
    return [*deltas[:-2], kept]


def append_delta(queued: Sequence[Delta], delta: Delta) -> list[Delta]:
    """Append ``delta`` to one key's queued deltas, oldest first, applying the dedup rule."""
    return dedup_deltas([*queued, delta])


def delete_is_dropped(key: str, known: Mapping[str, object], queued: Mapping[str, object]) -> bool:
    """A deletion of a key neither known nor queued is dropped (reference 2.4).

    Nobody ever saw the object, so announcing its deletion would make handlers delete something
    they never added.
    """
    return key not in known and key not in queued


def _newest_state(deltas: Sequence[Delta]) -> Obj | None:
    """The most recent object state among queued deltas, looking through tombstones."""
    if not deltas:
        return None
    newest = deltas[-1].obj
    return newest.obj if isinstance(newest, DeletedFinalStateUnknown) else newest


def replace_deltas(
    fresh: Iterable[Obj],
    known: Mapping[str, Obj],
    queued: Mapping[str, Sequence[Delta]],
    key_func: KeyFunc = meta_namespace_key,
) -> list[KeyedDelta]:
    """client-go's ``DeltaFIFO.Replace`` as a pure function (reference 2.5).

    ``known`` is what the consumer's store holds; ``queued`` is what is still waiting, per key.
    Returns the deltas to append, in queueing order: ``Replaced`` for every listed object, then
    a tombstone deletion for every queued key missing from the list (carrying its newest queued
    state), then one for every known key missing from the list with nothing queued (carrying the
    known object).
    """
    result: list[KeyedDelta] = []
    listed: set[str] = set()
    for obj in fresh:
        key = key_func(obj)
        listed.add(key)
        result.append((key, Delta(DeltaType.REPLACED, obj)))
    for key, deltas in queued.items():
        if key in listed:
            continue
        tombstone = DeletedFinalStateUnknown(key, _newest_state(deltas))
        result.append((key, Delta(DeltaType.DELETED, tombstone)))
    for key, obj in known.items():
        if key in listed or queued.get(key):
            continue
        result.append((key, Delta(DeltaType.DELETED, DeletedFinalStateUnknown(key, obj))))
    return result


def resync_deltas(
    known: Mapping[str, Obj], queued: Mapping[str, Sequence[Delta]]
) -> list[KeyedDelta]:
    """client-go's ``DeltaFIFO.Resync`` (reference 2.6): ``Sync`` every known key with nothing
    queued. A key with queued deltas is skipped because those deltas are newer than the store."""
    return [(key, Delta(DeltaType.SYNC, obj)) for key, obj in known.items() if not queued.get(key)]


def relist_diff(
    fresh: Iterable[Obj],
    known_versions: Mapping[str, str],
    last_known: Callable[[list[str]], Mapping[str, Obj | None]],
    key_func: KeyFunc = meta_namespace_key,
    *,
    snapshot_rv: str | None = None,
) -> Iterator[KeyedDelta]:
    """The deltas a relist really implies, given the resourceVersions already published.

    ``Added`` for new keys, ``Updated`` for keys whose resourceVersion changed, nothing for
    unchanged objects, and a tombstone ``Deleted`` for keys that vanished while we were not
    watching. Lazy: ``fresh`` may be a generator over LIST pages, and changes are yielded as
    they are found, so publishing overlaps listing. ``last_known`` is called once, with every
    vanished key, so the caller can keep full objects in Redis and fetch just those in one round
    trip. Tombstones come last, in key order, so the result is deterministic.

    ``snapshot_rv`` is the list's resourceVersion. A key known at a *newer* version than the
    snapshot changed after it, so the snapshot says nothing about it: it gets no tombstone and no
    update (the watch that follows the list brings its changes). Without this, a list older than
    the published state would delete objects that exist.
    """
    listed: set[str] = set()
    for obj in fresh:
        key = key_func(obj)
        listed.add(key)
        previous = known_versions.get(key)
        if previous is None:
            yield key, Delta(DeltaType.ADDED, obj)
            continue
        order = compare_resource_versions(resource_version(obj), previous)
        if order == 1 or order is None:
            yield key, Delta(DeltaType.UPDATED, obj)
    vanished = sorted(
        key
        for key in known_versions.keys() - listed
        if snapshot_rv is None or compare_resource_versions(known_versions[key], snapshot_rv) != 1
    )
    if not vanished:
        return
    last_objects = last_known(vanished)
    for key in vanished:
        tombstone = DeletedFinalStateUnknown(key, last_objects.get(key))
        yield key, Delta(DeltaType.DELETED, tombstone)
