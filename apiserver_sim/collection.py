"""One resource type's objects in the simulated etcd: the live objects, every revision of each
key that a snapshot may still ask for, the keys in order (LIST pages walk them), and per-namespace
counts (``remainingItemCount``).

The store (:class:`~apiserver_sim.state.ClusterState`) holds its lock around every
call and trims the revisions as it compacts its event log.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from apiserver_sim.resources import ResourceType
from apiserver_sim.revision import StoredObject, rv_of

__all__ = ["Collection"]


@dataclass
class Collection:
    resource: ResourceType
    current: dict[str, StoredObject] = field(default_factory=dict)
    revisions: dict[str, list[StoredObject]] = field(default_factory=dict)
    """Per key, ascending: every revision newer than the compaction point plus the one in
    force at it (a ``DELETED`` tombstone ends an incarnation)."""
    keys: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def at(self, key: str, rv: int) -> StoredObject | None:
        revs = self.revisions.get(key)
        if not revs:
            return None
        found = revs[-1]
        if found.rv > rv:
            i = bisect.bisect_right(revs, rv, key=rv_of)
            if not i:
                return None
            found = revs[i - 1]
        return None if found.type == "DELETED" else found

    def record(self, revision: StoredObject) -> None:
        revs = self.revisions.get(revision.key)
        if revs is None:
            self.revisions[revision.key] = [revision]
            bisect.insort(self.keys, revision.key)
        else:
            revs.append(revision)

    def trim(self, key: str, rv: int) -> None:
        """The revision written at ``rv`` is now at or before the compaction point."""
        revs = self.revisions.get(key)
        if revs is None:
            return
        if revs[0].rv < rv:  # short lists, mostly one stale entry: scan, don't bisect
            i, n = 1, len(revs)
            while i < n and revs[i].rv < rv:
                i += 1
            del revs[:i]
        if revs and revs[0].rv <= rv and revs[0].type == "DELETED":
            del revs[0]
        if not revs:
            del self.revisions[key]
            j = bisect.bisect_left(self.keys, key)
            if j < len(self.keys) and self.keys[j] == key:
                del self.keys[j]

    def count(self, namespace: str | None) -> int:
        if namespace is None:
            return len(self.current)
        return self.counts.get(namespace, 0)

    def adjust(self, namespace: str, delta: int) -> None:
        self.counts[namespace] = self.counts.get(namespace, 0) + delta
