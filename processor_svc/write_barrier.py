"""No reconcile acts on a cache older than its own writes (issue 15, point 4).

A controller that writes to the API and is triggered again before its cache caught up would
judge the world by a state from before its own write: it creates the ConfigMap twice, or
patches with a stale resourceVersion and gets 409 Conflict. client-go's controllers guard
against this with *expectations* (ReplicaSet's ``ControllerExpectations``), and KEP-5647
proposes the resourceVersion form used here: after a reconcile of queue key ``K`` writes an
object, it tells the barrier the resourceVersion the API returned (:meth:`WriteBarrier.expect`),
or that it deleted the object (:meth:`WriteBarrier.expect_deleted`); until the cache holds that
version (or a later one), or no longer holds the deleted object, ``K`` is not reconciled again.

The written object need not be ``K``'s own: a Widget's reconcile writes its ConfigMap and the
Widget's status, so one queue key has several expectations, each naming a *resource* and an
*object key* in it (by default the barrier's primary resource and ``K`` itself).

Rules, stated once here:

* An expectation is *met* when the named resource's cached object under the object key has a
  resourceVersion at least the expected one (``expect``), or when that cache holds no object
  under the key (``expect_deleted``); also when an event of that resource for that key carries
  such a version, or is a deletion, respectively (:meth:`WriteBarrier.observe`): a later event
  proves the cache passed the write even if the object changed again since.
* resourceVersions are compared as integers when both are decimal (etcd revisions, which is
  what every real API server and the simulator hand out); otherwise only equality meets one.
* Expecting an object again replaces its earlier expectation (the later write is what counts).
* ``K`` is reconciled when every expectation of ``K`` is met (met ones are forgotten). An
  expectation still unmet at its *deadline* (``timeout`` seconds after the write, wall-clock
  unix seconds so that another process can honour it) *expires*: it is forgotten, and ``K`` is
  requeued (with the controller's rate limiting) instead of reconciled now; the next attempt
  waits only for ``K``'s remaining expectations. Waiting forever would stall a key whose write
  the cache never shows (the object was replaced under the same name, a watch filter hides
  it); acting at once would be the stale read this module exists to prevent.
* A key that was told to wait is *released* when an event meets its last expectation:
  :meth:`WriteBarrier.observe` returns it, so the caller queues it again at once (the event
  itself may not, say a status update a predicate filters).
* Every change of a key's expectations made by :meth:`~WriteBarrier.expect`,
  :meth:`~WriteBarrier.expect_deleted`, :meth:`~WriteBarrier.observe` or
  :meth:`~WriteBarrier.check` is reported to ``on_change(key)``, called on the changing thread
  after the barrier's lock is released (a controller saves them for the shard's next owner);
  :meth:`~WriteBarrier.restore` and :meth:`~WriteBarrier.forget`, which install or drop what
  such a store holds, are not reported.

Pure and thread-safe: the reconcile workers expect and check, the dispatch threads observe.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from common.object_keys import DeletedFinalStateUnknown, Obj
from common.versions import compare_resource_versions

__all__ = ["DEFAULT_TIMEOUT", "GONE", "CacheReader", "Expectation", "Verdict", "WriteBarrier"]

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds a key waits for its cache to show the reconcile's own write before it is retried
anyway. A processor's cache trails the API by milliseconds; 30 s is a cache that is stuck."""

GONE: Final = ""
"""The expected version of a deletion: any cached object of the key is too old."""

CacheReader = Callable[[str, str], Obj | None]
"""``(resource, object_key) -> the cached object or None``: what :meth:`WriteBarrier.check`
reads when no event settled an expectation."""

_NOTHING: Final[tuple[str, ...]] = ()


@dataclass(frozen=True, slots=True)
class Expectation:
    """One write a reconcile made and the cache must show before its key is reconciled again:
    ``version`` (:data:`GONE`: the object must be gone) of ``object_key`` in ``resource``,
    until ``deadline`` (unix seconds, so that another process can honour it)."""

    resource: str
    object_key: str
    version: str
    deadline: float


