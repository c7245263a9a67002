"""Every informer-bus Redis client, built in one place: standalone, Cluster or through Sentinel.

Credentials and TLS come from :mod:`common.redis_credentials` (:func:`connection_kwargs`), the
sentinel-managed client from :mod:`common.redis_sentinel`, what a person must fix from
:mod:`common.redis_errors`; their names are re-exported here, where the services import them.

Redis Cluster (``--redis-cluster``): :func:`redis_client` builds every client, a standalone one
or a :class:`ClusterClient` that discovers the nodes from the URL's node and follows ``MOVED``
redirections, with the same options. Keys of one shard share a hash tag, so every script and
``MULTI`` stays within one slot; :func:`node_client` names the node that serves a key, for the
connections that must sit on it (the processors' blocking reads, ``CLIENT UNBLOCK``).

:func:`check_redis_access` pings once at startup and raises :class:`RedisAccessError` for what a
person must fix. Lease clients (:func:`lease_client`) bound every call's time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from common.redis_credentials import (
    PASSWORD_ENV,
    command_line_password_warning,
    connection_kwargs,
    redacted_url,
    redis_location,
    redis_password,
    redis_secrets,
)
from common.redis_errors import READ_ONLY_HINT, RedisAccessError, describe_redis_error, one_line
from common.redis_sentinel import (
    MasterDownError,
    MasterUnknownError,
    NoSentinelError,
    SentinelTarget,
    sentinel_client,
)
from common.settings import LeaseTiming, RedisConnection, SettingsError

__all__ = [
    "PASSWORD_ENV",
    "ClusterClient",
    "MasterDownError",
    "MasterUnknownError",
    "NoSentinelError",
    "RedisAccessError",
    "SentinelTarget",
    "check_redis_access",
    "command_line_password_warning",
    "connect",
    "connection_kwargs",
    "describe_redis_error",
    "is_cluster",
    "lease_client",
    "lease_client_for",
    "node_client",
    "redacted_url",
    "redis_client",
    "redis_location",
    "redis_password",
    "redis_secrets",
]


def check_redis_access(
    target: RedisConnection, environ: Mapping[str, str] | None = None, *, timeout: float = 5.0
) -> None:
    """PING Redis once with the configured credentials and TLS; raises
    :class:`RedisAccessError` for a failure a person must fix (see
    :func:`describe_redis_error`). An unreachable Redis passes: services retry until it is up."""
    client = redis.Redis.from_url(
        target.url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **connection_kwargs(target, environ),
    ) if target.sentinel is None else redis_client(
        target.url,
        sentinel_timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **connection_kwargs(target, environ),
    )  # fmt: skip
    where = redis_location(target)
    try:
        client.ping()
        if target.sentinel is None and not target.cluster and _is_replica(client):
            raise RedisAccessError(f"{where} is a read-only replica; {READ_ONLY_HINT}")
    except redis.RedisError as exc:
        cause = describe_redis_error(exc, client_cert=bool(target.tls_cert_file))
        if cause is not None:
            raise RedisAccessError(f"{cause} [{where}]") from None
    finally:
        client.close()


def _is_replica(client: redis.Redis) -> bool:
    """Whether ``client``'s server is a replica (``ROLE``); ``False`` when the user may not
    run ``ROLE``, leaving the ``READONLY`` replies to say it later."""
    try:
        untyped: Any = client  # redis-py leaves execute_command unannotated
        role: Any = untyped.execute_command("ROLE")
    except (redis.exceptions.NoPermissionError, redis.ResponseError):
        return False
    first = role[0] if role else b""
    return (first.decode() if isinstance(first, bytes) else str(first)) in ("slave", "replica")


class ClusterClient(RedisCluster):
    """A ``RedisCluster`` that also offers the one ``redis.Redis`` attribute the services read
    besides commands: ``connection_pool``, whose settings (timeouts, retries, decoding, TLS) are
    those of every node's pool, since all are built from the same keyword arguments."""

    @property
    def connection_pool(self) -> redis.ConnectionPool:
        untyped: Any = self  # redis-py leaves get_default_node unannotated
        pool: redis.ConnectionPool = self.get_redis_connection(
            untyped.get_default_node()
        ).connection_pool
        return pool

    def close(self) -> None:
        """Also disconnect every node's pool: ``RedisCluster.close`` only closes the node
        clients, and those never close a pool they were handed, which is how redis-py builds
        them from a URL. Their sockets would be left for the garbage collector."""
        untyped: Any = self  # redis-py leaves disconnect_connection_pools unannotated
        try:
            untyped.disconnect_connection_pools()
        finally:
            super().close()


