"""How long a controller's key waits while the caches of its shard are still loading.

A takeover loads one shard's caches while the others serve, so a key can be taken off the queue
before its shard is ready to judge. That is not a failure (the rate limiter's business): the key
is put back after a pause that starts short and doubles, so a shard that loads quickly costs
little and a co-sharded resource whose reflector is slow does not make thousands of keys spin.
"""

from __future__ import annotations

import threading

__all__ = ["KEY_SYNC_RETRY_MAX_SECONDS", "KEY_SYNC_RETRY_SECONDS", "SyncWaits"]

KEY_SYNC_RETRY_SECONDS = 0.1
"""How soon a key whose shard's caches are still loading is first tried again; each further
wait doubles, up to :data:`KEY_SYNC_RETRY_MAX_SECONDS`."""
KEY_SYNC_RETRY_MAX_SECONDS = 2.0
"""The longest pause between two looks at a key whose shard's caches are still loading."""


class SyncWaits:
    """The keys put back while their shard's caches loaded, and how often each was."""

    __slots__ = ("_lock", "_waits")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waits: dict[str, int] = {}

    def next_delay(self, key: str) -> float:
        """``key`` must wait again: the seconds before its next look."""
        with self._lock:
            waits = self._waits.get(key, 0)
            self._waits[key] = waits + 1
        return min(KEY_SYNC_RETRY_MAX_SECONDS, KEY_SYNC_RETRY_SECONDS * 2.0**waits)

    def forget(self, key: str) -> None:
        """``key``'s caches are loaded, or the key is dropped: its next wait starts short."""
        if self._waits:  # read without the lock: a key is only added by its own worker
            with self._lock:
                self._waits.pop(key, None)
