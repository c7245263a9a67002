"""No reconcile acts on a cache older than its own write (issue 15, point 4).

A controller that writes to the API and is triggered again before its cache caught up would
judge the world by a state from before its own write: it creates the ConfigMap twice, or
patches with a stale resourceVersion and gets 409 Conflict. client-go's controllers guard
against this with *expectations* (ReplicaSet's ``ControllerExpectations``), and KEP-5647
proposes the resourceVersion form used here: after a write, the reconcile tells the barrier
the resourceVersion the API returned (:meth:`WriteBarrier.expect`), or that it deleted the
object (:meth:`WriteBarrier.expect_deleted`); until the cache holds that version (or a later
one), or no longer holds the deleted object, the key is not reconciled again.

Rules, stated once here:

* An expectation is *met* when the cached object's resourceVersion is at least the expected
  one (``expect``), or when the cache holds no object for the key (``expect_deleted``); also
  when an event for the key carries such a version (:meth:`observe`): a later event proves the
  cache passed the write even if the object changed again since.
* resourceVersions are compared as integers when both are decimal (etcd revisions, which is
  what every real API server and the simulator hand out); otherwise only equality meets one.
* An expectation older than ``timeout`` seconds *expires*: the key is requeued (with the
  controller's rate limiting) and reconciled on the next attempt on whatever the cache holds
  then. Waiting forever would stall a key whose write the cache never shows (the object was
  replaced under the same name, a watch filter hides it); acting at once would be the stale
  read this module exists to prevent.

Pure and thread-safe: the reconcile workers expect, the dispatch threads observe.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from common.keys import DeletedFinalStateUnknown, Obj

__all__ = ["DEFAULT_TIMEOUT", "Verdict", "WriteBarrier"]

DEFAULT_TIMEOUT: Final = 30.0
"""Seconds a key waits for its cache to show the reconcile's own write before it is retried
anyway. A processor's cache trails the API by milliseconds; 30 s is a cache that is stuck."""

_GONE: Final = ""
"""The expected version of a deletion: any cached object of the key is too old."""


class Verdict(enum.Enum):
    """What a controller does with a key taken off its queue."""

    RECONCILE = "reconcile"
    """No expectation, or the cache already holds the write: reconcile now."""
    WAIT = "wait"
    """The cache is older than the key's last write: do not reconcile; the event that brings
    the write enqueues the key again."""
    EXPIRED = "expired"
    """The cache did not show the write within the timeout: requeue, reconcile next time."""


@dataclass(frozen=True, slots=True)
class _Expectation:
    version: str
    """The resourceVersion the write returned; :data:`_GONE` for a deletion."""
    deadline: float


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
    if version.isdigit() and expected.isdigit():
        return int(version) >= int(expected)
    return version == expected


def _meets(
    expectation: _Expectation, obj: Obj | DeletedFinalStateUnknown | None, *, gone: bool
) -> bool:
    """The module's rule: a deletion is met once the key is ``gone``; a write once ``obj``
    carries its version or a later one."""
    if expectation.version == _GONE:
        return gone
    return _at_least(_version_of(obj), expectation.version)


class WriteBarrier:
    """Per-key expectations of a controller's own writes (module docstring).

    ``timeout``: seconds before an unmet expectation expires; ``clock``: monotonic seconds.
    Raises ``ValueError`` unless ``timeout > 0``.
    """

    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.timeout: Final = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._expected: dict[str, _Expectation] = {}

    def expect(self, key: str, resource_version: str) -> None:
        """After writing ``key``: do not reconcile it until the cache holds
        ``resource_version`` (what the API returned for the write) or later."""
        if not isinstance(resource_version, str) or not resource_version:
            raise ValueError(
                f"resource_version must be a non-empty string, got {resource_version!r}"
            )
        self._set(key, resource_version)

    def expect_deleted(self, key: str) -> None:
        """After deleting ``key``: do not reconcile it until the cache no longer holds it."""
        self._set(key, _GONE)

    def _set(self, key: str, version: str) -> None:
        with self._lock:
            self._expected[key] = _Expectation(version, self._clock() + self.timeout)

    def observe(self, key: str, obj: Obj | DeletedFinalStateUnknown, *, deleted: bool) -> None:
        """An event for ``key`` reached the cache (``deleted``: it was a deletion): meets the
        key's expectation if the event carries the write or a later version."""
        with self._lock:
            expectation = self._expected.get(key)
            if expectation is None:
                return
            if _meets(expectation, obj, gone=deleted):
                del self._expected[key]

    def check(self, key: str, read_cache: Callable[[], Obj | None]) -> Verdict:
        """Whether ``key`` may be reconciled; ``read_cache`` returns the object the cache holds
        for it now, and is called only when the key has an expectation (a compact cache
        decodes on every read).

        A met expectation is forgotten; an expired one too (its verdict says so once)."""
        with self._lock:
            if key not in self._expected:
                return Verdict.RECONCILE
        cached = read_cache()  # outside the lock: the dispatch threads observe meanwhile
        with self._lock:
            expectation = self._expected.get(key)  # the current one, met or replaced since
            if expectation is None:
                return Verdict.RECONCILE
            if _meets(expectation, cached, gone=cached is None):
                del self._expected[key]
                return Verdict.RECONCILE
            if self._clock() >= expectation.deadline:
                del self._expected[key]
                return Verdict.EXPIRED
            return Verdict.WAIT

    def remaining(self, key: str) -> float | None:
        """Seconds until ``key``'s expectation expires (``None`` without one)."""
        with self._lock:
            expectation = self._expected.get(key)
            return None if expectation is None else max(0.0, expectation.deadline - self._clock())

    def __len__(self) -> int:
        with self._lock:
            return len(self._expected)