def redis_client(
    url: str,
    *,
    cluster: bool = False,
    sentinel: SentinelTarget | None = None,
    sentinel_timeout: float | None = None,
    **kwargs: Any,
) -> redis.Redis:
    """A client for ``url``: standalone, or with ``cluster`` a :class:`ClusterClient` that
    reads the cluster's slot map from the URL's node at once (so an unreachable cluster, or a
    node that is not in cluster mode, raises :class:`RedisAccessError` here, one line).

    Typed ``redis.Redis`` on purpose: ``RedisCluster`` offers the same command methods
    (key-based ones routed by slot, ``SCAN`` over every primary), which is all the services
    call; the few places that need a particular node use :func:`node_client`. A ``retry`` in
    ``kwargs`` becomes the cluster client's own retry policy (redis-py refuses it per node).

    ``sentinel``: a :class:`SentinelManagedRedis` for the master the sentinels name (the URL's
    host is ignored); ``sentinel_timeout`` bounds the connect and the reply of each sentinel
    asked (default: ``socket_connect_timeout``, else 5 s).
    """
    if sentinel is not None:
        if cluster:
            raise SettingsError("choose one of --redis-sentinel and --redis-cluster")
        return sentinel_client(url, sentinel, sentinel_timeout, kwargs)
    if not cluster:
        client: redis.Redis = redis.Redis.from_url(url, **kwargs)
        return client
    if url.startswith("unix://"):
        raise SettingsError("--redis-cluster needs a redis:// or rediss:// URL, not unix://")
    try:
        cluster_client = ClusterClient.from_url(url, **kwargs)
    except (RedisClusterException, redis.RedisError) as exc:
        raise RedisAccessError(
            f"cannot use the Redis Cluster at {redacted_url(url)}: {one_line(exc)}"
        ) from None
    return cluster_client  # type: ignore[return-value]  # same command API, see the docstring


def connect(
    target: RedisConnection, environ: Mapping[str, str] | None = None, **kwargs: Any
) -> redis.Redis:
    """A client for ``target`` (URL, credentials, TLS, Cluster mode), checked as
    :func:`connection_kwargs` checks it; ``kwargs`` (timeouts, ...) go to :func:`redis_client`."""
    return redis_client(
        target.url, cluster=target.cluster, **connection_kwargs(target, environ), **kwargs
    )


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (a :func:`redis_client` with ``cluster``)."""
    return isinstance(client, RedisCluster)


def node_client(client: redis.Redis, key: str) -> redis.Redis:
    """The client of the node that serves ``key`` now: ``client`` itself when standalone, else
    that primary's own ``redis.Redis`` (its pool is shared with the cluster client). The slot
    map is the cluster client's last known one; it is refreshed by the ``MOVED`` replies its
    own commands get, so callers look the node up again after an error."""
    if not is_cluster(client):
        return client
    cluster: Any = client  # redis-py leaves get_node_from_key unannotated
    node: redis.Redis = cluster.get_redis_connection(cluster.get_node_from_key(key))
    return node


def lease_client_for(
    url: str, *, timing: LeaseTiming, calls_per_renewal: int = 1, **kwargs: Any
) -> redis.Redis:
    """A :func:`lease_client` whose calls always end between the renew deadline and the lease
    expiry (a call takes up to about ``2 * timeout``), so a holder that gives up at its
    deadline never still writes after someone else could have taken the lease.
    ``calls_per_renewal``: how many calls one renewal makes one after the other (a processor
    owning shard *N* of several co-sharded resources renews one lease per resource), which
    share the margin. ``kwargs`` (credentials, TLS: ``connection_kwargs``) go to
    :func:`lease_client`."""
    margin = timing.lease_duration - timing.renew_deadline  # > 0: LeaseTiming's rule
    # Through sentinels a call may first spend up to one more timeout asking for the master.
    calls = (3.5 if kwargs.get("sentinel") is not None else 2.5) * max(1, calls_per_renewal)
    return lease_client(url, timeout=min(2.0, margin / calls), **kwargs)


def lease_client(
    url: str, *, timeout: float = 2.0, cluster: bool = False, **kwargs: Any
) -> redis.Redis:
    """A Redis client fit for leases: every call gives up after about ``2 * timeout`` seconds.

    ``timeout`` bounds the connect and each read (``socket_connect_timeout``/``socket_timeout``)
    and there are no retries: a lease operation is retried by the elector's loop, every retry
    period, where the renew deadline is checked between attempts. With the defaults (2 s timeout,
    15 s lease, 10 s deadline) a call that started just before the deadline still ends before
    the lease can expire. ``cluster``: a Redis Cluster client (no cluster-level retries either;
    ``redis_client``). ``sentinel``: the master through sentinels, which are asked with
    ``timeout / (2 * sentinels)`` each, so the lookup a new connection makes adds at most one
    ``timeout`` (about ``3 * timeout`` per call). Extra ``kwargs`` go to
    ``redis.Redis.from_url`` (e.g. ``password``).
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0, got {timeout!r}")
    sentinel: SentinelTarget | None = kwargs.pop("sentinel", None)
    return redis_client(
        url,
        cluster=cluster,
        sentinel=sentinel,
        sentinel_timeout=(
            None if sentinel is None else timeout / (2 * max(1, len(sentinel.addresses)))
        ),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **kwargs,
    )
