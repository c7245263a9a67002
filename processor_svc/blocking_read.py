"""The blocking wait for new entries of every shard a reading loop reads, and its interrupt.

Reads that change the consumer group are fenced scripts (:mod:`processor_svc.fenced_stream`),
and a script cannot block. So the wait for new entries is a plain ``XREAD BLOCK`` (it changes
nothing) on a dedicated connection whose ``socket_timeout`` is well above the block time
(redis-py's default 5 s would otherwise turn every long BLOCK into a timeout and retries); the
entries themselves are then taken with a fenced, non-blocking ``XREADGROUP``.

One ``XREAD BLOCK`` names every idle shard's stream (:meth:`BlockingRead.wait_any`; a Cluster
is polled per node instead). Stopping a shard must not wait out a whole block:
:meth:`BlockingRead.interrupt` ends the wait with ``CLIENT UNBLOCK``, using the connection's
``CLIENT ID`` recorded when it connected.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.redis_config import is_cluster, node_client
from common.redis_replies import as_text

__all__ = ["CLUSTER_POLL", "BlockingRead"]

log = logging.getLogger(__name__)

_BLOCK_TIMEOUT_MARGIN: Final = 10.0  # blocking socket timeout = block time + this

CLUSTER_POLL: Final = 0.02
"""Seconds an idle reading loop on a Redis Cluster waits between asking its shards' nodes."""

_POOL_BOUND_KWARGS: Final = frozenset(
    {
        "retry",
        "redis_connect_func",
        "maint_notifications_pool_handler",
        "himport_registry",
        "orig_host_address",
        "orig_socket_timeout",
        "orig_socket_connect_timeout",
    }
)
"""Connection settings that belong to the original pool (or are replaced), not copied."""


