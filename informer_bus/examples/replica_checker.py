"""Deployments that have fewer ready replicas than they ask for: a complete Controller.

Run it with ``informer-bus processor --resource deployments.apps
--handler informer_bus.examples.replica_checker:ReplicaChecker``.

This is client-go's NewController pattern: the inherited ``on_add``/``on_update``/``on_delete``
only queue the Deployment's key; worker threads call :meth:`ReplicaChecker.reconcile` with the
key, which reads the *current* Deployment from the lister and updates the report. Because it
reads state instead of interpreting events, it does not matter how many events were coalesced,
repeated by a takeover, or replayed by a resync: the report converges on the cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from informer_bus import Controller, HandlerContext

__all__ = ["ReplicaChecker", "Shortfall"]


@dataclass(frozen=True)
class Shortfall:
    """A Deployment with fewer ready replicas than desired."""

    desired: int
    ready: int


class ReplicaChecker(Controller):
    """Keeps ``shortfalls()``: every owned Deployment whose ready replicas fall short."""

    workers = 2
    max_retries = 3

    def __init__(self, context: HandlerContext) -> None:
        super().__init__(context)
        self._lock = threading.Lock()  # reconcile runs on several workers at once
        self._shortfalls: dict[str, Shortfall] = {}

    def shortfalls(self) -> dict[str, Shortfall]:
        """``{namespace/name: Shortfall}``, a copy."""
        with self._lock:
            return dict(self._shortfalls)

    def reconcile(self, key: str) -> None:
        deployment = self.lister.get_by_key(key)
        if deployment is None:
            # Deleted (a handed-over shard's keys are skipped before reconcile is called).
            with self._lock:
                self._shortfalls.pop(key, None)
            return
        # The lister hands out the cached dict itself: read it, never modify it.
        desired = (deployment.get("spec") or {}).get("replicas", 1)
        ready = (deployment.get("status") or {}).get("readyReplicas", 0)
        if not isinstance(desired, int) or not isinstance(ready, int):
            # Raising retries with backoff, then gives up with a logged error.
            raise ValueError(f"replicas of {key} are not integers: {desired!r}, {ready!r}")
        with self._lock:
            if ready < desired:
                self._shortfalls[key] = Shortfall(desired, ready)
            else:
                self._shortfalls.pop(key, None)
