"""A private redis-server per test session, on a free port (:mod:`informer_bus.local_redis`,
which the demo shares).

Tests never use a Redis that happens to run on the machine (127.0.0.1:6379 may exist and must
not be disturbed): they start their own with no persistence, in a temporary directory.
"""

from __future__ import annotations

from informer_bus import local_redis
from informer_bus.local_redis import free_port

__all__ = ["RedisServer", "free_port"]


class RedisServer(local_redis.RedisServer):
    """:class:`informer_bus.local_redis.RedisServer` whose port comes from this module's
    :func:`free_port`, so a test can monkeypatch that to restart a server on the same port."""

    def _pick_port(self) -> int:
        return free_port()
