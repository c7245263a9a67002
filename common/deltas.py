"""Deltas: what changed about one object, and the rules that decide which are published.

client-go's DeltaFIFO is a queue *and* a set of rules: which deltas a relist produces, when a
deletion is dropped, when a delta is already known. In informer-bus the queue is a Redis
stream per shard, so the rules are split by where they run (reference: client-go-semantics.md
section 2):

* :func:`relist_diff` is what the reflector publishes after a LIST (instead of client-go's
  ``Replace``, which re-announces every unchanged object as ``Replaced``: the relist storm):
  only real changes, and tombstones for vanished keys.
* What a shard already has is decided inside Redis, atomically, by the publish script
  (``common.redis_layout.publish_scripts.PUBLISH_LUA``): that Lua is the source of truth.
  :func:`publish_is_skipped` states the same rules in Python, for readers and for in-memory
  sinks; ``tests/reflector/publisher/test_publish_rules.py`` runs random delta sequences through
  both (the real Lua on a real redis-server) and requires the same decisions.

client-go's in-memory queue rules (``Replace``, ``Resync``, the deletion dedup) have no
counterpart: there is no in-memory queue here (a stream entry, once published, is what every
consumer reads), and a second deletion of a key is skipped because the first made it unknown.
Nothing here locks or blocks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.versions import compare_resource_versions, is_integer_version, resource_version

__all__ = [
    "Delta",
    "DeltaType",
    "KeyedDelta",
    "publish_is_skipped",
    "relist_diff",
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


def publish_is_skipped(
    delta_type: DeltaType, rv: str, known: str | None, *, replay_below: str | None = None
) -> bool:
    """Whether a shard that knows ``known`` (the key's published resourceVersion, ``None`` when
    the key is unknown) skips a delta at ``rv``: the publish script's rules, in its order.

    1. Checkpoint rule: with ``replay_below`` (the shard's checkpoint, passed for batches that
       move it, i.e. watch batches) an upsert at or below it is a replay.
    2. Per-key rules: an upsert is skipped when ``known`` is at least ``rv`` (equal when they
       are not both integers); a deletion when the key is unknown (nobody saw the object:
       reference 2.4, and a second deletion of a key), or when ``known`` is strictly newer
       (a replayed deletion of an object re-created since).
    """
    deletion = delta_type is DeltaType.DELETED
    if (
        not deletion
        and replay_below is not None
        and is_integer_version(rv)
        and is_integer_version(replay_below)
        and int(rv) <= int(replay_below)
    ):
        return True
    if known is None:
        return deletion
    order = compare_resource_versions(known, rv)
    return order == 1 if deletion else order in (0, 1)


def relist_diff(
    fresh: Iterable[Obj],
    known_versions: Mapping[str, str],
    last_known: Callable[[list[str]], Mapping[str, Obj | None]],
    key_func: KeyFunc = meta_namespace_key,
    *,
    snapshot_rv: str | None = None,
    moved: Callable[[str, Obj], bool] | None = None,
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
        if order == 1 or order is None or (order == 0 and moved is not None and moved(key, obj)):
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
