"""The two Redis clients every service holds, built one way for both services.

A command client for the short calls (publishing, reads, acknowledgements) whose socket timeout
is generous because none of those calls blocks server-side, and a lease client whose every call
ends between the renew deadline and the lease expiry (``common.redis_config.lease_client_for``).
Both get the same credentials, TLS, Cluster mode and sentinels (``common.redis_config``): with
``--redis-sentinel`` both follow a failover, the lease client still without retries.
"""

from __future__ import annotations

import redis

from common.redis_config import connect, connection_kwargs, lease_client_for
from common.settings import LeaseTiming, RedisConnection

__all__ = ["service_clients"]


def service_clients(
    redis_connection: RedisConnection, lease: LeaseTiming, *, calls_per_renewal: int = 1
) -> tuple[redis.Redis, redis.Redis]:
    """``(command client, lease client)`` for a service with these settings; a renewal of the
    service's leases makes ``calls_per_renewal`` calls (:func:`lease_client_for`)."""
    commands = connect(
        redis_connection, socket_timeout=30, socket_connect_timeout=5, health_check_interval=15
    )
    leases = lease_client_for(
        redis_connection.url,
        timing=lease,
        calls_per_renewal=calls_per_renewal,
        cluster=redis_connection.cluster,
        **connection_kwargs(redis_connection),
    )
    return commands, leases
