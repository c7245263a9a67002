"""The lease scripts (:mod:`common.lease`): a lease hash ``{holder, epoch}`` and its epoch counter.

Every lease informer-bus holds -- the reflector leader's ``ib:{R}:leader`` with ``ib:{R}:epoch``,
each shard's ``ib:{R:S}:lease`` with ``ib:{R:S}:lease_epoch`` -- is written by these scripts
only, so the fields (:data:`common.redis_layout.names.LEASE_HOLDER`, ``LEASE_EPOCH``) and the
epoch rules live in one place. The two keys share a Cluster hash tag, so one script may touch
both.
"""

from __future__ import annotations

from string import Template
from typing import Final

from common.redis_layout.lua import LuaScript
from common.redis_layout.names import LEASE_EPOCH, LEASE_HOLDER

__all__ = ["ACQUIRE_OR_RENEW", "READ", "RELEASE", "RENEW"]


def _lua(script: str) -> LuaScript:
    """``script`` with the lease hash's field names put in for ``$HOLDER`` and ``$EPOCH``."""
    return LuaScript(Template(script).substitute(HOLDER=LEASE_HOLDER, EPOCH=LEASE_EPOCH))


# KEYS[1] lease hash {holder, epoch}, KEYS[2] epoch counter; ARGV[1] holder, ARGV[2] duration ms,
# ARGV[3] the epoch the caller held last (0: none). A new epoch is the largest of the counter's
# INCR, ARGV[3] + 1 and the server's clock in ms (TIME):
# - above ARGV[3], even when Redis lost the counter (restarted without persistence), so a
#   lapsed holder always sees that its lease changed hands;
# - above every epoch issued before a failover, even one whose INCR the promoted replica never
#   received, as long as the new primary's clock is past the moment that epoch was issued
#   (docs/reliability.md, "Fencing across a failover"). Clocks only need to move forward
#   between two leaders, not agree: the INCR still orders acquisitions within one millisecond.
# Redis 7 replicates a script's effects, so TIME inside it is allowed and replicas store the
# epoch the primary chose. Epochs stay integers (about 1.7e12 today, exact in Lua's doubles,
# written with %.0f so that no exponent form ever reaches the fences' digit compare), above
# every counter value issued before this rule existed.
# Returns {held 0|1, epoch, holder, ttl ms (-1: no expiry)}.
ACQUIRE_OR_RENEW: Final = _lua("""
local holder = redis.call('HGET', KEYS[1], '$HOLDER')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], '$EPOCH')) or 0, holder, tonumber(ARGV[2])}
end
if holder then
  return {0, tonumber(redis.call('HGET', KEYS[1], '$EPOCH')) or 0, holder,
          redis.call('PTTL', KEYS[1])}
end
local counted = redis.call('INCR', KEYS[2])
local epoch = counted
local last = tonumber(ARGV[3]) or 0
if epoch <= last then epoch = last + 1 end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if epoch < now_ms then epoch = now_ms end
local text = string.format('%.0f', epoch)
if epoch ~= counted then redis.call('SET', KEYS[2], text) end
redis.call('PERSIST', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '$HOLDER', ARGV[1], '$EPOCH', text)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, epoch, ARGV[1], tonumber(ARGV[2])}
""")

# KEYS[1] lease hash; ARGV[1] holder, ARGV[2] duration ms, ARGV[3] the epoch we hold. Renews
# only that very lease, never takes a free one: whoever owned the lapsed lease must stop before
# a new ownership (and a new epoch) begins. Returns {held 0|1, epoch (0: none), holder ('':
# none), ttl ms}.
RENEW: Final = _lua("""
local lease = redis.call('HMGET', KEYS[1], '$HOLDER', '$EPOCH')
if lease[1] == ARGV[1] and tonumber(lease[2]) == tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(lease[2]), lease[1], tonumber(ARGV[2])}
end
if lease[1] then
  return {0, tonumber(lease[2]) or 0, lease[1], redis.call('PTTL', KEYS[1])}
end
return {0, 0, '', -2}
""")

# KEYS[1] lease hash; ARGV[1] holder. Returns 1 if the lease was ours and is now deleted.
RELEASE: Final = _lua("""
if redis.call('HGET', KEYS[1], '$HOLDER') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""")

# KEYS[1] lease hash, KEYS[2] epoch counter. Returns {holder or '', epoch}: the lease's epoch
# while held, else the last epoch issued (0 if none yet).
READ: Final = _lua("""
local holder = redis.call('HGET', KEYS[1], '$HOLDER')
if holder then
  return {holder, tonumber(redis.call('HGET', KEYS[1], '$EPOCH')) or 0}
end
return {'', tonumber(redis.call('GET', KEYS[2])) or 0}
""")