class Verdict(enum.Enum):
    """What a controller does with a key taken off its queue."""

    RECONCILE = "reconcile"
    """No expectation left, or the caches hold every write: reconcile now."""
    WAIT = "wait"
    """A cache is older than one of the key's writes: do not reconcile; the event that brings
    the write releases the key (:meth:`WriteBarrier.observe`), its deadline at the latest."""
    EXPIRED = "expired"
    """A write was not shown within the timeout: requeue, do not reconcile now."""


def _version_of(obj: Obj | DeletedFinalStateUnknown | None) -> str | None:
    if isinstance(obj, DeletedFinalStateUnknown):
        obj = obj.obj
    if obj is None:
        return None
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return version if isinstance(version, str) else None


def _at_least(version: str | None, expected: str) -> bool:
    if version is None:
        return False
    return compare_resource_versions(version, expected) in (0, 1)


def _meets(
    expectation: Expectation, obj: Obj | DeletedFinalStateUnknown | None, *, gone: bool
) -> bool:
    """The module's rule: a deletion is met once the object is ``gone``; a write once ``obj``
    carries its version or a later one."""
    if expectation.version == GONE:
        return gone
    return _at_least(_version_of(obj), expectation.version)


_Slot = tuple[str, str]
"""``(resource, object_key)``: one object a key may wait for."""


