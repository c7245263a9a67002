"""The membership scripts (``processor_svc.membership``): live processors in a sorted set.

``ib:{R}:members`` maps member id -> heartbeat deadline in milliseconds on *Redis's* clock, so
no two machines' clocks are ever compared; one script records a heartbeat and prunes the dead.
"""

from __future__ import annotations

from typing import Final

from common.redis_layout.lua import LuaScript

__all__ = ["HEARTBEAT", "LIVE"]

# Redis's clock in ms. TIME is allowed in scripts: since Redis 5 scripts replicate their effects,
# not the script, so a non-deterministic command is fine.
NOW_MS: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS[1] members; ARGV[1] member id, ARGV[2] ttl ms. Prunes members whose deadline passed,
# records ours (now + ttl) and returns the live members (deadline > now), ourselves included.
HEARTBEAT: Final = LuaScript(
    NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""
)

# KEYS[1] members. The live members (deadline > now); read-only.
LIVE: Final = LuaScript(
    NOW_MS
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
"""
)
