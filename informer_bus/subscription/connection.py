"""How a subscription reaches Redis: a client it makes from a URL when it opens (blocking or
asyncio, as it is iterated), or the caller's client, checked when the subscription is made.

The checks need no Redis: a client that decodes responses cannot carry envelopes (bytes), and
one whose read timeout is shorter than a blocking read would time out every quiet period.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import redis
import redis.asyncio

from common.redis_config import SentinelTarget, is_cluster, redacted_url, redis_client
from informer_bus.subscription.options import DEFAULT_BLOCK_MS, SubscribeError

__all__ = ["Connector"]

# redis-py's socket_timeout must outlast the block, or every quiet period becomes a timeout and
# a retry (the "5 s socket_timeout trap"); this is the slack given on our own connections.
_SOCKET_TIMEOUT_MARGIN: Final = 5.0
_CONNECT_TIMEOUT: Final = 5


def _effective_socket_timeout(client: Any) -> float | None:
    """The read timeout the client's connections use: the pool's kwargs omit the connection
    class's own default (5 s), so it is read from a connection object that is never opened."""
    pool = client.connection_pool
    connection: Any = pool.connection_class(**pool.connection_kwargs)
    timeout = getattr(connection, "socket_timeout", None)
    return None if timeout is None else float(timeout)


class Connector:
    """The caller's client, or a URL to make ours from; :attr:`block_ms` fits either.

    ``where`` names the Redis in messages (the URL without its password, or the sentinels)."""

    def __init__(
        self,
        client_or_url: Any,
        *,
        block_ms: int | None,
        connection: Mapping[str, Any],
        cluster: bool,
    ) -> None:
        self._url: str | None = None
        self._client: Any = None
        self._connection = dict(connection)
        self._cluster = cluster
        if isinstance(client_or_url, str):
            self._url = client_or_url
            self.block_ms = DEFAULT_BLOCK_MS if block_ms is None else block_ms
            target = self._connection.get("sentinel")
            self.where = (
                target.describe()
                if isinstance(target, SentinelTarget)
                else redacted_url(client_or_url)
            )
            return
        if not isinstance(client_or_url, redis.Redis | redis.asyncio.Redis) and not is_cluster(
            client_or_url
        ):
            raise SubscribeError(
                f"expected a redis:// URL, a redis.Redis or a redis.asyncio.Redis, got "
                f"{type(client_or_url).__name__}"
            )
        self._client = client_or_url
        self.where = "Redis"
        self.block_ms = self._block_for(client_or_url, block_ms)

    @staticmethod
    def _block_for(client: Any, block_ms: int | None) -> int:
        if client.connection_pool.connection_kwargs.get("decode_responses"):
            raise SubscribeError(
                "the Redis client decodes responses; envelopes are bytes: build it with "
                "decode_responses=False (or pass a URL)"
            )
        timeout = _effective_socket_timeout(client)
        # Half the client's read timeout leaves room for the reply, whatever the network.
        ceiling = DEFAULT_BLOCK_MS if timeout is None else max(1, int(timeout * 500))
        if block_ms is None:
            return min(DEFAULT_BLOCK_MS, ceiling)
        if block_ms > ceiling:
            raise SubscribeError(
                f"block_ms={block_ms} is not below half the client's socket_timeout ({timeout} s):"
                " blocking reads would time out"
            )
        return block_ms

    def blocking(self) -> tuple[redis.Redis, bool]:
        """A blocking client, and whether the subscription made it (and so closes it)."""
        if self._url is None:
            if isinstance(self._client, redis.asyncio.Redis):
                raise SubscribeError(
                    "this subscription was given a redis.asyncio.Redis: read it with "
                    "'async with' / 'async for' (or give it a redis.Redis or a URL)"
                )
            client: redis.Redis = self._client
            return client, False
        made = redis_client(
            self._url,
            cluster=self._cluster,
            socket_timeout=self.block_ms / 1000 + _SOCKET_TIMEOUT_MARGIN,
            socket_connect_timeout=_CONNECT_TIMEOUT,
            **self._connection,
        )
        return made, True

    def asynchronous(self) -> tuple[redis.asyncio.Redis, bool]:
        """An asyncio client, and whether the subscription made it (and so closes it)."""
        if self._url is None:
            if not isinstance(self._client, redis.asyncio.Redis):
                raise SubscribeError(
                    f"this subscription was given a blocking {type(self._client).__name__}: "
                    "read it with 'with' / 'for' (or give it a redis.asyncio.Redis or a URL)"
                )
            return self._client, False
        if self._cluster or self._connection.get("sentinel") is not None:
            raise SubscribeError(
                "'async for' reads a single Redis (a URL or a redis.asyncio.Redis); through a "
                "Redis Cluster or Sentinel, read with 'for'"
            )
        made = redis.asyncio.Redis.from_url(
            self._url,
            socket_timeout=self.block_ms / 1000 + _SOCKET_TIMEOUT_MARGIN,
            socket_connect_timeout=_CONNECT_TIMEOUT,
            **self._connection,
        )
        return made, True