class BlockingRead:
    """Waits up to ``block_ms`` for entries of ``stream`` after an ID, interruptibly.

    ``client`` is the shard worker's client (its connection settings are copied, and on a
    Cluster it finds the node serving the stream); ``stop`` is the worker's stop event: once it
    is set no new wait starts. :meth:`wait` runs on the worker's thread, :meth:`interrupt` on
    any other.
    """

    def __init__(
        self, client: redis.Redis, stream: str, *, block_ms: int, stop: threading.Event
    ) -> None:
        self._client = client
        self._stream = stream
        self._block_ms = block_ms
        self._stop = stop
        # What interrupt() needs to end a wait, guarded by the lock.
        self._lock = threading.Lock()
        self._blocking = False
        self._blocking_id: int | None = None
        self._blocking_client: redis.Redis | None = None

    @property
    def connected(self) -> bool:
        """The dedicated connection exists (it is made at the first wait, dropped on errors)."""
        return self._blocking_client is not None

    def wait(self, after_id: str, block_ms: int) -> None:
        """Block until the stream has an entry after ``after_id``, or ``block_ms`` passed, or
        :meth:`interrupt`; returns at once when the stop event is set. Raises
        ``redis.RedisError`` (the connection is then closed, the next wait makes a new one)."""
        self.read(after_id, 1, block_ms)

    def read(self, after_id: str, count: int, block_ms: int) -> list[Any]:
        """Up to ``count`` entries after ``after_id`` (``[(id, fields), ...]``), waiting as
        :meth:`wait` does when there are none: for a reader outside any consumer group (a
        replicated resource), whose read changes nothing and needs no fencing."""
        reply = self._xread_blocking({self._stream: after_id}, count, block_ms)
        if not reply:
            return []
        if isinstance(reply, dict):  # RESP3: {stream: [entries]}
            return list(next(iter(reply.values()))[0]) if reply else []
        return list(reply[0][1])

    def wait_any(self, positions: Mapping[str, str], block_ms: int) -> set[str]:
        """The streams of ``positions`` (stream -> last ID read) that have an entry after their
        ID, waiting up to ``block_ms`` for one; empty after a timeout or :meth:`interrupt`.

        One ``XREAD BLOCK`` names every stream, so a reading loop pays one round trip per wake
        for all its shards. A Redis Cluster refuses that (each shard is a slot of its own): there
        the streams are asked without blocking, one pipeline per node, and an idle answer waits
        :data:`CLUSTER_POLL` on the stop event before the next ask (docs/architecture.md, "One
        reading loop per processor")."""
        if not positions:
            self._stop.wait(block_ms / 1000)
            return set()
        if is_cluster(self._client):
            return self._poll_cluster(positions, block_ms)
        reply = self._xread_blocking(dict(positions), 1, block_ms)
        if not reply:
            return set()
        if isinstance(reply, dict):  # RESP3: {stream: [entries]}
            return {as_text(stream) for stream in reply}
        return {as_text(stream) for stream, _ in reply}

    def _xread_blocking(self, streams: dict[Any, Any], count: int, block_ms: int) -> Any:
        """One ``XREAD BLOCK``, marked as blocking so that :meth:`interrupt` knows to break
        it; ``None`` without a call once stopped. A failed call closes the connection."""
        with self._lock:
            if self._stop.is_set():
                return None
            self._blocking = True
        try:
            return self._connection().xread(streams, count=count, block=block_ms)
        except redis.RedisError:
            self.close()
            raise
        finally:
            with self._lock:
                self._blocking = False

    def _poll_cluster(self, positions: Mapping[str, str], block_ms: int) -> set[str]:
        pipe: Any = self._client.pipeline(transaction=False)
        for stream, after in positions.items():
            pipe.xread({stream: after}, count=1)
        found = {stream for stream, reply in zip(positions, pipe.execute(), strict=True) if reply}
        if not found:
            self._stop.wait(min(block_ms / 1000, CLUSTER_POLL))
        return found

    def interrupt(self, worker: threading.Thread) -> None:
        """End a blocking ``XREAD`` now with ``CLIENT UNBLOCK`` instead of waiting ``block_ms``.

        ``worker`` is the thread that waits. It may be between deciding to block and Redis
        registering the command, when there is nothing to unblock yet; so retry until it
        unblocked or the wait is over.
        """
        deadline = time.monotonic() + self._block_ms / 1000 + 1.0
        while worker.is_alive() and time.monotonic() < deadline:
            with self._lock:
                if not self._blocking:
                    return
                client_id = self._blocking_id
            if client_id is not None:
                try:
                    # The blocked connection sits on the node serving the stream (Cluster).
                    node = node_client(self._client, self._stream)
                    if node.client_unblock(client_id):
                        return
                except redis.RedisError:
                    return  # the read ends by its own timeout
            time.sleep(0.005)

    def close(self) -> None:
        """Close the dedicated connection (best effort); the next wait opens a new one."""
        client, self._blocking_client = self._blocking_client, None
        with self._lock:
            self._blocking_id = None
        if client is not None:
            try:
                client.close()
                client.connection_pool.disconnect()
            except Exception:  # closing is best effort
                log.debug("closing the blocking connection failed", exc_info=True)

    def _connection(self) -> redis.Redis:
        """A client on one dedicated connection whose socket timeout outlasts ``block_ms``.

        Built from the given client's connection settings (the pool's own bookkeeping left
        out). Its connect hook records the connection's ``CLIENT ID`` on every (re)connect, so
        :meth:`interrupt` can ``CLIENT UNBLOCK`` it. No retries: the blocked command is an
        ``XREAD`` that changes nothing, and the worker's loop retries with backoff.
        """
        # On a Redis Cluster: the pool of the node serving the stream's slot now, looked up
        # again whenever a failed read (MOVED, a lost node) closed the previous connection.
        pool = node_client(self._client, self._stream).connection_pool
        if self._blocking_client is not None:
            if not _left_behind(self._blocking_client, pool):
                return self._blocking_client
            self.close()
        kwargs = {
            name: value
            for name, value in pool.connection_kwargs.items()
            if name not in _POOL_BOUND_KWARGS
        }

        # The hook lives as long as the pool, and redis-py's pools sit in reference cycles
        # that only a full collection frees: a strong reference here kept every stopped
        # worker, with its shard store, alive for minutes (found by the soak test).
        reader = weakref.ref(self)

        def on_connect(connection: Any) -> None:
            connection.on_connect()
            connection.send_command("CLIENT", "ID")
            client_id = int(connection.read_response())
            owner = reader()
            if owner is not None:
                with owner._lock:
                    owner._blocking_id = client_id

        kwargs.update(
            socket_timeout=self._block_ms / 1000 + _BLOCK_TIMEOUT_MARGIN,
            retry=Retry(NoBackoff(), 0),
            redis_connect_func=on_connect,
        )
        blocking_pool = redis.ConnectionPool(
            connection_class=pool.connection_class, max_connections=2, **kwargs
        )
        self._blocking_client = redis.Redis(
            connection_pool=blocking_pool, single_connection_client=True
        )
        return self._blocking_client


def _left_behind(client: redis.Redis, pool: redis.ConnectionPool) -> bool:
    """Whether ``client``'s connection sits on a primary that Sentinel has since replaced.

    Its copy of a sentinel-managed pool's settings asks the sentinels on every (re)connect, but
    an ``XREAD`` is no write: on a demoted old primary it gets no ``READONLY`` to drop the
    connection, and would go on reading a replica that ``CLIENT UNBLOCK`` (sent through the
    command client, to the new primary) cannot reach. Sentinel usually prevents that with a
    ``CLIENT KILL TYPE normal`` when it demotes the old primary, but not where ``CLIENT`` is
    renamed away (a common hardening). The command client's pool learns the new address on its
    first reconnect; a plain pool has no ``master_address`` and never says so.
    """
    master = getattr(pool, "master_address", None)
    connection: Any = client.connection
    if master is None or connection is None or connection._sock is None:
        return False
    return (connection.host, connection.port) != tuple(master)
