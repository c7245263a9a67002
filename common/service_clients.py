"""The two Redis clients every service holds, built one way for both services.

A command client for the short calls (publishing, reads, acknowledgements) whose socket timeout
is generous because none of those calls blocks server-side, and a lease client whose every call
ends between the renew deadline and the lease expiry (``common.redis_config.lease_client_for``).
Both get the same credentials, TLS and Cluster mode (``common.redis_config``).
"""

from __future__ import annotations

import redis

from common.redis_config import connection_kwargs, lease_client_for, redis_client
from common.settings import ServiceSettings

__all__ = ["service_clients"]


def service_clients(
    settings: ServiceSettings, *, lease_duration: float, renew_deadline: float
) -> tuple[redis.Redis, redis.Redis]:
    """``(command client, lease client)`` for a service configured by ``settings``."""
    connection = connection_kwargs(settings)
    commands = redis_client(
        settings.redis_url, cluster=settings.redis_cluster, socket_timeout=30,
        socket_connect_timeout=5, health_check_interval=15, **connection,
    )  # fmt: skip
    leases = lease_client_for(
        settings.redis_url,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        cluster=settings.redis_cluster,
        **connection,
    )
    return commands, leases
