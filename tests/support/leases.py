"""What the lease and leader-election tests share: short timings, the keys, and lease clients on
the session's redis-server."""

from __future__ import annotations

import redis

from common.lease import RedisLease
from common.redis_config import lease_client

KEY = "ib:{pods}:leader"
EPOCH_KEY = "ib:{pods}:epoch"
LEASE = 1.0
RENEW_DEADLINE = 0.6
RETRY = 0.1
TIMEOUT = 0.15  # client timeouts: one call stalls at most 0.3 s < LEASE - RENEW_DEADLINE


def make_lease(
    url: str, made: list[redis.Redis], holder: str, duration: float = LEASE
) -> RedisLease:
    client = lease_client(url, timeout=TIMEOUT)
    made.append(client)
    return RedisLease(client, key=KEY, epoch_key=EPOCH_KEY, holder=holder, duration=duration)
