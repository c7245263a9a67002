"""How long a controller's key waits while the caches of its shard are still loading.

A takeover loads one shard's caches while the others serve, so a key can be taken off the queue
before its shard is ready to judge. That is not a failure (the rate limiter's business): the key
is put back after a pause that starts short and doubles, so a shard that loads quickly costs
little and a co-sharded resource whose reflector is slow does not make thousands of keys spin.
"""

from __future__ import annotations

from common.rate_limiters import ItemExponentialFailureRateLimiter

__all__ = ["KEY_SYNC_RETRY_MAX_SECONDS", "KEY_SYNC_RETRY_SECONDS", "SyncWaits"]

KEY_SYNC_RETRY_SECONDS = 0.1
"""How soon a key whose shard's caches are still loading is first tried again; each further
wait doubles, up to :data:`KEY_SYNC_RETRY_MAX_SECONDS`."""
KEY_SYNC_RETRY_MAX_SECONDS = 2.0
"""The longest pause between two looks at a key whose shard's caches are still loading."""


class SyncWaits(ItemExponentialFailureRateLimiter[str]):
    """The keys put back while their shard's caches loaded, and how often each was: the
    workqueue's per-item exponential backoff, on its own counts and with its own bounds."""

    def __init__(self) -> None:
        super().__init__(KEY_SYNC_RETRY_SECONDS, KEY_SYNC_RETRY_MAX_SECONDS)

    def next_delay(self, key: str) -> float:
        """``key`` must wait again: the seconds before its next look."""
        return self.when(key)

    def forget(self, key: str) -> None:
        """``key``'s caches are loaded, or the key is dropped: its next wait starts short."""
        if self._failures:  # read without the lock: a key is only added by its own worker
            super().forget(key)