class WriteBarrier:
    """Per-key expectations of a controller's own writes (module docstring).

    ``timeout``: seconds before an unmet expectation expires; ``resource``: the resource an
    expectation names when the caller names none (the controller's primary); ``clock``: unix
    seconds (deadlines are shared with other processes); ``on_change(key)``: told of every
    change of ``key``'s expectations. Raises ``ValueError`` unless ``timeout > 0``.
    """

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        resource: str = "",
        clock: Callable[[], float] = time.time,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.timeout: Final = timeout
        self.resource: Final = resource
        self._clock = clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._expected: dict[str, dict[_Slot, Expectation]] = {}
        # The inverse, so that an event finds the keys waiting for its object in one lookup.
        self._expecting: dict[_Slot, set[str]] = {}
        self._waiting: set[str] = set()

    # --- writes (reconcile workers) ------------------------------------------------------------

    def expect(
        self,
        key: str,
        resource_version: str,
        *,
        resource: str | None = None,
        object_key: str | None = None,
    ) -> None:
        """After a reconcile of ``key`` wrote ``object_key`` (default ``key``) of ``resource``
        (default the primary): do not reconcile ``key`` until the cache holds
        ``resource_version`` (what the API returned for the write) or later."""
        if not isinstance(resource_version, str) or not resource_version:
            raise ValueError(
                f"resource_version must be a non-empty string, got {resource_version!r}"
            )
        self._set(key, resource, object_key, resource_version)

    def expect_deleted(
        self, key: str, *, resource: str | None = None, object_key: str | None = None
    ) -> None:
        """After a reconcile of ``key`` deleted ``object_key`` (default ``key``) of
        ``resource`` (default the primary): do not reconcile ``key`` until the cache no
        longer holds it."""
        self._set(key, resource, object_key, GONE)

    def _set(self, key: str, resource: str | None, object_key: str | None, version: str) -> None:
        slot = (
            self.resource if resource is None else resource,
            key if object_key is None else object_key,
        )
        expectation = Expectation(slot[0], slot[1], version, self._clock() + self.timeout)
        with self._lock:
            self._expected.setdefault(key, {})[slot] = expectation
            self._expecting.setdefault(slot, set()).add(key)
        self._changed(key)

    # --- events (dispatch threads) -------------------------------------------------------------

    def observe(
        self,
        object_key: str,
        obj: Obj | DeletedFinalStateUnknown,
        *,
        deleted: bool,
        resource: str | None = None,
    ) -> tuple[str, ...]:
        """An event of ``resource`` (default the primary) for ``object_key`` reached its cache
        (``deleted``: it was a deletion): meets the expectations it carries. Returns the keys
        it released (module docstring): queue them."""
        if not self._expecting:  # the common case, without the lock: nobody waits for anything
            return _NOTHING
        slot = (self.resource if resource is None else resource, object_key)
        changed: list[str] = []
        released: list[str] = []
        with self._lock:
            keys = self._expecting.get(slot)
            if not keys:
                return _NOTHING
            for key in list(keys):
                if _meets(self._expected[key][slot], obj, gone=deleted):
                    self._remove_locked(key, slot)
                    changed.append(key)
                    if key not in self._expected and key in self._waiting:
                        self._waiting.discard(key)
                        released.append(key)
        for key in changed:
            self._changed(key)
        return tuple(released)

    # --- the verdict (reconcile workers) -------------------------------------------------------

    def check(self, key: str, read: CacheReader) -> Verdict:
        """Whether ``key`` may be reconciled now. ``read(resource, object_key)`` returns what
        that cache holds; it is called only for the key's pending expectations (a compact cache
        decodes on every read), outside the lock."""
        with self._lock:
            pending = self._expected.get(key)
            if not pending:
                self._waiting.discard(key)
                return Verdict.RECONCILE
            reads = list(pending.values())
        cached = [
            (expectation, read(expectation.resource, expectation.object_key))
            for expectation in reads
        ]
        changed = False
        with self._lock:
            for expectation, obj in cached:
                slot = (expectation.resource, expectation.object_key)
                current = self._expected.get(key, {}).get(slot)
                # Only the expectation that was read: one replaced meanwhile is a newer write.
                if current is expectation and _meets(expectation, obj, gone=obj is None):
                    self._remove_locked(key, slot)
                    changed = True
            verdict = self._verdict_locked(key)
            if verdict is Verdict.EXPIRED:
                changed = True
        if changed:
            self._changed(key)
        return verdict

    def _verdict_locked(self, key: str) -> Verdict:
        pending = self._expected.get(key)
        if not pending:
            self._waiting.discard(key)
            return Verdict.RECONCILE
        now = self._clock()
        expired = [slot for slot, expectation in pending.items() if now >= expectation.deadline]
        if expired:
            for slot in expired:
                self._remove_locked(key, slot)
            self._waiting.discard(key)
            return Verdict.EXPIRED
        self._waiting.add(key)
        return Verdict.WAIT

    def remaining(self, key: str) -> float | None:
        """Seconds until ``key``'s earliest expectation expires (``None`` without one)."""
        with self._lock:
            pending = self._expected.get(key)
            if not pending:
                return None
            deadline = min(expectation.deadline for expectation in pending.values())
        return max(0.0, deadline - self._clock())

    # --- what a store keeps --------------------------------------------------------------------

    def expectations(self, key: str) -> list[Expectation]:
        """``key``'s pending expectations, by resource and object key (what to persist)."""
        with self._lock:
            pending = self._expected.get(key, {})
            return [pending[slot] for slot in sorted(pending)]

    def pending_keys(self) -> list[str]:
        """The keys that have pending expectations."""
        with self._lock:
            return list(self._expected)

    def restore(self, key: str, expectations: Iterable[Expectation]) -> None:
        """Make ``expectations`` (as a store held them) ``key``'s, replacing what it had; not
        reported to ``on_change``."""
        with self._lock:
            self._forget_locked(key)
            for expectation in expectations:
                slot = (expectation.resource, expectation.object_key)
                self._expected.setdefault(key, {})[slot] = expectation
                self._expecting.setdefault(slot, set()).add(key)

    def forget(self, key: str) -> None:
        """Drop ``key``'s expectations (its shard went to another owner, which loads them from
        the store); not reported to ``on_change``."""
        with self._lock:
            self._forget_locked(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._expected)

    # --- internals -----------------------------------------------------------------------------

    def _changed(self, key: str) -> None:
        if self._on_change is not None:
            self._on_change(key)

    def _forget_locked(self, key: str) -> None:
        for slot in list(self._expected.get(key, ())):
            self._remove_locked(key, slot)
        self._waiting.discard(key)

    def _remove_locked(self, key: str, slot: _Slot) -> None:
        pending = self._expected[key]
        del pending[slot]
        if not pending:
            del self._expected[key]
        keys = self._expecting[slot]
        keys.discard(key)
        if not keys:
            del self._expecting[slot]
